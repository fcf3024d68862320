#!/usr/bin/env bash
# Builds the leasectl binary for each platform a release ships
# (.goreleaser.yaml: linux, darwin, windows on amd64 and arm64), with
# CGO_ENABLED=0 as releases are built, and exits non-zero when any fails,
# after trying them all. For CI once every platform builds; until then
# darwin and windows fail (lease/ and lab/ use Linux-only system calls).
set -uo pipefail
cd "$(dirname "$0")/.."
failed=()
for os in linux darwin windows; do
  for arch in amd64 arm64; do
    if out="$(CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -o /dev/null . 2>&1)"; then
      echo "ok    $os/$arch"
    else
      echo "FAIL  $os/$arch"
      printf '%s\n' "$out" | sed 's/^/      /'
      failed+=("$os/$arch")
    fi
  done
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "cross-compilation failed for: ${failed[*]}" >&2
  exit 1
fi
