package storetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/internal/testenv"
	"github.com/acemq/acemq-flow/patterns"
)

// OutboxStore is what the outbox suite checks: an outbox store with every
// interface a relay uses.
type OutboxStore interface {
	patterns.OutboxStore
	patterns.OutboxFailureMarker
	patterns.OutboxReleaser
	patterns.OutboxLookahead
	patterns.OutboxLeaseExtender
}

// OutboxConfig is what a test asks of the stores it opens.
type OutboxConfig struct {
	// Lease is how long a claim on records lasts.
	Lease time.Duration
	// MaxAttempts is how many refused publishes a record gets before it
	// is no longer claimed.
	MaxAttempts int
}

// OutboxStores are the stores of one test, over one new, empty outbox.
type OutboxStores struct {
	// Store is the first claimant.
	Store OutboxStore
	// Add adds rec, committed, and returns its id.
	Add func(ctx context.Context, rec patterns.OutboxRecord) (string, error)
	// Records lists the records not yet published, in order, given-up
	// ones included, without claiming any.
	Records func(ctx context.Context) ([]patterns.OutboxRecord, error)
	// Another returns one more claimant over Store's records, one of its
	// own (what another relay has); nil when an instance is the only
	// claimant of its records (patterns.InMemoryOutboxStore), which skips
	// the rules between claimants.
	Another func() OutboxStore
	// AddRolledBack adds rec in a transaction of the caller's and rolls
	// that back; nil when adding cannot join a transaction
	// (InMemoryOutboxStore, which does not close the gap the outbox is
	// for), which skips that rule.
	AddRolledBack func(ctx context.Context, rec patterns.OutboxRecord) error
}

// OutboxOpen opens the stores of one test, configured with cfg, on an
// outbox of the test's own; what they hold is dropped when t ends.
type OutboxOpen func(t *testing.T, cfg OutboxConfig) OutboxStores

// Outbox runs the outbox store suite against the stores open returns. The
// rules are those of patterns.OutboxStore and its optional interfaces and
// of the seeds: records are claimed in the order they were added, as a
// lease, and only those before the first live lease, so two claimants
// never hold the same record and one stands by while the other relays; an
// expired lease is claimable again and a renewed one is not; MarkFailed
// counts an attempt of a record the caller holds and frees it, and a
// record refused MaxAttempts times stays, no longer claimed, while the
// records after it go ahead; Release frees without counting; a record
// comes back as it was added; and a relay over the store publishes every
// record once, in order, stopping at a failing one.
func Outbox(t *testing.T, open OutboxOpen) {
	run(t, open, map[string]func(*testing.T, OutboxOpen){
		"claims in the order added":                  outboxOrder,
		"claimants never share a record":             outboxConcurrent,
		"an expired lease is claimable again":        outboxLeaseExpires,
		"an old claimant leaves the new lease alone": outboxOldClaimant,
		"an extended lease is kept":                  outboxExtend,
		"a late extension renews an untaken lease":   outboxLateExtend,
		"mark failed counts an attempt of a claim":   outboxMarkFailed,
		"a record refused too often gives way":       outboxExhausted,
		"release frees without counting":             outboxRelease,
		"a look ahead claims past the held batch":    outboxLookahead,
		"a record is what was added":                 outboxRoundTrip,
		"a record that cannot be routed is refused":  outboxUnroutable,
		"a rolled back add leaves no record":         outboxRolledBack,
		"a relay stops at a failing record":          outboxRelayStops,
		"two relays send every record once in order": outboxTwoRelays,
	})
}

// outbox is one test's stores, a loopback connection to build records
// with, and the ids of the records added, in order.
type outbox struct {
	t    *testing.T
	ctx  context.Context
	cfg  OutboxConfig
	conn *broker.Conn
	q    string
	ids  []string
	OutboxStores
}

