// privileges: fetchcostd gives up every capability it no longer needs once its probes are
// attached and its listen socket is bound (libcap).
//
// Kept, because fetchcostd keeps attaching at runtime:
//   CAP_BPF, CAP_PERFMON  load/attach BPF programs and uprobes: attribution off→on re-opens the
//                         capture, and each new broker process (a restart, a new pid) gets its
//                         TLS uprobes;
//   CAP_SYS_ADMIN         TLS uprobes on a new broker pid: without it creating the uprobe perf
//                         events fails with EACCES even with CAP_PERFMON (Linux 6.18, measured
//                         by tests/e2e/reliability), and kernels < 5.8 (no CAP_BPF) need it for
//                         every tracing program;
//   CAP_SYS_RESOURCE      kernels < 5.11 charge BPF maps to RLIMIT_MEMLOCK on every re-attach;
//   CAP_SYS_PTRACE        /proc/PID/{maps,fd,root} of a broker run by another user or with
//                         more capabilities (TLS libraries, connections open at attach);
//   CAP_DAC_READ_SEARCH   the broker's log dirs and libraries whatever their permissions;
//   CAP_SYS_NICE          only with capture.realtime_reader or capture.drain_yields: a re-opened
//                         capture (attribution off, then on) makes its new ring reader thread
//                         real-time again, and a yielding drain that falls behind is taken
//                         from SCHED_IDLE back to SCHED_OTHER (which needs it).
// Everything else is dropped from the effective, permitted, inheritable and ambient sets and from
// the bounding set, so no child (a budget command) can get it back.
#pragma once

#include <string>

#include "base/result.h"

namespace fc::daemon {

// Drops everything but the capabilities listed above. Returns the effective set after, in
// libcap's text form (e.g. "cap_dac_read_search,...=ep"), for the log.
Result<std::string> drop_unneeded_capabilities(bool keep_sys_nice);

}  // namespace fc::daemon
