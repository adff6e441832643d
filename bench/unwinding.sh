#!/usr/bin/env bash
# Stacks without frame pointers (issue #11): the eBPF profiler's cost and the stacks it
# gets while both cores run Debian's own frame-pointer-less binaries (xz and python3.11),
# at 19 Hz and 99 Hz, for this checkout and for a build of BEFORE (a commit before the
# .eh_frame walker; frame pointers only) in the same run; then what each exec costs it.
# Needs root.
#
#   bench/unwinding.sh [SECONDS] [BEFORE]      (defaults: 60, 1423445)
#
# Per run: profcol's user+system CPU and peak RSS (/usr/bin/time), its BPF program's run
# time and runs (kernel.bpf_stats_enabled; charged to the tasks it interrupts, so read
# from the kernel), and the share of xz's and python3.11's samples whose stack reaches
# `_start` with no frame left unnamed. Execs: profcol's CPU over 20 s of /bin/true
# exec'd in a loop, minus 20 s idle, divided by the execs.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
before_rev=${2:-1423445}
[ "$(id -u)" = 0 ] || { echo "bench/unwinding.sh: needs root to load BPF" >&2; exit 1; }
command -v /usr/bin/time >/dev/null || apt-get install -y -qq time >/dev/null
command -v bpftool >/dev/null || apt-get install -y -qq bpftool >/dev/null
command -v xz >/dev/null || apt-get install -y -qq xz-utils >/dev/null
[ -x /usr/bin/python3.11 ] || apt-get install -y -qq python3.11 >/dev/null

scripts/build-deps
cargo build --release --locked -q -p profcol
after=$PWD/target/release/profcol
before_dir=$PWD/target/bench-before
if [ ! -x "$before_dir/release/profcol" ]; then
  rm -rf "$before_dir/src"
  git worktree add -f "$before_dir/src" "$before_rev" >/dev/null
  (cd "$before_dir/src" && CARGO_TARGET_DIR=$before_dir cargo build --release --locked -q -p profcol)
  git worktree remove --force "$before_dir/src"
fi
before=$before_dir/release/profcol

work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
head -c 200000000 /dev/urandom >"$work/random"
cat >"$work/busy.py" <<'PY'
import sys, time
def walk(n):
    return sum(i * i for i in range(n))
until = time.time() + float(sys.argv[1])
while time.time() < until:
    walk(100000)
PY
cat >"$work/execloop.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
int main(int argc, char **argv) {
	double secs = atof(argv[1]);
	struct timespec t0, t;
	long n = 0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		pid_t pid = fork();
		if (pid == 0) { execl("/bin/true", "true", (char *)0); _exit(127); }
		waitpid(pid, 0, 0);
		n++;
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while (t.tv_sec - t0.tv_sec + (t.tv_nsec - t0.tv_nsec) / 1e9 < secs);
	printf("%ld\n", n);
	return 0;
}
C
gcc -O2 -o "$work/execloop" "$work/execloop.c"

sysctl -q -w kernel.bpf_stats_enabled=1
bpf_stat() { # -> "run_time_ns run_cnt" of the loaded on_cpu_sample programs
  bpftool prog show --json | python3 -c '
import json, sys
ps = [p for p in json.load(sys.stdin) if p.get("type") == "perf_event" and p.get("name", "").startswith("on_cpu_sample")]
print(sum(p.get("run_time_ns", 0) for p in ps), sum(p.get("run_cnt", 0) for p in ps))'
}
whole_share() { # jsonl -> "xz% python%": samples whose stack reaches libc's start of the
  # program (or a thread's), uncut (xz is stripped: its own frames have no names)
  python3 - "$1" <<'PY'
import json, sys
counts = {}
starts = {"__libc_start_call_main", "__libc_start_main_impl", "__libc_start_main", "start_thread", "clone3", "__clone3"}
for line in open(sys.argv[1]):
    d = json.loads(line)
    dic = d["dictionary"]; st = dic["stringTable"]; fn = dic.get("functionTable", [])
    locs = dic.get("locationTable", []); stacks = dic.get("stackTable", [])
    def names(li):
        lines = locs[li].get("lines") or []
        return [st[fn[l.get("functionIndex", 0)].get("nameStrindex", 0)] for l in lines]
    for rp in d["resourceProfiles"]:
        attrs = {a["key"]: list(a["value"].values())[0] for a in rp["resource"].get("attributes", [])}
        exe = attrs.get("process.executable.name")
        if exe not in ("xz", "python3.11"):
            continue
        for sp in rp["scopeProfiles"]:
            for p in sp["profiles"]:
                for s in p.get("samples", []):
                    n = len(s.get("timestampsUnixNano", [])) or 1
                    frames = [n for li in stacks[s.get("stackIndex", 0)].get("locationIndices", []) for n in names(li)]
                    whole = "[truncated]" not in frames and any(f in starts for f in frames)
                    c = counts.setdefault(exe, [0, 0]); c[0] += n; c[1] += n if whole else 0
print(" ".join("%.1f%%" % (100.0 * counts[e][1] / counts[e][0]) if e in counts else "-" for e in ("xz", "python3.11")))
PY
}
config() { # hz out -> config file
  cat >"$work/p-$1.yaml" <<YAML
receivers: {profiling: {samples_per_second: $1, reporter_interval: 5s}}
exporters: {file: {path: "$2"}}
service:
  telemetry: {metrics: {level: none}, logs: {level: warn}}
  pipelines: {profiles: {receivers: [profiling], exporters: [file]}}
YAML
  echo "$work/p-$1.yaml"
}

