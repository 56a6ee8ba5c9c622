package patterns

import (
	"time"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/transport"
)

// replayBrokerHeaders are what RabbitMQ adds when it dead-letters or
// redelivers a message. A copy drops them: RabbitMQ silently drops a
// message whose x-death shows it cycling through queues with no rejection
// in the loop.
var replayBrokerHeaders = []string{
	"x-death", "x-first-death-reason", "x-first-death-queue", "x-first-death-exchange",
	"x-last-death-reason", "x-last-death-queue", "x-last-death-exchange", "original-expiration",
	"x-delivery-count",
}

// replayEnvelope reads the envelope of a stored message for a replay
// filter. It is lenient where a consumer is strict: a replay moves messages
// it could not handle, and a malformed header reads as its zero value
// rather than stopping the pass.
func replayEnvelope(m *transport.Message) broker.Envelope {
	h := m.Headers
	env := broker.Envelope{
		ID:            m.MessageID,
		CorrelationID: m.CorrelationID,
		Type:          m.Type,
		ContentType:   m.ContentType,
		Timestamp:     m.Timestamp,
		ReplyTo:       m.ReplyTo,
		Expiration:    m.Expiration,
		Attempt:       1,
		CausationID:   replayString(h, broker.HeaderCausationID),
		RunID:         replayString(h, broker.HeaderRunID),
		Error:         replayString(h, broker.HeaderError),
		SourceQueue:   replayString(h, broker.HeaderQueue),
	}
	if ms, ok := transport.Int(h[broker.HeaderFirstSeen]); ok {
		env.FirstSeen = time.UnixMilli(ms)
	} else {
		env.FirstSeen = m.Timestamp
	}
	if n, ok := transport.Int(h[broker.HeaderAttempt]); ok && n >= 1 {
		env.Attempt = int(n)
	}
	if arr, ok := h[broker.HeaderRoute].([]any); ok {
		for _, s := range arr {
			if str, ok := s.(string); ok {
				env.Route = append(env.Route, str)
			}
		}
		if n, ok := transport.Int(h[broker.HeaderRoutePosition]); ok {
			env.RoutePosition = int(n)
		}
	}
	return env
}

func replayString(h transport.Table, k string) string {
	switch v := h[k].(type) {
	case string:
		return v
	case []byte:
		return string(v)
	}
	return ""
}
