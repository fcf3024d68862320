#!/usr/bin/env bash
# The GitHub Action's logic (action.yml at the repository root calls it):
# install leasectl, then check the keys file with `keys lint` and `keys diff`
# in the github-actions format, so that every finding and every failure is an
# annotation on the pull request.
#
# Inputs, as action.yml passes them:
#   INPUT_KEYS                the keys file (default keys.yaml), relative to the working directory
#   INPUT_BASE                the git ref to compare with (default: the latest tag reachable from HEAD)
#   INPUT_VERSION             "source" (default): build leasectl from the action's own files, at the
#                             action's ref; a release tag such as v1.2.0: download that release's
#                             archive and check it against the release's SHA-256 checksums
#   INPUT_ALLOW_MISSING_BASE  "true" for a first release, when there is no tag yet
# Read as well: GITHUB_ACTION_PATH (the action's files; default: the
# repository holding this script), GITHUB_ACTION_REF (stamped as a source
# build's version), RUNNER_OS and RUNNER_ARCH (default: this machine's),
# RUNNER_TEMP, GITHUB_PATH (leasectl's directory is added to it, for later
# steps), LEASECTL_RELEASE_URL (where releases are downloaded from; default
# https://github.com/leasectl/leasectl/releases/download).
#
# Exit status: that of the first check to fail (1: a change that breaks a
# rolling deploy; 2: invalid input, a missing keys file, a shallow clone, a
# ref not found), 2 for an invalid input of the action, 3 when leasectl could
# not be installed.
#
# Sourced (`. scripts/action.sh`), it only defines its functions, for tests.
set -euo pipefail

release_url_default=https://github.com/leasectl/leasectl/releases/download

# annotate_error MESSAGE: an error annotation, which the pull request shows.
annotate_error() {
  local msg="$1"
  msg="${msg//'%'/'%25'}"
  msg="${msg//$'\r'/'%0D'}"
  msg="${msg//$'\n'/'%0A'}"
  echo "::error title=leasectl action::$msg"
}

# fail CODE MESSAGE: annotate MESSAGE and exit with CODE.
fail() {
  annotate_error "$2"
  exit "$1"
}

# release_platform prints "OS ARCH" in Go's names for the runner (RUNNER_OS,
# RUNNER_ARCH), else for this machine.
release_platform() {
  local os arch
  case "${RUNNER_OS:-$(uname -s)}" in
    Linux | linux) os=linux ;;
    macOS | Darwin | darwin) os=darwin ;;
    Windows | windows | MINGW* | MSYS* | CYGWIN*) os=windows ;;
    *) echo "unsupported runner OS ${RUNNER_OS:-$(uname -s)}: leasectl is released for Linux, macOS and Windows" >&2; return 1 ;;
  esac
  case "${RUNNER_ARCH:-$(uname -m)}" in
    X64 | x86_64 | amd64) arch=amd64 ;;
    ARM64 | aarch64 | arm64) arch=arm64 ;;
    *) echo "unsupported runner architecture ${RUNNER_ARCH:-$(uname -m)}: leasectl is released for amd64 and arm64" >&2; return 1 ;;
  esac
  echo "$os $arch"
}

# release_archive VERSION OS ARCH prints the archive's file name, as
# .goreleaser.yaml's archives.name_template makes it (the version without its
# leading v; zip for Windows).
release_archive() {
  local ext=tar.gz
  [ "$2" = windows ] && ext=zip
  echo "leasectl_${1#v}_${2}_${3}.${ext}"
}

# release_checksums VERSION prints the checksums file's name
# (.goreleaser.yaml's checksum.name_template).
release_checksums() {
  echo "leasectl_${1#v}_checksums.txt"
}

# release_url VERSION FILE prints where FILE of release VERSION is.
release_url() {
  echo "${LEASECTL_RELEASE_URL:-$release_url_default}/$1/$2"
}

# verify_checksum FILE CHECKSUMS: FILE's SHA-256 must be the one CHECKSUMS
# (sha256sum's format) lists for FILE's name.
verify_checksum() {
  local file="$1" sums="$2" name want got
  name="$(basename "$file")"
  want="$(awk -v n="$name" '$2 == n || $2 == "*" n { print $1; exit }' "$sums")"
  if [ -z "$want" ]; then
    echo "$name is not listed in $(basename "$sums")" >&2
    return 1
  fi
  if command -v sha256sum >/dev/null 2>&1; then
    got="$(sha256sum "$file" | awk '{print $1}')"
  else
    got="$(shasum -a 256 "$file" | awk '{print $1}')"
  fi
  if [ "$got" != "$want" ]; then
    echo "$name has SHA-256 $got, but the release's checksums list $want: the download is corrupt or was tampered with" >&2
    return 1
  fi
}

