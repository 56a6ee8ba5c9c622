package transport

import (
	"fmt"
	"strconv"
	"time"
)

// MaxTTL is the longest time to live ParseExpiration reads (100 years),
// which keeps TTL arithmetic from overflowing a time.Duration.
const MaxTTL = 100 * 365 * 24 * time.Hour

// ParseExpiration reads a Message.Expiration: a per-message TTL in
// milliseconds as a decimal integer. ok is false for "" (no TTL). It
// refuses anything else, and a TTL over 100 years, with
// ErrInvalidExpiration.
func ParseExpiration(s string) (ttl time.Duration, ok bool, err error) {
	if s == "" {
		return 0, false, nil
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false, fmt.Errorf("%w: %q", ErrInvalidExpiration, s)
		}
	}
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil || ms > int64(MaxTTL/time.Millisecond) {
		return 0, false, fmt.Errorf("%w: %q is out of range", ErrInvalidExpiration, s)
	}
	return time.Duration(ms) * time.Millisecond, true, nil
}
