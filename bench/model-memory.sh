#!/usr/bin/env bash
# Peak memory of the model per input byte (README figures): `profcol convert` of a 60 MB
# pprof of small samples to OTLP, whose peak RSS holds the input, the model and the
# output, less the peak of the same command on a 2 KB profile (the binary's own).
#
#   bench/model-memory.sh [PROFCOL_BIN]      (default: a release build of this tree)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-}
if [ -z "$bin" ]; then
  cargo build --release --locked -q -p profcol
  bin=target/release/profcol
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 bench/small-samples.py "$work/small.pprof" >/dev/null
gunzip -c testdata/pprof/go-cpu.pb.gz >"$work/tiny.pprof"
peak_kib() { /usr/bin/time -f %M "$bin" convert "$1" --to otlp -o "$work/out.otlp" 2>&1 >/dev/null | tail -1; }
floor=$(peak_kib "$work/tiny.pprof")
peak=$(peak_kib "$work/small.pprof")
size=$(stat -c %s "$work/small.pprof")
python3 -c "import sys; f,p,s=map(int,sys.argv[1:]); print(f'{s>>20} MiB of pprof: peak {p>>10} MiB, {(p-f)*1024/s:.1f} bytes per input byte (binary alone: {f>>10} MiB)')" "$floor" "$peak" "$size"
