#!/usr/bin/env bash
# Time and memory to build the unwind table (issue #11) of the largest binaries here:
# profcol's own (the release binary if built, else the debug one, ~400 MB), Debian's libc
# and bash, or the files given. Builds bench/unwind-table (the receiver's unwind module
# compiled in, release, no libbpf) into target/unwind-bench.
#
#   bench/unwind.sh [FILE...]
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=$PWD/target/unwind-bench
cargo build --release --locked -q --manifest-path bench/unwind-table/Cargo.toml
if [ "$#" -eq 0 ]; then
  set --
  for f in target/release/profcol target/debug/profcol; do
    if [ -f "$f" ]; then set -- "$f"; break; fi
  done
  libc=$(ldconfig -p | awk '/libc\.so\.6 \(libc6,x86-64\)/ {print $NF; exit}')
  set -- "$@" "$libc" /bin/bash
fi
echo "unwind tables, $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'))"
"$CARGO_TARGET_DIR/release/unwind-table" "$@"
