package engine_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/journal"
	"github.com/acemq/acemq-flow/internal/brokertest"
)

// jsonLog is an engine's log written as JSON lines, at every level, for a
// test to read back.
type jsonLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *jsonLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// logger is a JSON logger writing to l from DEBUG up.
func (l *jsonLog) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// lines are the lines written so far about run runID (run_id), parsed.
func (l *jsonLog) lines(t *testing.T, runID string) []map[string]any {
	t.Helper()
	l.mu.Lock()
	raw := l.buf.String()
	l.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(raw))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var line map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &line), "a log line is one JSON object: %s", sc.Text())
		if line["run_id"] == runID {
			out = append(out, line)
		}
	}
	return out
}

// wait waits for the line about runID with message msg at level, and
// returns it.
func (l *jsonLog) wait(t *testing.T, runID, level, msg string) map[string]any {
	t.Helper()
	var found map[string]any
	require.Eventually(t, func() bool {
		for _, line := range l.lines(t, runID) {
			if line["msg"] == msg && line["level"] == level {
				found = line
				return true
			}
		}
		return false
	}, 15*time.Second, 20*time.Millisecond, "no %s line %q about run %s among:\n%s", level, msg, runID, l.dump(t, runID))
	return found
}

// loud are the messages of the lines about runID at INFO and above.
func (l *jsonLog) loud(t *testing.T, runID string) []string {
	t.Helper()
	var out []string
	for _, line := range l.lines(t, runID) {
		if line["level"] != "DEBUG" {
			out = append(out, fmt.Sprint(line["level"], " ", line["msg"]))
		}
	}
	return out
}

func (l *jsonLog) dump(t *testing.T, runID string) string {
	var b strings.Builder
	for _, line := range l.lines(t, runID) {
		fmt.Fprintln(&b, line)
	}
	return b.String()
}

// requireFields checks that line carries want (strings compared whole,
// except where the wanted value ends in "...", a prefix).
func requireFields(t *testing.T, line map[string]any, want map[string]any) {
	t.Helper()
	for k, v := range want {
		got, ok := line[k]
		require.True(t, ok, "line %v has no %q", line, k)
		if s, isString := v.(string); isString && strings.HasSuffix(s, "...") {
			require.Contains(t, got, strings.TrimSuffix(s, "..."), "line %v: %s", line, k)
			continue
		}
		require.Equal(t, v, got, "line %v: %s", line, k)
	}
}

// TestLogRetryGiveUpAndCompensation: a retry is a DEBUG line, the give-up
// a WARN line, the automatic compensation's start and end INFO lines,
// each with the run id, the flow and the step; nothing else about the run
// is written at INFO or above.
func TestLogRetryGiveUpAndCompensation(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		var log jsonLog
		fx := newFixture(t, h, engine.Config{Logger: log.logger()})
		ef := newEffects()
		fx.register(dsl.Flow(fx.name,
			dsl.Step("reserve", appendStep(ef, "reserve")).Compensate(func(context.Context, Order) error { return nil }),
			dsl.Step("ship", func(ctx context.Context, o Order) (Order, error) {
				m, _ := broker.Handling(ctx)
				if ef.add(m.RunID, "ship") == 1 {
					return o, errors.New("courier api timed out")
				}
				return o, broker.Fatal(errors.New("no courier"))
			}).Retry(broker.Constant(5, 0))))
		fx.work()
		run := fx.start(Order{ID: "o-1"})
		fx.waitStatus(run, journal.Compensated, 15*time.Second)

		requireFields(t, log.wait(t, run, "DEBUG", "step retried"), map[string]any{
			"run_id": run, "flow": fx.name, "step": "ship", "attempt": 1.0, "error": "courier api timed out...",
		})
		requireFields(t, log.wait(t, run, "WARN", "step given up"), map[string]any{
			"run_id": run, "flow": fx.name, "step": "ship", "attempt": 2.0, "error": "no courier...", "status": "compensating",
		})
		requireFields(t, log.wait(t, run, "INFO", "compensation started"), map[string]any{
			"run_id": run, "flow": fx.name, "step": "ship", "compensate": "reserve", "error": "no courier...",
		})
		requireFields(t, log.wait(t, run, "INFO", "compensation finished: the run is compensated"), map[string]any{
			"run_id": run, "flow": fx.name, "step": "reserve", "failed": "ship",
		})
		// The broker's own line for the retry says the flow and the step too.
		requireFields(t, log.wait(t, run, "DEBUG", "retry scheduled"), map[string]any{
			"run_id": run, "flow": fx.name, "step": "ship", "queue": fx.name + ".ship",
		})
		require.ElementsMatch(t, []string{
			"WARN step given up", "INFO compensation started", "INFO compensation finished: the run is compensated",
		}, log.loud(t, run), "one line per event an operator acts on, none per message")
	})
}

// TestLogGiveUpDeadLettered: a step given up with nothing to compensate
// is a WARN line naming the dead-letter queue, and the consumer's line for
// moving it there (DEBUG) carries the run id, the flow and the step.
func TestLogGiveUpDeadLettered(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		var log jsonLog
		fx := newFixture(t, h, engine.Config{Logger: log.logger()})
		fx.register(dsl.Flow(fx.name,
			dsl.Step("ship", func(context.Context, Order) (Order, error) {
				return Order{}, broker.Fatal(errors.New("no courier"))
			})))
		fx.work()
		run := fx.start(Order{ID: "o-2"})
		fx.waitStatus(run, journal.Failed, 15*time.Second)
		dlq := fx.name + ".ship" + broker.DeadLetterSuffix
		requireFields(t, log.wait(t, run, "WARN", "step given up"), map[string]any{
			"run_id": run, "flow": fx.name, "step": "ship", "error": "no courier...", "status": "failed", "dead_letter": dlq,
		})
		requireFields(t, log.wait(t, run, "DEBUG", "message set aside"), map[string]any{
			"run_id": run, "flow": fx.name, "step": "ship", "queue": fx.name + ".ship", "to": dlq, "reason": "no courier...",
		})
		require.Equal(t, []string{"WARN step given up"}, log.loud(t, run))
	})
}

// TestLogUnresolved: a compensation given up leaves its run unresolved, an
// ERROR line with the run id, the flow and the step; its retries are
// DEBUG lines.
func TestLogUnresolved(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, h *brokertest.Harness) {
		var log jsonLog
		fx := newFixture(t, h, engine.Config{Logger: log.logger()})
		fx.register(dsl.Flow(fx.name,
			dsl.Step("charge", func(_ context.Context, o Order) (Order, error) { return o, nil }).
				Compensate(func(context.Context, Order) error { return errors.New("refund service down") }).
				CompensateRetry(broker.Constant(2, 0)),
			dsl.Step("ship", func(context.Context, Order) (Order, error) {
				return Order{}, broker.Fatal(errors.New("no courier"))
			})))
		fx.work()
		run := fx.start(Order{ID: "o-3"})
		fx.waitStatus(run, journal.Unresolved, 15*time.Second)
		requireFields(t, log.wait(t, run, "DEBUG", "compensation retried"), map[string]any{
			"run_id": run, "flow": fx.name, "step": "charge", "attempt": 1.0, "error": "refund service down...",
		})
		requireFields(t, log.wait(t, run, "ERROR", "compensation given up: the run is unresolved, a person has to look"), map[string]any{
			"run_id": run, "flow": fx.name, "step": "charge", "error": "refund service down...",
		})
		require.ElementsMatch(t, []string{
			"WARN step given up", "INFO compensation started", "ERROR compensation given up: the run is unresolved, a person has to look",
		}, log.loud(t, run))
	})
}
