#!/usr/bin/env bash
# Runs leasectl's whole test suite against real PostgreSQL and PgBouncer,
# installing them first when they are missing (Debian), after go vet here
# and the build and vet of every release platform (scripts/cross.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
ensure_deps test
go vet ./...
bash scripts/cross.sh
go test -count=1 -timeout 20m "$@" ./...
# The packages that hold the lease's concurrency, under the race detector.
go test -count=1 -race ./locks ./lease/... ./probe ./supervisor
