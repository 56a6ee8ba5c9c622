#!/usr/bin/env bash
# The cluster scenarios (internal/chaos -suite cluster, docs/operations.md)
# against a three-node RabbitMQ cluster and a PostgreSQL of their own, on
# ports of their own, so that the services everything else uses (5672,
# 5432) and the chaos services (5673, 5433) are never touched.
#
#   scripts/cluster.sh [driver flags]   e.g. -scenarios 1,3 -runs 1000
#   scripts/cluster.sh ctl ACTION       what the driver runs to stop nodes
#                                       (node-stop N, node-kill N, node-freeze N,
#                                       node-thaw N, node-start N, leaders, redelivered)
#
# It makes a CA, a certificate for localhost / 127.0.0.1, a client
# certificate and a second, unrelated CA with openssl; starts three nodes
# (clu1@localhost, clu2@localhost, clu3@localhost: AMQP on 5681-5683,
# amqps with client certificates required on 5691-5693, distribution on
# 25681-25683), joins clu2 and clu3 to clu1 with rabbitmqctl join_cluster,
# starts PostgreSQL on 5434 accepting TLS connections with a client
# certificate only, builds and runs the driver, and stops exactly what it
# started, however it ends. Run it as root (the services then run as the
# rabbitmq and postgres users) or as a user who may run both servers.
#
# Environment: CLUSTER_AMQP_BASE (5680: node N listens on BASE+N),
# CLUSTER_TLS_BASE (5690), CLUSTER_DIST_BASE (25680), CLUSTER_PG_PORT
# (5434), CLUSTER_PG_BIN (the newest /usr/lib/postgresql/*/bin),
# CLUSTER_RABBIT_BIN (/usr/lib/rabbitmq/bin), CLUSTER_KEEP=1 keeps the
# working directory (data, certificates and logs) afterwards; it is kept,
# without the data, when the driver fails.
set -euo pipefail

. "$(dirname "$0")/lib.sh"

amqp_base=${CLUSTER_AMQP_BASE:-5680}
tls_base=${CLUSTER_TLS_BASE:-5690}
dist_base=${CLUSTER_DIST_BASE:-25680}
pg_port=${CLUSTER_PG_PORT:-5434}
rabbit_bin=${CLUSTER_RABBIT_BIN:-/usr/lib/rabbitmq/bin}
pg_bin=${CLUSTER_PG_BIN:-$(newest_pg_bin)}
nodes=(1 2 3)

node_name() { echo "clu$1@localhost"; }

# node_env N makes node N the one lib.sh's rnode_* functions act on.
node_env() {
	rnode_select "$(node_name "$1")" "$((amqp_base + $1))" "$((dist_base + $1))" "$dir/clu$1"
}

# ctl_on N ARGS...: rabbitmqctl against node N.
ctl_on() {
	local n=$1
	shift
	node_env "$n"
	rnode_ctl "$@"
}

node_configure() {
	local n=$1 r=$dir/clu$1
	mkdir -p "$r/log" "$r/mnesia"
	rnode_files "$r" "listeners.tcp.1 = 127.0.0.1:$((amqp_base + n))
listeners.ssl.1 = 127.0.0.1:$((tls_base + n))
ssl_options.cacertfile = $dir/tls/ca.pem
ssl_options.certfile = $dir/tls/server.pem
ssl_options.keyfile = $r/server.key
ssl_options.verify = verify_peer
ssl_options.fail_if_no_peer_cert = true"
	cp "$dir/tls/server.key" "$r/server.key"
	if [ "$(id -u)" -eq 0 ]; then
		chown -R rabbitmq:rabbitmq "$r"
	fi
	chmod 600 "$r/server.key"
}

# node_launch N starts node N in the background; node_wait N waits until
# it runs.
node_launch() {
	node_env "$1"
	rnode_launch
}

node_wait() {
	node_env "$1"
	rnode_wait 120
}

# node_stop N: a frozen node (node-freeze) is thawed first, or it would
# not stop.
node_stop() {
	node_env "$1"
	[ ! -s "$rdir/pid" ] || kill -CONT "$(cat "$rdir/pid")" 2>/dev/null || true
	rnode_stop
}

# node_kill N kills node N's Erlang VM with SIGKILL, as a machine that
# dies would lose it: no connection is closed, no queue hands its
# leadership over.
node_kill() {
	local n=$1 r=$dir/clu$1 pid
	[ -s "$r/pid" ] || die "node-kill: $(node_name "$n") has no pid file"
	pid=$(cat "$r/pid")
	kill -KILL "$pid"
	while kill -0 "$pid" 2>/dev/null; do
		sleep 0.1
	done
	rm -f "$r/pid" "$r/launcher.pid"
}

