#include "daemon/privileges.h"

#include <sys/capability.h>
#include <sys/prctl.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <memory>

namespace fc::daemon {
namespace {

constexpr std::array<cap_value_t, 6> kKept = {
    CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN, CAP_SYS_RESOURCE, CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH};

bool kept(cap_value_t c, bool keep_sys_nice) {
  if (c == CAP_SYS_NICE) return keep_sys_nice;
  for (cap_value_t k : kKept)
    if (k == c) return true;
  return false;
}

}  // namespace

Result<std::string> drop_unneeded_capabilities(bool keep_sys_nice) {
  std::unique_ptr<_cap_struct, int (*)(void*)> current(cap_get_proc(), cap_free);
  if (!current) return make_error(std::string("cannot read capabilities: ") + std::strerror(errno));
  // The bounding set first: dropping from it needs CAP_SETPCAP, which goes next.
  const cap_value_t last = static_cast<cap_value_t>(cap_max_bits()) - 1;
  for (cap_value_t c = 0; c <= last; ++c) {
    if (kept(c, keep_sys_nice) || !CAP_IS_SUPPORTED(c)) continue;
    if (cap_get_bound(c) == 1 && cap_drop_bound(c) != 0 && errno != EINVAL)
      return make_error(std::string("cannot drop ") + cap_to_name(c) +
                        " from the bounding set: " + std::strerror(errno));
  }
  std::unique_ptr<_cap_struct, int (*)(void*)> wanted(cap_init(), cap_free);
  // Keep only what this process has now (a container may have granted less).
  std::array<cap_value_t, kKept.size() + 1> have{};
  int n = 0;
  auto keep_if_held = [&](cap_value_t c) {
    cap_flag_value_t v = CAP_CLEAR;
    if (cap_get_flag(current.get(), c, CAP_PERMITTED, &v) == 0 && v == CAP_SET) have[n++] = c;
  };
  for (cap_value_t c : kKept) keep_if_held(c);
  if (keep_sys_nice) keep_if_held(CAP_SYS_NICE);
  if (n > 0 && (cap_set_flag(wanted.get(), CAP_PERMITTED, n, have.data(), CAP_SET) != 0 ||
                cap_set_flag(wanted.get(), CAP_EFFECTIVE, n, have.data(), CAP_SET) != 0))
    return make_error(std::string("cannot build the capability set: ") + std::strerror(errno));
  (void)cap_reset_ambient();
  if (cap_set_proc(wanted.get()) != 0)
    return make_error(std::string("cannot drop capabilities: ") + std::strerror(errno));
  std::unique_ptr<_cap_struct, int (*)(void*)> after(cap_get_proc(), cap_free);
  char* text = after ? cap_to_text(after.get(), nullptr) : nullptr;
  std::string out = text ? text : "?";
  if (text) cap_free(text);
  return out;
}

}  // namespace fc::daemon
