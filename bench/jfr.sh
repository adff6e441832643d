#!/usr/bin/env bash
# JFR reading speed and memory (README figures): `profcol convert` to OTLP of each
# testdata recording concatenated 20 times (20 chunks, ~9 MB: the JDK's own recording
# and one from Pyroscope's Java agent), time and peak RSS, beside the same command on
# the smallest recording (the binary's own floor). The rounds alternate recordings so
# the machine's noise falls on both; the median of 5 is printed.
#
#   bench/jfr.sh [PROFCOL_BIN]      (default: a release build of this tree)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-}
if [ -z "$bin" ]; then
  cargo build --release --locked -q -p profcol
  bin=target/release/profcol
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for name in jdk17-profile pyroscope-agent; do
  gunzip -c "testdata/jfr/$name.jfr.gz" >"$work/one.jfr"
  for _ in $(seq 20); do cat "$work/one.jfr"; done >"$work/$name.jfr"
done
measure() { /usr/bin/time -f "%e %M" "$bin" convert "$1" --to otlp -o "$work/out.otlp" 2>&1 >/dev/null | tail -1; }
floor=$(measure fuzz/seeds/jfr/written-two-frames.jfr | cut -d' ' -f2)
declare -A times peaks
for _ in 1 2 3 4 5; do
  for name in jdk17-profile pyroscope-agent; do
    read -r t m < <(measure "$work/$name.jfr")
    times[$name]+="$t "
    peaks[$name]+="$m "
  done
done
for name in jdk17-profile pyroscope-agent; do
  size=$(stat -c %s "$work/$name.jfr")
  python3 - "$name" "$size" "$floor" "${times[$name]}" "${peaks[$name]}" <<'PY'
import statistics, sys
name, size, floor = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
t = statistics.median(float(x) for x in sys.argv[4].split())
m = statistics.median(int(x) for x in sys.argv[5].split())
print(f"{name}: {size / 2**20:.1f} MiB in {t:.2f} s ({size / 2**20 / max(t, 1e-3):.0f} MiB/s), "
      f"peak {m >> 10} MiB, {(m - floor) * 1024 / size:.2f} bytes per input byte over the binary's {floor >> 10} MiB")
PY
done
