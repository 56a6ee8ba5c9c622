package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/enginepg"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// unitOrder is the payload of the in-process tests' flows.
type unitOrder struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
}

func keep(_ context.Context, o unitOrder) (unitOrder, error) { return o, nil }

func giveUp(_ context.Context, o unitOrder) (unitOrder, error) {
	return o, broker.Fatal(errors.New("card declined"))
}

// unitFlows are two flows named after prefix: one that completes, with an
// example, and one whose second step always gives up.
func unitFlows(prefix string) []*dsl.FlowDef {
	return []*dsl.FlowDef{
		dsl.Flow(prefix+".orders",
			dsl.Step("validate", keep),
			dsl.Step("charge", keep).Retry(broker.Constant(3, time.Second)).Timeout(5*time.Second).
				Compensate(func(context.Context, unitOrder) error { return nil }),
			dsl.Step("ship", keep).When(`payload.amount > 0`).OrderedBy(`payload.id`).Concurrency(2),
			dsl.Example(unitOrder{ID: "o-1", Amount: 42})),
		dsl.Flow(prefix+".doomed",
			dsl.Step("validate", keep),
			dsl.Step("charge", giveUp)),
	}
}

func TestFlowsList(t *testing.T) {
	t.Parallel()
	inv := invocation{flows: unitFlows("unit")}
	r := executeWith(t, inv, "flows", "list")
	require.Zero(t, r.code, r.stderr)
	require.Empty(t, r.stderr, "describing flows needs no broker, so nothing is said about one")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 3)
	require.Regexp(t, `^NAME\s+VERSION\s+FORM\s+STEPS\s+INPUT$`, lines[0])
	require.Regexp(t, `^unit\.orders\s+[0-9a-f]{12}\s+pipeline\s+validate, charge, ship\s+cli\.unitOrder$`, lines[1])
	require.Regexp(t, `^unit\.doomed\s+[0-9a-f]{12}\s+pipeline\s+validate, charge\s+cli\.unitOrder$`, lines[2])

	r = executeWith(t, inv, "flows", "list", "-o", "json")
	require.Zero(t, r.code, r.stderr)
	var infos []engine.FlowInfo
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &infos))
	require.Len(t, infos, 2)
	require.Equal(t, "unit.orders", infos[0].Name)
	require.Regexp(t, `^[0-9a-f]{12}$`, infos[0].Version)
	require.NotEqual(t, infos[0].Version, infos[1].Version)
	require.Contains(t, lines[1], infos[0].Version)
	require.JSONEq(t, `{"id":"o-1","amount":42}`, string(infos[0].ExamplePayload))
	require.Empty(t, infos[1].ExamplePayload)

	r = execute(t, nil, "flows", "list", "-o", "json")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, "[]\n", r.stdout, "no flows is an empty array, not null")
	r = execute(t, nil, "flows", "list")
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stderr, "this binary was built without any")
}

// TestFlowsShowLimits: flows show says how many runs of a key a step
// takes at once, and how often it starts, per key or for all.
func TestFlowsShowLimits(t *testing.T) {
	t.Parallel()
	inv := invocation{flows: []*dsl.FlowDef{dsl.Flow("unit.exports",
		dsl.Step("export", keep).ConcurrencyKey(`payload.id`, 2),
		dsl.Step("notify", keep).RateLimitBy(`payload.id`, 10, time.Second),
		dsl.Step("bill", keep).RateLimit(100, time.Minute))}}
	r := executeWith(t, inv, "flows", "show", "unit.exports")
	require.Zero(t, r.code, r.stderr)
	for _, want := range []string{
		`(?m)^  at most\s+2 at once per payload\.id$`,
		`(?m)^  rate\s+10 per 1s per payload\.id$`,
		`(?m)^  rate\s+100 per 1m0s$`,
	} {
		require.Regexp(t, want, r.stdout)
	}
	r = executeWith(t, inv, "flows", "show", "unit.exports", "-o", "json")
	require.Zero(t, r.code, r.stderr)
	var fi engine.FlowInfo
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &fi))
	require.Equal(t, "payload.id", fi.Steps[0].ConcurrencyKey)
	require.Equal(t, 2, fi.Steps[0].ConcurrencyLimit)
	require.Equal(t, "10 per 1s", fi.Steps[1].RateLimit)
	require.Equal(t, "payload.id", fi.Steps[1].RateKey)
	require.Empty(t, fi.Steps[2].RateKey)
}

