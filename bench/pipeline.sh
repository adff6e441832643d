#!/usr/bin/env bash
# Pipeline benchmark, profcol and the OpenTelemetry Collector (Go, v0.165.0, built from
# the modules pinned in integration/peers/otelcol) side by side in one run, on the same
# load and the same sink:
#
#   otlp-load --OTLP/HTTP--> gateway (otlp receiver -> batching -> otlp exporter, gRPC, gzip)
#             --> profcol sink (otlp receiver -> debug, counting what arrives)
#
# For each gateway: samples per second delivered to the sink, CPU seconds the gateway
# spent (user + system) and samples per CPU-second, and peak RSS (VmHWM). Then the
# overload case: the gateway's exporter points at a port nobody answers, with a queue
# big enough to hold everything, with and without each one's memory_limiter (limit
# 150 MiB, spike 30 MiB): peak RSS and how the load was refused.
#
#   bench/pipeline.sh [SECONDS]        (default 20 s per run)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
secs=${1:-20}
cargo build --release --locked -q -p profcol
cargo build --release --locked -q -p profcol-integration --bin otlp-load
mkdir -p target/peers
(cd integration/peers/otelcol && GOFLAGS="-buildvcs=false -mod=readonly" go build -o "$root/target/peers/otelcol-peer" ./cmd/otelcol-peer)
bin=$root/target/release/profcol
otelcol=$root/target/peers/otelcol-peer
load=$root/target/release/otlp-load
work=$(mktemp -d)
trap 'kill -KILL $(cat "$work/pids" 2>/dev/null) 2>/dev/null || true; rm -rf "$work"' EXIT

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { # port
  for _ in $(seq 400); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done
  echo "nothing listens on $1; logs:" >&2; tail -n 20 "$work"/*.log >&2; return 1
}
metric() { curl -s "http://127.0.0.1:$1/metrics" | awk -v m="$2" '$1 ~ "^"m {s+=$2} END {printf "%d", s}'; }
cpu_seconds() { awk '{printf "%.2f", ($14+$15)/'"$(getconf CLK_TCK)"'}' "/proc/$1/stat"; }
hwm_mib() { awk '/VmHWM/ {printf "%.1f", $2/1024}' "/proc/$1/status"; }
json() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }

start() { # name program-and-args... -> pid (run from $(...): not this shell's job)
  local name=$1; shift
  "$@" >/dev/null 2>"$work/$name.log" &
  echo $! | tee -a "$work/pids"
}
stop() { # pid: SIGTERM, and SIGKILL if it is not gone in 10 s (a Go collector drains
  # its queue at shutdown, towards a destination that never answers in the overload case)
  kill -TERM "$1" 2>/dev/null || return 0
  for _ in $(seq 100); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$1" 2>/dev/null || true
}
start_gateway() { # kind name config
  if [ "$1" = profcol ]; then start "$2" "$bin" --config "$3"
  else start "$2" "$otelcol" --config "file:$3" --feature-gates=service.profilesSupport; fi
}

# The gateway's config for each: same receiver, limiter, exporter and queue. The Go
# collector's batch processor takes no profiles (v0.165.0: "telemetry type is not
# supported"); its exporter batches instead (sending_queue::batch, by samples, with the
# batch processor's defaults: 8192 items or 200 ms).
gateway_config() { # kind http-port exporter-port limiter(yes|no) overload(yes|no) out
  local kind=$1 http=$2 to=$3 limiter=$4 overload=$5 out=$6 procs queue="" retry=""
  if [ "$overload" = yes ]; then
    queue="queue_size: 1000000"; retry=", retry_on_failure: {max_elapsed_time: 0s}"
  fi
  if [ "$kind" = profcol ]; then
    if [ "$limiter" = yes ]; then procs="[memory_limiter, batch]"; else procs="[batch]"; fi
    cat >"$out" <<YAML
receivers: {otlp: {protocols: {http: {endpoint: "127.0.0.1:$http"}}}}
processors:
  batch: {send_batch_size: 8192, timeout: 200ms}
  memory_limiter: {check_interval: 100ms, limit_mib: 150, spike_limit_mib: 30}
exporters:
  otlp: {endpoint: "127.0.0.1:$to", tls: {insecure: true}, compression: gzip, sending_queue: {$queue}$retry}
service:
  telemetry: {metrics: {level: none}, logs: {level: error}}
  pipelines: {profiles: {receivers: [otlp], processors: $procs, exporters: [otlp]}}
YAML
  else
    if [ "$limiter" = yes ]; then procs="[memory_limiter]"; else procs="[]"; fi
    cat >"$out" <<YAML
receivers: {otlp: {protocols: {http: {endpoint: "127.0.0.1:$http"}}}}
processors:
  memory_limiter: {check_interval: 100ms, limit_mib: 150, spike_limit_mib: 30}
exporters:
  otlp_grpc:
    endpoint: "127.0.0.1:$to"
    tls: {insecure: true}
    compression: gzip
    sending_queue: {$queue${queue:+, }batch: {flush_timeout: 200ms, min_size: 8192}}
    ${retry:+${retry#, }}
service:
  telemetry: {metrics: {level: none}, logs: {level: error}}
  pipelines: {profiles: {receivers: [otlp], processors: $procs, exporters: [otlp_grpc]}}
YAML
  fi
}

# --- the sink both gateways send to ---------------------------------------------------
s_grpc=$(port); s_metrics=$(port)
cat >"$work/sink.yaml" <<YAML
receivers: {otlp: {protocols: {grpc: {endpoint: "127.0.0.1:$s_grpc"}}}}
exporters: {debug: {verbosity: basic, sampling_initial: 1, sampling_thereafter: 1000000}}
service:
  telemetry: {metrics: {address: "127.0.0.1:$s_metrics"}, logs: {level: warn}}
  pipelines: {profiles: {receivers: [otlp], exporters: [debug]}}
YAML
sink=$(start sink "$bin" --config "$work/sink.yaml"); wait_port "$s_grpc"

echo "One run, ${secs} s per gateway, 4 connections of 1000-sample requests; the same profcol sink behind both."
echo
echo "| gateway | samples/s delivered | gateway CPU | samples per CPU-second | peak RSS |"
echo "|---|---|---|---|---|"
for kind in profcol otelcol; do
  http=$(port)
  gateway_config "$kind" "$http" "$s_grpc" no no "$work/$kind.yaml"
  g=$(start_gateway "$kind" "$kind" "$work/$kind.yaml"); wait_port "$http"
  got0=$(metric "$s_metrics" otelcol_receiver_accepted_profile_samples_total)
  cpu0=$(cpu_seconds "$g")
  result=$("$load" "$http" "$secs" 4 1000)
  sleep 3 # what is still in the batch processor and the exporter's queue arrives
  cpu=$(awk -v x="$(cpu_seconds "$g")" -v y="$cpu0" 'BEGIN {printf "%.2f", x-y}')
  got=$(( $(metric "$s_metrics" otelcol_receiver_accepted_profile_samples_total) - got0 ))
  seconds=$(json "$result" seconds)
  awk -v k="$kind" -v got="$got" -v s="$seconds" -v cpu="$cpu" -v rss="$(hwm_mib "$g")" 'BEGIN {
    printf "| %s | %.2f M | %.2f s (%.2f cores) | %.2f M | %s MiB |\n", k, got / s / 1e6, cpu, cpu / s, (cpu > 0 ? got / cpu / 1e6 : 0), rss }'
  echo "  $kind load: $result" >>"$work/details"
  { grep -o '"error": "[^"]*"' "$work/$kind.log" || true; } | sort | uniq -c | sed "s/^/  $kind errors logged: /" >>"$work/details"
  stop "$g"
done

# --- overload: the exporter's destination never answers ------------------------------
dead=$(port)
echo
echo "| gateway | memory_limiter | requests accepted / refused (429, 503) / failed | peak RSS |"
echo "|---|---|---|---|"
for kind in profcol otelcol; do
  for limiter in without with; do
    http=$(port)
    gateway_config "$kind" "$http" "$dead" "$([ "$limiter" = with ] && echo yes || echo no)" yes "$work/c.yaml"
    g=$(start_gateway "$kind" "c-$kind-$limiter" "$work/c.yaml"); wait_port "$http"
    result=$("$load" "$http" "$secs" 4 1000)
    printf "| %s | %s | %s / %s / %s | %s MiB |\n" "$kind" "$limiter" \
      "$(json "$result" requests_ok)" "$(json "$result" requests_refused)" "$(json "$result" requests_failed)" "$(hwm_mib "$g")"
    stop "$g"
  done
done
echo
cat "$work/details"
stop "$sink"
