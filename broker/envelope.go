package broker

import (
	"fmt"
	"strings"
	"time"

	"github.com/acemq/acemq-flow/broker/transport"
)

// Envelope is what the library knows about a message apart from its
// payload: the AMQP properties and the engine's x-acemq- headers, as typed
// fields. It is the same on every AceMQ library (docs/wire.md).
type Envelope struct {
	ID            string
	CorrelationID string
	CausationID   string
	Type          string
	ContentType   string
	// Timestamp is when this copy was published (one-second resolution).
	Timestamp time.Time
	// FirstSeen is when the message first entered; never reset, so giving
	// up on age measures from here.
	FirstSeen time.Time
	// Attempt is 1 on first delivery and grows by one per retry.
	Attempt int
	RunID   string
	// Route and RoutePosition are a declared pipeline's step names and the
	// index of the step this message is addressed to. Route is nil for a
	// message that is not on a pipeline.
	Route         []string
	RoutePosition int
	// Error says why a dead-lettered or parked copy was given up.
	Error string
	// SourceQueue is the queue a dead-lettered or parked copy came from.
	SourceQueue string
	// ReplyTo is the AMQP reply-to property (see patterns.ReplyAddress for
	// the header that request/reply also writes).
	ReplyTo string
	// Expiration is the per-message TTL property, as AMQP spells it.
	Expiration string
}

// MalformedHeaderError is returned when a delivery's engine headers cannot be read;
// such a delivery is parked.
type MalformedHeaderError struct {
	Header string
	Value  any
}

// Error names the header and what it held.
func (e *MalformedHeaderError) Error() string {
	return fmt.Sprintf("malformed header %s: %v (%T)", e.Header, e.Value, e.Value)
}

// encode writes e's engine fields into headers (which must be non-nil) and
// its properties into m.
func (e Envelope) encode(m *transport.Message, headers transport.Table) {
	m.MessageID = e.ID
	m.CorrelationID = e.CorrelationID
	m.Type = e.Type
	m.ContentType = e.ContentType
	m.ReplyTo = e.ReplyTo
	m.Timestamp = e.Timestamp
	m.Expiration = e.Expiration
	headers[HeaderFirstSeen] = e.FirstSeen.UnixMilli()
	headers[HeaderAttempt] = int64(max(e.Attempt, 1))
	setString(headers, HeaderCausationID, e.CausationID)
	setString(headers, HeaderRunID, e.RunID)
	setString(headers, HeaderError, e.Error)
	setString(headers, HeaderQueue, e.SourceQueue)
	if e.Route != nil {
		route := make([]any, len(e.Route))
		for i, s := range e.Route {
			route[i] = s
		}
		headers[HeaderRoute] = route
		headers[HeaderRoutePosition] = int64(e.RoutePosition)
	}
}

func setString(h transport.Table, k, v string) {
	if v != "" {
		h[k] = v
	} else {
		delete(h, k)
	}
}

// decodeEnvelope is readEnvelope for a delivery the consumer received at
// now. A delivery without x-acemq-first-seen (a foreign publisher's) first
// gets the value worked out for it written into its headers: every copy the
// library then moves of it (retry, in-progress put-back, dead-letter, park,
// a pattern's hop through Message.Raw) carries that value, so the next
// reader, in any language, sees the same one (docs/wire.md). Without it, a
// retry of a message with no timestamp property would be first seen anew
// on every delivery, and never grow old enough for a MaxAge policy.
func decodeEnvelope(m *transport.Message, now time.Time) (Envelope, transport.Table, error) {
	if _, ok := m.Headers[HeaderFirstSeen]; !ok {
		if m.Headers == nil {
			m.Headers = transport.Table{}
		}
		m.Headers[HeaderFirstSeen] = firstSeenOf(m, now).UnixMilli()
	}
	return readEnvelope(m, now)
}

// firstSeenOf is when a message without x-acemq-first-seen is taken to have
// first entered: at its timestamp property, or now when it has none or one
// beyond what epoch milliseconds hold (a foreign publisher's garbage, which
// would wrap round when written as x-acemq-first-seen).
func firstSeenOf(m *transport.Message, now time.Time) time.Time {
	if ts := m.Timestamp; !ts.IsZero() && time.UnixMilli(ts.UnixMilli()).Equal(ts.Truncate(time.Millisecond)) {
		return ts
	}
	return now
}