func TestFlowsShow(t *testing.T) {
	t.Parallel()
	inv := invocation{flows: unitFlows("unit")}
	r := executeWith(t, inv, "flows", "show", "unit.orders")
	require.Zero(t, r.code, r.stderr)
	for _, want := range []string{
		`(?m)^flow\s+unit\.orders$`, `(?m)^version\s+[0-9a-f]{12}$`, `(?m)^form\s+pipeline$`, `(?m)^input\s+cli\.unitOrder$`,
		`(?m)^compensate queue\s+unit\.orders\.compensate$`,
		`(?m)^step 2\s+charge$`, `(?m)^  queue\s+unit\.orders\.charge$`, `(?m)^  retry\s+3 attempts, 1s apart$`,
		`(?m)^  timeout\s+5s$`, `(?m)^  compensation\s+unit\.orders\.compensate\.charge$`,
		`(?m)^  when\s+payload\.amount > 0$`, `(?m)^  ordered by\s+payload\.id$`, `(?m)^  concurrency\s+2$`,
		`(?m)^  \{"id":"o-1","amount":42\}$`,
		`(?m)^  acemq-flow start unit\.orders --payload '\{"id":"o-1","amount":42\}'$`,
	} {
		require.Regexp(t, want, r.stdout)
	}

	r = executeWith(t, inv, "flows", "show", "unit.orders", "-o", "json")
	require.Zero(t, r.code, r.stderr)
	var fi map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &fi))
	require.Equal(t, "unit.orders", fi["name"])
	require.Len(t, fi["steps"], 3)
	require.Equal(t, map[string]any{"id": "o-1", "amount": float64(42)}, fi["example_payload"])
	step := fi["steps"].([]any)[1].(map[string]any)
	require.Equal(t, "unit.orders.charge", step["queue"])
	require.Equal(t, "unit.orders.compensate.charge", step["compensation"])

	r = executeWith(t, inv, "flows", "show", "unit.doomed", "-o", "json")
	require.Zero(t, r.code, r.stderr)
	require.NotContains(t, r.stdout, "example_payload")

	r = executeWith(t, inv, "flows", "show", "nope")
	require.Equal(t, 1, r.code)
	require.Empty(t, r.stdout)
	require.Contains(t, r.stderr, `unknown flow: "nope" (registered: [unit.doomed unit.orders])`)
}

func TestAFlowThatWasNotBuiltFailsOnlyTheCommandsThatUseFlows(t *testing.T) {
	t.Parallel()
	inv := invocation{flows: []*dsl.FlowDef{dsl.Flow("bad name!", dsl.Step("a", keep))}}
	r := executeWith(t, inv, "flows", "list")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, `register flows: flow "bad name!"`)
	r = executeWith(t, inv, "version")
	require.Zero(t, r.code, r.stderr)
}

