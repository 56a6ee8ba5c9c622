# shellcheck shell=bash
# What scripts/chaos.sh and scripts/cluster.sh share: running commands as
# the service users, private RabbitMQ nodes and a private PostgreSQL
# cluster, the build of the driver, and the working directory with the
# trap that stops what the script started, however it ends. Sourced, not
# run: . "$(dirname "$0")/lib.sh"

log() { printf '%s: %s\n' "${0##*/}" "$*" >&2; }
die() {
	log "$*"
	exit 1
}

# as USER CMD...: CMD as USER when we are root (the servers refuse to run
# as root, or should not), as ourselves otherwise. As USER it runs in /:
# it would inherit the checkout as its working directory, which USER may
# not be allowed to enter (a checkout in a 0700 home or temp directory),
# and rabbitmqctl then fails to load its code (eacces) and pg_ctl says
# "could not change directory". The paths given to it are absolute: the
# working directory is (work_start), and so is everything under it.
as() {
	local user=$1
	shift
	if [ "$(id -u)" -eq 0 ]; then
		(cd / && exec runuser -u "$user" -- "$@")
	else
		"$@"
	fi
}

# newest_pg_bin prints the newest /usr/lib/postgresql/*/bin, or nothing
# (and succeeds: under pipefail a missing /usr/lib/postgresql must not end
# the script before it can say what is missing).
newest_pg_bin() {
	{ find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -name bin -type d 2>/dev/null || true; } | sort -V | tail -n 1
}

# check_servers PREFIX: rabbit_bin and pg_bin hold the servers; PREFIX
# names the variables that set them.
check_servers() {
	[ -x "$rabbit_bin/rabbitmq-server" ] || die "no rabbitmq-server in $rabbit_bin (set ${1}_RABBIT_BIN)"
	[ -n "$pg_bin" ] && [ -x "$pg_bin/initdb" ] || die "no PostgreSQL binaries found (set ${1}_PG_BIN)"
}

# ports_free WHAT PORT...: dies, saying WHAT, when something listens on a
# PORT of 127.0.0.1.
ports_free() {
	local what=$1 port
	shift
	for port in "$@"; do
		if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			die "port $port is taken: $what"
		fi
	done
}

# RabbitMQ nodes. rnode_select NAME AMQP_PORT DIST_PORT DIR makes node
# NAME, whose files are in DIR, the one the other rnode_* functions act
# on, and sets, in the array renv, the environment that makes
# rabbitmq-server and rabbitmqctl use it and nothing of the system node's:
# its own name, ports, data, logs, config, plugins (none, so that no
# management port is taken) and env file.
rnode_select() {
	rnode=$1
	rdir=$4
	local r=$4
	renv=(RABBITMQ_NODENAME="$1" RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
		RABBITMQ_NODE_PORT="$2" RABBITMQ_DIST_PORT="$3"
		RABBITMQ_MNESIA_BASE="$r/mnesia" RABBITMQ_LOG_BASE="$r/log"
		RABBITMQ_CONFIG_FILE="$r/rabbitmq.conf" RABBITMQ_ADVANCED_CONFIG_FILE="$r/advanced.config"
		RABBITMQ_ENABLED_PLUGINS_FILE="$r/enabled_plugins" RABBITMQ_CONF_ENV_FILE="$r/rabbitmq-env.conf"
		RABBITMQ_PID_FILE="$r/pid" ERL_EPMD_ADDRESS=127.0.0.1
		RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}")
}

# rnode_files DIR LISTENERS writes, in DIR, a node's rabbitmq.conf
# (LISTENERS, lines of it, then what every node here has) and its empty
# plugins, advanced config and env files.
rnode_files() {
	local r=$1
	{
		printf '%s\n' "$2"
		cat <<'EOF'
loopback_users.guest = true
disk_free_limit.absolute = 50MB
log.file.level = info
log.console = false
EOF
	} >"$r/rabbitmq.conf"
	echo '[].' >"$r/enabled_plugins"
	echo '[].' >"$r/advanced.config"
	: >"$r/rabbitmq-env.conf"
}

rnode_ctl() {
	as rabbitmq env "${renv[@]}" "$rabbit_bin/rabbitmqctl" -q -n "$rnode" "$@"
}

# rnode_launch starts the node in the background; rnode_wait SECONDS
# waits until it runs.
rnode_launch() {
	# setsid: a ^C meant for the driver must not reach the node; the trap
	# stops it. As rabbitmq it runs in /, for the reason given at as().
	local user=() cwd=.
	[ "$(id -u)" -ne 0 ] || user=(runuser -u rabbitmq --) cwd=/
	(cd "$cwd" && exec setsid "${user[@]}" env "${renv[@]}" "$rabbit_bin/rabbitmq-server") \
		</dev/null >>"$rdir/log/server.out" 2>&1 &
	echo $! >"$rdir/launcher.pid"
}

