package rabbitmq

import (
	"context"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/broker/transport"
)

// TestLostUnder: an operation that failed on a connection amqp091 has not
// yet seen closed is the connection's failure when the error is not the
// broker's answer and the connection closes soon after (a resubscription
// then goes on to the next connection); a broker's exception, or a
// connection that stays open, is the operation's own failure.
func TestLostUnder(t *testing.T) {
	t.Parallel()
	reset := fmt.Errorf("basic.qos: %w", &net.OpError{Op: "write", Net: "tcp", Err: syscall.ECONNRESET})
	for _, tc := range []struct {
		name    string
		err     error
		closeIn time.Duration // < 0: the connection stays open
		ctx     time.Duration // 0: no deadline
		want    bool
	}{
		{name: "a write reset, the connection closes after it", err: reset, closeIn: 50 * time.Millisecond, want: true},
		{name: "amqp091's closed error, the connection closes after it", err: amqp.ErrClosed, closeIn: 10 * time.Millisecond, want: true},
		{name: "the broker's exception", err: &transport.AMQPError{Code: 404, Reason: "NOT_FOUND"}, closeIn: 10 * time.Millisecond, want: false},
		{name: "the broker's exception, unmapped", err: &amqp.Error{Code: 405, Reason: "RESOURCE_LOCKED", Server: true}, closeIn: 10 * time.Millisecond, want: false},
		{name: "a write reset, the connection stays open until ctx ends", err: reset, closeIn: -1, ctx: 100 * time.Millisecond, want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := &session{conn: &amqp.Connection{}, lost: make(chan struct{})}
			if tc.closeIn >= 0 {
				timer := time.AfterFunc(tc.closeIn, func() { close(s.lost) })
				defer timer.Stop()
			}
			ctx := context.Background()
			if tc.ctx > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.ctx)
				defer cancel()
			}
			start := time.Now()
			require.Equal(t, tc.want, s.lostUnder(ctx, tc.err))
			require.Less(t, time.Since(start), 2*time.Second, "it waits for the close, not for lostGrace")
		})
	}
}
