package broker

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

// fuzzOffsetValue is the x-stream-offset value a fuzz input stands for: the
// string, the integer in one of several widths, or a value of some other
// type a caller might pass.
func fuzzOffsetValue(kind uint8, s string, n int64) any {
	switch kind % 10 {
	case 0:
		return s
	case 1:
		return n
	case 2:
		return int(n)
	case 3:
		return int32(n)
	case 4:
		return uint32(n)
	case 5:
		return float64(n)
	case 6:
		return []byte(s)
	case 7:
		return time.Unix(n, 0)
	case 8:
		return nil
	default:
		return []any{s, n}
	}
}

// fuzzOffsetAllowed is the contract's list (docs/wire.md, Streams) written
// out: "first", "last", "next", an offset of 0 or more, a timestamp; and
// the one form ConsumeArgs adds to it, RabbitMQ's interval ("7D": digits
// and a unit of Y, M, D, h, m or s).
func fuzzOffsetAllowed(v any) bool {
	switch o := v.(type) {
	case string:
		switch o {
		case "first", "last", "next":
			return true
		}
		digits := strings.TrimRight(o[:max(len(o)-1, 0)], "0123456789")
		return len(o) >= 2 && digits == "" && strings.Contains("YMDhms", o[len(o)-1:])
	case int64:
		return o >= 0
	case int:
		return o >= 0
	case time.Time:
		return true
	}
	return false
}

// FuzzStreamOffsetArg: ConsumeArgs takes an x-stream-offset exactly when
// it is one of the forms RabbitMQ takes (any other closes the whole
// connection), and refuses the rest with ErrInvalidOption; it never panics.
func FuzzStreamOffsetArg(f *testing.F) {
	for _, s := range []string{"first", "last", "next", "7D", "30m", "1Y", "0s", "", "First", "next ", " last",
		"-1", "1.5h", "10", "7d", "D", "1DD", "１D", "7D\n", "12345678901234567890123h"} {
		f.Add(uint8(0), s, int64(0))
	}
	for _, n := range []int64{0, 1, 4211, -1, math.MaxInt64, math.MinInt64, 1 << 32} {
		for kind := range uint8(10) {
			f.Add(kind, "first", n)
		}
	}
	f.Fuzz(func(t *testing.T, kind uint8, s string, n int64) {
		v := fuzzOffsetValue(kind, s, n)
		var c consumeConfig
		err := ConsumeArgs(Table{HeaderStreamOffset: v}, nil).applyConsume(&c)
		switch allowed := fuzzOffsetAllowed(v); {
		case allowed && err != nil:
			t.Fatalf("x-stream-offset %#v refused: %v", v, err)
		case !allowed && err == nil:
			t.Fatalf("x-stream-offset %#v (%T) accepted", v, v)
		case !allowed && !errors.Is(err, ErrInvalidOption):
			t.Fatalf("x-stream-offset %#v refused with %v, want ErrInvalidOption", v, err)
		case allowed && c.args[HeaderStreamOffset] == nil:
			t.Fatalf("x-stream-offset %#v accepted but not kept: %#v", v, c.args)
		}
	})
}
