#!/usr/bin/env bash
# Builds the leasectl binary for each platform a release ships
# (.goreleaser.yaml: linux, darwin, windows on amd64 and arm64), with
# CGO_ENABLED=0 and -trimpath as releases are built, and runs go vet on every
# package (test files too) for each operating system; exits non-zero when
# any fails, after trying them all. scripts/test.sh runs it, beside the
# tests, and so CI.
#
# go vet gets -trimpath too: it then type-checks against the very packages
# the build compiled (the build cache keys them by their flags), where it
# would compile them all again otherwise; and test/release's snapshot
# release, whose goreleaser builds the same way, finds them compiled too.
# Each platform's time goes to stderr.
set -uo pipefail
cd "$(dirname "$0")/.."
now() { if [ -n "${EPOCHREALTIME:-}" ]; then echo "${EPOCHREALTIME//[!0-9]/}"; else echo "$(($(date +%s) * 1000000))"; fi; }
failed=()
# go vet once per operating system (on amd64) while no file of this module
# is chosen by the architecture: arm64's vet would check the same files.
vet_arm64=""
if git ls-files -- '*.go' | grep -qE '_(amd64|arm64)(_test)?\.go$' ||
  git grep -qE '^//go:build .*(amd64|arm64)' -- '*.go'; then
  vet_arm64=1
fi
# linux/amd64 last: scripts/test.sh's tests, built the same way, have
# compiled its packages by then.
for platform in darwin/arm64 windows/arm64 linux/arm64 darwin/amd64 windows/amd64 linux/amd64; do
  os="${platform%/*}" arch="${platform#*/}"
  start="$(now)"
  vet=(go vet -trimpath ./...)
  [ "$arch" = arm64 ] && [ -z "$vet_arm64" ] && vet=(true)
  if out="$(CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -o /dev/null . 2>&1 &&
    CGO_ENABLED=0 GOOS=$os GOARCH=$arch "${vet[@]}" 2>&1)"; then
    echo "ok    $os/$arch"
  else
    echo "FAIL  $os/$arch"
    printf '%s\n' "$out" | sed 's/^/      /'
    failed+=("$os/$arch")
  fi
  us=$(($(now) - start))
  printf '>> cross %s took %d.%d s\n' "$os/$arch" $((us / 1000000)) $((us / 100000 % 10)) >&2
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "cross-compilation failed for: ${failed[*]}" >&2
  exit 1
fi
