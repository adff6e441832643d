#!/usr/bin/env bash
# Compiles the profiler's BPF C (bpf/src/bpf/profiler.bpf.c) into the object the
# Rust crate embeds with include_bytes!: bpf/src/bpf/profiler.bpf.o, which is
# committed so that building profcol needs no clang.
#
#   bpf/build-object.sh            rebuild bpf/src/bpf/profiler.bpf.o
#   bpf/build-object.sh OUT.o      build into OUT.o instead (check-object.sh does)
#
# Needs Debian bookworm's clang 14, llvm (llvm-strip) and libbpf-dev (for
# <bpf/bpf_helpers.h>, bpf_tracing.h, bpf_core_read.h):
#   apt-get install -y clang llvm libbpf-dev
# The output is byte-identical wherever it is built with those packages: paths
# are mapped to a fixed prefix, DWARF is stripped (BTF, which CO-RE needs, stays).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
src=$here/src/bpf
out=${1:-$src/profiler.bpf.o}
clang=${CLANG:-clang}
strip=${LLVM_STRIP:-llvm-strip}

# What the committed object was built with.
expected_clang='Debian clang version 14.0.6'
expected_libbpf='1:1.1.2-0+deb12u1'

missing=()
command -v "$clang" >/dev/null || missing+=(clang)
command -v "$strip" >/dev/null || missing+=(llvm)
[ -f /usr/include/bpf/bpf_helpers.h ] || missing+=(libbpf-dev)
if ((${#missing[@]})); then
  echo "build-object.sh: missing ${missing[*]}; install with: apt-get install -y ${missing[*]}" >&2
  exit 2
fi

version=$("$clang" --version | head -n1)
if [[ $version != "$expected_clang"* ]]; then
  echo "build-object.sh: warning: $version is not $expected_clang; the object will differ from the committed one" >&2
fi
libbpf_version=$(dpkg-query -W -f='${Version}' libbpf-dev 2>/dev/null || echo unknown)
if [ "$libbpf_version" != "$expected_libbpf" ]; then
  echo "build-object.sh: warning: libbpf-dev $libbpf_version is not $expected_libbpf; the object may differ" >&2
fi

out_dir=$(cd "$(dirname "$out")" && pwd)
tmp=$(mktemp "$out_dir/.profiler.bpf.o.XXXXXX")
trap 'rm -f "$tmp"' EXIT

cd "$src"
"$clang" -O2 -g -target bpf -D__TARGET_ARCH_x86 \
  -Wall -Wextra -Wno-unused-parameter -Werror \
  -ffile-prefix-map="$src"=/profcol/bpf/src/bpf \
  -fdebug-prefix-map="$src"=/profcol/bpf/src/bpf \
  -c profiler.bpf.c -o "$tmp"
# Drop DWARF (bulky, and unused by libbpf); keep .BTF/.BTF.ext for CO-RE.
"$strip" -g "$tmp"
chmod 644 "$tmp"
mv "$tmp" "$out"
trap - EXIT
echo "built $out ($(stat -c %s "$out") bytes)"