echo "Both cores busy with xz -9 and python3.11 (no frame pointers); ${secs} s per run."
echo
echo "| build | Hz | user-space CPU | BPF time | BPF per sample | total, % of a core | peak RSS | whole stacks: xz | whole stacks: python3.11 |"
echo "|---|---|---|---|---|---|---|---|---|"
for hz in 19 99; do
  for which in before after; do
    bin=${!which}
    out="$work/$which-$hz.jsonl"
    (while :; do xz -9 -T1 -c "$work/random" >/dev/null; done) &
    busy_xz=$!
    /usr/bin/python3.11 "$work/busy.py" $((secs + 20)) &
    busy_py=$!
    sleep 1
    read -r t0 c0 < <(bpf_stat)
    /usr/bin/time -f "%U %S %M" -o "$work/$which-$hz.time" "$bin" --config "$(config "$hz" "$out")" 2>"$work/$which-$hz.log" &
    sleep "$secs"
    read -r t1 c1 < <(bpf_stat)
    pkill -TERM -f "^$bin --config $work/p-$hz.yaml" || true
    sleep 3
    kill "$busy_xz" "$busy_py" 2>/dev/null || true
    pkill -f "xz -9 -T1 -c $work/random" || true
    wait 2>/dev/null || true
    read -r u s m <"$work/$which-$hz.time"
    read -r wxz wpy < <(whole_share "$out")
    awk -v w="$which" -v hz="$hz" -v secs="$secs" -v u="$u" -v s="$s" -v m="$m" \
      -v t="$((t1 - t0))" -v c="$((c1 - c0))" -v wxz="$wxz" -v wpy="$wpy" 'BEGIN {
      cpu = u + s; bpf = t / 1e9
      printf "| %s | %d | %.2f s | %.3f s | %.1f µs | %.2f%% | %.0f MiB | %s | %s |\n",
        w, hz, cpu, bpf, (c > 0 ? t / c / 1000 : 0), 100 * (cpu + bpf) / secs, m / 1024, wxz, wpy }'
  done
done

echo
echo "Exec cost at 19 Hz: profcol's CPU while /bin/true is exec'd in a loop for 20 s, minus 20 s idle."
echo
echo "| build | execs | execs/s | profcol CPU, idle 20 s | profcol CPU, exec loop 20 s | per exec |"
echo "|---|---|---|---|---|---|"
cpu_of() { awk '{print $14 + $15}' "/proc/$1/stat"; }
tick=$(getconf CLK_TCK)
for which in before after; do
  bin=${!which}
  "$bin" --config "$(config 19 "$work/exec-$which.jsonl")" 2>/dev/null &
  pid=$!
  sleep 5
  a=$(cpu_of "$pid"); sleep 20; b=$(cpu_of "$pid")
  n=$("$work/execloop" 20)
  c=$(cpu_of "$pid")
  kill -TERM "$pid"; wait "$pid" 2>/dev/null || true
  awk -v w="$which" -v n="$n" -v a="$a" -v b="$b" -v c="$c" -v tick="$tick" 'BEGIN {
    idle = (b - a) / tick; busy = (c - b) / tick
    printf "| %s | %d | %.0f | %.2f s | %.2f s | %.1f µs |\n", w, n, n / 20, idle, busy, 1e6 * (busy - idle) / n }'
done
