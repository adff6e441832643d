#!/usr/bin/env bash
# Off-CPU profiling's cost, side by side in one run: a context-switch-heavy workload
# (integration/peers/native/pingpong.c: two threads pinned to one CPU pass a byte over
# two pipes, some 370,000 switches a second here) runs alone and under profcol profiling
# the whole machine at 19 Hz with off_cpu_threshold 0, 0.01 and 1, in turns, ROUNDS
# times. Per setting we report the workload's round trips a second (and its loss against
# running alone), profcol's own CPU (user + system while the workload ran), the time its
# sched_switch program ran (kernel.bpf_stats_enabled: charged to whichever task was
# switching, not to profcol), and the off-CPU samples profcol wrote. Needs root.
#
#   bench/off-cpu.sh [SECONDS] [ROUNDS]     (default 10 s, 3 rounds)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
secs=${1:-10}
rounds=${2:-3}
[ "$(id -u)" = 0 ] || { echo "bench/off-cpu.sh: needs root to load BPF" >&2; exit 1; }
command -v bpftool >/dev/null || { apt-get install -y -qq bpftool >/dev/null; }

scripts/build-deps
cargo build --release --locked -q -p profcol
bin=$root/target/release/profcol
work=$(mktemp -d)
stats_before=$(sysctl -n kernel.bpf_stats_enabled)
trap 'for j in $(jobs -p); do kill "$j"; done 2>/dev/null || true; rm -rf "$work"; sysctl -q -w kernel.bpf_stats_enabled="$stats_before"' EXIT
sysctl -q -w kernel.bpf_stats_enabled=1
gcc -O2 -pthread -o "$work/pingpong" integration/peers/native/pingpong.c
hz=$(getconf CLK_TCK)

# run_time_ns of profcol's sched_switch program, or 0 when it is not loaded.
switch_ns() {
  bpftool prog show name on_switch -j 2>/dev/null |
    python3 -c 'import json,sys; d=json.load(sys.stdin); d=d if isinstance(d,list) else [d]; print(sum(p.get("run_time_ns",0) for p in d))' 2>/dev/null || echo 0
}
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

run() { # setting round
  local setting=$1 round=$2 pid="" before_cpu=0 before_bpf after_bpf rate cpu bpf samples
  local out=$work/out-$setting-$round.jsonl
  if [ "$setting" != alone ]; then
    local health
    health=$((20000 + RANDOM % 20000))
    cat >"$work/config.yaml" <<YAML
receivers:
  profiling:
    samples_per_second: 19
    reporter_interval: 5s
    off_cpu_threshold: $setting
exporters:
  file:
    path: $out
extensions:
  health_check:
    endpoint: 127.0.0.1:$health
service:
  extensions: [health_check]
  telemetry:
    metrics:
      level: none
  pipelines:
    profiles:
      receivers: [profiling]
      exporters: [file]
YAML
    "$bin" --config "$work/config.yaml" >"$work/log-$setting-$round" 2>&1 &
    pid=$!
    for _ in $(seq 100); do
      curl -sf "http://127.0.0.1:$health/" >/dev/null 2>&1 && break
      sleep 0.1
    done
    sleep 2 # past the start-up scan of /proc
    before_cpu=$(cpu_ticks "$pid")
  fi
  before_bpf=$(switch_ns)
  rate=$(taskset -c 0 "$work/pingpong" "$secs")
  after_bpf=$(switch_ns)
  if [ -n "$pid" ]; then
    cpu=$(( $(cpu_ticks "$pid") - before_cpu ))
    kill -TERM "$pid"; wait "$pid" || true
    samples=$(python3 - "$out" <<'PY'
import json, sys
n = 0
for line in open(sys.argv[1]):
    doc = json.loads(line)
    strings = doc.get("dictionary", {}).get("stringTable", [])
    for rp in doc.get("resourceProfiles", []):
        for sp in rp.get("scopeProfiles", []):
            for p in sp.get("profiles", []):
                if strings[p.get("sampleType", {}).get("typeStrindex", 0)] == "off_cpu":
                    n += sum(len(s.get("timestampsUnixNano", [])) for s in p.get("samples", []))
print(n)
PY
)
  else
    cpu=0 samples=0
  fi
  bpf=$((after_bpf - before_bpf))
  echo "$setting $round $rate $cpu $bpf $samples" >>"$work/results"
  rm -f "$out"
}

for round in $(seq "$rounds"); do
  for setting in alone 0 0.01 1; do
    run "$setting" "$round"
  done
done

python3 - "$work/results" "$secs" "$hz" <<'PY'
import sys, statistics
rows = [l.split() for l in open(sys.argv[1])]
secs, hz = float(sys.argv[2]), float(sys.argv[3])
by = {}
for setting, _, rate, cpu, bpf, samples in rows:
    by.setdefault(setting, []).append((float(rate), float(cpu), float(bpf), int(samples)))
alone = statistics.median(r[0] for r in by["alone"])
print(f"pingpong pinned to one CPU, {secs:.0f} s per run, {len(by['alone'])} rounds; medians")
print("| setting | round trips/s | loss vs alone | profcol CPU (% of a core) | sched_switch BPF (% of a core) | off-CPU samples/s |")
print("|---|---|---|---|---|---|")
for setting in ["alone", "0", "0.01", "1"]:
    rs = by[setting]
    rate = statistics.median(r[0] for r in rs)
    cpu = statistics.median(r[1] for r in rs) / hz / secs * 100
    bpf = statistics.median(r[2] for r in rs) / 1e9 / secs * 100
    samples = statistics.median(r[3] for r in rs) / secs
    name = "alone" if setting == "alone" else f"off_cpu_threshold {setting}"
    loss = "" if setting == "alone" else f"{(1 - rate / alone) * 100:.1f}%"
    cpu_s = "" if setting == "alone" else f"{cpu:.1f}%"
    bpf_s = "" if setting == "alone" else f"{bpf:.1f}%"
    samples_s = "" if setting == "alone" else f"{samples:,.0f}"
    print(f"| {name} | {rate:,.0f} | {loss} | {cpu_s} | {bpf_s} | {samples_s} |")
PY
