package patterns

import (
	"fmt"

	"github.com/acemq/acemq-flow/broker"
)

// RequestOption configures NewRequester.
type RequestOption func(*requestConfig) error

type requestConfig struct {
	exchange string
	replyTo  string
	codec    broker.Codec
	prefetch int
}

// RequestExchange sends requests through exchange, with the requester's
// "to" as the routing key (default: the default exchange, "to" being the
// responder's queue).
func RequestExchange(name string) RequestOption {
	return func(c *requestConfig) error { c.exchange = name; return nil }
}

// RequestReplyTo has replies come to queue, which the caller declared and
// owns, instead of a reply queue the requester declares for itself. The
// requester consumes it exclusively and does not delete it.
func RequestReplyTo(queue string) RequestOption {
	return func(c *requestConfig) error {
		if queue == "" {
			return fmt.Errorf("%w: empty reply queue", broker.ErrInvalidOption)
		}
		c.replyTo = queue
		return nil
	}
}

// RequestCodec encodes requests with codec and decodes replies of its
// content type with it (default: the connection's codec).
func RequestCodec(codec broker.Codec) RequestOption {
	return func(c *requestConfig) error {
		if codec == nil {
			return fmt.Errorf("%w: nil codec", broker.ErrInvalidOption)
		}
		c.codec = codec
		return nil
	}
}

// RequestPrefetch sets the reply consumer's prefetch (default 100): replies
// are handed to waiting callers, never worked on, so a larger number only
// saves round trips.
func RequestPrefetch(n int) RequestOption {
	return func(c *requestConfig) error {
		if n < 1 {
			return fmt.Errorf("%w: reply prefetch %d, want at least 1", broker.ErrInvalidOption, n)
		}
		c.prefetch = n
		return nil
	}
}