func openOutbox(t *testing.T, open OutboxOpen, cfg OutboxConfig) *outbox {
	t.Helper()
	o := &outbox{t: t, ctx: ctxOf(t), cfg: cfg, q: testenv.Name(t, "outbox")}
	conn, err := broker.Config{Logger: testenv.Logger(t)}.Open(o.ctx, "memory://")
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, conn.Close(context.Background())) })
	require.NoError(t, conn.Declare(o.ctx, broker.ConsumerTopology(o.q)))
	o.conn = conn
	o.OutboxStores = open(t, cfg)
	require.NotNil(t, o.Store, "open returned no store")
	return o
}

// another is a further claimant; the test is skipped when there is none.
func (o *outbox) another() OutboxStore {
	o.t.Helper()
	if o.Another == nil {
		o.t.Skip("OutboxStores.Another is nil: an instance is the only claimant of its records")
	}
	return o.Another()
}

// otherOrSelf is another claimant, or Store when there is none: for rules
// that hold for any caller.
func (o *outbox) otherOrSelf() OutboxStore {
	if o.Another == nil {
		return o.Store
	}
	return o.Another()
}

func (o *outbox) record(payload any, opts ...broker.PublishOption) patterns.OutboxRecord {
	o.t.Helper()
	rec, err := patterns.Record(o.ctx, o.conn, payload, opts...)
	require.NoError(o.t, err)
	return rec
}

// add adds n records to the test's queue, each one's payload its
// position among the records the test added.
func (o *outbox) add(n int) []string {
	o.t.Helper()
	from := len(o.ids)
	for i := from; i < from+n; i++ {
		o.addRecord(o.record(i, broker.To(o.q)))
	}
	return o.ids[from:]
}

func (o *outbox) addRecord(rec patterns.OutboxRecord) string {
	o.t.Helper()
	id, err := o.Add(o.ctx, rec)
	require.NoError(o.t, err)
	require.NotEmpty(o.t, id)
	o.ids = append(o.ids, id)
	return id
}

func ids(recs []patterns.OutboxRecord) []string {
	out := []string{}
	for _, r := range recs {
		out = append(out, r.ID)
	}
	return out
}

func (o *outbox) pending(s OutboxStore, limit int) []string {
	o.t.Helper()
	recs, err := s.Pending(o.ctx, limit)
	require.NoError(o.t, err)
	return ids(recs)
}

func (o *outbox) after(s OutboxStore, held []string, limit int) []string {
	o.t.Helper()
	recs, err := s.PendingAfter(o.ctx, held, limit)
	require.NoError(o.t, err)
	return ids(recs)
}

func (o *outbox) records() []patterns.OutboxRecord {
	o.t.Helper()
	recs, err := o.Records(o.ctx)
	require.NoError(o.t, err)
	return recs
}

// attempts is the attempts counted of the record with id.
func (o *outbox) attempts(id string) int {
	o.t.Helper()
	for _, r := range o.records() {
		if r.ID == id {
			return r.Attempts
		}
	}
	o.t.Fatalf("record %s is gone", id)
	return 0
}

// drain takes every message off the test's queue and returns the payloads.
func (o *outbox) drain() []int {
	o.t.Helper()
	out := []int{}
	for {
		d, err := o.conn.Transport().Get(o.ctx, o.q)
		require.NoError(o.t, err)
		if d == nil {
			return out
		}
		require.NoError(o.t, d.Ack())
		n, err := broker.Decode[int](&broker.Message{Body: d.Body})
		require.NoError(o.t, err)
		out = append(out, n)
	}
}

func (o *outbox) relay(s OutboxStore, cfg patterns.OutboxRelayConfig) *patterns.OutboxRelay {
	o.t.Helper()
	cfg.Logger = testenv.Logger(o.t)
	r, err := patterns.NewOutboxRelay(o.conn, s, cfg)
	require.NoError(o.t, err)
	o.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(o.t, r.Close(ctx))
	})
	return r
}