func TestStartOnTheEmbeddedBroker(t *testing.T) {
	t.Parallel()
	inv := invocation{flows: unitFlows("unit"), env: map[string]string{"ACEMQ_URL": "memory://"}}
	r := executeWith(t, inv, "start", "unit.orders", "--payload", `{"id":"o-7","amount":3}`)
	require.Zero(t, r.code, r.stderr)
	require.Regexp(t, `^[0-9a-f-]{36}\n$`, r.stdout, "text output is the run id alone")
	require.Contains(t, r.stderr, noDatabaseStart)

	r = executeWith(t, inv, "start", "unit.orders", "--payload", `{"id":"o-8","amount":3}`, "--run-id", "mine-1", "--in", "1h", "-o", "json")
	require.Zero(t, r.code, r.stderr)
	var started struct {
		RunID string    `json:"run_id"`
		Flow  string    `json:"flow"`
		DueAt time.Time `json:"due_at"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &started))
	require.Equal(t, "mine-1", started.RunID)
	require.Equal(t, "unit.orders", started.Flow)
	require.WithinDuration(t, time.Now().Add(time.Hour), started.DueAt, time.Minute)

	r = executeWith(t, inv, "start", "unit.orders", "--payload", `{"id":"o-9","amount":3}`, "-o", "json")
	require.Zero(t, r.code, r.stderr)
	require.NotContains(t, r.stdout, "due_at", "a run started now has no due time")

	inv.stdin = `{"id":"from-stdin","amount":1}`
	r = executeWith(t, inv, "start", "unit.orders", "--payload", "-", "--at", time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stderr, "waits until")
}

func TestStartRefusesWhatDoesNotFit(t *testing.T) {
	t.Parallel()
	inv := invocation{flows: unitFlows("unit")}
	for _, tc := range []struct {
		name  string
		args  []string
		stdin string
		want  []string
		// connects: only the engine knows whether JSON fits the flow's
		// type, so the broker is connected first (nothing is published).
		connects bool
	}{
		{"no payload, example shown", []string{"start", "unit.orders"},
			"", []string{`start unit.orders: --payload is required, e.g. --payload '{"id":"o-1","amount":42}'`}, false},
		{"no payload, no example", []string{"start", "unit.doomed"},
			"", []string{`--payload is required (the payload is a JSON cli.unitOrder)`}, false},
		{"empty stdin", []string{"start", "unit.orders", "--payload", "-"},
			"", []string{`--payload is required: stdin was empty`}, false},
		{"not JSON", []string{"start", "unit.orders", "--payload", "{id:"},
			"", []string{`payload does not fit the flow: the payload is not JSON`, `e.g. --payload`}, false},
		{"wrong type", []string{"start", "unit.orders", "--payload", `{"id":"x","amount":"many"}`, "--url", "memory://"},
			"", []string{`payload does not fit the flow: flow "unit.orders" takes cli.unitOrder`, `e.g. --payload '{"id":"o-1","amount":42}'`}, true},
		{"unknown field", []string{"start", "unit.orders", "--payload", `{"id":"x","colour":"red"}`, "--url", "memory://"},
			"", []string{`unknown field "colour"`}, true},
		{"unknown flow", []string{"start", "nope", "--payload", `{}`},
			"", []string{`start: unknown flow: "nope"`}, false},
		{"in and at", []string{"start", "unit.orders", "--payload", `{}`, "--in", "1m", "--at", "2030-01-01T00:00:00Z"},
			"", []string{`give --in or --at, not both`}, false},
		{"negative in", []string{"start", "unit.orders", "--payload", `{}`, "--in", "-1m"},
			"", []string{`--in -1m0s: want a duration of 0 or more`}, false},
		{"bad at", []string{"start", "unit.orders", "--payload", `{}`, "--at", "tomorrow"},
			"", []string{`"tomorrow" is not an RFC 3339 time`}, false},
		{"no flow", []string{"start"},
			"", []string{`accepts 1 arg(s), received 0`}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			inv := inv
			inv.stdin = tc.stdin
			r := executeWith(t, inv, tc.args...)
			require.Equal(t, 1, r.code, r.stderr)
			require.Empty(t, r.stdout)
			for _, w := range tc.want {
				require.Contains(t, r.stderr, w)
			}
			if !tc.connects {
				require.NotContains(t, r.stderr, "no broker", "refused before connecting to anything (there is no --url)")
			}
		})
	}
}

func TestStartOptions(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 24, 9, 0, 0, 0, time.UTC)
	opts, err := startOptions("", false, 0, time.Time{})
	require.NoError(t, err)
	require.Empty(t, opts)
	opts, err = startOptions("r-1", false, 30*time.Minute, time.Time{})
	require.NoError(t, err)
	require.Len(t, opts, 2)
	opts, err = startOptions("r-1", true, 0, time.Time{})
	require.NoError(t, err)
	require.Len(t, opts, 2)
	opts, err = startOptions("", false, 0, at)
	require.NoError(t, err)
	require.Len(t, opts, 1)
	_, err = startOptions("", false, time.Minute, at)
	require.ErrorContains(t, err, "not both")
	_, err = startOptions("", false, -time.Second, time.Time{})
	require.ErrorContains(t, err, "want a duration of 0 or more")
	_, err = startOptions("", true, 0, time.Time{})
	require.ErrorContains(t, err, "give its --run-id")

	var tf timeFlag
	require.NoError(t, tf.Set("2026-12-24T09:00:00Z"))
	require.Equal(t, at, tf.t)
	require.Equal(t, "2026-12-24T09:00:00Z", tf.String())
	require.Error(t, tf.Set("2026-12-24 09:00"))
}

func TestReadPayload(t *testing.T) {
	t.Parallel()
	p, err := readPayload(`{"a":1}`, strings.NewReader("ignored"))
	require.NoError(t, err)
	require.JSONEq(t, `{"a":1}`, string(p))
	p, err = readPayload("-", strings.NewReader(" {\"b\": 2}\n"))
	require.NoError(t, err)
	require.JSONEq(t, `{"b":2}`, string(p))
	_, err = readPayload("", strings.NewReader(`{}`))
	require.ErrorIs(t, err, errNoPayload, "stdin is read only for --payload -")
	_, err = readPayload("-", strings.NewReader(""))
	require.ErrorIs(t, err, errNoPayload)
	_, err = readPayload(`{"a":1} {"a":2}`, nil)
	require.ErrorIs(t, err, engine.ErrInvalidPayload)
	_, err = readPayload("-", iotestErrReader{})
	require.ErrorContains(t, err, "read the payload from stdin: broken pipe")
}

// iotestErrReader fails every read.
type iotestErrReader struct{}

func (iotestErrReader) Read([]byte) (int, error) { return 0, errors.New("broken pipe") }

func TestRunsQuery(t *testing.T) {
	t.Parallel()
	since := time.Now().Add(-time.Hour)
	q, err := runsQuery("orders", []string{"failed", " Unresolved "}, since, 10, "declined")
	require.NoError(t, err)
	require.Equal(t, journal.Query{Flow: "orders", Statuses: []journal.Status{journal.Failed, journal.Unresolved},
		Since: since, Limit: 10, ErrorContains: "declined"}, q)
	_, err = runsQuery("", []string{"failed", "broken"}, time.Time{}, 10, "")
	require.ErrorIs(t, err, ErrInvalidStatus)
	require.ErrorContains(t, err, `"broken": want one of running, waiting, completed, ended, failed, compensating, compensated, unresolved, cancelled`)
	_, err = runsQuery("", nil, time.Time{}, 0, "")
	require.ErrorContains(t, err, "--limit 0: want at least 1")
}

func TestSinceFlag(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 24, 9, 0, 0, 0, time.UTC)
	var f sinceFlag
	require.True(t, f.since(now).IsZero(), "not given: every run")
	require.NoError(t, f.Set("24h"))
	require.Equal(t, now.Add(-24*time.Hour), f.since(now))
	require.Equal(t, "24h0m0s", f.String())
	require.NoError(t, f.Set("2026-12-01T00:00:00Z"))
	require.Equal(t, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), f.since(now))
	require.ErrorContains(t, f.Set("-1h"), "want a positive duration")
	require.ErrorContains(t, f.Set("yesterday"), "neither a duration (24h) nor an RFC 3339 time")
}

func TestFormatting(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		1234567 * time.Nanosecond:                "1ms",
		1234 * time.Millisecond:                  "1.23s",
		3*time.Minute + 12*time.Second + 400e6:   "3m12s",
		5*time.Hour + 3*time.Minute + 20e9:       "5h3m",
		-2 * time.Second:                         "-2s",
		26*time.Hour + 59*time.Minute + 59*1e9:   "27h0m",
		999 * time.Millisecond:                   "999ms",
		59*time.Second + 999*time.Millisecond:    "1m0s",
		time.Duration(0):                         "0s",
		90 * time.Minute:                         "1h30m",
		time.Hour + 30*time.Second:               "1h1m",
		42 * time.Second:                         "42s",
		100 * time.Millisecond:                   "100ms",
		time.Minute + 500*time.Millisecond + 1e6: "1m1s",
	} {
		require.Equal(t, want, shortDuration(d), "%s", d)
	}
	require.Equal(t, "short", truncate("short", 10))
	require.Equal(t, "line one line two", truncate("line one\n\tline two", 20))
	require.Equal(t, "abcdefghi…", truncate("abcdefghijklmnop", 10))
	require.Equal(t, "ééé…", truncate("éééééé", 4), "cut on runes")
	require.Equal(t, `'{"a":"it'\''s"}'`, shellQuote(`{"a":"it's"}`))
	require.Equal(t, "1 message", count(1, "message"))
	require.Equal(t, "0 messages", count(0, "message"))

	var buf bytes.Buffer
	tb := newTable(&buf)
	tb.row("A", "B")
	tb.row("x\ty", "multi\nline")
	require.NoError(t, tb.flush())
	require.Equal(t, "A    B\nx y  multi line\n", buf.String())
}

func TestMigrateNeedsADatabase(t *testing.T) {
	t.Parallel()
	r := execute(t, nil, "migrate")
	require.Equal(t, 1, r.code)
	require.Empty(t, r.stdout)
	require.Contains(t, r.stderr, "migrate: no database: set --database-url / ACEMQ_DATABASE_URL to a PostgreSQL URL")
}

func TestAnUnreachableDatabaseNamesTheFlag(t *testing.T) {
	t.Parallel()
	// Nothing listens on port 1: the connection is refused at once.
	const url = "postgres://acemq:s3cret-pw@127.0.0.1:1/test"
	inv := invocation{flows: unitFlows("unit")}
	for _, args := range [][]string{
		{"migrate", "--database-url", url},
		{"runs", "list", "--database-url", url},
		{"runs", "show", "r-1", "--database-url", url},
		{"worker", "--database-url", url},
		{"start", "unit.orders", "--payload", `{}`, "--database-url", url},
		{"replay", "r-1", "--database-url", url},
		{"compensate", "r-1", "--database-url", url},
	} {
		r := executeWith(t, inv, args...)
		require.Equal(t, 1, r.code, "%v", args)
		require.Empty(t, r.stdout)
		require.Contains(t, r.stderr, "acemq-flow: --database-url / ACEMQ_DATABASE_URL: connect to postgres://acemq@127.0.0.1:1/test:", "%v", args)
		require.NotContains(t, r.stderr, "s3cret-pw")
		require.NotContains(t, r.stderr, "no broker", "the database is opened before the broker")
	}

	inv.env = map[string]string{"ACEMQ_DATABASE_URL": "postgres://acemq:s3cret-pw@127.0.0.1:1/test?sslmode=nonsense"}
	r := executeWith(t, inv, "runs", "list")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "--database-url / ACEMQ_DATABASE_URL: cannot parse")
	require.NotContains(t, r.stderr, "s3cret-pw")
}

