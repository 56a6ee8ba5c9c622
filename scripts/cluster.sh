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

amqp_base=${CLUSTER_AMQP_BASE:-5680}
tls_base=${CLUSTER_TLS_BASE:-5690}
dist_base=${CLUSTER_DIST_BASE:-25680}
pg_port=${CLUSTER_PG_PORT:-5434}
rabbit_bin=${CLUSTER_RABBIT_BIN:-/usr/lib/rabbitmq/bin}
pg_bin=${CLUSTER_PG_BIN:-}
if [ -z "$pg_bin" ]; then
	pg_bin=$(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -name bin -type d 2>/dev/null | sort -V | tail -n 1)
fi
nodes=(1 2 3)

log() { printf 'cluster.sh: %s\n' "$*" >&2; }
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

node_name() { echo "clu$1@localhost"; }

# node_env N sets, in the array renv, the environment that makes
# rabbitmq-server and rabbitmqctl use node N and nothing of the system
# node's: its own name, ports, data, logs, config, plugins (none, so that
# no management port is taken) and env file.
node_env() {
	local r=$dir/clu$1
	renv=(RABBITMQ_NODENAME="$(node_name "$1")" RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
		RABBITMQ_NODE_PORT="$((amqp_base + $1))" RABBITMQ_DIST_PORT="$((dist_base + $1))"
		RABBITMQ_MNESIA_BASE="$r/mnesia" RABBITMQ_LOG_BASE="$r/log"
		RABBITMQ_CONFIG_FILE="$r/rabbitmq.conf" RABBITMQ_ADVANCED_CONFIG_FILE="$r/advanced.config"
		RABBITMQ_ENABLED_PLUGINS_FILE="$r/enabled_plugins" RABBITMQ_CONF_ENV_FILE="$r/rabbitmq-env.conf"
		RABBITMQ_PID_FILE="$r/pid" ERL_EPMD_ADDRESS=127.0.0.1
		RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}")
}

# ctl_on N ARGS...: rabbitmqctl against node N.
ctl_on() {
	local n=$1
	shift
	node_env "$n"
	as rabbitmq env "${renv[@]}" "$rabbit_bin/rabbitmqctl" -q -n "$(node_name "$n")" "$@"
}

node_configure() {
	local n=$1 r=$dir/clu$1
	mkdir -p "$r/log" "$r/mnesia"
	cat >"$r/rabbitmq.conf" <<EOF
listeners.tcp.1 = 127.0.0.1:$((amqp_base + n))
listeners.ssl.1 = 127.0.0.1:$((tls_base + n))
ssl_options.cacertfile = $dir/tls/ca.pem
ssl_options.certfile = $dir/tls/server.pem
ssl_options.keyfile = $r/server.key
ssl_options.verify = verify_peer
ssl_options.fail_if_no_peer_cert = true
loopback_users.guest = true
disk_free_limit.absolute = 50MB
log.file.level = info
log.console = false
EOF
	echo '[].' >"$r/enabled_plugins"
	echo '[].' >"$r/advanced.config"
	: >"$r/rabbitmq-env.conf"
	cp "$dir/tls/server.key" "$r/server.key"
	if [ "$(id -u)" -eq 0 ]; then
		chown -R rabbitmq:rabbitmq "$r"
	fi
	chmod 600 "$r/server.key"
}

# node_launch N starts node N in the background; node_wait N waits until
# it runs.
node_launch() {
	local n=$1 r=$dir/clu$1
	node_env "$n"
	# setsid: a ^C meant for the driver must not reach the node; the trap
	# stops it.
	local user=()
	[ "$(id -u)" -ne 0 ] || user=(runuser -u rabbitmq --)
	setsid "${user[@]}" env "${renv[@]}" "$rabbit_bin/rabbitmq-server" \
		</dev/null >>"$r/log/server.out" 2>&1 &
	echo $! >"$r/launcher.pid"
}

node_wait() {
	local n=$1 r=$dir/clu$1
	if ! ctl_on "$n" wait --timeout 120 "$r/pid" >/dev/null; then
		tail -n 30 "$r/log/server.out" >&2 || true
		die "the RabbitMQ node $(node_name "$n") did not start (logs in $r/log)"
	fi
}

