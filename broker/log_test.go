package broker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/internal/brokertest"
	"github.com/acemq/acemq-flow/internal/testenv"
)

// syncBuffer is a buffer log lines can be written to from any goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// line is the JSON line with message msg, nil while there is none.
func (s *syncBuffer) line(t *testing.T, msg string) map[string]any {
	s.mu.Lock()
	raw := s.b.String()
	s.mu.Unlock()
	for l := range strings.Lines(raw) {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m))
		if m["msg"] == msg {
			return m
		}
	}
	return nil
}

// TestSetAsideLogLine: the line for a message dead-lettered is a WARN line
// carrying the queue, the message id and its run id, written to the
// consumer's logger (LogTo) with that logger's attributes; SetAsideLogLevel
// lowers it for an owner that writes its own.
func TestSetAsideLogLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		opts  []broker.ConsumeOption
		level string
	}{
		{"default", nil, "WARN"},
		{"owner logs its own", []broker.ConsumeOption{broker.SetAsideLogLevel(slog.LevelDebug)}, "DEBUG"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := brokertest.Ctx(t)
			conn, err := broker.Config{Logger: testenv.Logger(t)}.Open(ctx, "memory://"+testenv.Name(t, "broker"))
			require.NoError(t, err)
			defer conn.Close(ctx)
			var buf syncBuffer
			logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})).With(slog.String("flow", "orders"))
			q := "orders.ship"
			opts := append([]broker.ConsumeOption{broker.WithRetry(broker.NoRetry()), broker.LogTo(logger)}, tc.opts...)
			_, err = conn.Consume(ctx, q, broker.Func(func(context.Context, *broker.Message) error {
				return broker.Fatal(errors.New("no courier"))
			}), opts...)
			require.NoError(t, err)
			require.NoError(t, conn.Publish(ctx, "x", broker.To(q), broker.RunID("run-1"), broker.MessageID("m-1")))
			var line map[string]any
			require.Eventually(t, func() bool { line = buf.line(t, "message set aside"); return line != nil }, 5*time.Second, 10*time.Millisecond)
			require.Equal(t, tc.level, line["level"])
			require.Equal(t, "run-1", line["run_id"])
			require.Equal(t, "m-1", line["message_id"])
			require.Equal(t, q, line["queue"])
			require.Equal(t, q+broker.DeadLetterSuffix, line["to"])
			require.Equal(t, "orders", line["flow"], "the consumer's logger's attributes")
			require.Contains(t, line["reason"], "no courier")
		})
	}
	require.ErrorIs(t, func() error {
		conn, err := broker.Config{}.Open(context.Background(), "memory://"+testenv.Name(t, "nil-logger"))
		require.NoError(t, err)
		defer conn.Close(context.Background())
		_, err = conn.Consume(context.Background(), "q", broker.Func(func(context.Context, *broker.Message) error { return nil }), broker.LogTo(nil))
		return err
	}(), broker.ErrInvalidOption)
}
