package broker

import (
	"encoding/json"
	"fmt"
)

// Codec turns payloads into bytes and back. ContentType is written on every
// message it encodes and is how a consumer picks the codec to decode with.
type Codec interface {
	ContentType() string
	Encode(v any) ([]byte, error)
	Decode(data []byte, v any) error
}

// Checker is implemented by codecs that can tell, without a target type,
// whether bytes are theirs to decode. A consumer parks a delivery that fails
// the check rather than handing a handler something it can never read.
type Checker interface {
	Check(data []byte) error
}

// Content types of the built-in codecs.
const (
	ContentTypeJSON  = "application/json"
	ContentTypeBytes = "application/octet-stream"
)

// JSON is the default codec: encoding/json, "application/json".
var JSON Codec = jsonCodec{}

// Raw passes bytes through untouched, "application/octet-stream". It
// encodes []byte, string and json.RawMessage and decodes into *[]byte or
// *string; anything else is refused.
var Raw Codec = rawCodec{}

type jsonCodec struct{}

func (jsonCodec) ContentType() string { return ContentTypeJSON }

func (jsonCodec) Encode(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode json: %w", err)
	}
	return b, nil
}

func (jsonCodec) Decode(data []byte, v any) error {
	if err := json.Unmarshal(data, v); err != nil {
		return &DecodeError{ContentType: ContentTypeJSON, Err: err}
	}
	return nil
}

func (jsonCodec) Check(data []byte) error {
	if !json.Valid(data) {
		return &DecodeError{ContentType: ContentTypeJSON, Err: fmt.Errorf("body is not valid JSON (%d bytes)", len(data))}
	}
	return nil
}

type rawCodec struct{}

func (rawCodec) ContentType() string { return ContentTypeBytes }

func (rawCodec) Encode(v any) ([]byte, error) {
	switch b := v.(type) {
	case []byte:
		return b, nil
	case string:
		return []byte(b), nil
	case json.RawMessage:
		return b, nil
	default:
		return nil, fmt.Errorf("%w: the raw codec encodes []byte or string, not %T", ErrInvalidPayload, v)
	}
}

func (rawCodec) Decode(data []byte, v any) error {
	switch p := v.(type) {
	case *[]byte:
		*p = append([]byte(nil), data...)
	case *string:
		*p = string(data)
	default:
		return &DecodeError{ContentType: ContentTypeBytes, Err: fmt.Errorf("the raw codec decodes into *[]byte or *string, not %T", v)}
	}
	return nil
}

// codecs maps content types to codecs; the empty content type reads as raw
// bytes, which is what a plain AMQP client without one sent.
type codecs map[string]Codec

func newCodecs(list ...Codec) codecs {
	c := codecs{"": Raw}
	for _, k := range list {
		c[k.ContentType()] = k
	}
	return c
}

func (c codecs) with(k Codec) codecs {
	out := make(codecs, len(c)+1)
	for t, v := range c {
		out[t] = v
	}
	out[k.ContentType()] = k
	return out
}