# running: the nodes whose pid file names a live process.
running() {
	local n
	for n in "${nodes[@]}"; do
		if [ -s "$dir/clu$n/pid" ] && kill -0 "$(cat "$dir/clu$n/pid")" 2>/dev/null; then
			echo "$n"
		fi
	done
}

# redelivered_expr reads every node's count of redeliveries in one
# rabbitmqctl call: [{clu1@localhost,12},{clu2@localhost,{badrpc,nodedown}},
# ...].
redelivered_expr() {
	local n list=
	for n in "${nodes[@]}"; do
		list+="${list:+, }'$(node_name "$n")'"
	done
	cat <<EOF
	Sum = fun() -> lists:sum([maps:get(messages_redelivered_total, Counters, 0)
		|| {Labels, Counters} <- maps:to_list(rabbit_global_counters:overview()),
		   lists:member({protocol, amqp091}, Labels)]) end,
	[{N, rpc:call(N, erlang, apply, [Sum, []], 5000)} || N <- [$list]].
EOF
}

# redelivered prints the cluster's count of redeliveries: the sum over the
# nodes of each one's counter, which a node's restart starts again from
# zero, so the count it had before is kept in $dir/redelivered.N (the last
# value read) and $dir/redelivered-base.N (what its earlier lives counted).
redelivered() {
	local n total=0 now last base out first
	first=$(running | sed -n 1p)
	[ -n "$first" ] || die "redelivered: no node runs"
	out=$(ctl_on "$first" eval "$(redelivered_expr)" | tr -d ' \n')
	for n in "${nodes[@]}"; do
		last=$(cat "$dir/redelivered.$n" 2>/dev/null || echo 0)
		base=$(cat "$dir/redelivered-base.$n" 2>/dev/null || echo 0)
		now=$(sed -n "s/.*{'\\?$(node_name "$n")'\\?,\([0-9][0-9]*\)}.*/\1/p" <<<"$out")
		if [ -n "$now" ]; then
			if [ "$now" -lt "$last" ]; then
				base=$((base + last))
				echo "$base" >"$dir/redelivered-base.$n"
			fi
			last=$now
			echo "$last" >"$dir/redelivered.$n"
		fi
		total=$((total + base + last))
	done
	echo "$total"
}

# leaders prints "queue<TAB>leader node" for every quorum queue, asking the
# first node that runs.
leaders() {
	local n
	n=$(running | sed -n 1p)
	[ -n "$n" ] || die "leaders: no node runs"
	ctl_on "$n" list_queues --no-table-headers name type leader | awk -F '\t' '$2 == "quorum" { print $1 "\t" $3 }'
}

ctl() {
	[ -n "${CHAOS_DIR:-}" ] || die "ctl: CHAOS_DIR is not set (the driver sets it)"
	dir=$CHAOS_DIR
	local n=${2:-}
	case "${1:-}" in
	node-stop | node-kill | node-start | node-freeze | node-thaw)
		[[ $n =~ ^[123]$ ]] || die "ctl ${1}: want a node number, 1 to 3"
		case $1 in
		node-freeze)
			# SIGSTOP: the node stops answering, its sockets stay open, as
			# a machine that hangs or a network that drops its packets.
			redelivered >/dev/null
			kill -STOP "$(cat "$dir/clu$n/pid")"
			;;
		node-thaw) kill -CONT "$(cat "$dir/clu$n/pid")" ;;
		node-stop)
			redelivered >/dev/null
			node_stop "$n"
			;;
		node-kill)
			redelivered >/dev/null
			node_kill "$n"
			;;
		node-start)
			node_launch "$n"
			node_wait "$n"
			;;
		esac
		;;
	leaders) leaders ;;
	redelivered) redelivered ;;
	*) die "ctl: unknown action ${1:-} (node-stop N, node-kill N, node-freeze N, node-thaw N, node-start N, leaders, redelivered)" ;;
	esac
}

if [ "${1:-}" = ctl ]; then
	shift
	ctl "$@"
	exit
fi

check_servers CLUSTER
command -v openssl >/dev/null || die "no openssl: it makes the certificates"
ports_free "the cluster needs it (set CLUSTER_AMQP_BASE, CLUSTER_TLS_BASE, CLUSTER_DIST_BASE or CLUSTER_PG_PORT)" \
	$((amqp_base + 1)) $((amqp_base + 2)) $((amqp_base + 3)) $((tls_base + 1)) $((tls_base + 2)) $((tls_base + 3)) \
	$((dist_base + 1)) $((dist_base + 2)) $((dist_base + 3)) "$pg_port"

