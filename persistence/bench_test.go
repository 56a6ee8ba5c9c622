package persistence_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/internal/testenv"
	"github.com/acemq/acemq-flow/patterns"
	"github.com/acemq/acemq-flow/persistence"
)

// BenchmarkOutboxRelayThroughput measures records/s from committed to
// confirmed: b.N records are committed first, then one relay sweeps them
// all to a quorum queue (mandatory, confirmed, marked).
func BenchmarkOutboxRelayThroughput(b *testing.B) {
	for _, c := range []struct{ inFlight, batch int }{{1, 500}, {64, 500}, {256, 500}, {256, 2000}, {1024, 2000}} {
		inFlight := c.inFlight
		b.Run(fmt.Sprintf("in_flight=%d/batch=%d", inFlight, c.batch), func(b *testing.B) {
			db := pool(b)
			tb := tables(b, db)
			r := newRabbit(b)
			ctx := ctxT(b)
			q := r.Queue("bench-relay")
			r.Declare(q)
			conn := r.Open(broker.Config{})
			s := outboxStore(b, db, tb, persistence.SQLOutboxStoreConfig{})
			body := make([]byte, 256)
			require.NoError(b, pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
				for i := range b.N {
					rec, err := patterns.Record(ctx, conn, body, broker.To(q), broker.MessageID("b-"+strconv.Itoa(i)))
					if err != nil {
						return err
					}
					if _, err := s.Add(ctx, tx, rec); err != nil {
						return err
					}
				}
				return nil
			}))
			ts := &timedOutboxStore{SQLOutboxStore: s}
			rl := relay(b, conn, ts, patterns.OutboxRelayConfig{BatchSize: c.batch, InFlight: inFlight})
			b.ResetTimer()
			start := time.Now()
			n, err := rl.Sweep(ctx)
			elapsed := time.Since(start)
			b.StopTimer()
			require.NoError(b, err)
			require.Equal(b, b.N, n)
			b.ReportMetric(float64(n)/elapsed.Seconds(), "records/s")
			// Where the sweep's time went: the store's calls, and the
			// rest (publishing and waiting for confirms).
			b.ReportMetric(ts.claim.Seconds()*100/elapsed.Seconds(), "%claim")
			b.ReportMetric(ts.mark.Seconds()*100/elapsed.Seconds(), "%mark")
		})
	}
}

// timedOutboxStore adds up the time a relay spends waiting for the store:
// claims made in line (Pending) and marking. Claims made ahead
// (PendingAfter, promoted from the store) overlap publishing and are not
// counted. A relay makes these calls one at a time, so plain sums do.
type timedOutboxStore struct {
	*persistence.SQLOutboxStore
	claim, mark time.Duration
}

func (t *timedOutboxStore) Pending(ctx context.Context, limit int) ([]patterns.OutboxRecord, error) {
	start := time.Now()
	defer func() { t.claim += time.Since(start) }()
	return t.SQLOutboxStore.Pending(ctx, limit)
}

func (t *timedOutboxStore) MarkPublished(ctx context.Context, ids ...string) error {
	start := time.Now()
	defer func() { t.mark += time.Since(start) }()
	return t.SQLOutboxStore.MarkPublished(ctx, ids...)
}

