# Starts the distributed mode on this machine, on loopback, for the
# benchmark scripts: a durable PostgreSQL cluster (fsync on), fauxqs as SQS,
# and one `waft serve` per role (two executors). Source it from the
# project's root after building target/release/waft (or the binary $waft
# names); everything it starts is stopped, and its files removed, when the
# script exits.
# shellcheck shell=bash

work=$(mktemp -d)
chmod 755 "$work"
pids=()
distributed_cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    # runuser does not pass the signal on: stop the postmaster itself (a
    # fast shutdown) and wait for it to go.
    if [ -n "${pg:-}" ]; then
        kill -INT "$pg" 2>/dev/null || true
        while kill -0 "$pg" 2>/dev/null; do sleep 0.1; done
    fi
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap distributed_cleanup EXIT

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
as_postgres() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
waft=${waft:-target/release/waft}
pg_bin=$(dirname "$(command -v initdb || ls /usr/lib/postgresql/*/bin/initdb | tail -1)")

# start_postgres [SETTING...]: a fresh cluster; sets pg_base (its URL
# without a database) and pg (the postmaster's pid). Extra arguments go to
# `postgres` (e.g. -c shared_preload_libraries=...).
start_postgres() {
    local pg_port
    pg_port=$(port)
    mkdir -p "$work/pg" && chown postgres "$work/pg" 2>/dev/null || true
    as_postgres "$pg_bin/initdb" -D "$work/pg" -U postgres --auth=trust >/dev/null
    as_postgres "$pg_bin/postgres" -D "$work/pg" -k "$work/pg" -c listen_addresses=127.0.0.1 \
        -p "$pg_port" -c max_connections=200 "$@" >"$work/pg.log" 2>&1 &
    pids+=($!)
    until psql -h 127.0.0.1 -p "$pg_port" -U postgres -c 'select 1' >/dev/null 2>&1; do sleep 0.2; done
    pg=$(head -1 "$work/pg/postmaster.pid")
    pg_base="postgres://postgres@127.0.0.1:$pg_port"
}

# start_fauxqs: an SQS-compatible server; sets sqs (its pid) and exports
# WAFT_QUEUE_SQS_ENDPOINT_URL.
start_fauxqs() {
    local sqs_port
    sqs_port=$(port)
    FAUXQS_PORT=$sqs_port FAUXQS_LOGGER=false node .tools/node_modules/fauxqs/dist/cli.js \
        >"$work/sqs.log" 2>&1 &
    sqs=$!
    pids+=("$sqs")
    until (exec 3<>/dev/tcp/127.0.0.1/$sqs_port) 2>/dev/null; do sleep 0.2; done
    export WAFT_QUEUE_SQS_ENDPOINT_URL="http://127.0.0.1:$sqs_port"
}

# start_roles STORE_URL: one `waft serve` per role on the store at
# STORE_URL with one secrets key; sets roles (their pids) and role_pids
# (role:pid each) and exports the peers' addresses, and returns once the
# Frontend answers. The Controller reaches the queues at $controller_sqs
# when set (a counting proxy), else where every role does.
start_roles() {
    export WAFT_STORE_URL=$1
    # The installation's key: it seals secrets and the components the
    # Frontend compiles, which executors then load instead of compiling.
    if [ -z "${WAFT_SECRETS_KEY_FILE:-}" ]; then
        export WAFT_SECRETS_KEY_FILE=$work/secrets.key
        python3 -c 'import secrets; print(secrets.token_hex(32))' >"$WAFT_SECRETS_KEY_FILE"
        chmod 600 "$WAFT_SECRETS_KEY_FILE"
    fi
    export WAFT_PEERS_FRONTEND="127.0.0.1:$(port)"
    export WAFT_PEERS_CONTROLLER="127.0.0.1:$(port)"
    export WAFT_PEERS_HSC="127.0.0.1:$(port)"
    roles=()
    role_pids=()
    local role address sqs
    for role in hsc:$WAFT_PEERS_HSC frontend:$WAFT_PEERS_FRONTEND consumer: \
                controller:$WAFT_PEERS_CONTROLLER executor: executor:; do
        address=${role#*:}
        address=${address:-127.0.0.1:$(port)}
        role=${role%%:*}
        sqs=$WAFT_QUEUE_SQS_ENDPOINT_URL
        if [ "$role" = controller ]; then sqs=${controller_sqs:-$sqs}; fi
        WAFT_LISTEN=$address WAFT_QUEUE_SQS_ENDPOINT_URL=$sqs "$waft" serve "$role" \
            >"$work/$role-${address##*:}.log" 2>&1 &
        pids+=($!)
        roles+=($!)
        role_pids+=("$role:$!")
    done
    until "$waft" lambda list --server "$WAFT_PEERS_FRONTEND" >/dev/null 2>&1; do
        sleep 0.2
    done
}
