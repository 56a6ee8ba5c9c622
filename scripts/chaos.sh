#!/usr/bin/env bash
# The chaos scenarios (internal/chaos, docs/chaos.md) against a RabbitMQ
# node and a PostgreSQL cluster of their own, on ports of their own, so
# that the services everything else uses (5672, 5432) are never touched.
#
#   scripts/chaos.sh [driver flags]    e.g. -scenarios 1,4 -runs 2000
#   scripts/chaos.sh ctl ACTION        what the driver runs to inject faults
#
# It builds the driver and the chaos flow binary, starts the services,
# runs the driver, and stops exactly what it started, however it ends.
# Run it as root (the services then run as the rabbitmq and postgres
# users: PostgreSQL refuses root) or as a user who may run both servers.
#
# Environment: CHAOS_AMQP_PORT (5673), CHAOS_DIST_PORT (25673),
# CHAOS_PG_PORT (5433), CHAOS_NODE (chaos@localhost), CHAOS_PG_BIN (the
# newest /usr/lib/postgresql/*/bin), CHAOS_RABBIT_BIN (/usr/lib/rabbitmq/bin),
# CHAOS_KEEP=1 keeps the working directory (data and logs) afterwards; it
# is kept, without the data, when the driver fails.
set -euo pipefail

amqp_port=${CHAOS_AMQP_PORT:-5673}
dist_port=${CHAOS_DIST_PORT:-25673}
pg_port=${CHAOS_PG_PORT:-5433}
node=${CHAOS_NODE:-chaos@localhost}
rabbit_bin=${CHAOS_RABBIT_BIN:-/usr/lib/rabbitmq/bin}
pg_bin=${CHAOS_PG_BIN:-}
if [ -z "$pg_bin" ]; then
	pg_bin=$(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -name bin -type d 2>/dev/null | sort -V | tail -n 1)
fi

log() { printf 'chaos.sh: %s\n' "$*" >&2; }
die() {
	log "$*"
	exit 1
}

# as USER CMD...: CMD as USER when we are root (the servers refuse to run
# as root, or should not), as ourselves otherwise.
as() {
	local user=$1
	shift
	if [ "$(id -u)" -eq 0 ]; then
		runuser -u "$user" -- "$@"
	else
		"$@"
	fi
}

# rabbit_env sets, in the array renv, the environment that makes
# rabbitmq-server and rabbitmqctl use the chaos node and nothing of the
# system node's: its own name, ports, data, logs, config, plugins (none,
# so that no management port is taken) and env file.
rabbit_env() {
	local r=$dir/rabbit
	renv=(RABBITMQ_NODENAME="$node" RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
		RABBITMQ_NODE_PORT="$amqp_port" RABBITMQ_DIST_PORT="$dist_port"
		RABBITMQ_MNESIA_BASE="$r/mnesia" RABBITMQ_LOG_BASE="$r/log"
		RABBITMQ_CONFIG_FILE="$r/rabbitmq.conf" RABBITMQ_ADVANCED_CONFIG_FILE="$r/advanced.config"
		RABBITMQ_ENABLED_PLUGINS_FILE="$r/enabled_plugins" RABBITMQ_CONF_ENV_FILE="$r/rabbitmq-env.conf"
		RABBITMQ_PID_FILE="$r/pid" ERL_EPMD_ADDRESS=127.0.0.1
		RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}")
}

rabbitmqctl() {
	rabbit_env
	as rabbitmq env "${renv[@]}" "$rabbit_bin/rabbitmqctl" -q -n "$node" "$@"
}