// TestDatabaseErrorsKeepTheirCause: an error about the database names
// the flag and still matches what it wraps (enginepg's own tests check
// that its errors never show a password).
func TestDatabaseErrorsKeepTheirCause(t *testing.T) {
	t.Parallel()
	err := databaseError(fmt.Errorf("run journal: %w", enginepg.ErrNotMigrated))
	require.ErrorIs(t, err, enginepg.ErrNotMigrated)
	require.Equal(t, "--database-url / ACEMQ_DATABASE_URL: run journal: database not migrated", err.Error())
}

func TestReplayAndCompensateWithoutADatabaseSearchTheDeadLetterQueues(t *testing.T) {
	t.Parallel()
	inv := invocation{flows: unitFlows("unit"), env: map[string]string{"ACEMQ_URL": "memory://"}}
	for _, cmd := range []string{"replay", "compensate"} {
		r := executeWith(t, inv, cmd, "run-404")
		require.Equal(t, 1, r.code)
		require.Empty(t, r.stdout)
		require.Contains(t, r.stderr, noDatabaseMover)
		require.Contains(t, r.stderr, "run run-404 is not in the run journal: looked for it by x-acemq-run-id in unit.orders.validate.dlq, unit.orders.charge.dlq, unit.orders.ship.dlq, unit.doomed.validate.dlq, unit.doomed.charge.dlq")
		require.Contains(t, r.stderr, cmd+": the run's message was not found: run run-404 is in none of")
	}
	r := execute(t, nil, "replay", "run-404")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "replay: this binary has no flows")
}

