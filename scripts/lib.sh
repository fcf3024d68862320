# Shared by scripts/demo.sh, scripts/test.sh (and so .ci/run) and `make
# chaos`: `ensure_deps demo` or `ensure_deps test` makes sure Go and what
# that job runs are there, installing the missing Debian packages.

if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
  export PATH="/usr/local/go/bin:$PATH"
fi

# need_packages JOB prints the Debian packages that JOB (demo or test) needs
# and this machine lacks.
need_packages() {
  local missing=()
  # Both: the lab's PostgreSQL (initdb, pg_ctl, postgres, pg_basebackup)
  # and PgBouncer, psql; git, which go build asks for the commit in a clone.
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 || missing+=(postgresql)
  command -v psql >/dev/null 2>&1 || missing+=(postgresql-client)
  command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] || missing+=(pgbouncer)
  command -v git >/dev/null 2>&1 || missing+=(git)
  if [ "$1" = test ]; then
    # make: the docs tests run `make install` into a staging directory.
    command -v make >/dev/null 2>&1 || missing+=(make)
    # The fault suite's network partition (test/chaos): ip netns, veth, nft.
    command -v ip >/dev/null 2>&1 || [ -x /usr/sbin/ip ] || [ -x /sbin/ip ] || missing+=(iproute2)
    command -v nft >/dev/null 2>&1 || [ -x /usr/sbin/nft ] || missing+=(nftables)
    # The lab's optional front doors, which the probe's tests go through:
    # pgpool-II load balancing, HAProxy, a socat unix-to-TCP relay.
    command -v pgpool >/dev/null 2>&1 || [ -x /usr/sbin/pgpool ] || missing+=(pgpool2)
    command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || missing+=(haproxy)
    # nginx's stream proxy (the lab's nginx front door): Debian ships the
    # stream module as a package of its own, which nginx does not pull in.
    command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing+=(nginx)
    [ -e /usr/lib/nginx/modules/ngx_stream_module.so ] || missing+=(libnginx-mod-stream)
    command -v socat >/dev/null 2>&1 || missing+=(socat)
    # The fencing page's programs (lease/fence_clients_test.go): psycopg 3,
    # ruby-pg, node and npm (which installs npm's pg for the test).
    /usr/bin/python3 -c 'import psycopg' >/dev/null 2>&1 || missing+=(python3-psycopg)
    ruby -e 'require "pg"' >/dev/null 2>&1 || missing+=(ruby-pg)
    command -v node >/dev/null 2>&1 || missing+=(nodejs)
    command -v npm >/dev/null 2>&1 || missing+=(npm)
    # The HA lab: Patroni (its Debian package brings python3-etcd and
    # psycopg2) and etcd 3.4.
    command -v patroni >/dev/null 2>&1 || missing+=(patroni)
    command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
    # The release tests (test/release): promtool checks the alerting
    # rules; curl is the GitHub Action's downloader.
    command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
    command -v curl >/dev/null 2>&1 || missing+=(curl)
  fi
  echo "${missing[@]}"
}

# ensure_deps JOB: demo (a lab of PostgreSQL and PgBouncer) or test (the
# whole suite: every lab, the fault suite, the release tests, so goreleaser
# too). scripts/test.sh runs its parts itself, goreleaser's build in the
# background: ensure_go, ensure_packages test, install_goreleaser.
ensure_deps() {
  ensure_go
  ensure_packages "${1:-}"
  if [ "${1:-}" = test ]; then
    install_goreleaser
  fi
  # Where a policy let Debian's packages start their own cluster and pooler
  # on 5432/6432, leasectl's lab still uses its own free ports.
}

ensure_go() {
  if ! command -v go >/dev/null 2>&1; then
    echo "go not found: install Go 1.26 (https://go.dev/dl/) and put it on PATH" >&2
    exit 1
  fi
}

# ensure_packages JOB installs the Debian packages that JOB (demo or test)
# needs and this machine lacks.
ensure_packages() {
  local job="${1:-}"
  case "$job" in
  demo | test) ;;
  *)
    echo "ensure_deps: say demo or test, not '$job'" >&2
    exit 2
    ;;
  esac
  local missing
  missing="$(need_packages "$job")"
  if [ -n "$missing" ]; then
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    echo ">> installing: $missing" >&2
    $sudo apt-get update -qq
    # Packages such as nginx, postgresql and pgbouncer start a service of
    # their own on install (port 80, 5432, 6432), and an install whose
    # service cannot start (its port taken) fails. The lab starts its own
    # processes on free ports and needs none of them: where no policy says
    # otherwise, deny service starts for the length of the install.
    local policy=/usr/sbin/policy-rc.d added=""
    if [ ! -e "$policy" ]; then
      printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null && $sudo chmod 755 "$policy" && added=1
    fi
    local rc=0
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $missing >/dev/null || rc=$?
    [ -n "$added" ] && $sudo rm -f "$policy"
    [ "$rc" -eq 0 ] || exit "$rc"
  fi
}

# install_goreleaser: goreleaser, pinned (the Makefile's GORELEASER_VERSION
# and test/release's goreleaserVersion say the same), for
# test/release's release tests; go install once, offline afterwards.
# Built from source: a few hundred modules, minutes on a fresh machine, which
# is why scripts/test.sh builds it in the background. Built without
# optimisation or inlining, and without symbols: it only ever packs test
# snapshots, and its build costs 360 CPU-seconds instead of 516.
install_goreleaser() {
  command -v goreleaser >/dev/null 2>&1 || [ -x "$(go env GOPATH)/bin/goreleaser" ] ||
    go install -gcflags='all=-N -l' -ldflags='-s -w' github.com/goreleaser/goreleaser/v2@v2.15.1
}