rabbit_start() {
	rabbit_env
	# setsid: a ^C meant for the driver must not reach the node; the
	# trap stops it.
	local user=()
	[ "$(id -u)" -ne 0 ] || user=(runuser -u rabbitmq --)
	setsid "${user[@]}" env "${renv[@]}" "$rabbit_bin/rabbitmq-server" \
		</dev/null >>"$dir/rabbit/log/server.out" 2>&1 &
	echo $! >"$dir/rabbit/launcher.pid"
	if ! rabbitmqctl wait --timeout 90 "$dir/rabbit/pid" >/dev/null; then
		tail -n 30 "$dir/rabbit/log/server.out" >&2 || true
		die "the RabbitMQ node $node did not start (logs in $dir/rabbit/log)"
	fi
}

rabbit_stop() {
	if [ ! -s "$dir/rabbit/pid" ]; then
		# Never came up far enough to write its pid: stop what launched it.
		if [ -s "$dir/rabbit/launcher.pid" ]; then
			kill -TERM "$(cat "$dir/rabbit/launcher.pid")" 2>/dev/null || true
			rm -f "$dir/rabbit/launcher.pid"
		fi
		return 0
	fi
	local pid
	pid=$(cat "$dir/rabbit/pid")
	if ! rabbitmqctl stop "$dir/rabbit/pid" >/dev/null 2>&1 && kill -0 "$pid" 2>/dev/null; then
		log "rabbitmqctl stop failed; sending SIGTERM to the node ($pid)"
		kill -TERM "$pid" 2>/dev/null || true
		for _ in $(seq 1 60); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.5
		done
	fi
	rm -f "$dir/rabbit/pid" "$dir/rabbit/launcher.pid"
}

pg_ctl() {
	as postgres "$pg_bin/pg_ctl" -D "$dir/pg/data" "$@"
}

# pg_start starts the cluster without fsync: a crash of PostgreSQL alone
# (what the scenarios inject) loses nothing committed, since every
# commit's WAL is still written to the kernel; only a machine crash
# would, and none is injected.
pg_start() {
	pg_ctl -l "$dir/pg/log/postgres.log" -w -t 60 start \
		-o "-p $pg_port -k $dir/pg -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off -c max_connections=300" \
		>/dev/null || die "PostgreSQL did not start (log: $dir/pg/log/postgres.log)"
}

pg_stop() {
	[ -f "$dir/pg/data/postmaster.pid" ] || return 0
	pg_ctl -m "${1:-fast}" -w -t 60 stop >/dev/null
}

# The in-node loop of close-loop-start (replacing one already running):
# every 2 s it closes every client connection of the chaos node, as
# rabbitmqctl close_all_connections would, without starting a CLI virtual
# machine every 2 s on a machine of two cores. It registers its own name
# first, so that no loop can run without one (close-loop-stop finds it by
# it).
close_loop='
	case whereis(acemq_chaos_closer) of
		undefined -> ok;
		Old -> unregister(acemq_chaos_closer), exit(Old, kill)
	end,
	Closer = fun Loop() ->
		timer:sleep(2000),
		rabbit_networking:close_connections(rabbit_networking:connections(), "chaos: every connection closed every 2 s"),
		Loop()
	end,
	spawn(fun() -> true = register(acemq_chaos_closer, self()), Closer() end), ok.'

redelivered='
	lists:sum([maps:get(messages_redelivered_total, Counters, 0)
		|| {Labels, Counters} <- maps:to_list(rabbit_global_counters:overview()),
		   lists:member({protocol, amqp091}, Labels)]).'

ctl() {
	[ -n "${CHAOS_DIR:-}" ] || die "ctl: CHAOS_DIR is not set (the driver sets it)"
	dir=$CHAOS_DIR
	case "${1:-}" in
	rabbit-stop) rabbit_stop ;;
	rabbit-start) rabbit_start ;;
	pg-stop) pg_stop "${2:-fast}" ;;
	pg-start) pg_start ;;
	close-loop-start) rabbitmqctl eval "$close_loop" >/dev/null ;;
	close-loop-stop) rabbitmqctl eval 'case whereis(acemq_chaos_closer) of undefined -> ok; P -> exit(P, kill), ok end.' >/dev/null ;;
	redelivered) rabbitmqctl eval "$redelivered" ;;
	*) die "ctl: unknown action ${1:-} (rabbit-stop, rabbit-start, pg-stop [mode], pg-start, close-loop-start, close-loop-stop, redelivered)" ;;
	esac
}

