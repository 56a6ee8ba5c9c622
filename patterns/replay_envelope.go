package patterns

import (
	"errors"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/broker/transport"
)

// replayEnvelope reads the envelope of a stored message for a replay
// filter. It is lenient where a consumer is strict: a replay moves messages
// it could not handle, and a malformed header reads as its zero value
// rather than stopping the pass. broker.EnvelopeOf stops at the first
// malformed header, so that header is set aside and the rest read again.
func replayEnvelope(m *transport.Message) broker.Envelope {
	env, _, err := broker.EnvelopeOf(m)
	var bad *broker.MalformedHeaderError
	if !errors.As(err, &bad) {
		return env
	}
	lenient := *m
	lenient.Headers = m.Headers.Clone()
	for errors.As(err, &bad) {
		if _, ok := lenient.Headers[bad.Header]; !ok {
			return env // nothing left to set aside: keep what was read
		}
		delete(lenient.Headers, bad.Header)
		env, _, err = broker.EnvelopeOf(&lenient)
	}
	return env
}
