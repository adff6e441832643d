#!/usr/bin/env bash
# Regenerates the real-runtime pprof fixtures in testdata/pprof/.
#
#   testdata/producers/make-fixtures.sh [output-dir]
#
# Needs: go (stdlib only, no network), node + npm (installs @datadog/pprof
# from the npm registry into a temp dir; nothing is written into the repo
# except the .pb.gz files).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:-$here/../pprof}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# --- Go -----------------------------------------------------------------
export GO111MODULE=off GOPROXY=off GOFLAGS=
# -trimpath keeps host paths out of the profiles (file names become
# ./main.go, runtime/proc.go, ...). -B embeds a GNU build-id note derived
# from the source so the Mapping carries a build id.
build_id="0x$(sha1sum "$here/go/main.go" | cut -c1-40)"
go build -trimpath -ldflags="-B $build_id" -o "$tmp/fixgen" "$here/go/main.go"
"$tmp/fixgen" -out "$out"

# --- Node ---------------------------------------------------------------
mkdir "$tmp/node"
cp "$here/node/package.json" "$here/node/wall.js" "$tmp/node/"
(
  cd "$tmp/node"
  npm install --no-audit --no-fund --no-package-lock --loglevel=error
  node wall.js "$out"
)

# Sanity: every fixture must be gzip.
for f in go-cpu go-heap go-allocs go-goroutine go-mutex node-wall; do
  magic="$(od -An -tx1 -N2 "$out/$f.pb.gz" | tr -d ' ')"
  if [ "$magic" != "1f8b" ]; then
    echo "error: $out/$f.pb.gz is not gzip (magic $magic)" >&2
    exit 1
  fi
done
ls -l "$out"
