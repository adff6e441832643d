#!/usr/bin/env bash
# What walking CPython's frames costs, side by side in one run: four busy Python
# processes (pyenv 3.8, 3.10, 3.12 and Debian's 3.11, each running
# integration/peers/python/workload.py: three threads, one in zlib) under profcol
# profiling the whole machine at 19 Hz and 99 Hz, with Python unwinding on and off
# (interpreters: {python: {disabled: true}}), in turns, ROUNDS times. Per setting:
# profcol's CPU (user + system while the workload ran), its peak RSS (VmHWM), the time
# its perf_event program ran (kernel.bpf_stats_enabled: charged to the sampled tasks,
# not to profcol) per sample, and the share of the Python processes' samples that
# carry Python frames. Needs root.
#
#   bench/python.sh [SECONDS] [ROUNDS]     (default 20 s, 2 rounds)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
secs=${1:-20}
rounds=${2:-2}
[ "$(id -u)" = 0 ] || { echo "bench/python.sh: needs root to load BPF" >&2; exit 1; }
command -v bpftool >/dev/null || { apt-get install -y -qq bpftool >/dev/null; }
pythons=()
for p in /root/.pyenv/versions/3.8.18/bin/python3.8 /root/.pyenv/versions/3.10.13/bin/python3.10 \
  /root/.pyenv/versions/3.12.1/bin/python3.12 /usr/bin/python3.11; do
  if [ -x "$p" ]; then pythons+=("$p"); else echo "bench/python.sh: $p missing, not used" >&2; fi
done
[ ${#pythons[@]} -gt 0 ] || { echo "bench/python.sh: no CPython found" >&2; exit 1; }

scripts/build-deps
cargo build --release --locked -q -p profcol
bin=$root/target/release/profcol
work=$(mktemp -d)
stats_before=$(sysctl -n kernel.bpf_stats_enabled)
trap 'for j in $(jobs -p); do kill "$j"; done 2>/dev/null || true; rm -rf "$work"; sysctl -q -w kernel.bpf_stats_enabled="$stats_before"' EXIT
sysctl -q -w kernel.bpf_stats_enabled=1
hz=$(getconf CLK_TCK)

# run_time_ns and run_cnt of profcol's perf_event program.
sample_prog() {
  bpftool prog show name on_cpu_sample -j 2>/dev/null |
    python3 -c 'import json,sys; d=json.load(sys.stdin); d=d if isinstance(d,list) else [d]; print(sum(p.get("run_time_ns",0) for p in d), sum(p.get("run_cnt",0) for p in d))' 2>/dev/null || echo "0 0"
}
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

run() { # rate python round
  local rate=$1 python=$2 round=$3 health pid before_cpu before after rss cpu share
  local out=$work/out-$rate-$python-$round.jsonl
  local interpreters=""
  [ "$python" = off ] && interpreters="    interpreters: {python: {disabled: true}}"
  health=$((20000 + RANDOM % 20000))
  cat >"$work/config.yaml" <<YAML
receivers:
  profiling:
    samples_per_second: $rate
    reporter_interval: 5s
$interpreters
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
  "$bin" --config "$work/config.yaml" >"$work/log-$rate-$python-$round" 2>&1 &
  pid=$!
  for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$health/" >/dev/null 2>&1 && break
    sleep 0.1
  done
  sleep 2 # past the start-up scan of /proc
  before_cpu=$(cpu_ticks "$pid")
  read -r before_ns before_cnt < <(sample_prog)
  local workers=()
  for p in "${pythons[@]}"; do
    "$p" integration/peers/python/workload.py "$secs" >/dev/null &
    workers+=($!)
  done
  wait "${workers[@]}"
  read -r after_ns after_cnt < <(sample_prog)
  cpu=$(( $(cpu_ticks "$pid") - before_cpu ))
  rss=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
  sleep 6 # the last reporter interval
  kill -TERM "$pid"; wait "$pid" || true
  share=$(python3 - "$out" <<'PY'
import json, sys
with_python = total = 0
for line in open(sys.argv[1]):
    doc = json.loads(line)
    d = doc.get("dictionary", {})
    strings, attrs = d.get("stringTable", []), d.get("attributeTable", [])
    locs, stacks = d.get("locationTable", []), d.get("stackTable", [])
    def typed(li):
        for a in locs[li].get("attributeIndices", []):
            kv = attrs[int(a)]
            if strings[int(kv.get("keyStrindex", 0))] == "profile.frame.type":
                return kv["value"].get("stringValue")
    for rp in doc.get("resourceProfiles", []):
        res = {a["key"]: a["value"].get("stringValue") for a in rp["resource"]["attributes"]}
        if "python" not in (res.get("process.executable.name") or ""):
            continue
        for sp in rp.get("scopeProfiles", []):
            for p in sp.get("profiles", []):
                for s in p.get("samples", []):
                    n = len(s.get("timestampsUnixNano", []))
                    total += n
                    st = stacks[int(s.get("stackIndex", 0))].get("locationIndices", [])
                    if any(typed(int(li)) == "cpython" for li in st):
                        with_python += n
print(f"{with_python} {total}")
PY
)
  echo "$rate $python $round $cpu $rss $((after_ns - before_ns)) $((after_cnt - before_cnt)) $share" >>"$work/results"
  rm -f "$out"
}

for round in $(seq "$rounds"); do
  for rate in 19 99; do
    for python in on off; do
      run "$rate" "$python" "$round"
    done
  done
done

python3 - "$work/results" "$secs" "$hz" "${#pythons[@]}" <<'PY'
import sys, statistics
rows = [l.split() for l in open(sys.argv[1])]
secs, hz, n = float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
by = {}
for rate, python, _, cpu, rss, ns, cnt, with_py, total in rows:
    by.setdefault((rate, python), []).append(
        (float(cpu), int(rss), int(ns), int(cnt), int(with_py), int(total)))
print(f"{n} busy Python processes (3 threads each), {secs:.0f} s per run, {len(next(iter(by.values())))} rounds; medians")
print("| rate | Python unwinding | profcol CPU (% of a core) | profcol peak RSS | BPF per sample | samples with Python frames |")
print("|---|---|---|---|---|---|")
for rate in ["19", "99"]:
    for python in ["on", "off"]:
        rs = by[(rate, python)]
        cpu = statistics.median(r[0] for r in rs) / hz / secs * 100
        rss = statistics.median(r[1] for r in rs) / 1024
        per = statistics.median(r[2] / max(r[3], 1) for r in rs) / 1000
        share = statistics.median(r[4] / max(r[5], 1) for r in rs) * 100
        print(f"| {rate} Hz | {python} | {cpu:.1f}% | {rss:.0f} MiB | {per:.1f} µs | {share:.1f}% |")
PY