// readEnvelope reads the envelope of a message from any AceMQ library or
// from a plain AMQP client. Missing engine headers take their defaults
// (attempt 1, first seen = timestamp or now); present but unreadable ones
// are a *MalformedHeaderError.
func readEnvelope(m *transport.Message, now time.Time) (Envelope, transport.Table, error) {
	e := Envelope{
		ID:            m.MessageID,
		CorrelationID: m.CorrelationID,
		Type:          m.Type,
		ContentType:   m.ContentType,
		Timestamp:     m.Timestamp,
		ReplyTo:       m.ReplyTo,
		Expiration:    m.Expiration,
		Attempt:       1,
	}
	// Sized for the application headers alone: most messages carry none,
	// and a map sized for the engine's headers too costs a few hundred
	// bytes per delivery for nothing.
	n := 0
	for k := range m.Headers {
		if !strings.HasPrefix(k, ReservedPrefix) {
			n++
		}
	}
	app := make(transport.Table, n)
	for k, v := range m.Headers {
		if !strings.HasPrefix(k, ReservedPrefix) {
			app[k] = v
		}
	}
	h := m.Headers
	if v, ok := h[HeaderFirstSeen]; ok {
		ms, ok := transport.Int(v)
		if !ok {
			return e, app, &MalformedHeaderError{HeaderFirstSeen, v}
		}
		e.FirstSeen = time.UnixMilli(ms)
	} else {
		e.FirstSeen = firstSeenOf(m, now)
	}
	if v, ok := h[HeaderAttempt]; ok {
		n, ok := transport.Int(v)
		if !ok || n < 1 {
			return e, app, &MalformedHeaderError{HeaderAttempt, v}
		}
		e.Attempt = int(n)
	}
	var err error
	if e.CausationID, err = stringHeader(h, HeaderCausationID); err != nil {
		return e, app, err
	}
	if e.RunID, err = stringHeader(h, HeaderRunID); err != nil {
		return e, app, err
	}
	if e.Error, err = stringHeader(h, HeaderError); err != nil {
		return e, app, err
	}
	if e.SourceQueue, err = stringHeader(h, HeaderQueue); err != nil {
		return e, app, err
	}
	if v, ok := h[HeaderRoute]; ok {
		arr, ok := v.([]any)
		if !ok {
			return e, app, &MalformedHeaderError{HeaderRoute, v}
		}
		e.Route = make([]string, len(arr))
		for i, s := range arr {
			str, ok := s.(string)
			if !ok {
				return e, app, &MalformedHeaderError{HeaderRoute, v}
			}
			e.Route[i] = str
		}
		// The position (0 when absent) indexes the route: one outside it,
		// the route's length included, addresses no step, and neither does
		// an empty route. Both are malformed engine headers, so the
		// consumer parks the message, whichever way it is out of range.
		if len(e.Route) == 0 {
			return e, app, &MalformedHeaderError{HeaderRoute, v}
		}
		var p any = int64(0)
		if v, ok := h[HeaderRoutePosition]; ok {
			p = v
		}
		n, ok := transport.Int(p)
		if !ok || n < 0 || n >= int64(len(e.Route)) {
			return e, app, &MalformedHeaderError{HeaderRoutePosition, p}
		}
		e.RoutePosition = int(n)
	}
	return e, app, nil
}

func stringHeader(h transport.Table, k string) (string, error) {
	v, ok := h[k]
	if !ok || v == nil {
		return "", nil
	}
	switch s := v.(type) {
	case string:
		return s, nil
	case []byte:
		return string(s), nil
	default:
		return "", &MalformedHeaderError{k, v}
	}
}

// checkApplicationHeaders refuses application headers in the reserved
// namespace and values that are not AMQP field values.
func checkApplicationHeaders(h transport.Table) error {
	for k := range h {
		if strings.HasPrefix(strings.ToLower(k), ReservedPrefix) {
			return fmt.Errorf("%w: header %q is in the reserved %s namespace", ErrReservedHeader, k, ReservedPrefix)
		}
	}
	return h.Validate()
}

// EnvelopeOf reads the envelope and the application headers of a message
// the transport handed over (a dead letter fetched with Get, say), by the
// same rules a consumer uses. A malformed engine header is a
// *MalformedHeaderError.
func EnvelopeOf(m *transport.Message) (Envelope, Table, error) {
	return readEnvelope(m, time.Now())
}
