package patterns

import (
	"context"
	"fmt"
	"slices"

	"github.com/acemq/acemq-flow/broker"
)

// ThenPublish returns a handler that runs fn and publishes what it
// returns to the destination to names (broker.To, broker.ToExchange, and
// any other publish options): chaining services into a pipeline. The
// message is published mandatory with the correlation carried forward and
// the causation recorded, and the input is accepted only once the broker
// has confirmed it, so a destination nothing is bound to retries the input
// rather than being dropped. fn returning End (or nil) publishes nothing
// and accepts: how a step says "this one does not continue" without
// inventing an empty message. An error from fn retries, one wrapped with
// broker.Fatal gives up; a payload that cannot be encoded gives up too, as
// does a typed nil (ErrNilResult). Errors are *StepError and *HopError, as
// FollowSlip's; under Idempotent with a ResultStore the message is kept
// before it is sent, so a redelivery sends it again rather than running fn
// twice.
//
// ThenPublish refuses a nil connection or fn, and publish options that do
// not validate, with an error.
func ThenPublish(conn *broker.Conn, fn StepFunc, to ...broker.PublishOption) (broker.Handler, error) {
	if conn == nil || fn == nil {
		return nil, fmt.Errorf("then publish: %w: nil connection or function", broker.ErrInvalidOption)
	}
	// Clipped, so that handlers appending to it concurrently each get
	// their own copy.
	opts := slices.Clip(append(slices.Clone(to), broker.Mandatory()))
	// Preparing once now reports a bad option when the handler is built
	// rather than on the first message.
	if _, err := conn.Prepare(context.Background(), nil, opts...); err != nil {
		return nil, fmt.Errorf("then publish: %w", err)
	}
	return func(ctx context.Context, m *broker.Message) broker.Ack {
		if ack, ok := resent(ctx, conn, ""); ok {
			return ack
		}
		payload, err := fn(ctx, m)
		if err != nil {
			return stepFailed("", err)
		}
		end, err := ending(payload)
		if err != nil {
			return stepFailed("", broker.Fatal(err))
		}
		if end {
			return broker.Accept()
		}
		out, err := conn.Prepare(ctx, payload, append(opts, broker.CausedBy(m))...)
		if err != nil {
			return broker.Reject(broker.Fatal(&HopError{To: "the destination", Err: err}))
		}
		return onward(ctx, conn, "", out)
	}, nil
}
