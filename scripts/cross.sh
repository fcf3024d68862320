#!/usr/bin/env bash
# Builds the leasectl binary for each platform a release ships
# (.goreleaser.yaml: linux, darwin, windows on amd64 and arm64), with
# CGO_ENABLED=0 as releases are built, and runs go vet on every package
# (test files too) for each of them; exits non-zero when any fails, after
# trying them all. scripts/test.sh runs it, and so CI.
set -uo pipefail
cd "$(dirname "$0")/.."
failed=()
for os in linux darwin windows; do
  for arch in amd64 arm64; do
    if out="$(CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -o /dev/null . 2>&1 &&
      CGO_ENABLED=0 GOOS=$os GOARCH=$arch go vet ./... 2>&1)"; then
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
