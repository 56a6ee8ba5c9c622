package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/rabbitmq"
	"github.com/acemq/acemq-flow/internal/chaos/chaosflow"
)

// clusterScenarios are the scenarios of the cluster suite
// (docs/operations.md), which scripts/cluster.sh runs against three
// RabbitMQ nodes and a PostgreSQL that takes TLS connections only. The
// broker URLs list the nodes in order: the URL's first node is node 1
// (clu1@localhost), and so on.
var clusterScenarios = []scenario{
	{n: 1, name: "the workers' node stopped and started", runs: 10000, flow: chaosflow.Pipeline, workers: 2, workMillis: 2,
		fault: stopWorkersNode},
	{n: 2, name: "the node holding most queue leaders killed", runs: 5000, flow: chaosflow.Pipeline, workers: 2, workMillis: 2,
		setup: declareQueues, workerURL: fromNode(2), fault: killLeadersNode},
	{n: 3, name: "over TLS: wrong CAs refused; the workers' node stopped", runs: 5000, flow: chaosflow.Pipeline, workers: 2, workMillis: 2,
		tls: true, fault: overTLS},
	{n: 4, name: "the node holding most queue leaders frozen", runs: 5000, flow: chaosflow.Pipeline, workers: 2, workMillis: 2,
		setup: declareQueues, workerURL: fromNode(2), fault: freezeLeadersNode},
	{n: 5, name: "a quorum queue's members lost one, then two", runs: 500, flow: chaosflow.Pipeline, workers: 1,
		fault: loseMajority},
}

// nodeDown is how long a stopped node stays down: long enough for every
// client and queue to notice, and for quorum queues to elect new leaders.
const nodeDown = 10 * time.Second

// pauseLimit is the longest pause in the steps' effects a node's loss may
// cause: "consumers keep consuming within seconds".
const pauseLimit = 20 * time.Second

// nodeList is the host:port of every node of a broker URL, in order.
func nodeList(raw string) ([]string, error) {
	_, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return nil, errors.New("broker URL without scheme://")
	}
	if end := strings.IndexAny(rest, "/?#"); end >= 0 {
		rest = rest[:end]
	}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		rest = rest[at+1:]
	}
	return strings.Split(rest, ","), nil
}

// firstNode is the broker URL raw with only the first node of its list,
// for a plain amqp091-go client, which reads no list.
func firstNode(raw string) string {
	nodes, err := nodeList(raw)
	if err != nil || len(nodes) < 2 {
		return raw
	}
	return strings.Replace(raw, strings.Join(nodes, ","), nodes[0], 1)
}

// nodeNumber is the number (1, 2, 3) of the node at addr in the broker URL
// raw.
func nodeNumber(raw, addr string) (int, error) {
	nodes, err := nodeList(raw)
	if err != nil {
		return 0, err
	}
	i := slices.Index(nodes, addr)
	if i < 0 {
		return 0, fmt.Errorf("node %s is not in the broker URL's list %v", addr, nodes)
	}
	return i + 1, nil
}

// fromNode gives the workers the driver's URL with its list starting at
// node n, so that they connect to a node other than the driver's.
func fromNode(n int) func(string) (string, error) {
	return func(raw string) (string, error) {
		nodes, err := nodeList(raw)
		if err != nil {
			return "", err
		}
		if n > len(nodes) {
			return "", fmt.Errorf("no node %d in %v", n, nodes)
		}
		rotated := append(append([]string(nil), nodes[n-1:]...), nodes[:n-1]...)
		return strings.Replace(raw, strings.Join(nodes, ","), strings.Join(rotated, ","), 1), nil
	}
}

// connectedLine is a worker's log line saying it connected to a node.
var connectedLine = regexp.MustCompile(`msg="rabbitmq (?:re)?connected" .*?\bnode=(\S+)`)

// workerNodes is, for every live worker, the node its log last said it
// connected to ("" when it said none).
func (s *session) workerNodes() map[string]string {
	s.fleet.mu.Lock()
	live := make([]*worker, 0, len(s.fleet.workers))
	for _, w := range s.fleet.workers {
		if !closed(w.done) {
			live = append(live, w)
		}
	}
	s.fleet.mu.Unlock()
	out := map[string]string{}
	for _, w := range live {
		out[w.name] = ""
		b, err := os.ReadFile(w.logPath)
		if err != nil {
			continue
		}
		if m := connectedLine.FindAllSubmatch(b, -1); len(m) > 0 {
			out[w.name] = string(m[len(m)-1][1])
		}
	}
	return out
}