// syncBuffer is a bytes.Buffer a command writes to while the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestWorkerOnTheEmbeddedBroker: a worker works the runs another command
// of the same process starts on a shared in-process broker, drains when its
// context ends, and exits 0; a run that fails lands in its dead-letter
// queue, where replay finds it by its run id without a database.
func TestWorkerOnTheEmbeddedBroker(t *testing.T) {
	t.Parallel()
	url := "memory://" + testenv.Name(t, "broker")
	h := brokertest.New(t, url, false)
	flows := unitFlows(testenv.Name(t, "flow"))
	inv := invocation{flows: flows, env: map[string]string{"ACEMQ_URL": url, "ACEMQ_LADDER": h.Ladder}}

	ctx, cancel := context.WithCancel(t.Context())
	var (
		stderr syncBuffer
		code   int
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		code = run(ctx, testName, inv.lookup, inv.flows, []string{"worker"}, streams{in: strings.NewReader(""), out: &bytes.Buffer{}, err: &stderr})
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), `msg="worker started"`) }, 10*time.Second, 10*time.Millisecond, stderr.String())
	log := stderr.String()
	require.Contains(t, log, noDatabaseWorker)
	require.Contains(t, log, "level=INFO", "a worker logs at info unless told otherwise")
	require.Contains(t, log, fmt.Sprintf("flows=\"[%s %s]\"", flows[0].Name(), flows[1].Name()))
	require.Contains(t, log, flows[0].Name()+".compensate.charge")

	r := executeWith(t, inv, "start", flows[1].Name(), "--payload", `{"id":"d-1","amount":1}`)
	require.Zero(t, r.code, r.stderr)
	runID := strings.TrimSpace(r.stdout)
	dlq := flows[1].Name() + ".charge" + broker.DeadLetterSuffix
	h.WaitDepth(dlq, 1, 10*time.Second)

	r = executeWith(t, inv, "replay", runID, "-o", "json")
	require.Zero(t, r.code, r.stderr)
	var moved engine.Moved
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &moved))
	require.Equal(t, runID, moved.RunID)
	require.Equal(t, dlq, moved.From)
	require.Equal(t, flows[1].Name()+".charge", moved.To)
	require.Equal(t, 1, moved.Messages)
	require.NotEmpty(t, moved.Searched)
	require.Contains(t, r.stderr, "looked for it by x-acemq-run-id in")
	h.WaitDepth(dlq, 1, 10*time.Second) // given up again: the step always fails

	cancel()
	select {
	case <-done:
		require.Zero(t, code, stderr.String())
	case <-time.After(20 * time.Second):
		t.Fatal("the worker did not drain")
	}
	require.Contains(t, stderr.String(), `msg=draining`)
}

