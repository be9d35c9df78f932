// What a target process already has: its TLS libraries (from /proc/PID/maps, read inside its
// mount namespace through /proc/PID/root, symbols by libelf so statically linked copies count)
// and its open TCP connections (/proc/PID/fd + /proc/PID/net/tcp{,6}).
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "capture/capture.h"

namespace fc::capture {
namespace {

// BoringSSL has SSL_read/SSL_write (the Android 13 build in Debian has no _ex variants; they
// are hooked wherever a build defines them) with OpenSSL's signatures.
const char* const kOpenSslFunctions[] = {"SSL_read", "SSL_write", "SSL_read_ex", "SSL_write_ex"};
const char* const kGnuTlsFunctions[] = {"gnutls_record_recv", "gnutls_record_send"};
// Defined by BoringSSL's libssl and by no OpenSSL release: they tell the two apart, also in a
// copy linked statically into another library (netty-tcnative-boringssl-static).
const char* const kBoringSslMarkers[] = {"SSL_CTX_set_strict_cipher_list",
                                         "SSL_CTX_set_select_certificate_cb"};

struct SymbolScan {
  std::set<std::string> found;
  bool boringssl = false;
};

void on_function(const char* name, SymbolScan& scan) {
  for (const char* f : kOpenSslFunctions)
    if (std::strcmp(name, f) == 0) scan.found.insert(name);
  for (const char* f : kGnuTlsFunctions)
    if (std::strcmp(name, f) == 0) scan.found.insert(name);
  for (const char* f : kBoringSslMarkers)
    if (std::strcmp(name, f) == 0) scan.boringssl = true;
}

// The functions an ELF file defines (.symtab and .dynsym; imported ones have no section) into
// `scan`. False when the file cannot be opened or is not ELF. libelf is libbpf's own ELF reader,
// so this costs no library of its own (libbcc's reader mapped LLVM: 60 MiB of fetchcostd's RSS).
bool scan_functions(const std::string& path, SymbolScan& scan) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  elf_version(EV_CURRENT);
  Elf* elf = elf_begin(fd, ELF_C_READ_MMAP, nullptr);
  const bool is_elf = elf && elf_kind(elf) == ELF_K_ELF;
  for (Elf_Scn* section = nullptr; is_elf && (section = elf_nextscn(elf, section));) {
    GElf_Shdr header;
    if (!gelf_getshdr(section, &header)) continue;
    if (header.sh_type != SHT_SYMTAB && header.sh_type != SHT_DYNSYM) continue;
    Elf_Data* data = elf_getdata(section, nullptr);
    if (!data || header.sh_entsize == 0) continue;
    const std::size_t count = header.sh_size / header.sh_entsize;
    for (std::size_t i = 0; i < count; ++i) {
      GElf_Sym symbol;
      if (!gelf_getsym(data, static_cast<int>(i), &symbol)) break;
      const int type = GELF_ST_TYPE(symbol.st_info);
      if (type != STT_FUNC && type != STT_GNU_IFUNC) continue;
      if (symbol.st_shndx == SHN_UNDEF || symbol.st_value == 0) continue;  // imported
      if (const char* name = elf_strptr(elf, header.sh_link, symbol.st_name))
        on_function(name, scan);
    }
  }
  if (elf) elf_end(elf);
  close(fd);
  return is_elf;
}

std::string comm_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/comm");
  std::string s;
  std::getline(in, s);
  return s;
}

}  // namespace

