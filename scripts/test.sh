#!/usr/bin/env bash
# Runs leasectl's whole test suite against real PostgreSQL and PgBouncer,
# installing them first when they are missing (Debian).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
ensure_deps
go vet ./...
go test -count=1 -timeout 20m "$@" ./...
