package transport

import (
	"fmt"
	"time"
)

// Validate checks that every value in t is an AMQP field value (see the
// package doc), naming the first offending key.
func (t Table) Validate() error {
	for k, v := range t {
		if err := validValue(v); err != nil {
			return fmt.Errorf("%w: %q: %v", ErrInvalidHeader, k, err)
		}
	}
	return nil
}

func validValue(v any) error {
	switch x := v.(type) {
	case nil, bool, int8, uint8, int16, uint16, int32, uint32, int64, int, float32, float64,
		string, []byte, time.Time:
		return nil
	case Table:
		return x.Validate()
	case map[string]any:
		return Table(x).Validate()
	case []any:
		for i, e := range x {
			if err := validValue(e); err != nil {
				return fmt.Errorf("element %d: %w", i, err)
			}
		}
		return nil
	default:
		return fmt.Errorf("type %T", v)
	}
}

// Clone returns a deep copy of t, so a message handed on cannot be changed
// under its sender.
func (t Table) Clone() Table {
	if t == nil {
		return nil
	}
	out := make(Table, len(t))
	for k, v := range t {
		out[k] = cloneValue(v)
	}
	return out
}

func cloneValue(v any) any {
	switch x := v.(type) {
	case Table:
		return x.Clone()
	case map[string]any:
		return Table(x).Clone()
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = cloneValue(e)
		}
		return out
	case []byte:
		return append([]byte(nil), x...)
	default:
		return v
	}
}

// Int reads an integer header value of any AMQP integer width (other
// libraries write int32, int16 or int8 where this one writes int64).
func Int(v any) (int64, bool) {
	switch x := v.(type) {
	case int8:
		return int64(x), true
	case uint8:
		return int64(x), true
	case int16:
		return int64(x), true
	case uint16:
		return int64(x), true
	case int32:
		return int64(x), true
	case uint32:
		return int64(x), true
	case int64:
		return x, true
	case int:
		return int64(x), true
	default:
		return 0, false
	}
}
