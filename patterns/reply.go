package patterns

import (
	"errors"
	"fmt"

	"github.com/acemq/acemq-flow/broker"
)

// ErrRequestTimedOut is what Requester.Call returns when no reply arrived
// in time. It says only that an answer did not arrive, not whether the work
// was done: a request that changes anything wants an idempotent responder.
var ErrRequestTimedOut = errors.New("request timed out")

// ErrNoReplyAddress is why a responder dead-letters a request that names no
// reply address: retrying cannot make a reply queue appear.
var ErrNoReplyAddress = errors.New("request has no reply address")

// ResponderFailed is the error Requester.Call returns when the responder's
// function failed: the reply carried acemq-error with its message.
type ResponderFailed struct {
	// To is where the request was sent.
	To string
	// Message is the responder's error text (acemq-error).
	Message string
}

// Error names where the request went and what the responder said.
func (e *ResponderFailed) Error() string {
	return fmt.Sprintf("responder at %q failed: %s", e.To, e.Message)
}

// ReplyAddress is where a reply to m goes: the acemq-reply-to header, or,
// when that is absent, AMQP's reply-to property, or "" for neither. The
// header comes first because it is the half that survives a service that
// republishes a message keeping its headers and dropping its properties.
func ReplyAddress(m *broker.Message) string {
	switch v := m.Headers[broker.HeaderReplyTo].(type) {
	case string:
		if v != "" {
			return v
		}
	case []byte:
		if len(v) > 0 {
			return string(v)
		}
	}
	return m.ReplyTo
}

// replyError is the acemq-error a reply carries, and whether it carries one.
func replyError(m *broker.Message) (string, bool) {
	switch v := m.Headers[broker.HeaderReplyError].(type) {
	case string:
		return v, true
	case []byte:
		return string(v), true
	}
	return "", false
}

// uncheckedCodec hides a codec's broker.Checker. The reply consumer would
// otherwise park a reply whose body fails the check before the requester
// saw it, in a .parked queue a reply queue does not have: a failed reply
// (acemq-error, an empty body, a JSON content type) would be lost and its
// caller time out. Unchecked, every reply reaches its caller, who reads
// acemq-error first and decodes, with the codec's own error, only a reply
// that succeeded.
type uncheckedCodec struct{ broker.Codec }

// replyCodecs are the codecs a requester's reply consumer decodes with:
// every one the connection knows and the requester's own (which wins for
// its content type), none of them checking bodies.
func replyCodecs(cfg broker.Config, own broker.Codec) []broker.Codec {
	all := append([]broker.Codec{broker.JSON, broker.Raw, cfg.Codec}, cfg.Codecs...)
	all = append(all, own)
	out := make([]broker.Codec, 0, len(all))
	for _, c := range all {
		if c != nil {
			out = append(out, uncheckedCodec{c})
		}
	}
	return out
}
