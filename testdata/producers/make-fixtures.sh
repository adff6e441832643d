#!/usr/bin/env bash
# Regenerates the real-runtime pprof fixtures in testdata/pprof/.
#
#   testdata/producers/make-fixtures.sh [--go-only] [--prefix PREFIX] [output-dir]
#
# --prefix names the Go files PREFIX{cpu,heap,allocs,goroutine,mutex}.pb.gz
# (default go-): the checked-in go-* files come from Go 1.19, the go126-* ones
# from Go 1.26 (`--go-only --prefix go126-`), so both runtimes' output stays
# under test. --go-only skips Node.
#
# Needs: go (stdlib only, module mode with no network), node + npm (installs
# @datadog/pprof from the npm registry into a temp dir; nothing is written
# into the repo except the .pb.gz files).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
prefix=go-
node=1
while [ $# -gt 0 ]; do
  case "$1" in
    --go-only) node=; shift ;;
    --prefix) prefix="$2"; shift 2 ;;
    -*) echo "unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
out="${1:-$here/../pprof}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# --- Go -----------------------------------------------------------------
# Module mode (go/go.mod), standard library only: nothing to fetch, and the
# toolchain on PATH, not one it would download.
export GOPROXY=off GOFLAGS=-mod=readonly GOTOOLCHAIN=local
# -trimpath keeps host paths out of the profiles (file names become
# profcol.test/fixgen/main.go, runtime/proc.go, ...). -B embeds a GNU
# build-id note derived from the source so the Mapping carries a build id.
build_id="0x$(sha1sum "$here/go/main.go" | cut -c1-40)"
(cd "$here/go" && go build -trimpath -ldflags="-B $build_id" -o "$tmp/fixgen" .)
"$tmp/fixgen" -out "$out" -prefix "$prefix"
go version

# --- Node ---------------------------------------------------------------
if [ -n "$node" ]; then
  mkdir "$tmp/node"
  cp "$here/node/package.json" "$here/node/wall.js" "$tmp/node/"
  (
    cd "$tmp/node"
    npm install --no-audit --no-fund --no-package-lock --loglevel=error
    node wall.js "$out"
  )
fi

# Sanity: every fixture must be gzip.
files="${prefix}cpu ${prefix}heap ${prefix}allocs ${prefix}goroutine ${prefix}mutex"
[ -n "$node" ] && files="$files node-wall"
for f in $files; do
  magic="$(od -An -tx1 -N2 "$out/$f.pb.gz" | tr -d ' ')"
  if [ "$magic" != "1f8b" ]; then
    echo "error: $out/$f.pb.gz is not gzip (magic $magic)" >&2
    exit 1
  fi
done
ls -l "$out"
