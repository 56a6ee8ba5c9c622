package loopback

import (
	"time"

	"github.com/acemq/acemq-flow/broker/transport"
)

// message is one message held by a queue. Its Message is normalised on the
// way in and never changed afterwards, so queues that received the same
// publish share it; every delivery hands out a deep copy.
type message struct {
	msg         transport.Message
	exchange    string
	routingKey  string
	redelivered bool
	// pos is the message's place in its queue's order (queue.seq when it
	// was enqueued), where a classic queue puts it back.
	pos uint64
	// expiresAt is when the message expires once at the head of its queue;
	// zero means never.
	expiresAt time.Time
	// returns counts how often a quorum queue got the message back
	// (x-delivery-count).
	returns int64
}

// size is what x-max-length-bytes counts: the body.
func (m *message) size() int { return len(m.msg.Body) }

// newMessage validates and normalises msg as RabbitMQ and amqp091-go would
// hand it back: headers checked, copied and converted, the timestamp cut to
// the second.
func newMessage(msg transport.Message) (transport.Message, error) {
	if _, _, err := transport.ParseExpiration(msg.Expiration); err != nil {
		return transport.Message{}, err
	}
	if err := msg.Headers.Validate(); err != nil {
		return transport.Message{}, err
	}
	msg.Headers = normalizeHeaders(msg.Headers)
	msg.Timestamp = normalizeTime(msg.Timestamp)
	msg.Body = cloneBytes(msg.Body)
	return msg, nil
}

// normalizeHeaders returns a normalised deep copy of t, nil when empty (an
// empty table does not travel).
func normalizeHeaders(t transport.Table) transport.Table {
	if len(t) == 0 {
		return nil
	}
	return normalizeTable(t)
}

func normalizeTable(t transport.Table) transport.Table {
	out := make(transport.Table, len(t))
	for k, v := range t {
		out[k] = normalizeValue(v)
	}
	return out
}

func normalizeValue(v any) any {
	switch x := v.(type) {
	case int:
		return int64(x)
	case transport.Table:
		return normalizeTable(x)
	case map[string]any:
		return normalizeTable(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = normalizeValue(e)
		}
		return out
	case []byte:
		return cloneBytes(x)
	case time.Time:
		return normalizeTime(x)
	default:
		return v
	}
}

// normalizeTime cuts t to the second, in the local zone, as amqp091-go
// decodes an AMQP timestamp; the zero time stays zero (it is not sent).
func normalizeTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return time.Unix(t.Unix(), 0)
}

func cloneBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}

// copyMessage returns a deep copy of m for a receiver to own.
func copyMessage(m transport.Message) transport.Message {
	m.Headers = m.Headers.Clone()
	m.Body = cloneBytes(m.Body)
	return m
}