// BenchmarkSendInFlight is the ceiling any relay can reach on this machine:
// 256-byte mandatory messages sent through broker.Conn.Send to a quorum
// queue (as the relay sends them) by N goroutines, each waiting for its
// confirm, so that N publishes are in flight.
func BenchmarkSendInFlight(b *testing.B) {
	for _, inFlight := range []int{1, 16, 64, 256, 1024} {
		b.Run(fmt.Sprintf("in_flight=%d", inFlight), func(b *testing.B) {
			r := newRabbit(b)
			ctx := ctxT(b)
			q := r.Queue("bench-send")
			r.Declare(q)
			conn := r.Open(broker.Config{})
			outs := make([]broker.Outgoing, b.N)
			for i := range outs {
				out, err := conn.Prepare(ctx, make([]byte, 256), broker.To(q), broker.Mandatory())
				require.NoError(b, err)
				outs[i] = out
			}
			var next atomic.Int64
			var failed atomic.Value
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for range inFlight {
				wg.Go(func() {
					for {
						i := next.Add(1) - 1
						if i >= int64(b.N) {
							return
						}
						if err := conn.Send(ctx, outs[i]); err != nil {
							failed.Store(err)
							return
						}
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			if err, _ := failed.Load().(error); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msg/s")
		})
	}
}

// BenchmarkOutboxCommitToConsumer measures, one record at a time, the time
// from the commit of the transaction that added a record to its delivery
// to a consumer, woken by NOTIFY against polling every 100 ms and every
// second (the default interval).
func BenchmarkOutboxCommitToConsumer(b *testing.B) {
	for _, mode := range []struct {
		name     string
		interval time.Duration
		notify   bool
	}{
		{"notify", time.Hour, true},
		{"poll=100ms", 100 * time.Millisecond, false},
		{"poll=1s", time.Second, false},
	} {
		b.Run(mode.name, func(b *testing.B) {
			db := pool(b)
			tb := tables(b, db)
			r := newRabbit(b)
			ctx := ctxT(b)
			q := r.Queue("bench-latency")
			r.Declare(q)
			conn := r.Open(broker.Config{})
			got := make(chan struct{}, 1)
			_, err := conn.Consume(ctx, q, func(context.Context, *broker.Message) broker.Ack {
				got <- struct{}{}
				return broker.Accept()
			}, broker.WithRetry(broker.NoRetry()))
			require.NoError(b, err)
			s := outboxStore(b, db, tb, persistence.SQLOutboxStoreConfig{})
			var store patterns.OutboxStore = s
			if !mode.notify {
				store = struct {
					patterns.OutboxStore
					patterns.OutboxFailureMarker
					patterns.OutboxReleaser
				}{s, s, s}
			}
			rl := relay(b, conn, store, patterns.OutboxRelayConfig{Interval: mode.interval})
			require.NoError(b, rl.Start(ctx))
			rec, err := patterns.Record(ctx, conn, "latency", broker.To(q))
			require.NoError(b, err)
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				require.NoError(b, pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
					_, err := s.Add(ctx, tx, rec)
					return err
				}))
				committed := time.Now()
				select {
				case <-got:
				case <-time.After(30 * time.Second):
					b.Fatal("record not delivered")
				}
				lat = append(lat, time.Since(committed))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[min(len(lat)-1, len(lat)*99/100)].Microseconds())/1000, "p99-ms")
		})
	}
}

// BenchmarkSQLIdempotencyClaimConfirm measures claim+confirm pairs per
// second of 8 concurrent workers, each with its own store instance (a
// consumer process each) on one pool, every key new: with the server's
// durable commits, and on a pool whose sessions set synchronous_commit=off
// (a database crash may then forget the last claims and confirmations,
// which costs a duplicate run, as an expired lease does).
func BenchmarkSQLIdempotencyClaimConfirm(b *testing.B) {
	for _, syncCommit := range []string{"on", "off"} {
		b.Run("synchronous_commit="+syncCommit, func(b *testing.B) {
			cfg, err := pgxpool.ParseConfig(testenv.DatabaseURL(b))
			require.NoError(b, err)
			cfg.ConnConfig.RuntimeParams["synchronous_commit"] = syncCommit
			// A connection per worker: the pool's default (max(4, CPUs))
			// would let only 4 of the 8 run at once on this machine.
			cfg.MaxConns = claimConfirmWorkers
			db, err := pgxpool.NewWithConfig(ctxT(b), cfg)
			require.NoError(b, err)
			b.Cleanup(db.Close)
			benchClaimConfirm(b, db, tables(b, db))
		})
	}
}

// claimConfirmWorkers is how many workers BenchmarkSQLIdempotencyClaimConfirm
// runs at once.
const claimConfirmWorkers = 8

func benchClaimConfirm(b *testing.B, db *pgxpool.Pool, tb persistence.Tables) {
	ctx := ctxT(b)
	const workers = claimConfirmWorkers
	stores := make([]*persistence.SQLIdempotencyStore, workers)
	for i := range stores {
		s, err := persistence.NewSQLIdempotencyStore(db, persistence.SQLIdempotencyStoreConfig{Tables: tb})
		require.NoError(b, err)
		stores[i] = s
	}
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				key := "k-" + strconv.FormatInt(i, 10)
				c, err := stores[w].Claim(ctx, key)
				if err == nil && c != patterns.ClaimClaimed {
					err = fmt.Errorf("claim %s: %s", key, c)
				}
				if err == nil {
					err = stores[w].Confirm(ctx, key)
				}
				if err != nil {
					failed.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "claim+confirm/s")
}
