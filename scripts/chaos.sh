#!/usr/bin/env bash
# The chaos scenarios (internal/chaos, docs/chaos.md) against a RabbitMQ
# node and a PostgreSQL cluster of their own, on ports of their own, so
# that the services everything else uses (5672, 5432) are never touched.
#
#   scripts/chaos.sh [driver flags]    e.g. -scenarios 1,4 -runs 2000, or -short (1, 4, 7, 9, 10)
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

. "$(dirname "$0")/lib.sh"

amqp_port=${CHAOS_AMQP_PORT:-5673}
dist_port=${CHAOS_DIST_PORT:-25673}
pg_port=${CHAOS_PG_PORT:-5433}
node=${CHAOS_NODE:-chaos@localhost}
rabbit_bin=${CHAOS_RABBIT_BIN:-/usr/lib/rabbitmq/bin}
pg_bin=${CHAOS_PG_BIN:-$(newest_pg_bin)}

# rabbit_node makes the chaos node the one lib.sh's rnode_* functions act
# on.
rabbit_node() { rnode_select "$node" "$amqp_port" "$dist_port" "$dir/rabbit"; }

rabbitmqctl() {
	rabbit_node
	rnode_ctl "$@"
}

rabbit_start() {
	rabbit_node
	rnode_launch
	rnode_wait 90
}

rabbit_stop() {
	rabbit_node
	rnode_stop
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

# close-all: every client connection of the chaos node closed once; it
# prints how many.
close_all='
	Conns = rabbit_networking:connections(),
	rabbit_networking:close_connections(Conns, "chaos: every connection closed"),
	length(Conns).'

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
	close-all) rabbitmqctl eval "$close_all" ;;
	redelivered) rabbitmqctl eval "$redelivered" ;;
	*) die "ctl: unknown action ${1:-} (rabbit-stop, rabbit-start, pg-stop [mode], pg-start, close-loop-start, close-loop-stop, close-all, redelivered)" ;;
	esac
}

if [ "${1:-}" = ctl ]; then
	shift
	ctl "$@"
	exit
fi

check_servers CHAOS
ports_free "the chaos services need it (set CHAOS_AMQP_PORT, CHAOS_DIST_PORT or CHAOS_PG_PORT)" \
	"$amqp_port" "$dist_port" "$pg_port"

rabbit_started=
pg_started=
stop_services() {
	[ -n "$rabbit_started" ] && rabbit_stop
	[ -n "$pg_started" ] && pg_stop fast
}
work_start chaos "${CHAOS_KEEP:-}"

mkdir -p "$dir/bin" "$dir/logs" "$dir/rabbit/log" "$dir/rabbit/mnesia" "$dir/pg/log"
build_start

rnode_files "$dir/rabbit" "listeners.tcp.1 = 127.0.0.1:$amqp_port"
if [ "$(id -u)" -eq 0 ]; then
	chown -R rabbitmq:rabbitmq "$dir/rabbit"
	mkdir -p "$dir/pg/data"
	chown -R postgres:postgres "$dir/pg"
fi

log "starting RabbitMQ node $node on 127.0.0.1:$amqp_port"
rabbit_started=1
rabbit_start
log "starting PostgreSQL on 127.0.0.1:$pg_port"
pg_init
pg_started=1
pg_start
build_wait

set +e
CHAOS_DIR=$dir "$dir/bin/chaos" -bin "$dir/bin/flowbin" -ctl "$here/chaos.sh" -logs "$dir/logs" \
	-amqp-url "amqp://guest:guest@127.0.0.1:$amqp_port/" \
	-database-url "postgres://postgres@127.0.0.1:$pg_port/postgres?sslmode=disable" "$@"
status=$?
set -e