if [ "${1:-}" = ctl ]; then
	shift
	ctl "$@"
	exit
fi

[ -x "$rabbit_bin/rabbitmq-server" ] || die "no rabbitmq-server in $rabbit_bin (set CHAOS_RABBIT_BIN)"
[ -n "$pg_bin" ] && [ -x "$pg_bin/initdb" ] || die "no PostgreSQL binaries found (set CHAOS_PG_BIN)"
for port in "$amqp_port" "$dist_port" "$pg_port"; do
	if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
		die "port $port is taken: the chaos services need it (set CHAOS_AMQP_PORT, CHAOS_DIST_PORT or CHAOS_PG_PORT)"
	fi
done

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
dir=$(mktemp -d "${TMPDIR:-/tmp}/acemq-chaos.XXXXXX")
chmod 755 "$dir"
rabbit_started=
pg_started=
build=
status=1

cleanup() {
	trap - EXIT INT TERM
	set +e
	if [ -n "$build" ] && kill -0 "$build" 2>/dev/null; then
		kill "$build"
		wait "$build"
	fi
	[ -n "$rabbit_started" ] && rabbit_stop
	[ -n "$pg_started" ] && pg_stop fast
	if [ "${CHAOS_KEEP:-}" = 1 ]; then
		log "kept $dir"
	elif [ "$status" -ne 0 ]; then
		rm -rf "$dir/rabbit/mnesia" "$dir/pg/data" "$dir/bin"
		log "logs kept in $dir"
	else
		rm -rf "$dir"
	fi
	exit "$status"
}
trap cleanup EXIT
trap 'status=130; exit' INT TERM

mkdir -p "$dir/bin" "$dir/logs" "$dir/rabbit/log" "$dir/rabbit/mnesia" "$dir/pg/log"
log "building the driver and the chaos flow binary while the services start"
(cd "$root" && exec go build -o "$dir/bin/" ./internal/chaos ./internal/chaos/flowbin) &
build=$!

cat >"$dir/rabbit/rabbitmq.conf" <<EOF
listeners.tcp.1 = 127.0.0.1:$amqp_port
loopback_users.guest = true
disk_free_limit.absolute = 50MB
log.file.level = info
log.console = false
EOF
echo '[].' >"$dir/rabbit/enabled_plugins"
echo '[].' >"$dir/rabbit/advanced.config"
: >"$dir/rabbit/rabbitmq-env.conf"
if [ "$(id -u)" -eq 0 ]; then
	chown -R rabbitmq:rabbitmq "$dir/rabbit"
	mkdir -p "$dir/pg/data"
	chown -R postgres:postgres "$dir/pg"
fi

log "starting RabbitMQ node $node on 127.0.0.1:$amqp_port"
rabbit_started=1
rabbit_start
log "starting PostgreSQL on 127.0.0.1:$pg_port"
as postgres "$pg_bin/initdb" -D "$dir/pg/data" -U postgres -A trust -E UTF8 --no-sync >"$dir/pg/log/initdb.log" 2>&1 ||
	die "initdb failed (log: $dir/pg/log/initdb.log)"
pg_started=1
pg_start
wait "$build" || die "go build failed"
build=

set +e
CHAOS_DIR=$dir "$dir/bin/chaos" -bin "$dir/bin/flowbin" -ctl "$here/chaos.sh" -logs "$dir/logs" \
	-amqp-url "amqp://guest:guest@127.0.0.1:$amqp_port/" \
	-database-url "postgres://postgres@127.0.0.1:$pg_port/postgres?sslmode=disable" "$@"
status=$?
set -e