// A way to take a node away.
type outage int

const (
	// stop is rabbitmqctl stop: the node closes its connections and hands
	// its queues' leadership over first.
	stop outage = iota
	// kill is SIGKILL, as a process that crashes: the operating system
	// closes its sockets, and its peers and clients see them close.
	kill
	// freeze is SIGSTOP, as a machine that hangs or a network that drops
	// its packets: its sockets stay open and nothing answers on them.
	// It ends with SIGCONT.
	freeze
)

// stopNode takes node n away as how says, for down, and brings it back.
// It returns the database's clock when the outage began, and says how
// long it took.
func (s *session) stopNode(ctx context.Context, n int, how outage, down time.Duration, why string) (time.Time, error) {
	at := s.completedPercent(ctx)
	stopped, err := s.dbNow(ctx)
	if err != nil {
		return stopped, err
	}
	action, back, what := "node-stop", "node-start", "stopped with rabbitmqctl stop"
	switch how {
	case kill:
		action, what = "node-kill", "SIGKILLed"
	case freeze:
		action, back, what = "node-freeze", "node-thaw", "frozen with SIGSTOP"
	}
	began := time.Now()
	if _, err := s.ctl(ctx, action, fmt.Sprint(n)); err != nil {
		return stopped, err
	}
	took := time.Since(began)
	if err := sleep(ctx, down); err != nil {
		return stopped, err
	}
	if _, err := s.ctl(ctx, back, fmt.Sprint(n)); err != nil {
		return stopped, err
	}
	s.note("node clu%d (%s) %s at %d%% %s (in %s), back %s later",
		n, why, what, at, s.final, took.Round(100*time.Millisecond), time.Since(began).Round(100*time.Millisecond))
	return stopped, nil
}

// longestPause is the longest time between two consecutive effects of the
// scenario's steps from a second before since to within after it: how long
// the workers consumed nothing around a fault.
func (s *session) longestPause(ctx context.Context, since time.Time, within time.Duration) (time.Duration, error) {
	var secs float64
	err := s.pool.QueryRow(ctx, `SELECT coalesce(max(gap), 0) FROM (
		SELECT extract(epoch FROM at - lag(at) OVER (ORDER BY at))::float8 AS gap
		FROM `+chaosflow.EffectsTable+` WHERE at >= $1::timestamptz - interval '1 second' AND at <= $1::timestamptz + $2 * interval '1 second') g`,
		since, within.Seconds()).Scan(&secs)
	if err != nil {
		return 0, fmt.Errorf("the longest pause in the effects: %w", err)
	}
	return time.Duration(secs * float64(time.Second)), nil
}

// stopWorkersNode stops, once 30% of the runs completed, the node the
// oldest worker is connected to, and starts it again nodeDown later. Every
// worker must end on another node, and the effects may pause at most
// pauseLimit.
func stopWorkersNode(ctx context.Context, s *session) (func(context.Context), error) {
	if err := s.waitFraction(ctx, 0.3); err != nil {
		return nil, err
	}
	before := s.workerNodes()
	w := s.fleet.oldest()
	if w == nil {
		return nil, errors.New("no worker")
	}
	addr := before[w.name]
	n, err := nodeNumber(s.cfg.amqpURL, addr)
	if err != nil {
		return nil, fmt.Errorf("%s's node: %w", w.name, err)
	}
	stopped, err := s.stopNode(ctx, n, stop, nodeDown, fmt.Sprintf("the workers' node: %s", describeNodes(before)))
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) {
		s.checkPause(ctx, stopped)
		after := s.workerNodes()
		s.note("the workers ended on %s", describeNodes(after))
		for name, node := range after {
			if node == addr || node == "" {
				s.fail("%s ended on %q, not on another node than the one stopped (%s)", name, node, addr)
			}
		}
	}, nil
}

