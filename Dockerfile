# syntax=docker/dockerfile:1
# fetchcostd's container image, the default image of the Helm chart (helm/fetchcost).
#
#   docker build -t fetchcost:0.1.0 .
#
# Two stages on Debian 12 (bookworm): "build" compiles fetchcostd (BPF programs and their
# skeletons included) and the fetchcost CLI with the build and library packages tools/bootstrap
# installs; the runtime image carries only the shared libraries the two binaries load (the last
# RUN fails the build if ldd finds one missing). The price-table presets are compiled in; they are
# also copied to /usr/share/fetchcost/presets as starting points for a custom table.
# The container runs as root (or with CAP_BPF, CAP_PERFMON, ...): see docs/kubernetes.md.

ARG DEBIAN_IMAGE=debian:bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim

FROM ${DEBIAN_IMAGE} AS build
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# Keep in sync with the "build" and "libraries" lines of tools/bootstrap (tests/unit/helm checks).
# hadolint ignore=DL3008
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential cmake pkg-config clang llvm libbpf-dev bpftool libelf-dev zlib1g-dev \
      nlohmann-json3-dev doctest-dev libcli11-dev libpcap-dev \
      libspdlog-dev libfmt-dev libncurses-dev libssl-dev libgnutls28-dev libcpp-httplib-dev \
      libcap-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cmake -S /src -B /build -DCMAKE_BUILD_TYPE=Release \
 && cmake --build /build -j"$(nproc)" --target fetchcostd fetchcost \
 && install -D -m 0755 -s /build/userspace/daemon/fetchcostd /out/usr/bin/fetchcostd \
 && install -D -m 0755 -s /build/tools/fetchcost/fetchcost /out/usr/bin/fetchcost \
 && install -D -m 0644 -t /out/usr/share/fetchcost/presets /src/userspace/cost/presets/*.json

FROM ${RUNTIME_IMAGE}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="fetchcost" \
      org.opencontainers.image.description="Attributes Kafka tiered-storage remote reads and their cost to client-ids, with eBPF" \
      org.opencontainers.image.version="${VERSION}"
# The shared libraries of fetchcostd (libbpf, libelf, cpp-httplib, libcap) and of the
# fetchcost CLI (libpcap, ncurses); their own dependencies (zlib, OpenSSL, brotli) follow.
# hadolint ignore=DL3008
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libbpf1 libelf1 libcpp-httplib0.11 libpcap0.8 libncursesw6 libcap2 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/ /
RUN ! ldd /usr/bin/fetchcostd /usr/bin/fetchcost | grep -F "not found" \
 && fetchcostd --help > /dev/null
EXPOSE 9464
ENTRYPOINT ["/usr/bin/fetchcostd"]
CMD ["--config", "/etc/fetchcost/config.json"]