std::vector<TlsLibrary> find_tls_libraries(pid_t pid) {
  std::vector<TlsLibrary> result;
  const std::string proc = "/proc/" + std::to_string(pid);
  std::ifstream maps(proc + "/maps");
  std::map<std::string, std::string> paths;  // as the process sees it -> where we open it
  std::string line;
  while (std::getline(maps, line)) {
    // address perms offset dev inode path
    std::istringstream fields(line);
    std::string addr, perms, offset, dev, inode, path;
    fields >> addr >> perms >> offset >> dev >> inode;
    std::getline(fields >> std::ws, path);
    if (perms.size() < 3 || perms[2] != 'x' || path.empty() || path[0] != '/') continue;
    if (paths.count(path)) continue;
    // A library deleted after loading (netty-tcnative unpacks itself to /tmp and deletes the
    // file) is still reachable through the mapping's own link.
    if (path.ends_with(" (deleted)"))
      paths[path] = proc + "/map_files/" + addr;
    else
      paths[path] = proc + "/root" + path;  // inside the process's mount namespace
  }
  for (const auto& [path, host_path] : paths) {
    SymbolScan scan;
    if (!scan_functions(host_path, scan)) continue;
    TlsLibrary openssl{path, host_path, scan.boringssl ? "boringssl" : "openssl", {}};
    TlsLibrary gnutls{path, host_path, "gnutls", {}};
    for (const std::string& f : scan.found)
      (f.starts_with("SSL_") ? openssl : gnutls).functions.push_back(f);
    // OpenSSL or BoringSSL needs SSL_read and SSL_write; GnuTLS both record calls.
    if (scan.found.count("SSL_read") && scan.found.count("SSL_write")) result.push_back(openssl);
    if (gnutls.functions.size() == 2) result.push_back(gnutls);
  }
  return result;
}

namespace {

// Parses /proc/net/tcp{,6} hex "ADDR:PORT" (ADDR = 32-bit words as the kernel stores them).
bool parse_endpoint(const std::string& text, std::uint8_t* addr, std::uint16_t& port) {
  auto colon = text.find(':');
  if (colon == std::string::npos) return false;
  const std::string hex = text.substr(0, colon);
  if (hex.size() != 8 && hex.size() != 32) return false;
  for (std::size_t w = 0; w < hex.size() / 8; ++w) {
    std::uint32_t word =
        static_cast<std::uint32_t>(std::strtoul(hex.substr(w * 8, 8).c_str(), nullptr, 16));
    std::memcpy(addr + 4 * w, &word, 4);
  }
  port = static_cast<std::uint16_t>(std::strtoul(text.substr(colon + 1).c_str(), nullptr, 16));
  return true;
}

}  // namespace

std::vector<fc_conn_event> scan_connections(pid_t pid) {
  const std::string proc = "/proc/" + std::to_string(pid);
  std::map<std::uint64_t, int> fd_of_inode;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(proc + "/fd", ec)) {
    std::error_code lec;
    const std::string target = std::filesystem::read_symlink(entry.path(), lec).string();
    if (lec || !target.starts_with("socket:[")) continue;
    fd_of_inode[std::strtoull(target.c_str() + 8, nullptr, 10)] =
        std::atoi(entry.path().filename().c_str());
  }
  std::vector<fc_conn_event> result;
  if (fd_of_inode.empty()) return result;
  const std::string comm = comm_of(pid);
  for (const auto& [file, family] :
       {std::pair{"/net/tcp", AF_INET}, std::pair{"/net/tcp6", AF_INET6}}) {
    std::ifstream in(proc + file);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string sl, local, remote, state, queues, timer, retr, uid, timeout, inode;
      f >> sl >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode;
      const std::uint64_t ino = std::strtoull(inode.c_str(), nullptr, 10);
      auto it = fd_of_inode.find(ino);
      if (it == fd_of_inode.end()) continue;
      if (state == "0A") continue;  // TCP_LISTEN
      fc_conn_event ev{};
      ev.c.kind = FC_EVENT_CONNECT;
      ev.c.tgid = static_cast<fc_u32>(pid);
      ev.c.fd = it->second;
      std::strncpy(ev.c.comm, comm.c_str(), FC_COMM_LEN - 1);
      ev.family = static_cast<fc_u16>(family);
      ev.origin = FC_ORIGIN_PROC_SCAN;
      ev.inode = ino;
      if (!parse_endpoint(local, ev.local_addr, ev.local_port) ||
          !parse_endpoint(remote, ev.peer_addr, ev.peer_port))
        continue;
      result.push_back(ev);
    }
  }
  return result;
}

}  // namespace fc::capture
