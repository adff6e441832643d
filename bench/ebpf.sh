#!/usr/bin/env bash
# eBPF profiler overhead, side by side with bcc's `profile` tool in the same run: both
# profile the whole machine at the same frequency for the same time while both cores are
# kept busy; we report each one's CPU time (user + system, from /proc/PID/stat) and peak
# RSS (VmHWM). Runs at 19 Hz and 99 Hz. Needs root.
#
#   bench/ebpf.sh [SECONDS]     (default 60)
set -euo pipefail
cd "$(dirname "$0")/.."
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

scripts/build-deps
cargo build --release --locked -q -p profcol
bin=$PWD/target/release/profcol
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
gcc -O1 -fno-omit-frame-pointer -o "$work/burner" integration/peers/native/burner.c

# Total user+system CPU and peak RSS of a whole run come from /usr/bin/time (start-up and
# exit included: bcc compiles its program at start and symbolizes at exit). The BPF
# programs' own run time is charged to the tasks they interrupt, not to either tool, so
# it is read from the kernel's BPF statistics (kernel.bpf_stats_enabled) by program name.
command -v /usr/bin/time >/dev/null || { apt-get install -y -qq time >/dev/null; }
command -v bpftool >/dev/null || { apt-get install -y -qq bpftool >/dev/null; }
sysctl -q -w kernel.bpf_stats_enabled=1
bpf_ns() { # program-name-regex -> total run time in ns over loaded perf_event programs
  bpftool prog show --json | python3 -c '
import json, re, sys
pat = re.compile(sys.argv[1])
print(sum(p.get("run_time_ns", 0) for p in json.load(sys.stdin) if p.get("type") == "perf_event" and pat.search(p.get("name", ""))))' "$1"
}

echo "Both cores busy; ${secs} s per run. User-space CPU and peak RSS over the whole run; BPF time summed over the perf_event program's runs."
echo
echo "| Hz | profcol user-space CPU | profcol BPF time | profcol total, % of a core | profcol peak RSS | bcc user-space CPU | bcc BPF time | bcc total, % of a core | bcc peak RSS |"
echo "|---|---|---|---|---|---|---|---|---|"
for hz in 19 99; do
  for _ in 1 2; do "$work/burner" $((secs + 40)) >/dev/null & done
  cat >"$work/p.yaml" <<YAML
receivers: {profiling: {samples_per_second: $hz}}
processors: {batch: {timeout: 10s}}
exporters: {pprof: {directory: "$work/out-$hz", interval: 60s}}
service:
  telemetry: {metrics: {level: none}, logs: {level: warn}}
  pipelines: {profiles: {receivers: [profiling], processors: [batch], exporters: [pprof]}}
YAML
  /usr/bin/time -f "%U %S %M" -o "$work/profcol-$hz.time" "$bin" --config "$work/p.yaml" 2>"$work/profcol-$hz.log" &
  /usr/bin/time -f "%U %S %M" -o "$work/bcc-$hz.time" profile-bpfcc -F "$hz" -f "$secs" >"$work/bcc-$hz.folded" 2>"$work/bcc-$hz.log" &
  b=$!
  sleep "$secs"
  # Read BPF time while both programs are still loaded.
  p_bpf=$(bpf_ns '^on_cpu_sample'); b_bpf=$(bpf_ns '^do_perf_event')
  pkill -TERM -f "^$bin --config $work/p.yaml" || true
  wait "$b" 2>/dev/null || true
  sleep 2
  pkill -f "$work/burner" || true; wait 2>/dev/null || true
  read -r pu ps pm <"$work/profcol-$hz.time"
  read -r bu bs bm < <(tail -1 "$work/bcc-$hz.time")
  awk -v hz="$hz" -v s="$secs" -v pu="$pu" -v ps="$ps" -v pm="$pm" -v pb="$p_bpf" -v bu="$bu" -v bs="$bs" -v bm="$bm" -v bb="$b_bpf" 'BEGIN {
    pcpu = pu + ps; bcpu = bu + bs; pbs = pb / 1e9; bbs = bb / 1e9
    printf "| %d | %.2f s | %.3f s | %.2f%% | %.0f MiB | %.2f s | %.3f s | %.2f%% | %.0f MiB |\n", hz, pcpu, pbs, 100 * (pcpu + pbs) / s, pm / 1024, bcpu, bbs, 100 * (bcpu + bbs) / s, bm / 1024 }'
done
echo
echo "profcol pprof files: $(find "$work" -name '*.pb.gz' | wc -l); bcc folded stacks: $(cat "$work"/bcc-*.folded | wc -l)"
