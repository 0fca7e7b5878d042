#!/usr/bin/env bash
# A throwaway PostgreSQL server on loopback for tests and benchmarks.
#
#   scripts/postgres.sh install   install PostgreSQL from the Debian packages if missing
#   scripts/postgres.sh start     install if needed, create the cluster if needed, start it, print its URL
#   scripts/postgres.sh url       print the URL of the running server (exit 1 if none)
#   scripts/postgres.sh stop      stop the server and delete its data directory
#
# Environment: COSEARCH_PG_DIR (default /tmp/cosearch-pg: data, socket, log, URL file),
# COSEARCH_PG_PORT (default: a free port above 20000), COSEARCH_PG_DURABLE=0 turns off fsync and
# synchronous commit (faster; data may be lost on a machine crash, fine for tests).
# The server listens on 127.0.0.1 only, with password authentication; when run as root, it runs
# as the `postgres` system user. The URL (postgresql+psycopg2://cosearch:PASSWORD@127.0.0.1:PORT/cosearch)
# is kept in $COSEARCH_PG_DIR/url (mode 600).
set -euo pipefail

PGROOT="${COSEARCH_PG_DIR:-/tmp/cosearch-pg}"
DATA="$PGROOT/data"
URLFILE="$PGROOT/url"
LOG="$PGROOT/server.log"
DB=cosearch
ROLE=cosearch

log() { echo "postgres.sh: $*" >&2; }

pg_bindir() {
  local d
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    if [[ -x "$d/initdb" && -x "$d/pg_ctl" ]]; then echo "$d"; return 0; fi
  done
  if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
    dirname "$(command -v initdb)"; return 0
  fi
  return 1
}

install() {
  if pg_bindir >/dev/null; then return 0; fi
  if [[ $(id -u) -ne 0 ]]; then
    log "PostgreSQL is not installed and this is not root: apt-get install postgresql (or put initdb/pg_ctl on PATH)"
    return 1
  fi
  log "installing PostgreSQL from the Debian packages"
  # Only our own throwaway clusters: no default 'main' cluster, no service started by the package.
  mkdir -p /etc/postgresql-common/createcluster.d
  echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.d/cosearch.conf
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends postgresql >/dev/null
  pg_bindir >/dev/null
}

# Run a command as the cluster owner (the postgres system user when we are root).
as_owner() {
  if [[ $(id -u) -eq 0 ]]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

free_port() {
  python3 - <<'EOF'
import random, socket
for _ in range(200):
    port = random.randint(20000, 60000)
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
        print(port)
        break
else:
    raise SystemExit("no free port")
EOF
}

running() {
  local bin; bin=$(pg_bindir) || return 1
  [[ -f "$DATA/PG_VERSION" ]] && as_owner "$bin/pg_ctl" -D "$DATA" status >/dev/null 2>&1
}

url() {
  if running && [[ -s "$URLFILE" ]]; then cat "$URLFILE"; return 0; fi
  log "no server running in $PGROOT (scripts/postgres.sh start)"
  return 1
}

start() {
  install
  local bin; bin=$(pg_bindir)
  if running; then url; return 0; fi
  local owner; owner=$(id -un)
  if [[ $(id -u) -eq 0 ]]; then
    id postgres >/dev/null 2>&1 || useradd --system --home-dir /var/lib/postgresql --shell /bin/false postgres
    owner=postgres
  fi
  mkdir -p "$PGROOT"
  chmod 755 "$PGROOT"
  if [[ ! -f "$DATA/PG_VERSION" ]]; then
    rm -rf "$DATA"
    local port=${COSEARCH_PG_PORT:-$(free_port)}
    local password; password=$(python3 -c 'import secrets; print(secrets.token_hex(16))')
    local pwfile="$PGROOT/pwfile"
    (umask 077; echo "$password" > "$pwfile")
    mkdir -p "$DATA"
    if [[ $(id -u) -eq 0 ]]; then chown "$owner" "$pwfile" "$DATA" "$PGROOT"; fi
    as_owner "$bin/initdb" -D "$DATA" -U "$ROLE" --pwfile="$pwfile" --auth=scram-sha-256 -E UTF8 \
      --locale=C --no-sync >/dev/null
    rm -f "$pwfile"
    local durable=${COSEARCH_PG_DURABLE:-1}
    {
      echo "listen_addresses = '127.0.0.1'"
      echo "port = $port"
      echo "unix_socket_directories = '$PGROOT'"
      echo "max_connections = 200"
      echo "shared_buffers = 128MB"
      if [[ "$durable" == 0 ]]; then
        echo "fsync = off"
        echo "synchronous_commit = off"
        echo "full_page_writes = off"
      fi
    } | as_owner tee -a "$DATA/postgresql.conf" >/dev/null
    (umask 077; echo "postgresql+psycopg2://$ROLE:$password@127.0.0.1:$port/$DB" > "$URLFILE")
  fi
  [[ $(id -u) -eq 0 ]] && chown "$owner" "$PGROOT"
  as_owner "$bin/pg_ctl" -D "$DATA" -l "$LOG" -w -t 60 start >/dev/null || { log "start failed; log:"; tail -20 "$LOG" >&2 || true; return 1; }
  local port; port=$(sed -E 's#.*:([0-9]+)/.*#\1#' "$URLFILE")
  local password; password=$(sed -E 's#^[^:]+://[^:]+:([^@]+)@.*#\1#' "$URLFILE")
  if ! PGPASSWORD="$password" "$bin/psql" -h 127.0.0.1 -p "$port" -U "$ROLE" -d postgres -tAc \
       "SELECT 1 FROM pg_database WHERE datname = '$DB'" | grep -q 1; then
    PGPASSWORD="$password" "$bin/createdb" -h 127.0.0.1 -p "$port" -U "$ROLE" "$DB"
  fi
  cat "$URLFILE"
}

stop() {
  local bin
  if bin=$(pg_bindir) && [[ -f "$DATA/PG_VERSION" ]]; then
    as_owner "$bin/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null 2>&1 || true
  fi
  rm -rf "$PGROOT"
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  url) url ;;
  stop) stop ;;
  *) echo "usage: $0 {install|start|url|stop}" >&2; exit 2 ;;
esac
