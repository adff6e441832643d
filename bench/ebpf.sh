#!/usr/bin/env bash
# eBPF profilers side by side in one run: profcol, the OpenTelemetry eBPF profiler
# (go.opentelemetry.io/ebpf-profiler v0.0.202633, built from the module pinned in
# integration/peers/ebpf-profiler) and bcc's `profile`. All three profile the whole
# machine at the same frequency for the same time while both cores run burner.c: one
# build with frame pointers, one without (-O2 -fomit-frame-pointer). We report each one's
# CPU time (user + system over its whole run), the time its perf_event BPF programs ran
# (kernel.bpf_stats_enabled), its peak RSS, and the share of each burner's samples whose
# stack is whole (bench/whole-stacks.py: burner_leaf ... main, ending in _start).
# profcol and the OTel profiler both send OTLP over gRPC to one profcol sink that writes
# what each sent to its own file. Runs at 19 Hz and 99 Hz. Needs root.
#
#   bench/ebpf.sh [SECONDS]     (default 60)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
secs=${1:-60}
[ "$(id -u)" = 0 ] || { echo "bench/ebpf.sh: needs root to load BPF" >&2; exit 1; }

# bcc's profile compiles its BPF at run time against kernel headers; Debian has none for
# this kernel, so link the cloud headers in as the running kernel's build/source trees.
if ! command -v profile-bpfcc >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq bpfcc-tools linux-headers-cloud-amd64 >/dev/null
fi
k=$(uname -r)
if [ ! -e "/lib/modules/$k/build" ]; then
  h=$(ls -d /usr/src/linux-headers-*-cloud-amd64 | sort -V | tail -1)
  mkdir -p "/lib/modules/$k"
  ln -sfn "$h" "/lib/modules/$k/build"
  ln -sfn "${h%-cloud-amd64}-common" "/lib/modules/$k/source"
fi
# The OTel profiler attaches tracepoints through tracefs.
[ -e /sys/kernel/tracing/events ] || mount -t tracefs nodev /sys/kernel/tracing

scripts/build-deps
cargo build --release --locked -q -p profcol
bin=$root/target/release/profcol
mkdir -p target/peers
(cd integration/peers/ebpf-profiler && GOFLAGS="-buildvcs=false -mod=readonly" go build -o "$root/target/peers/ebpf-profiler" go.opentelemetry.io/ebpf-profiler)
otel=$root/target/peers/ebpf-profiler
work=$(mktemp -d)
trap 'for j in $(jobs -p); do pkill -TERM -P "$j"; kill "$j"; done 2>/dev/null || true; rm -rf "$work"; [ -z "${stats_before:-}" ] || sysctl -q -w kernel.bpf_stats_enabled="$stats_before"' EXIT
gcc -O1 -g -fno-omit-frame-pointer -o "$work/burner" integration/peers/native/burner.c
gcc -O2 -g -fomit-frame-pointer -o "$work/burner-nofp" integration/peers/native/burner.c
# The OTel profiler insists on raising RLIMIT_MEMLOCK to infinity and exits if it cannot;
# a container without CAP_SYS_RESOURCE cannot. The kernel charges BPF memory to the
# memory cgroup (since 5.11), so the limit is moot: no-memlock answers that call with
# success.
gcc -O2 -o "$work/no-memlock" integration/peers/native/no-memlock.c
python=${PROFCOL_PYTHON:-$root/.venv/bin/python}
"$python" -c 'import opentelemetry.proto.profiles.v1development.profiles_pb2' 2>/dev/null || {
  echo "bench/ebpf.sh: needs a Python with opentelemetry-proto (scripts/test makes .venv)" >&2; exit 1; }

# Total user+system CPU and peak RSS of a whole run come from /usr/bin/time (start-up and
# exit included: bcc compiles its program at start and symbolizes at exit). The BPF
# programs' own run time is charged to the tasks they interrupt, not to any tool, so it is
# read from the kernel's BPF statistics, per perf_event program, and attributed by name:
# profcol's is on_cpu_sample, bcc's do_perf_event, the rest is the OTel profiler's (run
# it on a machine with no other perf_event BPF programs loaded).
command -v /usr/bin/time >/dev/null || { apt-get install -y -qq time >/dev/null; }
command -v bpftool >/dev/null || { apt-get install -y -qq bpftool >/dev/null; }
stats_before=$(sysctl -n kernel.bpf_stats_enabled)
sysctl -q -w kernel.bpf_stats_enabled=1
bpf_ns() { # name-regex [exclude-regex] -> total run time in ns over loaded perf_event programs
  bpftool prog show --json | python3 -c '
import json, re, sys
want = re.compile(sys.argv[1]); skip = re.compile(sys.argv[2]) if len(sys.argv) > 2 else None
print(sum(p.get("run_time_ns", 0) for p in json.load(sys.stdin)
          if p.get("type") == "perf_event" and want.search(p.get("name", ""))
          and not (skip and skip.search(p.get("name", "")))))' "$@"
}
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 400); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; return 1; }

echo "Both cores busy (burner with and without frame pointers); ${secs} s per run. User-space CPU and peak RSS over the whole run; BPF time summed over each one's perf_event programs; whole stacks: share of each burner's samples unwound from the leaf to _start."
echo
echo "| Hz | profiler | user-space CPU | BPF time | total, % of a core | peak RSS | whole stacks, burner (frame pointers) | whole stacks, burner-nofp |"
echo "|---|---|---|---|---|---|---|---|"
for hz in 19 99; do
  sink_port=$(port); p_port=$(port)
  cat >"$work/sink.yaml" <<YAML
