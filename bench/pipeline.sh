#!/usr/bin/env bash
# Pipeline benchmark (issue figures in README): samples/s through
#   otlp receiver (HTTP) -> batch -> otlp exporter (gRPC, gzip) -> second profcol
# over loopback, and RSS of the first collector under a sustained load above what its
# exporter can send, with and without memory_limiter.
#
#   bench/pipeline.sh [SECONDS]        (default 20 s per run)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
cargo build --release --locked -q -p profcol
cargo build --release --locked -q -p profcol-integration --bin otlp-load
bin=target/release/profcol
load=target/release/otlp-load
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_ready() { # health-port
  for _ in $(seq 200); do curl -sf "http://127.0.0.1:$1/" >/dev/null 2>&1 && return 0; sleep 0.05; done
  echo "collector with health check on $1 not ready; logs:" >&2; cat "$work"/*.log >&2; return 1
}
metric() { curl -s "http://127.0.0.1:$1/metrics" | awk -v m="$2" '$1 ~ "^"m {s+=$2} END {printf "%d", s}'; }
cpu_seconds() { awk '{printf "%.2f", ($14+$15)/'"$(getconf CLK_TCK)"'}' "/proc/$1/stat"; }
hwm_mib() { awk '/VmHWM/ {printf "%.1f", $2/1024}' "/proc/$1/status"; }

start() { # name config -> pid
  "$bin" --config "$2" >/dev/null 2>"$work/$1.log" &
  echo $!
}

# --- throughput ---------------------------------------------------------------------
b_grpc=$(port); b_health=$(port); b_metrics=$(port)
cat >"$work/b.yaml" <<YAML
receivers: {otlp: {protocols: {grpc: {endpoint: "127.0.0.1:$b_grpc"}}}}
exporters: {debug: {verbosity: basic, sampling_initial: 1, sampling_thereafter: 1000000}}
extensions: {health_check: {endpoint: "127.0.0.1:$b_health"}}
service:
  extensions: [health_check]
  telemetry: {metrics: {address: "127.0.0.1:$b_metrics"}, logs: {level: warn}}
  pipelines: {profiles: {receivers: [otlp], exporters: [debug]}}
YAML
a_http=$(port); a_health=$(port); a_metrics=$(port)
cat >"$work/a.yaml" <<YAML
receivers: {otlp: {protocols: {http: {endpoint: "127.0.0.1:$a_http"}}}}
processors: {batch: {}}
exporters: {otlp: {endpoint: "127.0.0.1:$b_grpc", tls: {insecure: true}}}
extensions: {health_check: {endpoint: "127.0.0.1:$a_health"}}
service:
  extensions: [health_check]
  telemetry: {metrics: {address: "127.0.0.1:$a_metrics"}, logs: {level: warn}}
  pipelines: {profiles: {receivers: [otlp], processors: [batch], exporters: [otlp]}}
YAML
b=$(start b "$work/b.yaml"); wait_ready "$b_health"
a=$(start a "$work/a.yaml"); wait_ready "$a_health"
a_cpu0=$(cpu_seconds "$a")
result=$("$load" "$a_http" "$secs" 4 1000)
sleep 2
a_cpu=$(awk -v x="$(cpu_seconds "$a")" -v y="$a_cpu0" 'BEGIN {printf "%.2f", x-y}')
sent=$(metric "$a_metrics" otelcol_exporter_sent_profile_samples_total)
got=$(metric "$b_metrics" otelcol_receiver_accepted_profile_samples_total)
echo "throughput: $result"
echo "throughput: collector A sent $sent samples, B accepted $got; A CPU ${a_cpu}s over ${secs}s; A peak RSS $(hwm_mib "$a") MiB"
kill -TERM "$a" "$b"; wait "$a" "$b" 2>/dev/null || true

# --- overload: the exporter's destination never answers ------------------------------
dead=$(port)
for limiter in without with; do
  c_http=$(port); c_health=$(port); c_metrics=$(port)
  if [ "$limiter" = with ]; then procs="[memory_limiter, batch]"; else procs="[batch]"; fi
  cat >"$work/c.yaml" <<YAML
receivers: {otlp: {protocols: {http: {endpoint: "127.0.0.1:$c_http"}}}}
processors:
  batch: {}
  memory_limiter: {check_interval: 100ms, limit_mib: 150, spike_limit_mib: 30}
exporters:
  otlp:
    endpoint: "127.0.0.1:$dead"
    tls: {insecure: true}
    retry_on_failure: {max_elapsed_time: 0s}
    sending_queue: {queue_size: 1000000}
extensions: {health_check: {endpoint: "127.0.0.1:$c_health"}}
service:
  extensions: [health_check]
  telemetry: {metrics: {address: "127.0.0.1:$c_metrics"}, logs: {level: error}}
  pipelines: {profiles: {receivers: [otlp], processors: $procs, exporters: [otlp]}}
YAML
  c=$(start "c-$limiter" "$work/c.yaml"); wait_ready "$c_health"
  result=$("$load" "$c_http" "$secs" 4 1000)
  echo "overload $limiter memory_limiter (limit 150 MiB, spike 30): $result; peak RSS $(hwm_mib "$c") MiB; queue $(metric "$c_metrics" otelcol_exporter_queue_size) batches"
  kill -TERM "$c"; wait "$c" 2>/dev/null || true
done