started=()
pg_started=
# stop_services stops the nodes side by side, then PostgreSQL. A ^C in
# the meantime interrupts wait, not the stops (background jobs ignore
# SIGINT): wait again until they are done.
stop_services() {
	local n
	for n in "${started[@]}"; do
		node_stop "$n" &
	done
	until wait; do :; done
	[ -n "$pg_started" ] && pg_stop fast
}
work_start cluster "${CLUSTER_KEEP:-}"

mkdir -p "$dir/bin" "$dir/logs" "$dir/tls" "$dir/pg/log"
build_start

# Certificates: a CA, the servers' certificate (localhost, 127.0.0.1)
# and a client's, all signed by it, and a CA that signed nothing of
# them (what a client with the wrong CA trusts).
tls=$dir/tls
(
	cd "$tls"
	exec >openssl.log 2>&1
	for ca in ca wrong-ca; do
		openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=acemq cluster $ca" \
			-keyout "$ca.key" -out "$ca.pem"
	done
	printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >server.ext
	printf 'extendedKeyUsage=clientAuth\n' >client.ext
	for c in server client; do
		openssl req -newkey rsa:2048 -nodes -subj "/CN=acemq-cluster-$c" -keyout "$c.key" -out "$c.csr"
		openssl x509 -req -in "$c.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile "$c.ext" -out "$c.pem"
	done
	chmod 644 ./*.pem
) || die "openssl failed (log: $tls/openssl.log)"

for n in "${nodes[@]}"; do
	node_configure "$n"
done
mkdir -p "$dir/pg/data"
cp "$tls/server.key" "$dir/pg/server.key"
if [ "$(id -u)" -eq 0 ]; then
	chown -R postgres:postgres "$dir/pg"
fi
chmod 600 "$dir/pg/server.key"

log "starting RabbitMQ nodes $(node_name 1), $(node_name 2), $(node_name 3) on 127.0.0.1:$((amqp_base + 1))-$((amqp_base + 3)) (amqps $((tls_base + 1))-$((tls_base + 3)))"
for n in "${nodes[@]}"; do
	started+=("$n")
	node_launch "$n"
done
log "starting PostgreSQL on 127.0.0.1:$pg_port (TLS with a client certificate only)"
pg_init
cat >"$dir/pg/data/pg_hba.conf" <<EOF
local   all all                trust
hostssl all all 127.0.0.1/32   trust clientcert=verify-ca
EOF
pg_started=1
pg_start "-c ssl=on -c ssl_cert_file=$tls/server.pem -c ssl_key_file=$dir/pg/server.key -c ssl_ca_file=$tls/ca.pem"

for n in "${nodes[@]}"; do
	node_wait "$n"
done
for n in 2 3; do
	log "joining $(node_name "$n") to $(node_name 1)"
	for step in stop_app reset "join_cluster $(node_name 1)" start_app; do
		# shellcheck disable=SC2086 # step is a command and its argument
		ctl_on "$n" $step >>"$dir/clu$n/log/join.log" 2>&1 ||
			die "rabbitmqctl $step on $(node_name "$n") failed: $(tail -n 5 "$dir/clu$n/log/join.log")"
	done
done
ctl_on 1 await_online_nodes 3 --timeout 60 >/dev/null || die "the cluster did not come together: $(ctl_on 1 cluster_status 2>&1)"
build_wait

list() {
	local base=$1 out=
	for n in "${nodes[@]}"; do
		out+="${out:+,}127.0.0.1:$((base + n))"
	done
	echo "$out"
}
client_tls="cacertfile=$tls/ca.pem&certfile=$tls/client.pem&keyfile=$tls/client.key"
pg_tls="sslmode=verify-full&sslrootcert=$tls/ca.pem&sslcert=$tls/client.pem&sslkey=$tls/client.key"

set +e
CHAOS_DIR=$dir "$dir/bin/chaos" -suite cluster -bin "$dir/bin/flowbin" -ctl "$here/cluster.sh" -logs "$dir/logs" \
	-amqp-url "amqp://guest:guest@$(list "$amqp_base")/" \
	-database-url "postgres://postgres@127.0.0.1:$pg_port/postgres?$pg_tls" \
	-tls-amqp-url "amqps://guest:guest@$(list "$tls_base")/?$client_tls" \
	-wrong-ca "$tls/wrong-ca.pem" "$@"
status=$?
set -e
