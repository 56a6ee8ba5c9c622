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
	"github.com/acemq/acemq-flow/internal/benchmark"
	"github.com/acemq/acemq-flow/internal/testenv"
	"github.com/acemq/acemq-flow/patterns"
	"github.com/acemq/acemq-flow/persistence"
)

// BenchmarkOutboxRelayThroughput measures records/s from committed to
// confirmed: b.N records are committed first, then one relay sweeps them
// all to a quorum queue (mandatory, confirmed, marked). The measurement is
// internal/benchmark's, which `acemq-flow bench` prints too.
func BenchmarkOutboxRelayThroughput(b *testing.B) {
	for _, c := range []struct{ inFlight, batch int }{{1, 500}, {64, 500}, {256, 500}, {256, 2000}, {1024, 2000}} {
		b.Run(fmt.Sprintf("in_flight=%d/batch=%d", c.inFlight, c.batch), func(b *testing.B) {
			cfg := benchmark.Config{URL: testenv.RabbitURL(b), DB: pool(b), N: b.N}
			m, err := benchmark.OutboxRelay(ctxT(b), cfg, c.inFlight, c.batch)
			require.NoError(b, err)
			b.ReportMetric(float64(m.Elapsed.Nanoseconds())/float64(b.N), "ns/op")
			b.ReportMetric(m.Rate(), "records/s")
			// Where the sweep's time went: the store's calls, and the
			// rest (publishing and waiting for confirms).
			b.ReportMetric(m.Claim.Seconds()*100/m.Elapsed.Seconds(), "%claim")
			b.ReportMetric(m.Mark.Seconds()*100/m.Elapsed.Seconds(), "%mark")
		})
	}
}

// BenchmarkSendInFlight is the ceiling any relay can reach on this machine:
// 256-byte mandatory messages sent through broker.Conn.Send to a quorum
// queue (as the relay sends them) by N goroutines, each waiting for its
// confirm, so that N publishes are in flight.
func BenchmarkSendInFlight(b *testing.B) {
	for _, inFlight := range []int{1, 16, 64, 256, 1024} {
		b.Run(fmt.Sprintf("in_flight=%d", inFlight), func(b *testing.B) {
			cfg := benchmark.Config{URL: testenv.RabbitURL(b), N: b.N}
			m, err := benchmark.SendInFlight(ctxT(b), cfg, inFlight)
			require.NoError(b, err)
			b.ReportMetric(float64(m.Elapsed.Nanoseconds())/float64(b.N), "ns/op")
			b.ReportMetric(m.Rate(), "msg/s")
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