node_stop() {
	local n=$1 r=$dir/clu$1
	[ ! -s "$r/pid" ] || kill -CONT "$(cat "$r/pid")" 2>/dev/null || true
	if [ ! -s "$r/pid" ]; then
		# Never came up far enough to write its pid: stop what launched it.
		if [ -s "$r/launcher.pid" ]; then
			kill -TERM "$(cat "$r/launcher.pid")" 2>/dev/null || true
			rm -f "$r/launcher.pid"
		fi
		return 0
	fi
	local pid
	pid=$(cat "$r/pid")
	if ! ctl_on "$n" stop "$r/pid" >/dev/null 2>&1 && kill -0 "$pid" 2>/dev/null; then
		log "rabbitmqctl stop failed; sending SIGTERM to $(node_name "$n") ($pid)"
		kill -TERM "$pid" 2>/dev/null || true
		for _ in $(seq 1 60); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.5
		done
	fi
	rm -f "$r/pid" "$r/launcher.pid"
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

[ -x "$rabbit_bin/rabbitmq-server" ] || die "no rabbitmq-server in $rabbit_bin (set CLUSTER_RABBIT_BIN)"
[ -n "$pg_bin" ] && [ -x "$pg_bin/initdb" ] || die "no PostgreSQL binaries found (set CLUSTER_PG_BIN)"
command -v openssl >/dev/null || die "no openssl: it makes the certificates"
for port in $((amqp_base + 1)) $((amqp_base + 2)) $((amqp_base + 3)) $((tls_base + 1)) $((tls_base + 2)) $((tls_base + 3)) \
	$((dist_base + 1)) $((dist_base + 2)) $((dist_base + 3)) "$pg_port"; do
	if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
		die "port $port is taken: the cluster needs it (set CLUSTER_AMQP_BASE, CLUSTER_TLS_BASE, CLUSTER_DIST_BASE or CLUSTER_PG_PORT)"
	fi
done

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
dir=$(mktemp -d "${TMPDIR:-/tmp}/acemq-cluster.XXXXXX")
chmod 755 "$dir"
started=()
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
	for n in "${started[@]}"; do
		node_stop "$n" &
	done
	wait
	[ -n "$pg_started" ] && as postgres "$pg_bin/pg_ctl" -D "$dir/pg/data" -m fast -w -t 60 stop >/dev/null
	if [ "${CLUSTER_KEEP:-}" = 1 ]; then
		log "kept $dir"
	elif [ "$status" -ne 0 ]; then
		rm -rf "$dir"/clu*/mnesia "$dir/pg/data" "$dir/bin"
		log "logs kept in $dir"
	else
		rm -rf "$dir"
	fi
	exit "$status"
}
trap cleanup EXIT
trap 'status=130; exit' INT TERM

mkdir -p "$dir/bin" "$dir/logs" "$dir/tls" "$dir/pg/log"
log "building the driver and the chaos flow binary while the services start"
(cd "$root" && exec go build -o "$dir/bin/" ./internal/chaos ./internal/chaos/flowbin) &
build=$!

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
as postgres "$pg_bin/initdb" -D "$dir/pg/data" -U postgres -A trust -E UTF8 --no-sync >"$dir/pg/log/initdb.log" 2>&1 ||
	die "initdb failed (log: $dir/pg/log/initdb.log)"
cat >"$dir/pg/data/pg_hba.conf" <<EOF
local   all all                trust
hostssl all all 127.0.0.1/32   trust clientcert=verify-ca
EOF
pg_started=1
as postgres "$pg_bin/pg_ctl" -D "$dir/pg/data" -l "$dir/pg/log/postgres.log" -w -t 60 start \
	-o "-p $pg_port -k $dir/pg -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off -c max_connections=300 -c ssl=on -c ssl_cert_file=$tls/server.pem -c ssl_key_file=$dir/pg/server.key -c ssl_ca_file=$tls/ca.pem" \
	>/dev/null || die "PostgreSQL did not start (log: $dir/pg/log/postgres.log)"

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
wait "$build" || die "go build failed"
build=

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