rnode_wait() {
	if ! rnode_ctl wait --timeout "$1" "$rdir/pid" >/dev/null; then
		tail -n 30 "$rdir/log/server.out" >&2 || true
		die "the RabbitMQ node $rnode did not start (logs in $rdir/log)"
	fi
}

rnode_stop() {
	if [ ! -s "$rdir/pid" ]; then
		# Never came up far enough to write its pid: stop what launched it.
		if [ -s "$rdir/launcher.pid" ]; then
			kill -TERM "$(cat "$rdir/launcher.pid")" 2>/dev/null || true
			rm -f "$rdir/launcher.pid"
		fi
		return 0
	fi
	local pid ctl
	pid=$(cat "$rdir/pid")
	# Bounded: the last nodes of a cluster stopped side by side can hang in
	# their quorum queues' shutdown (seen once in CI: clu2 waited on its
	# leaders' elections for minutes), and rabbitmqctl stop waits with it.
	rnode_ctl stop "$rdir/pid" >/dev/null 2>&1 &
	ctl=$!
	for _ in $(seq 1 120); do
		kill -0 "$ctl" 2>/dev/null || break
		sleep 0.5
	done
	if kill -0 "$ctl" 2>/dev/null; then
		log "rabbitmqctl stop of $rnode took over 60 s; stopping it with signals"
		kill -TERM "$ctl" 2>/dev/null || true
	fi
	wait "$ctl" 2>/dev/null || true
	if kill -0 "$pid" 2>/dev/null; then
		log "sending SIGTERM to $rnode ($pid)"
		kill -TERM "$pid" 2>/dev/null || true
		for _ in $(seq 1 60); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.5
		done
	fi
	if kill -0 "$pid" 2>/dev/null; then
		log "$rnode ($pid) did not stop on SIGTERM in 30 s; SIGKILL"
		kill -KILL "$pid" 2>/dev/null || true
	fi
	rm -f "$rdir/pid" "$rdir/launcher.pid"
}

# PostgreSQL, in $dir/pg on pg_port.
pg_ctl() {
	as postgres "$pg_bin/pg_ctl" -D "$dir/pg/data" "$@"
}

pg_init() {
	as postgres "$pg_bin/initdb" -D "$dir/pg/data" -U postgres -A trust -E UTF8 --no-sync >"$dir/pg/log/initdb.log" 2>&1 ||
		die "initdb failed (log: $dir/pg/log/initdb.log)"
}

# pg_start [OPTIONS] starts the cluster, with the server OPTIONS (-c ...)
# too, without fsync: a crash of PostgreSQL alone (what the scenarios
# inject) loses nothing committed, since every commit's WAL is still
# written to the kernel; only a machine crash would, and none is injected.
pg_start() {
	pg_ctl -l "$dir/pg/log/postgres.log" -w -t 60 start \
		-o "-p $pg_port -k $dir/pg -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off -c max_connections=300${1:+ $1}" \
		>/dev/null || die "PostgreSQL did not start (log: $dir/pg/log/postgres.log)"
}

pg_stop() {
	[ -f "$dir/pg/data/postmaster.pid" ] || return 0
	pg_ctl -m "${1:-fast}" -w -t 60 stop >/dev/null
}

# work_start NAME KEEP makes the working directory dir (acemq-NAME.*,
# kept afterwards when KEEP is 1; kept without the data when status is not
# 0) and sets the trap that, however the script ends, stops the build and
# calls stop_services, which the script defines: it stops exactly what the
# script started. The variables stop_services reads must be set before.
work_start() {
	here=$(cd "$(dirname "$0")" && pwd)
	root=$(cd "$here/.." && pwd)
	dir=$(mktemp -d "${TMPDIR:-/tmp}/acemq-$1.XXXXXX")
	dir=$(cd "$dir" && pwd) # absolute, even under a relative TMPDIR: see as()
	chmod 755 "$dir"
	keep=$2
	build=
	status=1
	trap cleanup EXIT
	trap 'status=130; exit' INT TERM
}

cleanup() {
	# A ^C or TERM now ends the step under way (a hung rabbitmqctl stop),
	# not the cleanup: what is left is still stopped.
	trap - EXIT
	trap 'status=130' INT TERM
	set +e
	if [ -n "$build" ] && kill -0 "$build" 2>/dev/null; then
		kill "$build"
		wait "$build"
	fi
	stop_services
	if [ "$keep" = 1 ]; then
		log "kept $dir"
	elif [ "$status" -ne 0 ]; then
		rm -rf "$dir"/*/mnesia "$dir/pg/data" "$dir/bin"
		log "logs kept in $dir"
	else
		rm -rf "$dir"
	fi
	exit "$status"
}

# build_start builds the driver and the chaos flow binary into $dir/bin in
# the background; build_wait waits for them.
build_start() {
	log "building the driver and the chaos flow binary while the services start"
	(cd "$root" && exec go build -o "$dir/bin/" ./internal/chaos ./internal/chaos/flowbin) &
	build=$!
}

build_wait() {
	wait "$build" || die "go build failed"
	build=
}