# install_release VERSION DIR downloads release VERSION's archive for this
# runner, checks its checksum and puts the binary into DIR.
install_release() {
  local version="$1" dir="$2" platform os arch archive sums tmp
  platform="$(release_platform)" || return 1
  read -r os arch <<<"$platform"
  archive="$(release_archive "$version" "$os" "$arch")"
  sums="$(release_checksums "$version")"
  tmp="$(mktemp -d)"
  for f in "$archive" "$sums"; do
    if ! curl -fsL --retry 3 -o "$tmp/$f" "$(release_url "$version" "$f")"; then
      echo "cannot download $(release_url "$version" "$f"): check that release $version exists and has an archive for $os/$arch" >&2
      return 1
    fi
  done
  verify_checksum "$tmp/$archive" "$tmp/$sums" || return 1
  mkdir -p "$dir"
  case "$archive" in
    *.zip) unzip -q -o "$tmp/$archive" leasectl.exe -d "$dir" ;;
    *) tar -xzf "$tmp/$archive" -C "$dir" leasectl ;;
  esac
  rm -rf "$tmp"
}

# install_source SRC DIR builds leasectl from the module in SRC into DIR,
# stamped with the action's ref (GITHUB_ACTION_REF) as its version when
# there is one.
install_source() {
  local src="$1" dir="$2" pkg=github.com/leasectl/leasectl/internal/buildinfo ldflags="-s -w" commit
  if ! command -v go >/dev/null 2>&1; then
    echo "go is not installed, and version: source builds leasectl with it: add actions/setup-go before this action, or set version to a release tag" >&2
    return 1
  fi
  [ -n "${GITHUB_ACTION_REF:-}" ] && ldflags+=" -X $pkg.version=${GITHUB_ACTION_REF}"
  if commit="$(git -C "$src" rev-parse HEAD 2>/dev/null)"; then
    ldflags+=" -X $pkg.commit=$commit"
  fi
  mkdir -p "$dir"
  # -buildvcs=false: the commit is stamped above, and git may refuse a
  # checkout it does not own.
  (cd "$src" && CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "$ldflags" -o "$dir/leasectl$(exe_suffix)" .)
}

exe_suffix() {
  case "${RUNNER_OS:-$(uname -s)}" in
    Windows | MINGW* | MSYS* | CYGWIN*) echo .exe ;;
  esac
}

main() {
  local keys="${INPUT_KEYS:-keys.yaml}" base="${INPUT_BASE:-}" version="${INPUT_VERSION:-source}"
  local allow="${INPUT_ALLOW_MISSING_BASE:-false}"
  local src="${GITHUB_ACTION_PATH:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
  local dir="${RUNNER_TEMP:-${TMPDIR:-/tmp}}/leasectl-action-bin" why

  case "$allow" in
    true | false) ;;
    *) fail 2 "invalid input allow-missing-base: \"$allow\": use true or false" ;;
  esac
  case "$version" in
    source)
      echo "building leasectl from source at ${GITHUB_ACTION_REF:-$src}"
      why="$(install_source "$src" "$dir" 2>&1)" || fail 3 "cannot build leasectl from source: $why"
      ;;
    v[0-9]*)
      echo "installing leasectl $version"
      why="$(install_release "$version" "$dir" 2>&1)" || fail 3 "cannot install leasectl $version: $why"
      ;;
    *) fail 2 "invalid input version: \"$version\": use source, or a release tag such as v1.2.0" ;;
  esac
  local leasectl="$dir/leasectl$(exe_suffix)"
  "$leasectl" --version
  [ -n "${GITHUB_PATH:-}" ] && echo "$dir" >>"$GITHUB_PATH"

  # -o github-actions; releases before it show --format in their help, and
  # know only that name.
  local format=(-o github-actions)
  if "$leasectl" keys lint --help 2>/dev/null | grep -q -- '--format'; then
    format=(--format github-actions)
  fi
  local rc=0
  "$leasectl" keys lint "$keys" "${format[@]}" || rc=$?
  if [ "$rc" -ne 0 ]; then
    exit "$rc" # keys diff would report the same problems again
  fi
  local args=(keys diff "$keys" "${format[@]}")
  [ -n "$base" ] && args+=(--base "$base")
  [ "$allow" = true ] && args+=(--allow-missing-base)
  "$leasectl" "${args[@]}" || rc=$?
  exit "$rc"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  main "$@"
fi