func TestWorkerWithoutFlows(t *testing.T) {
	t.Parallel()
	r := execute(t, nil, "worker")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "worker: this binary has no flows: build a main of your own that calls cli.Main(flows...)")

	r = executeWith(t, invocation{flows: unitFlows("unit")}, "worker", "--flows", "unit.orders,nope", "--url", "memory://")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, `worker: unknown flow: "nope"`)
}

func TestNewCommandsNameTheirEnvironmentFallbacks(t *testing.T) {
	t.Parallel()
	for cmd, envs := range map[string][]string{
		"worker":     {"$ACEMQ_DATABASE_URL", "$ACEMQ_URL", "$ACEMQ_LADDER"},
		"start":      {"$ACEMQ_URL", "$ACEMQ_LADDER", "$ACEMQ_DATABASE_URL"},
		"runs list":  {"$ACEMQ_DATABASE_URL", "$ACEMQ_LOG_LEVEL"},
		"migrate":    {"$ACEMQ_DATABASE_URL"},
		"replay":     {"$ACEMQ_URL", "$ACEMQ_LADDER"},
		"compensate": {"$ACEMQ_URL", "$ACEMQ_LADDER"},
	} {
		r := execute(t, nil, append(strings.Fields(cmd), "--help")...)
		require.Zero(t, r.code, r.stderr)
		for _, env := range envs {
			require.Contains(t, r.stdout, env, cmd)
		}
	}
}

// TestWorkerExitsWhenAConsumerEnds: a queue deleted under a worker ends
// its consumer for good; the worker then drains and fails, so that
// whatever supervises it starts a healthy one.
func TestWorkerExitsWhenAConsumerEnds(t *testing.T) {
	t.Parallel()
	url := "memory://" + testenv.Name(t, "broker")
	h := brokertest.New(t, url, false)
	flows := unitFlows(testenv.Name(t, "flow"))
	inv := invocation{flows: flows, env: map[string]string{"ACEMQ_URL": url, "ACEMQ_LADDER": h.Ladder}}
	var (
		stderr syncBuffer
		code   int
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		code = run(t.Context(), testName, inv.lookup, inv.flows, []string{"worker"}, streams{in: strings.NewReader(""), out: &bytes.Buffer{}, err: &stderr})
	}()
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), `msg="worker started"`) }, 10*time.Second, 10*time.Millisecond, stderr.String())
	_, err := h.Admin.Transport().DeleteQueue(brokertest.Ctx(t), flows[0].Name()+".ship")
	require.NoError(t, err)
	select {
	case <-done:
	case <-time.After(3 * consumerCheckInterval):
		t.Fatalf("the worker did not notice: %s", stderr.String())
	}
	require.Equal(t, 1, code)
	require.Contains(t, stderr.String(), `msg="a consumer ended; stopping the worker"`)
	require.Contains(t, stderr.String(), "acemq-flow: worker: "+flows[0].Name()+".ship")
}
