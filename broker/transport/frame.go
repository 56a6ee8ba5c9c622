package transport

import (
	"fmt"
	"strings"
	"time"
)

// DefaultFrameMax is RabbitMQ's default frame_max: the largest AMQP frame,
// in bytes, a connection carries unless both ends agree on another. It is
// the limit the loopback models.
const DefaultFrameMax = 131072

// HeaderAllowance is the room, in bytes, CheckPublishing keeps in a frame
// for the headers a broker adds to a message on its way out: x-delivery-count
// on a quorum queue's redelivery and basic.get, x-death and x-first-death-*
// on a dead-letter. amqp091-go refuses a frame larger than the connection's
// frame_max (RabbitMQ 3.10 itself takes one 8 bytes larger) and drops the
// connection, so a message that only just fitted when published could never
// be read back.
const HeaderAllowance = 4096

// Limits of amqp091-go (v1.16) when it reads a frame; beyond any of them it
// drops the whole connection, and the broker delivers the message again to
// the next reader, for ever.
const (
	// frameOverhead is what a frame adds around its payload: type, channel
	// and size before it, the frame-end octet after.
	frameOverhead = 8
	// maxShortString is the longest AMQP short string: a header or table
	// key, a property such as message-id, an exchange name, a routing key.
	maxShortString = 255
	// maxContainerElements is the most elements of an array, or entries of
	// a table, amqp091-go reads.
	maxContainerElements = 8192
	// maxContainerDepth is how deep a table or array may sit below the
	// headers table (depth 0) for amqp091-go to read it.
	maxContainerDepth = 32
	// headerFixed is a content header's class, weight, body size and
	// property flags; deliveryMode is the property every publish sets.
	headerFixed  = 2 + 2 + 8 + 2
	deliveryMode = 1
)

// MaxHeaderSize is the largest content header (a message's properties and
// headers, as encoded in its header frame's payload) CheckPublishing lets
// through on a connection whose frame_max is frameMax: the frame's payload
// less HeaderAllowance. 0 means no limit, as frame_max 0 does.
func MaxHeaderSize(frameMax int) int {
	if frameMax <= 0 {
		return 0
	}
	return frameMax - frameOverhead - HeaderAllowance
}

// CheckPublishing refuses, with an error matching ErrTooLarge and before
// anything is sent, a publish that AMQP or a reader could not carry: a
// content header larger than MaxHeaderSize(frameMax) (RabbitMQ closes the
// whole connection on a frame beyond frame_max, FRAME_ERROR); an exchange
// name, routing key, property or header key longer than 255 bytes (amqp091-go
// fails the write and drops the connection); and a header array or table of
// more than 8,192 elements, or nested more than 32 deep, which every
// amqp091-go reader drops its connection over. The headers must already be
// valid field values (Table.Validate); a Go int counts as the int64 it is
// sent as.
func CheckPublishing(p Publishing, frameMax int) error {
	for _, s := range []struct{ what, value string }{
		{"exchange name", p.Exchange}, {"routing key", p.RoutingKey},
	} {
		if len(s.value) > maxShortString {
			return fmt.Errorf("%w: %s of %d bytes: AMQP short strings hold at most %d", ErrTooLarge, s.what, len(s.value), maxShortString)
		}
	}
	size, err := headerSize(p.Message)
	if err != nil {
		return err
	}
	if limit := MaxHeaderSize(frameMax); limit > 0 && size > limit {
		return fmt.Errorf("%w: its properties and headers take %d bytes; a frame of frame_max %d carries %d once %d are kept for the headers the broker adds (x-delivery-count, x-death)",
			ErrTooLarge, size, frameMax, limit, HeaderAllowance)
	}
	return nil
}

