#!/usr/bin/env bash
# The main job in one command: build leasectl, start a throwaway PostgreSQL +
# PgBouncer, show what leasectl sees, and tear it all down again.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
ensure_deps demo

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
# run prints a command as written, then runs it and shows a non-zero exit code.
run() { printf '$ %s\n' "$1"; eval "$1" || printf '(exit %d)\n' "$?"; }

go build -o bin/leasectl .
export PATH="$PWD/bin:$PATH"
LAB_DIR="$(mktemp -d -t leasectl-demo-XXXXXX)"
trap 'leasectl lab down --dir "$LAB_DIR" >/dev/null 2>&1 || true; rm -rf "$LAB_DIR"' EXIT

say "a throwaway PostgreSQL with PgBouncer in transaction and session mode"
leasectl lab up --dir "$LAB_DIR"
eval "$(leasectl lab env --dir "$LAB_DIR")"

say "the trap: two clients through the transaction pooler both 'win' the same key"
psql -X -At -d "$LEASECTL_LAB_TX_DSN" -c "select 'client A got the lock: ' || pg_try_advisory_lock(42) || ' on backend ' || pg_backend_pid()"
psql -X -At -d "$LEASECTL_LAB_TX_DSN" -c "select 'client B got the lock: ' || pg_try_advisory_lock(42) || ' on backend ' || pg_backend_pid()"

say "who holds key 42 now? a pooled server connection: both clients are gone, the lock stays"
run 'leasectl who --all'

say "leasectl probe: the direct DSN is stable..."
run 'leasectl probe "$LEASECTL_LAB_DSN"'

say "...PgBouncer in session mode is a proxy, but safe..."
run 'leasectl probe "$LEASECTL_LAB_SESSION_DSN"'

say "...and the transaction pooler is refused, although the textbook session probe passes there"
run 'leasectl probe "$LEASECTL_LAB_TX_DSN"'

say "keys.yaml is a deployment API: keys diff catches a changed key before it ships"
leasectl keys lint
sed 's/poller: 1840000001/poller: 1840000009/' keys.yaml > "$LAB_DIR/keys.yaml"
run 'leasectl keys diff "$LAB_DIR/keys.yaml" --base-file keys.yaml'

say "the term record (leasectl fence init): leasectl run creates it too; workers of your own keep leading by holding the key"
run 'leasectl fence init'

say "forced failover: worker A (plain psql, no lease) holds poller's key, worker B stands by in the server's lock queue"
# Two psql sessions play the workers, each reading statements from a fifo
# that this script holds open: they stay connected (and idle) until the
# script closes the fifos or exits.
mkfifo "$LAB_DIR/worker-a" "$LAB_DIR/worker-b"
PGAPPNAME=poller-a psql -X -q -d "$LEASECTL_DSN" -f "$LAB_DIR/worker-a" >/dev/null 2>&1 &
exec 3>"$LAB_DIR/worker-a"
echo "select pg_advisory_lock(1840000001);" >&3
until leasectl who poller --check >/dev/null 2>&1; do sleep 0.1; done
PGAPPNAME=poller-b psql -X -q -d "$LEASECTL_DSN" -f "$LAB_DIR/worker-b" >/dev/null 2>&1 &
exec 4>"$LAB_DIR/worker-b"
echo "select pg_advisory_lock(1840000001);" >&4
until leasectl who poller | grep -q '1 waiting'; do sleep 0.1; done
run 'leasectl who poller --check'
run 'leasectl failover poller --yes --force'
run 'leasectl verify poller --pooler-dsn "$LEASECTL_LAB_TX_DSN"'
exec 3>&- 4>&-   # end of input: both psql sessions disconnect

say "leasectl run: two replicas of a worker; only the leader runs it"
# The worker takes 300 ms to stop after SIGTERM, like one that drains work.
worker='echo "  worker pid $$ runs under backend $LEASECTL_BACKEND_PID"; trap "sleep 0.3; exit 0" TERM; while :; do sleep 0.1; done'
leasectl run --role poller -- sh -c "$worker" 2>"$LAB_DIR/a.log" & A=$!
until leasectl who poller --check >/dev/null 2>&1; do sleep 0.1; done
leasectl run --role poller -- sh -c "$worker" 2>"$LAB_DIR/b.log" & B=$!
until leasectl who poller | grep -q '1 waiting'; do sleep 0.1; done

say "graceful failover: the leader is asked to step down; it stops its worker, then the stand-by leads"
run 'leasectl failover poller --yes'
until leasectl who poller | grep -q '1 waiting'; do sleep 0.1; done

say "SIGKILL the leader's leasectl (now B, $B): its worker dies with it, A takes over"
kill -9 "$B"; wait "$B" 2>/dev/null || true
until [ "$(grep -c 'program started' "$LAB_DIR/a.log")" -ge 2 ]; do sleep 0.1; done
kill -TERM "$A" 2>/dev/null || true; wait "$A" 2>/dev/null || true
grep -h 'msg=leading\|program started\|stepped down\|asked to step down' "$LAB_DIR/a.log" "$LAB_DIR/b.log" | sort | cut -c1-150

say "tear down"
leasectl lab down --dir "$LAB_DIR"
