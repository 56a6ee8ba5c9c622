package broker

import (
	"errors"
	"strings"
	"unicode/utf8"

	"github.com/acemq/acemq-flow/broker/transport"
)

// errNotFast is the fast envelope decoder declining its input; the
// reference decoder (json.Unmarshal into typed, then typed.value) then
// reads it, or says why it cannot.
var errNotFast = errors.New("not in the fast path's shape")

// fastTypedValue reads a typed value exactly as typed.value would, in one
// pass over s without reflection: a relay decodes one envelope per record,
// and the reference decoder, which parses each nested level again, was most
// of the cost of claiming a batch (BenchmarkOutboxEnvelopeDecode). It takes
// only the shape encodeEnvelope writes — valid UTF-8, {"t":...} with "v"
// after "t", strings without escapes or control characters (those with
// escapes are handed to encoding/json) — and declines (errNotFast or a
// conversion error) anything else, for the reference decoder to read. It
// never accepts what the reference decoder would refuse.
func fastTypedValue(s string) (any, error) {
	if !utf8.ValidString(s) {
		return nil, errNotFast
	}
	d := fastDecoder{s: s}
	v, err := d.node()
	if err != nil {
		return nil, err
	}
	if d.i != len(d.s) {
		return nil, errNotFast
	}
	return v, nil
}

type fastDecoder struct {
	s string
	i int
}

// eat consumes c or declines.
func (d *fastDecoder) eat(c byte) error {
	if d.i < len(d.s) && d.s[d.i] == c {
		d.i++
		return nil
	}
	return errNotFast
}

func (d *fastDecoder) peek() byte {
	if d.i < len(d.s) {
		return d.s[d.i]
	}
	return 0
}

// str reads a JSON string without escapes or control characters.
func (d *fastDecoder) str() (string, error) {
	if err := d.eat('"'); err != nil {
		return "", err
	}
	start := d.i
	for d.i < len(d.s) {
		switch c := d.s[d.i]; {
		case c == '"':
			d.i++
			return d.s[start : d.i-1], nil
		case c == '\\' || c < 0x20:
			return "", errNotFast
		}
		d.i++
	}
	return "", errNotFast
}

// node reads {"t":tag} or {"t":tag,"v":value}.
func (d *fastDecoder) node() (any, error) {
	if err := d.eat('{'); err != nil {
		return nil, err
	}
	if !strings.HasPrefix(d.s[d.i:], `"t":`) {
		return nil, errNotFast
	}
	d.i += len(`"t":`)
	tag, err := d.str()
	if err != nil {
		return nil, err
	}
	if d.peek() == '}' {
		d.i++
		if tag != "null" {
			return nil, errNotFast
		}
		return nil, nil
	}
	if !strings.HasPrefix(d.s[d.i:], `,"v":`) {
		return nil, errNotFast
	}
	d.i += len(`,"v":`)
	var v any
	switch {
	case tag == "bool":
		switch {
		case strings.HasPrefix(d.s[d.i:], "true"):
			d.i += len("true")
			v = true
		case strings.HasPrefix(d.s[d.i:], "false"):
			d.i += len("false")
			v = false
		default:
			return nil, errNotFast
		}
	case tag == "table":
		v, err = d.table()
	case tag == "array":
		v, err = d.array()
	case scalarTag(tag):
		var s string
		if s, err = d.str(); err == nil {
			v, err = scalarValue(tag, s)
		}
	default:
		return nil, errNotFast
	}
	if err != nil {
		return nil, err
	}
	if err := d.eat('}'); err != nil {
		return nil, err
	}
	return v, nil
}

func (d *fastDecoder) table() (transport.Table, error) {
	if err := d.eat('{'); err != nil {
		return nil, err
	}
	t := transport.Table{}
	if d.peek() == '}' {
		d.i++
		return t, nil
	}
	for {
		k, err := d.str()
		if err != nil {
			return nil, err
		}
		if _, dup := t[k]; dup {
			return nil, errNotFast
		}
		if err := d.eat(':'); err != nil {
			return nil, err
		}
		if t[k], err = d.node(); err != nil {
			return nil, err
		}
		switch d.peek() {
		case ',':
			d.i++
		case '}':
			d.i++
			return t, nil
		default:
			return nil, errNotFast
		}
	}
}

func (d *fastDecoder) array() ([]any, error) {
	if err := d.eat('['); err != nil {
		return nil, err
	}
	out := []any{}
	if d.peek() == ']' {
		d.i++
		return out, nil
	}
	for {
		v, err := d.node()
		if err != nil {
			return nil, err
		}
		out = append(out, v)
		switch d.peek() {
		case ',':
			d.i++
		case ']':
			d.i++
			return out, nil
		default:
			return nil, errNotFast
		}
	}
}