// checkPause notes the longest pause in the effects in the minute from
// stopped, once the runs are over, and fails the scenario when it is
// longer than pauseLimit.
func (s *session) checkPause(ctx context.Context, stopped time.Time) {
	pause, err := s.longestPause(ctx, stopped, time.Minute)
	if err != nil {
		s.fail("%v", err)
		return
	}
	s.note("the longest pause in the steps' effects in the minute from the stop: %s", pause.Round(10*time.Millisecond))
	if pause > pauseLimit {
		s.fail("the steps consumed nothing for %s after the node stopped (limit %s)", pause.Round(100*time.Millisecond), pauseLimit)
	}
}

// describeNodes is "w1 on 127.0.0.1:5681, w2 on ...", sorted.
func describeNodes(m map[string]string) string {
	var parts []string
	for name, node := range m {
		parts = append(parts, name+" on "+node)
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

// declareQueues declares the flow's queues and the scenario's ladder from
// the driver's connection (on node 1, the first of its list) before any
// worker runs: a quorum queue's leader starts on the node of the
// connection that declared it, so every leader is on node 1 while the
// workers (fromNode(2)) are on node 2.
func declareQueues(ctx context.Context, s *session) error {
	info, err := s.eng.Flow(s.flow)
	if err != nil {
		return err
	}
	topo := broker.ConsumerTopology(info.CompensateQueue)
	for _, st := range info.Steps {
		topo = topo.Merge(broker.ConsumerTopology(st.Queue))
	}
	if err := s.conn.Declare(ctx, topo); err != nil {
		return fmt.Errorf("declare the flow's queues: %w", err)
	}
	if err := s.conn.DeclareLadder(ctx); err != nil {
		return fmt.Errorf("declare the ladder: %w", err)
	}
	s.note("the flow's queues and the ladder were declared from the driver's connection, on %s", s.conn.Node())
	return nil
}

// leaders counts the leaders of the scenario's quorum queues by node name.
func (s *session) leaders(ctx context.Context) (map[string]int, error) {
	out, err := s.ctl(ctx, "leaders")
	if err != nil {
		return nil, err
	}
	count := map[string]int{}
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		q, leader, ok := strings.Cut(line, "\t")
		if ok && (strings.HasPrefix(q, s.prefix+".")) {
			count[leader]++
		}
	}
	return count, nil
}

// clusterNode is the node name clu<N>@localhost scripts/cluster.sh gives
// node N.
var clusterNode = regexp.MustCompile(`^clu([0-9]+)@`)

// killLeadersNode and freezeLeadersNode take away, once 30% of the runs
// completed, the node that leads most of the scenario's quorum queues,
// while the workers are connected to another, and bring it back: the
// queues elect new leaders, and the workers' consumers, whose connections
// never dropped, consume from them within seconds.
func killLeadersNode(ctx context.Context, s *session) (func(context.Context), error) {
	return leadersNodeAway(ctx, s, kill, nodeDown)
}

func freezeLeadersNode(ctx context.Context, s *session) (func(context.Context), error) {
	return leadersNodeAway(ctx, s, freeze, frozenFor)
}

// frozenFor is how long scenario 4 keeps its node frozen: longer than the
// clients' heartbeat timeout (1.5 x 10 s), shorter than the cluster's
// net_ticktime (60 s), after which its peers would declare it down.
const frozenFor = 30 * time.Second

func leadersNodeAway(ctx context.Context, s *session, how outage, down time.Duration) (func(context.Context), error) {
	if err := s.waitFraction(ctx, 0.3); err != nil {
		return nil, err
	}
	count, err := s.leaders(ctx)
	if err != nil {
		return nil, err
	}
	nodes, err := nodeList(s.cfg.amqpURL)
	if err != nil {
		return nil, err
	}
	workers := s.workerNodes()
	// The node leading most queues among those no worker is on: a worker
	// may have dialled past a node still starting after the scenario
	// before, and the scenario stops a node the workers are not on.
	onWorker := func(node string) bool {
		m := clusterNode.FindStringSubmatch(node)
		if m == nil {
			return false
		}
		var k int
		fmt.Sscan(m[1], &k)
		for _, w := range workers {
			if k >= 1 && k <= len(nodes) && w == nodes[k-1] {
				return true
			}
		}
		return false
	}
	most := ""
	for node, c := range count {
		if onWorker(node) {
			continue
		}
		if most == "" || c > count[most] || c == count[most] && node < most {
			most = node
		}
	}
	m := clusterNode.FindStringSubmatch(most)
	if m == nil {
		return nil, fmt.Errorf("no leader among the scenario's queues on a node no worker is on (%v; workers: %s)", count, describeNodes(workers))
	}
	var n int
	fmt.Sscan(m[1], &n)
	for name, node := range workers {
		if n <= len(nodes) && node == nodes[n-1] {
			s.fail("%s is connected to %s, the node the scenario stops: the scenario is meant to stop a node the workers are not on", name, node)
		}
	}
	stopped, err := s.stopNode(ctx, n, how, down, fmt.Sprintf("leading %d of the scenario's %d quorum queues; %s", count[most], sum(count), describeNodes(workers)))
	if err != nil {
		return nil, err
	}
	after, err := s.leaders(ctx)
	if err != nil {
		return nil, err
	}
	s.note("leaders by node once it was back: %v", after)
	return func(ctx context.Context) {
		s.checkPause(ctx, stopped)
		s.note("the workers ended on %s", describeNodes(s.workerNodes()))
	}, nil
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// overTLS checks that a client trusting the wrong CA is refused by the
// broker (the library and the binary) and by PostgreSQL, and that
// PostgreSQL refuses a connection without TLS; then it stops the workers'
// node as stopWorkersNode does, everything over TLS.
func overTLS(ctx context.Context, s *session) (func(context.Context), error) {
	if err := s.wrongCAs(ctx); err != nil {
		return nil, err
	}
	return stopWorkersNode(ctx, s)
}

// refusal is one connection that must be refused, and what its error
// must say.
type refusal struct {
	what, want string
	try        func(ctx context.Context) error
}

// wrongCAs tries each refusal, noting what it said and failing the
// scenario for one that connected or said something else.
func (s *session) wrongCAs(ctx context.Context) error {
	broken, err := url.Parse(s.cfg.amqpURL)
	if err != nil {
		return err
	}
	q := broken.Query()
	q.Set("cacertfile", s.cfg.wrongCA)
	broken.RawQuery = q.Encode()
	bare := *broken
	bare.RawQuery = ""
	first, err := nodeList(s.cfg.amqpURL)
	if err != nil {
		return err
	}
	db, err := url.Parse(s.dbURL)
	if err != nil {
		return err
	}
	dbq := db.Query()
	dbq.Set("sslrootcert", s.cfg.wrongCA)
	wrongDB := *db
	wrongDB.RawQuery = dbq.Encode()
	dbq = db.Query()
	for _, k := range []string{"sslrootcert", "sslcert", "sslkey"} {
		dbq.Del(k)
	}
	dbq.Set("sslmode", "disable")
	plainDB := *db
	plainDB.RawQuery = dbq.Encode()

	for _, r := range []refusal{
		{"the library (broker.Open, cacertfile = the wrong CA)", "TLS handshake with " + first[0], func(ctx context.Context) error {
			conn, err := broker.Config{Logger: s.log}.Open(ctx, broken.String())
			if err == nil {
				_ = conn.Close(ctx)
				return nil
			}
			var te *rabbitmq.TLSError
			if !errors.As(err, &te) {
				return fmt.Errorf("not a *rabbitmq.TLSError: %w", err)
			}
			return err
		}},
		{"the binary (topology apply, ACEMQ_BROKER_CA_FILE = the wrong CA)", "TLS handshake with " + first[0], func(ctx context.Context) error {
			cmd := exec.CommandContext(ctx, s.cfg.bin, "topology", "apply", "--ladder", s.prefix+".refused")
			cmd.Env = append(cleanEnviron(), "ACEMQ_URL="+bare.String(), "ACEMQ_BROKER_CA_FILE="+s.cfg.wrongCA,
				"ACEMQ_BROKER_CERT_FILE="+q.Get("certfile"), "ACEMQ_BROKER_KEY_FILE="+q.Get("keyfile"))
			out, err := cmd.CombinedOutput()
			if err == nil {
				return nil
			}
			return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
		}},
		{"PostgreSQL (sslrootcert = the wrong CA)", "failed to verify certificate", func(ctx context.Context) error {
			return connectDB(ctx, wrongDB.String())
		}},
		{"PostgreSQL without TLS (sslmode=disable)", "no encryption", func(ctx context.Context) error {
			return connectDB(ctx, plainDB.String())
		}},
	} {
		c, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := r.try(c)
		cancel()
		switch {
		case err == nil:
			s.fail("%s connected", r.what)
		case !strings.Contains(err.Error(), r.want):
			s.fail("%s was refused, but its error does not say %q: %v", r.what, r.want, err)
		default:
			msg := lastLine(err.Error())
			// One error per node, each saying the same: the first will do.
			if first, _, more := strings.Cut(msg, "; rabbitmq: dial "); more {
				msg = first + "; (the same for every other node)"
			}
			s.note("refused, as it must be: %s: %s", r.what, msg)
		}
	}
	return nil
}

// connectDB connects to the database at raw and pings it.
func connectDB(ctx context.Context, raw string) error {
	conn, err := pgx.Connect(ctx, raw)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return conn.Ping(ctx)
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// majorityWait bounds a publish while a quorum queue has lost its
// majority: longer than any confirm takes when it has one.
const majorityWait = 10 * time.Second

// loseMajority, once every run completed, publishes to a quorum queue of
// its own (members on the three nodes, leader on node 1, where the
// driver's connection is); stops node 2 and publishes (two members of
// three: it must be confirmed); stops node 3 and publishes again: with one
// member of three the queue can confirm nothing, and the publish must fail
// (a nack, or no confirm within majorityWait), never succeed. With the
// nodes back, a publish is confirmed again, and the queue holds the
// messages confirmed and, maybe, the one whose publish failed (its outcome
// was unknown, not negative).
func loseMajority(ctx context.Context, s *session) (func(context.Context), error) {
	if err := s.waitFraction(ctx, 1); err != nil {
		return nil, err
	}
	q := s.prefix + ".majority"
	if err := s.conn.Declare(ctx, broker.Topology{Queues: []broker.Queue{{Name: q, Durable: true,
		Args: broker.Table{"x-queue-type": "quorum"}}}}); err != nil {
		return nil, err
	}
	publish := func(id string) (time.Duration, error) {
		c, cancel := context.WithTimeout(ctx, majorityWait)
		defer cancel()
		began := time.Now()
		err := s.conn.Publish(c, id, broker.To(q), broker.Mandatory(), broker.MessageID(id))
		return time.Since(began), err
	}
	if _, err := publish("before"); err != nil {
		return nil, fmt.Errorf("publish with every node up: %w", err)
	}
	if _, err := s.ctl(ctx, "node-stop", "2"); err != nil {
		return nil, err
	}
	took, err := publish("one-down")
	if err != nil {
		s.fail("with node 2 stopped (2 of 3 members up), a publish to %s failed: %v", q, err)
	} else {
		s.note("with node 2 stopped, a publish to the quorum queue (2 of 3 members up) was confirmed in %s", took.Round(time.Millisecond))
	}
	if _, err := s.ctl(ctx, "node-stop", "3"); err != nil {
		return nil, err
	}
	took, err = publish("during")
	switch {
	case err == nil:
		s.fail("a publish to %s was confirmed with 1 of its 3 members up (on %s)", q, s.conn.Node())
	default:
		s.note("with nodes 2 and 3 stopped, a publish to the quorum queue (leader on %s) failed after %s: %v",
			s.conn.Node(), took.Round(10*time.Millisecond), err)
	}
	began := time.Now()
	for _, n := range []int{2, 3} {
		if _, err := s.ctl(ctx, "node-start", fmt.Sprint(n)); err != nil {
			return nil, err
		}
	}
	s.note("nodes 2 and 3 started again in %s", time.Since(began).Round(100*time.Millisecond))
	for attempt := 1; ; attempt++ {
		took, err := publish("after")
		if err == nil {
			s.note("then a publish was confirmed in %s (attempt %d)", took.Round(time.Millisecond), attempt)
			break
		}
		if attempt == 3 {
			s.fail("with every node back, a publish to %s still failed: %v", q, err)
			break
		}
	}
	st, err := s.conn.Transport().Inspect(ctx, q)
	if err != nil {
		return nil, err
	}
	s.note("%s holds %d messages: the 3 confirmed, and the one whose publish failed %s", q, st.Messages,
		map[bool]string{true: "too (the broker had taken it: the failure meant unknown)", false: "not"}[st.Messages == 4])
	_, err = s.conn.Transport().DeleteQueue(ctx, q)
	return nil, err
}
