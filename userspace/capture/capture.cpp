// Loader and ring-buffer drain for bpf/capture.bpf.c (libbpf skeleton).
#include "capture/capture.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <string>

#include "fetchcost_capture.skel.h"

namespace fc::capture {
namespace {

std::string errno_text(int err) { return std::strerror(err < 0 ? -err : err); }

std::size_t round_up_pow2(std::size_t n) {
  std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  std::size_t v = page;
  while (v < n) v <<= 1;
  return v;
}

// libbpf prints verifier logs and warnings through this; keep them, they explain load failures.
int print_libbpf(enum libbpf_print_level level, const char* format, va_list args) {
  if (level == LIBBPF_DEBUG) return 0;
  return std::vfprintf(stderr, format, args);
}

}  // namespace

struct Capture::Impl {
  fetchcost_capture* skel = nullptr;
  ring_buffer* rings = nullptr;
  std::vector<int> ring_fds;
  EventHandler handler;
  int cpus = 0;

  ~Impl() {
    if (rings) ring_buffer__free(rings);
    for (int fd : ring_fds) close(fd);
    if (skel) fetchcost_capture__destroy(skel);
  }

  static int on_sample(void* ctx, void* data, std::size_t size) {
    auto* self = static_cast<Impl*>(ctx);
    if (size < sizeof(fc_event)) return 0;  // cannot happen with our programs; ignore safely
    const auto* header = static_cast<const fc_event*>(data);
    std::size_t payload = header->captured;
    if (payload > size - sizeof(fc_event)) payload = size - sizeof(fc_event);
    EventView view{*header, {static_cast<const std::uint8_t*>(data) + sizeof(fc_event), payload}};
    self->handler(view);
    return 0;
  }
};

Capture::Capture(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Capture::~Capture() = default;

Result<std::unique_ptr<Capture>> Capture::open(const Options& options, EventHandler handler) {
  libbpf_set_print(print_libbpf);
  auto impl = std::make_unique<Impl>();
  impl->handler = std::move(handler);
  impl->cpus = libbpf_num_possible_cpus();
  if (impl->cpus <= 0) return make_error("cannot count CPUs: " + errno_text(impl->cpus));
  if (impl->cpus > FC_MAX_CPUS)
    return make_error("this machine has " + std::to_string(impl->cpus) +
                      " possible CPUs; fetchcost supports up to " + std::to_string(FC_MAX_CPUS));

  impl->skel = fetchcost_capture__open();
  if (!impl->skel) return make_error("cannot open the BPF object: " + errno_text(errno));
  impl->skel->rodata->cfg_self_tgid = static_cast<__u32>(getpid());

  // The ring buffers are created here so their size is the one the verifier checks every
  // inner map against (the first one doubles as the array's inner-map template).
  const std::size_t ring_bytes = round_up_pow2(options.ring_bytes_per_cpu);
  for (int cpu = 0; cpu < impl->cpus; ++cpu) {
    int fd = bpf_map_create(BPF_MAP_TYPE_RINGBUF, "fc_ring", 0, 0, static_cast<__u32>(ring_bytes),
                            nullptr);
    if (fd < 0)
      return make_error("cannot create a " + std::to_string(ring_bytes) +
                        "-byte ring buffer: " + errno_text(errno) +
                        " (lower the ring size or raise the memory limit)");
    impl->ring_fds.push_back(fd);
  }
  bpf_map__set_max_entries(impl->skel->maps.ringbufs, static_cast<__u32>(impl->cpus));
  if (bpf_map__set_inner_map_fd(impl->skel->maps.ringbufs, impl->ring_fds[0]) != 0)
    return make_error("cannot set the ring buffer template: " + errno_text(errno));

  if (int err = fetchcost_capture__load(impl->skel); err != 0) {
    return make_error("the kernel refused fetchcost's BPF programs (" + errno_text(err) +
                      "); the verifier log above says why. fetchcost needs Linux >= 6.3 for the "
                      "sock_send_length/sock_recv_length tracepoints");
  }

  const int outer_fd = bpf_map__fd(impl->skel->maps.ringbufs);
  for (int cpu = 0; cpu < impl->cpus; ++cpu) {
    const int fd = impl->ring_fds[static_cast<std::size_t>(cpu)];
    __u32 key = static_cast<__u32>(cpu);
    if (bpf_map_update_elem(outer_fd, &key, &fd, BPF_ANY) != 0)
      return make_error("cannot install the ring buffer of CPU " + std::to_string(cpu) + ": " +
                        errno_text(errno));
    if (!impl->rings) {
      impl->rings = ring_buffer__new(fd, &Impl::on_sample, impl.get(), nullptr);
      if (!impl->rings) return make_error("cannot map ring buffer: " + errno_text(errno));
    } else if (ring_buffer__add(impl->rings, fd, &Impl::on_sample, impl.get()) != 0) {
      return make_error("cannot map ring buffer: " + errno_text(errno));
    }
  }

  if (int err = fetchcost_capture__attach(impl->skel); err != 0)
    return make_error("cannot attach fetchcost's BPF programs: " + errno_text(err));

  return std::unique_ptr<Capture>(new Capture(std::move(impl)));
}

Result<void> Capture::add_target(pid_t tgid, std::uint32_t capture_bytes) {
  fc_target target{capture_bytes > FC_MAX_CAPTURE ? FC_MAX_CAPTURE : capture_bytes, 0};
  __u32 key = static_cast<__u32>(tgid);
  if (bpf_map__update_elem(impl_->skel->maps.targets, &key, sizeof(key), &target, sizeof(target),
                           BPF_ANY) != 0)
    return make_error("cannot watch process " + std::to_string(tgid) + ": " + errno_text(errno));
  return {};
}

void Capture::remove_target(pid_t tgid) {
  __u32 key = static_cast<__u32>(tgid);
  bpf_map__delete_elem(impl_->skel->maps.targets, &key, sizeof(key), 0);
}

Result<int> Capture::poll(int timeout_ms) {
  int n = ring_buffer__poll(impl_->rings, timeout_ms);
  if (n < 0 && n != -EINTR) return make_error("reading ring buffers failed: " + errno_text(n));
  return n < 0 ? 0 : n;
}

std::vector<Counters> Capture::per_cpu() const {
  std::vector<Counters> result(static_cast<std::size_t>(impl_->cpus));
  std::vector<__u64> values(static_cast<std::size_t>(impl_->cpus));
  auto read = [&](__u32 which, std::uint64_t Counters::*field) {
    if (bpf_map__lookup_elem(impl_->skel->maps.counters, &which, sizeof(which), values.data(),
                             values.size() * sizeof(__u64), 0) != 0)
      return;
    for (std::size_t i = 0; i < values.size(); ++i) result[i].*field = values[i];
  };
  read(FC_COUNTER_EVENTS, &Counters::events);
  read(FC_COUNTER_DROPS, &Counters::drops);
  read(FC_COUNTER_COPY_FAULTS, &Counters::copy_faults);
  return result;
}

Counters Capture::totals() const {
  Counters sum;
  for (const auto& c : per_cpu()) {
    sum.events += c.events;
    sum.drops += c.drops;
    sum.copy_faults += c.copy_faults;
  }
  return sum;
}

int Capture::cpu_count() const { return impl_->cpus; }

}  // namespace fc::capture
