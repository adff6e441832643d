#!/usr/bin/env bash
# Checks that the committed BPF object (bpf/src/bpf/profiler.bpf.o) is what its
# source compiles to: rebuilds it into a temporary directory with
# bpf/build-object.sh and compares the bytes.
#
# Installs Debian's clang, llvm and libbpf-dev when they are missing and we are
# root (the committed object is built with Debian bookworm's clang 14).
# Exit status: 0 same bytes, 1 different, 2 cannot build.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
committed=$here/src/bpf/profiler.bpf.o

need=()
command -v "${CLANG:-clang}" >/dev/null || need+=(clang)
command -v "${LLVM_STRIP:-llvm-strip}" >/dev/null || need+=(llvm)
[ -f /usr/include/bpf/bpf_helpers.h ] || need+=(libbpf-dev)
if ((${#need[@]})); then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "check-object.sh: installing ${need[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "check-object.sh: need ${need[*]} (apt-get install -y ${need[*]}) to rebuild the BPF object" >&2
    exit 2
  fi
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$here/build-object.sh" "$tmp/profiler.bpf.o" >/dev/null || {
  echo "check-object.sh: FAILED: bpf/src/bpf/profiler.bpf.c does not compile (see above)" >&2
  exit 2
}

if [ ! -f "$committed" ]; then
  echo "check-object.sh: FAILED: $committed is missing; run bpf/build-object.sh and commit it" >&2
  exit 1
fi
if cmp -s "$tmp/profiler.bpf.o" "$committed"; then
  echo "check-object.sh: ok: bpf/src/bpf/profiler.bpf.o ($(stat -c %s "$committed") bytes) matches its source"
else
  echo "check-object.sh: FAILED: bpf/src/bpf/profiler.bpf.o differs from what bpf/src/bpf/profiler.bpf.c compiles to" >&2
  echo "  committed: $(stat -c %s "$committed") bytes, sha256 $(sha256sum <"$committed" | cut -c1-16)" >&2
  echo "  rebuilt:   $(stat -c %s "$tmp/profiler.bpf.o") bytes, sha256 $(sha256sum <"$tmp/profiler.bpf.o" | cut -c1-16)" >&2
  echo "  (with $(${CLANG:-clang} --version | head -n1)); run bpf/build-object.sh and commit the object" >&2
  exit 1
fi
