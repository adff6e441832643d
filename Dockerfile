# profcol's container image: built on Debian with the same toolchain steps as scripts/run,
# shipped on distroless (glibc, no shell) as the nonroot user.
#
#   docker build -t ghcr.io/profcol/profcol:0.1.0 .
#
# The eBPF profiler needs root and a few capabilities; the Helm chart's
# presets.profiling sets them (runAsUser 0, BPF, PERFMON, SYS_PTRACE, SYS_RESOURCE, SYSLOG).
# Every other use (OTLP/pprof gateway, sidecar) runs as the image's nonroot user.

FROM rust:1-bookworm AS build
WORKDIR /src
# libbpf-sys builds libbpf, libelf and zlib from source and links them statically.
COPY scripts/build-deps scripts/build-deps
RUN scripts/build-deps && rm -rf /var/lib/apt/lists/*
COPY . .
RUN cargo build --release --locked -p profcol \
 && strip target/release/profcol \
 && cp target/release/profcol /profcol

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /profcol /profcol
# OTLP gRPC, OTLP/HTTP, pprof ingest, self metrics, health check.
EXPOSE 4317 4318 1777 8888 13133
USER 65532:65532
ENTRYPOINT ["/profcol"]