receivers:
  otlp/profcol: {protocols: {grpc: {endpoint: "127.0.0.1:$p_port"}}}
  otlp/otel: {protocols: {grpc: {endpoint: "127.0.0.1:$sink_port"}}}
exporters:
  file/profcol: {path: "$work/profcol-$hz.pb", format: proto}
  file/otel: {path: "$work/otel-$hz.pb", format: proto}
service:
  telemetry: {metrics: {level: none}, logs: {level: warn}}
  pipelines:
    profiles/profcol: {receivers: [otlp/profcol], exporters: [file/profcol]}
    profiles/otel: {receivers: [otlp/otel], exporters: [file/otel]}
YAML
  "$bin" --config "$work/sink.yaml" 2>"$work/sink-$hz.log" & sink=$!
  wait_port "$p_port"; wait_port "$sink_port"
  cat >"$work/p.yaml" <<YAML
receivers: {profiling: {samples_per_second: $hz}}
exporters: {otlp: {endpoint: "127.0.0.1:$p_port", tls: {insecure: true}}}
service:
  telemetry: {metrics: {level: none}, logs: {level: warn}}
  pipelines: {profiles: {receivers: [profiling], exporters: [otlp]}}
YAML
  /usr/bin/time -f "%U %S %M" -o "$work/profcol-$hz.time" "$bin" --config "$work/p.yaml" 2>"$work/profcol-$hz.log" & p=$!
  /usr/bin/time -f "%U %S %M" -o "$work/otel-$hz.time" "$work/no-memlock" "$otel" \
    -collection-agent "127.0.0.1:$sink_port" -disable-tls -samples-per-second "$hz" \
    -reporter-interval 5s >"$work/otel-$hz.log" 2>&1 & o=$!
  /usr/bin/time -f "%U %S %M" -o "$work/bcc-$hz.time" profile-bpfcc -F "$hz" -f "$((secs + 16))" >"$work/bcc-$hz.folded" 2>"$work/bcc-$hz.log" & b=$!
  sleep 10 # every profiler attached and past its start-up before the workload starts
  # They outlive bcc, which names frames at its exit from the processes' maps.
  "$work/burner" $((secs + 60)) >/dev/null & w1=$!
  "$work/burner-nofp" $((secs + 60)) >/dev/null & w2=$!
  sleep "$secs"
  # Read BPF time while every program is still loaded.
  p_bpf=$(bpf_ns '^on_cpu_sample'); b_bpf=$(bpf_ns '^do_perf_event'); o_bpf=$(bpf_ns '.' '^(on_cpu_sample|do_perf_event)')
  sleep 6 # a last report from each
  # The profilers are /usr/bin/time's children: signal them, so time reports them.
  kill -TERM $(pgrep -P "$p") $(pgrep -P "$o") 2>/dev/null || true
  wait "$b" "$p" "$o" 2>/dev/null || true
  kill "$w1" "$w2" 2>/dev/null || true
  wait "$w1" "$w2" 2>/dev/null || true
  sleep 1; kill -TERM "$sink"; wait "$sink" 2>/dev/null || true
  share() { # file program -> share as a percentage
    "$python" bench/whole-stacks.py "$1" "$work/$2" | python3 -c 'import json,sys; r=json.load(sys.stdin); print("%.1f%% of %d" % (100*r["share"], r["samples"]) if r["samples"] else "no samples")'
  }
  bcc_share() { # program -> share in bcc's folded output
    python3 - "$work/bcc-$hz.folded" "$1" <<'PY'
import sys
total = whole = 0
for line in open(sys.argv[1]):
    stack, _, n = line.rstrip().rpartition(" ")
    frames = stack.split(";")
    if not n.isdigit() or frames[0] != sys.argv[2]:
        continue
    # comm;root...;leaf, kernel frames after a "-" or marked _[k].
    user = []
    for f in frames[1:]:
        if f == "-":
            break
        if not f.endswith("_[k]"):
            user.append(f)
    total += int(n)
    chain = ";".join(user)
    if user and user[0] == "_start" and chain.endswith("main;burner_outer;burner_middle;burner_leaf"):
        whole += int(n)
print("%.1f%% of %d" % (100 * whole / total, total) if total else "no samples")
PY
  }
  row() { # name time-file bpf-ns share-fp share-nofp
    read -r u s m <"$2"
    awk -v hz="$hz" -v n="$1" -v u="$u" -v s="$s" -v m="$m" -v b="$3" -v t="$secs" -v f="$4" -v nf="$5" 'BEGIN {
      printf "| %d | %s | %.2f s | %.3f s | %.2f%% | %.0f MiB | %s | %s |\n", hz, n, u + s, b / 1e9, 100 * (u + s + b / 1e9) / (t + 16), m / 1024, f, nf }'
  }
  row profcol <(tail -1 "$work/profcol-$hz.time") "$p_bpf" "$(share "$work/profcol-$hz.pb" burner)" "$(share "$work/profcol-$hz.pb" burner-nofp)"
  row "OTel eBPF profiler" <(tail -1 "$work/otel-$hz.time") "$o_bpf" "$(share "$work/otel-$hz.pb" burner)" "$(share "$work/otel-$hz.pb" burner-nofp)"
  row "bcc profile" <(tail -1 "$work/bcc-$hz.time") "$b_bpf" "$(bcc_share burner)" "$(bcc_share burner-nofp)"
done
