#!/usr/bin/env bash
# Runs leasectl's whole test suite against real PostgreSQL and PgBouncer,
# installing them first when they are missing (Debian), and with the race
# detector on the lease's packages after. Beside it all run the build and
# go vet of every release platform, this one included (scripts/cross.sh),
# and the build of goreleaser: a failure of either fails the script, with
# its output.
# Each step's time goes to stderr, `>> step NAME took S s`, and all of them
# at the end (scripts/steps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
. scripts/steps.sh
steps_init
ensure_go
# In the background, niced: goreleaser (test/release's release tests wait
# for it), and the build and vet of every release platform, whose compiled
# packages goreleaser's snapshot release in those tests then reuses.
bg_step goreleaser bash -c '. scripts/lib.sh && install_goreleaser'
LEASECTL_GORELEASER_STATUS="$(bg_status goreleaser)"
export LEASECTL_GORELEASER_STATUS
bg_step cross bash scripts/cross.sh
step packages ensure_packages test
# Four test binaries at a time: they spend most of their time waiting on
# servers, processes and timers. The tests build as releases are built
# (static, -trimpath), and so do the leasectl binaries they build (the
# environment carries the flags), so that those builds and the release
# builds of this platform (scripts/cross.sh, goreleaser) find every
# package compiled.
step test env CGO_ENABLED=0 GOFLAGS="$(go env GOFLAGS) -trimpath" go test -count=1 -p 4 -timeout 20m "$@" ./...
# The packages that hold the lease's concurrency, under the race detector,
# after the tests: beside them, on a fresh 2-core machine, the probe's
# verdicts on pgpool-II and idle proxies timed out under the load.
step race go test -count=1 -race ./locks ./lease/... ./probe ./supervisor
bg_wait cross
bg_wait goreleaser quiet
