// Start-up checks with messages that say what to do.
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

#include "capture/capture.h"

namespace fc::capture {
namespace {

constexpr int kCapSysAdmin = 21;
constexpr int kCapPerfmon = 38;
constexpr int kCapBpf = 39;
constexpr unsigned long kTracefsMagic = 0x74726163;

std::uint64_t effective_capabilities() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("CapEff:", 0) == 0) return std::stoull(line.substr(7), nullptr, 16);
  }
  return 0;
}

bool has_cap(std::uint64_t caps, int cap) {
  return (caps >> cap) & 1;
}

bool tracefs_mounted(const char* path) {
  struct statfs fs {};
  return statfs(path, &fs) == 0 && static_cast<unsigned long>(fs.f_type) == kTracefsMagic;
}

}  // namespace

Result<void> check_environment() {
  const std::uint64_t caps = effective_capabilities();
  const bool bpf_ok =
      has_cap(caps, kCapSysAdmin) || (has_cap(caps, kCapBpf) && has_cap(caps, kCapPerfmon));
  if (!bpf_ok) {
    return make_error(
        "fetchcostd needs to load BPF programs: run it as root, or grant it CAP_BPF and "
        "CAP_PERFMON (plus CAP_SYS_RESOURCE, CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH), e.g. "
        "`sudo setcap cap_bpf,cap_perfmon,cap_sys_resource,cap_sys_ptrace,cap_dac_read_search+ep "
        "fetchcostd`");
  }
  struct stat st {};
  if (stat("/sys/kernel/btf/vmlinux", &st) != 0) {
    struct utsname u {};
    uname(&u);
    return make_error(
        std::string("kernel ") + u.release +
        " exposes no BTF (/sys/kernel/btf/vmlinux is missing): fetchcost needs a "
        "kernel built with CONFIG_DEBUG_INFO_BTF=y (Linux >= 5.8; most distribution "
        "kernels since 2020 have it). In Kubernetes, mount the host's /sys/kernel/btf.");
  }
  // Syscall tracepoints (the fallback for kernels without the sock tracepoints) are looked up
  // in tracefs by libbpf; tp_btf programs and uprobes do not need it. Mount it if we can.
  if (!tracefs_mounted("/sys/kernel/tracing") && !tracefs_mounted("/sys/kernel/debug/tracing")) {
    if (mount("nodev", "/sys/kernel/tracing", "tracefs", 0, nullptr) != 0 &&
        !tracefs_mounted("/sys/kernel/tracing")) {
      return make_error(std::string("tracefs is not mounted and mounting it failed (") +
                        std::strerror(errno) +
                        "): run `mount -t tracefs nodev /sys/kernel/tracing` as root, or mount "
                        "the host's /sys/kernel/tracing into the container");
    }
  }
  // Kernels before 5.11 charge BPF maps to RLIMIT_MEMLOCK; raise it so ring buffers fit.
  struct rlimit unlimited {
    RLIM_INFINITY, RLIM_INFINITY
  };
  if (setrlimit(RLIMIT_MEMLOCK, &unlimited) != 0) {
    struct rlimit current {};
    getrlimit(RLIMIT_MEMLOCK, &current);
    struct utsname u {};
    uname(&u);
    int major = 0, minor = 0;
    std::sscanf(u.release, "%d.%d", &major, &minor);
    if (major < 5 || (major == 5 && minor < 11)) {
      return make_error("cannot raise RLIMIT_MEMLOCK (now " + std::to_string(current.rlim_cur) +
                        " bytes) and kernel " + u.release +
                        " charges BPF maps to it: grant CAP_SYS_RESOURCE or run `ulimit -l "
                        "unlimited` before starting fetchcostd");
    }
  }
  return {};
}

}  // namespace fc::capture