func outboxOrder(t *testing.T, open OutboxOpen) {
	o := openOutbox(t, open, OutboxConfig{Lease: long})
	all := o.add(5)
	require.Equal(t, all[:2], o.pending(o.Store, 2), "the oldest first, up to the limit")
	require.Empty(t, o.pending(o.Store, 2), "its own live leases hold back a plain claim")
	if o.Another != nil {
		require.Empty(t, o.pending(o.Another(), 0), "and another claimant stands by")
	}
	require.NoError(t, o.Store.MarkPublished(o.ctx, all[:2]...))
	require.Equal(t, all[2:], ids(o.records()), "published records are removed")
	require.NoError(t, o.Store.MarkPublished(o.ctx, all[:2]...), "removing what is gone is not an error")
	require.Equal(t, all[2:], o.pending(o.otherOrSelf(), 0), "every claimable one without a limit")
}

func outboxConcurrent(t *testing.T, open OutboxOpen) {
	o := openOutbox(t, open, OutboxConfig{Lease: long})
	all := o.add(60)
	var (
		mu   sync.Mutex
		won  = map[string]int{}
		errs = make(chan error, 6)
		wg   sync.WaitGroup
	)
	for range 6 {
		s := o.otherOrSelf()
		wg.Go(func() {
			for o.ctx.Err() == nil {
				recs, err := s.Pending(o.ctx, 4)
				if err != nil {
					errs <- err
					return
				}
				if len(recs) == 0 {
					left, err := o.Records(o.ctx)
					if err != nil || len(left) == 0 {
						errs <- err
						return
					}
					time.Sleep(time.Millisecond)
					continue
				}
				mu.Lock()
				for _, r := range recs {
					won[r.ID]++
				}
				mu.Unlock()
				if err := s.MarkPublished(o.ctx, ids(recs)...); err != nil {
					errs <- err
					return
				}
			}
			errs <- o.ctx.Err()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, won, len(all))
	for _, id := range all {
		require.Equal(t, 1, won[id], "record %s claimed once", id)
	}
}

func outboxLeaseExpires(t *testing.T, open OutboxOpen) {
	o := openOutbox(t, open, OutboxConfig{Lease: short})
	require.Equal(t, short, o.Store.Lease())
	all := o.add(3)
	crashed := o.Store
	require.Equal(t, all[:2], o.pending(crashed, 2))
	taker := o.otherOrSelf()
	require.Empty(t, o.pending(taker, 0))
	var won []patterns.OutboxRecord
	require.Eventually(t, func() bool {
		recs, err := taker.Pending(o.ctx, 0)
		won = recs
		return err == nil && len(recs) > 0
	}, runOut, poll, "a dead claimant's records are taken over once its lease runs out")
	require.Equal(t, all, ids(won), "in order, with the one after them")
	require.Empty(t, o.pending(taker, 0), "under a lease of the new claimant's")
}

func outboxOldClaimant(t *testing.T, open OutboxOpen) {
	o := openOutbox(t, open, OutboxConfig{Lease: short})
	crashed, taker := o.Store, o.another()
	all := o.add(2)
	require.Equal(t, all, o.pending(crashed, 0))
	require.Eventually(t, func() bool {
		recs, err := taker.Pending(o.ctx, 0)
		return err == nil && len(recs) == 2
	}, runOut, poll)
	// What the old claimant still does to the records does not touch the
	// new lease.
	cause := errors.New("returned: NO_ROUTE")
	require.NoError(t, crashed.MarkFailed(o.ctx, all[0], cause))
	require.Equal(t, 0, o.attempts(all[0]), "mark failed of a record taken over counts nothing")
	require.NoError(t, crashed.Release(o.ctx, all[0]))
	require.Empty(t, o.pending(crashed, 0), "release of a record taken over frees nothing")
	require.NoError(t, crashed.Extend(o.ctx, all...))
	require.NoError(t, taker.Release(o.ctx, all...))
	require.Equal(t, all, o.pending(crashed, 0), "extend of a record taken over takes nothing back")
}

func outboxExtend(t *testing.T, open OutboxOpen) {
	o := openOutbox(t, open, OutboxConfig{Lease: short})
	all := o.add(2)
	require.Equal(t, all[:1], o.pending(o.Store, 1))
	other := o.otherOrSelf()
	// Renewed twice as often as a relay does (Lease/3): a claim between
	// two renewals must not find the lease run out on a slow machine.
	for start := time.Now(); time.Since(start) < 2*short; time.Sleep(short / 6) {
		require.NoError(t, o.Store.Extend(o.ctx, all[0]))
		require.Empty(t, o.pending(other, 0), "a renewed lease is not taken over")
	}
	require.Eventually(t, func() bool {
		recs, err := other.Pending(o.ctx, 0)
		return err == nil && len(recs) == 2
	}, runOut, poll, "once no longer renewed it runs out")
}

func outboxLateExtend(t *testing.T, open OutboxOpen) {
	o := openOutbox(t, open, OutboxConfig{Lease: short})
	all := o.add(2)
	require.Equal(t, all[:1], o.pending(o.Store, 1))
	// A relay that renews late (a pause longer than the lease) still holds
	// what nobody took over meanwhile: renewing it spares a second relay
	// publishing the batch again halfway.
	time.Sleep(short + short/2)
	require.NoError(t, o.Store.Extend(o.ctx, all[0]))
	other := o.otherOrSelf()
	require.Empty(t, o.pending(other, 0), "renewed")
	require.NoError(t, o.Store.Release(o.ctx, all[0]))
	require.Equal(t, all, o.pending(other, 0))
}

func outboxMarkFailed(t *testing.T, open OutboxOpen) {
	o := openOutbox(t, open, OutboxConfig{Lease: long})
	all := o.add(2)
	cause := errors.New("returned: NO_ROUTE")
	require.NoError(t, o.Store.MarkFailed(o.ctx, all[1], cause))
	require.Equal(t, 0, o.attempts(all[1]), "a record nobody claimed was not refused")

	require.Equal(t, all[:1], o.pending(o.Store, 1))
	require.NoError(t, o.Store.MarkFailed(o.ctx, all[0], cause))
	recs := o.records()
	require.Equal(t, 1, recs[0].Attempts)
	require.Equal(t, cause.Error(), recs[0].LastError)
	require.NoError(t, o.Store.MarkFailed(o.ctx, all[0], cause))
	require.Equal(t, 1, o.attempts(all[0]), "one claim, one refused attempt")

	got, err := o.otherOrSelf().Pending(o.ctx, 0)
	require.NoError(t, err)
	require.Equal(t, all, ids(got), "the lease was freed")
	require.Equal(t, 1, got[0].Attempts, "a claimed record says how often it was refused")
	require.Equal(t, cause.Error(), got[0].LastError)
	require.Equal(t, 0, got[1].Attempts)
	require.Empty(t, got[1].LastError)
}

func outboxExhausted(t *testing.T, open OutboxOpen) {
	o := openOutbox(t, open, OutboxConfig{Lease: long, MaxAttempts: 2})
	all := o.add(3)
	for range 2 {
		require.Equal(t, all[:1], o.pending(o.Store, 1))
		require.NoError(t, o.Store.MarkFailed(o.ctx, all[0], errors.New("refused")))
	}
	require.Equal(t, all[1:], o.pending(o.otherOrSelf(), 0), "spent, it no longer holds back the records after it")
	require.NoError(t, o.Store.MarkPublished(o.ctx, all[1:]...))
	recs := o.records()
	require.Equal(t, all[:1], ids(recs), "it stays for somebody to look at")
	require.Equal(t, 2, recs[0].Attempts)
	require.Equal(t, "refused", recs[0].LastError)
	require.Empty(t, o.pending(o.Store, 0), "and is never claimed again")
}

func outboxRelease(t *testing.T, open OutboxOpen) {
	o := openOutbox(t, open, OutboxConfig{Lease: long})
	all := o.add(3)
	require.Equal(t, all, o.pending(o.Store, 0))
	require.NoError(t, o.Store.Release(o.ctx, all...))
	require.Equal(t, all, o.pending(o.otherOrSelf(), 0), "freed, the next claim starts from the first of them")
	for _, r := range o.records() {
		require.Zero(t, r.Attempts, "nothing counted")
	}
	if o.Another != nil {
		other := o.Another()
		require.Empty(t, o.pending(other, 0))
		require.NoError(t, other.Release(o.ctx, all...))
		require.Empty(t, o.pending(other, 0), "a claimant frees only its own leases")
	}
	require.NoError(t, o.Store.MarkPublished(o.ctx, all...))
	require.NoError(t, o.Store.Release(o.ctx, all...), "releasing what is gone is not an error")
}

func outboxLookahead(t *testing.T, open OutboxOpen) {
	o := openOutbox(t, open, OutboxConfig{Lease: long})
	all := o.add(6)
	require.Equal(t, all[:2], o.pending(o.Store, 2))
	require.Equal(t, all[2:4], o.after(o.Store, all[:2], 2), "the batch after the held one")
	require.Empty(t, o.after(o.Store, all[:1], 2), "a live lease not held stops it")
	if o.Another != nil {
		require.Empty(t, o.after(o.Another(), all[:2], 2), "another claimant's too")
	}
	// The batch looked ahead of fails: it and the look-ahead go back, and
	// the next claim starts again from the first of them.
	require.NoError(t, o.Store.Release(o.ctx, all[:4]...))
	require.Equal(t, all[:3], o.pending(o.otherOrSelf(), 3))
}

func outboxRoundTrip(t *testing.T, open OutboxOpen) {
	o := openOutbox(t, open, OutboxConfig{Lease: long})
	body := []byte{0xff, 0xfe, 0x00, 'o', 'k', 0xc3, 0x28, 0x00}
	headers := broker.Table{"count": int64(7), "ratio": 0.25, "raw": []byte{0, 1, 2},
		"nested": broker.Table{"list": []any{"a", int32(2), true}}}
	opts := []broker.PublishOption{broker.ToExchange("amq.direct"), broker.To("blobs"), broker.Type("blob.v1"), broker.MessageID("m-1")}
	for k, v := range headers {
		opts = append(opts, broker.Header(k, v))
	}
	rec := o.record(body, opts...)
	want := rec
	want.Message.Headers = rec.Message.Headers.Clone()
	want.Message.Body = append([]byte(nil), rec.Message.Body...)
	id := o.addRecord(rec)
	rec.Message.Body[0] = 'X'
	rec.Message.Headers["count"] = int64(8)

	check := func(got patterns.OutboxRecord) {
		t.Helper()
		require.Equal(t, id, got.ID)
		require.Equal(t, "amq.direct", got.Exchange)
		require.Equal(t, "blobs", got.RoutingKey)
		require.Equal(t, patterns.OutboxDestination{Exchange: "amq.direct", RoutingKey: "blobs"}, got.Destination())
		require.True(t, got.Mandatory, "a relayed record is published mandatory")
		require.Equal(t, want.Message.Body, got.Message.Body, "byte for byte")
		require.Equal(t, want.Message.Headers, got.Message.Headers)
		require.Equal(t, "m-1", got.Message.MessageID)
		require.Equal(t, want.Message.CorrelationID, got.Message.CorrelationID)
		require.Equal(t, "blob.v1", got.Message.Type)
		require.Equal(t, want.Message.ContentType, got.Message.ContentType)
		require.Equal(t, want.Message.Timestamp.Unix(), got.Message.Timestamp.Unix())
		require.Zero(t, got.Attempts)
		require.Empty(t, got.LastError)
		require.WithinDuration(t, time.Now(), got.CreatedAt, time.Minute)
	}
	got, err := o.Store.Pending(o.ctx, 0)
	require.NoError(t, err)
	require.Len(t, got, 1)
	check(got[0])
	got[0].Message.Body[1] = 'Y'
	got[0].Message.Headers["ratio"] = 0.5
	require.NoError(t, o.Store.Release(o.ctx, id))
	got, err = o.Store.Pending(o.ctx, 0)
	require.NoError(t, err)
	require.Len(t, got, 1)
	check(got[0])
	recs := o.records()
	require.Len(t, recs, 1)
	check(recs[0])
}

func outboxUnroutable(t *testing.T, open OutboxOpen) {
	o := openOutbox(t, open, OutboxConfig{Lease: long})
	_, err := o.Add(o.ctx, patterns.OutboxRecord{})
	require.ErrorIs(t, err, patterns.ErrInvalidOutboxRecord, "no exchange and no routing key")
	require.Empty(t, o.records())
}

func outboxRolledBack(t *testing.T, open OutboxOpen) {
	o := openOutbox(t, open, OutboxConfig{Lease: long})
	if o.AddRolledBack == nil {
		t.Skip("OutboxStores.AddRolledBack is nil: adding cannot join a transaction")
	}
	require.NoError(t, o.AddRolledBack(o.ctx, o.record(1, broker.To(o.q))))
	require.Empty(t, o.records(), "rolled back with the work")
	require.Empty(t, o.pending(o.Store, 0))
	all := o.add(1)
	require.Equal(t, all, o.pending(o.Store, 0))
}

func outboxRelayStops(t *testing.T, open OutboxOpen) {
	o := openOutbox(t, open, OutboxConfig{Lease: long, MaxAttempts: 2})
	o.add(5)
	poison := o.addRecord(o.record(99, broker.ToExchange("amq.direct"), broker.To("nowhere")))
	o.add(5)
	var mu sync.Mutex
	var heard []patterns.OutboxDestination
	r := o.relay(o.Store, patterns.OutboxRelayConfig{BatchSize: 4, OnError: func(_ error, d patterns.OutboxDestination) {
		mu.Lock()
		heard = append(heard, d)
		mu.Unlock()
	}})

	n, err := r.Sweep(o.ctx)
	require.ErrorIs(t, err, broker.ErrUnroutable, "a flush fails loudly")
	require.Equal(t, 5, n, "everything before the failing record")
	require.Equal(t, []int{0, 1, 2, 3, 4}, o.drain(), "in order, nothing after the failure")
	recs := o.records()
	require.Equal(t, o.ids[5:], ids(recs), "the failing record and everything after it stay")
	require.Equal(t, 1, recs[0].Attempts)
	require.Contains(t, recs[0].LastError, "returned")
	mu.Lock()
	require.Equal(t, []patterns.OutboxDestination{{Exchange: "amq.direct", RoutingKey: "nowhere"}}, heard)
	mu.Unlock()

	n, err = r.Sweep(o.ctx)
	require.ErrorIs(t, err, broker.ErrUnroutable)
	require.Zero(t, n)
	n, err = r.Sweep(o.ctx)
	require.NoError(t, err, "its attempts spent, the failing record gives way")
	require.Equal(t, 5, n)
	require.Equal(t, []int{6, 7, 8, 9, 10}, o.drain())
	recs = o.records()
	require.Equal(t, []string{poison}, ids(recs), "and stays for inspection")
	require.Equal(t, 2, recs[0].Attempts)
}

func outboxTwoRelays(t *testing.T, open OutboxOpen) {
	o := openOutbox(t, open, OutboxConfig{Lease: long})
	first, second := o.Store, o.another()
	const n = 100
	o.add(n)
	got := make(chan int, n)
	_, err := o.conn.Consume(o.ctx, o.q, broker.Func(func(_ context.Context, m *broker.Message) error {
		v, err := broker.Decode[int](m)
		got <- v
		return err
	}), broker.WithRetry(broker.NoRetry()))
	require.NoError(t, err)
	for _, s := range []OutboxStore{first, second} {
		r := o.relay(s, patterns.OutboxRelayConfig{BatchSize: 7, Interval: 5 * time.Millisecond})
		require.NoError(t, r.Start(o.ctx))
	}
	for i := range n {
		select {
		case v := <-got:
			require.Equal(t, i, v, "every record once, in order, between the two relays")
		case <-o.ctx.Done():
			t.Fatalf("only %d of %d records arrived", i, n)
		}
	}
	require.Eventually(t, func() bool {
		recs, err := o.Records(o.ctx)
		return err == nil && len(recs) == 0
	}, runOut, poll, "every record marked published")
	select {
	case v := <-got:
		t.Fatalf("record %d arrived again", v)
	case <-time.After(50 * time.Millisecond):
	}
}
