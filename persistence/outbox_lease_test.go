package persistence_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/loopback"
	"github.com/acemq/acemq-flow/broker/transport"
	"github.com/acemq/acemq-flow/internal/testenv"
	"github.com/acemq/acemq-flow/patterns"
	"github.com/acemq/acemq-flow/persistence"
)

// slowTransport takes delay over every publish, as a broker under flow
// control does.
type slowTransport struct {
	transport.Transport
	delay time.Duration
}

func (s slowTransport) Publish(ctx context.Context, p transport.Publishing) error {
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.Transport.Publish(ctx, p)
}

// loopbackConn is a connection to a loopback broker of the test's own,
// every publish taking delay; it is closed when the test ends.
func loopbackConn(t *testing.T, b *loopback.Broker, delay time.Duration) *broker.Conn {
	t.Helper()
	conn, err := broker.Config{Logger: testenv.Logger(t)}.Wrap(slowTransport{b.Connect(), delay})
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// A batch that takes several leases to publish keeps its leases: a second
// relay sweeping all the while publishes nothing, and every record reaches
// the queue once.
func TestOutboxSlowBatchKeepsItsLeases(t *testing.T) {
	t.Parallel()
	db := pool(t)
	tb := tables(t, db)
	ctx := ctxT(t)
	b := loopback.New()
	t.Cleanup(b.Close)
	fast := loopbackConn(t, b, 0)
	q := testenv.Name(t, "outbox-slow")
	require.NoError(t, fast.Declare(ctx, broker.ConsumerTopology(q)))

	const n, lease = 10, 300 * time.Millisecond
	addCommitted(t, db, outboxStore(t, db, tb, persistence.SQLOutboxStoreConfig{}), fast, q, 0, n)
	// n publishes of 100 ms: a batch of about three leases.
	slow := relay(t, loopbackConn(t, b, 100*time.Millisecond), outboxStore(t, db, tb, persistence.SQLOutboxStoreConfig{Lease: lease}),
		patterns.OutboxRelayConfig{BatchSize: n})
	other := relay(t, fast, outboxStore(t, db, tb, persistence.SQLOutboxStoreConfig{Lease: lease}), patterns.OutboxRelayConfig{BatchSize: n})

	type result struct {
		published int
		err       error
	}
	done := make(chan result, 1)
	go func() {
		published, err := slow.Sweep(ctx)
		done <- result{published, err}
	}()
	var published, stolen int
	for finished := false; !finished; {
		select {
		case r := <-done:
			require.NoError(t, r.err)
			published, finished = r.published, true
		case <-time.After(50 * time.Millisecond):
			k, err := other.Sweep(ctx)
			require.NoError(t, err)
			stolen += k
		}
	}
	require.Equal(t, n, published)
	require.Zero(t, stolen, "the other relay took over records whose relay was still publishing them")
	st, err := fast.Transport().Inspect(ctx, q)
	require.NoError(t, err)
	require.Equal(t, n, st.Messages, "every record exactly once")
}

// A record whose stored envelope cannot be read is given up at the first
// claim instead of failing every claim after it: the records after it are
// published, and it stays, exhausted, for inspection.
func TestOutboxUnreadableRecordIsGivenUp(t *testing.T) {
	t.Parallel()
	db := pool(t)
	tb := tables(t, db)
	ctx := ctxT(t)
	b := loopback.New()
	t.Cleanup(b.Close)
	conn := loopbackConn(t, b, 0)
	q := testenv.Name(t, "outbox-unreadable")
	require.NoError(t, conn.Declare(ctx, broker.ConsumerTopology(q)))
	s := outboxStore(t, db, tb, persistence.SQLOutboxStoreConfig{})

	addCommitted(t, db, s, conn, q, 0, 1)
	_, err := db.Exec(ctx, `INSERT INTO `+tb.Outbox+` (exchange, routing_key, message_id, envelope, body, body_encoding)
		VALUES ('', $1, 'bad', '{"from":"a future version"', 'x', 'utf8')`, q)
	require.NoError(t, err)
	addCommitted(t, db, s, conn, q, 1, 1)

	rl := relay(t, conn, s, patterns.OutboxRelayConfig{})
	published, err := rl.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, published, "the records around the unreadable one")
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, persistence.OutboxStats{Pending: 0, Exhausted: 1}, st)
	recs, err := s.Records(ctx, 0)
	require.NoError(t, err, "an unreadable record can still be listed")
	require.Len(t, recs, 1)
	require.Equal(t, patterns.DefaultOutboxMaxAttempts, recs[0].Attempts)
	require.Contains(t, recs[0].LastError, persistence.ErrUnreadableRecord.Error())
	got, err := conn.Transport().Inspect(ctx, q)
	require.NoError(t, err)
	require.Equal(t, 2, got.Messages)
}
