package persistence

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"unicode/utf8"

	"github.com/acemq/acemq-flow/broker"
)

// Body encodings of the outbox's body_encoding column.
const (
	bodyUTF8   = "utf8"
	bodyBase64 = "base64"
)

// encodeBody stores a body as text when PostgreSQL's text type can hold it
// byte for byte, and base64 otherwise: text refuses invalid UTF-8 and the
// NUL byte, and losing the message to a driver error is the worse trade.
func encodeBody(b []byte) (string, string) {
	if utf8.Valid(b) && bytes.IndexByte(b, 0) < 0 {
		return string(b), bodyUTF8
	}
	return base64.StdEncoding.EncodeToString(b), bodyBase64
}

func decodeBody(s, encoding string) ([]byte, error) {
	switch encoding {
	case bodyUTF8:
		return []byte(s), nil
	case bodyBase64:
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, fmt.Errorf("%w: body: %w", broker.ErrUnreadableEnvelope, err)
		}
		return b, nil
	default:
		return nil, fmt.Errorf("%w: body encoding %q", broker.ErrUnreadableEnvelope, encoding)
	}
}