// headerSize is the size of the content header frame payload that carries
// m, exactly as amqp091-go encodes it.
func headerSize(m Message) (int, error) {
	size := headerFixed + deliveryMode
	for _, p := range []struct{ what, value string }{
		{"content type", m.ContentType}, {"correlation id", m.CorrelationID}, {"reply-to", m.ReplyTo},
		{"expiration", m.Expiration}, {"message id", m.MessageID}, {"type", m.Type},
	} {
		if len(p.value) > maxShortString {
			return 0, fmt.Errorf("%w: %s of %d bytes: AMQP short strings hold at most %d", ErrTooLarge, p.what, len(p.value), maxShortString)
		}
		if p.value != "" {
			size += 1 + len(p.value)
		}
	}
	if !m.Timestamp.IsZero() {
		size += 8
	}
	if len(m.Headers) > 0 {
		n, err := tableSize(m.Headers, 0)
		if err != nil {
			return 0, err
		}
		size += n
	}
	return size, nil
}

// headerError is a header CheckPublishing refuses. Its path is filled in on
// the way back out of the nested tables and arrays, so that walking headers
// it accepts allocates nothing.
type headerError struct {
	// path leads from the headers table to the offending value: keys, and
	// "[i]" for array elements; empty for the headers table itself.
	path []string
	why  string
	err  error // ErrTooLarge or ErrInvalidHeader
}

func (e *headerError) Error() string {
	where := "the headers"
	if len(e.path) > 0 {
		var b strings.Builder
		for i, p := range e.path {
			if i > 0 && !strings.HasPrefix(p, "[") {
				b.WriteByte('/')
			}
			b.WriteString(p)
		}
		where = fmt.Sprintf("header %q", b.String())
	}
	return fmt.Sprintf("%v: %s: %s", e.err, where, e.why)
}

func (e *headerError) Unwrap() error { return e.err }

// within puts step in front of err's path when err is a *headerError.
func within(step string, err error) error {
	if he, ok := err.(*headerError); ok {
		he.path = append([]string{step}, he.path...)
	}
	return err
}

// tableSize is the encoded size of a field table at depth (the headers are
// at 0).
func tableSize(t Table, depth int) (int, error) {
	if len(t) > maxContainerElements {
		return 0, &headerError{err: ErrTooLarge, why: fmt.Sprintf(
			"a table of %d entries: amqp091-go readers refuse more than %d and drop their connection", len(t), maxContainerElements)}
	}
	size := 4
	for k, v := range t {
		if len(k) > maxShortString {
			return 0, &headerError{err: ErrTooLarge, why: fmt.Sprintf(
				"a header name of %d bytes: AMQP short strings hold at most %d", len(k), maxShortString)}
		}
		n, err := fieldSize(v, depth)
		if err != nil {
			return 0, within(k, err)
		}
		size += 1 + len(k) + n
	}
	return size, nil
}

// fieldSize is the encoded size of a field value in a container at depth,
// its type octet included.
func fieldSize(v any, depth int) (int, error) {
	switch x := v.(type) {
	case nil:
		return 1, nil
	case bool, int8, uint8:
		return 2, nil
	case int16, uint16:
		return 3, nil
	case int32, uint32, float32:
		return 5, nil
	case int, int64, float64, time.Time:
		return 9, nil
	case string:
		return 5 + len(x), nil
	case []byte:
		return 5 + len(x), nil
	}
	if depth+1 > maxContainerDepth {
		return 0, &headerError{err: ErrTooLarge, why: fmt.Sprintf(
			"tables or arrays nested %d deep: amqp091-go readers refuse more than %d and drop their connection", depth+1, maxContainerDepth)}
	}
	switch x := v.(type) {
	case Table:
		n, err := tableSize(x, depth+1)
		return 1 + n, err
	case map[string]any:
		n, err := tableSize(x, depth+1)
		return 1 + n, err
	case []any:
		if len(x) > maxContainerElements {
			return 0, &headerError{err: ErrTooLarge, why: fmt.Sprintf(
				"an array of %d elements: amqp091-go readers refuse more than %d and drop their connection", len(x), maxContainerElements)}
		}
		size := 1 + 4
		for i, e := range x {
			n, err := fieldSize(e, depth+1)
			if err != nil {
				return 0, within(fmt.Sprintf("[%d]", i), err)
			}
			size += n
		}
		return size, nil
	default:
		return 0, &headerError{err: ErrInvalidHeader, why: fmt.Sprintf("type %T", v)}
	}
}
