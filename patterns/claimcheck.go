package patterns

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/acemq/acemq-flow/broker"
)

// DefaultClaimCheckThreshold is the body size, in bytes, from which a
// ClaimCheckCodec offloads a payload to its store (docs/wire.md: 64 KiB,
// the same number every AceMQ library uses).
const DefaultClaimCheckThreshold = 65536

// DefaultClaimCheckTimeout bounds each store call a ClaimCheckCodec makes.
const DefaultClaimCheckTimeout = 30 * time.Second

// The claim-check frame (docs/wire.md): three bytes, the third saying
// whether the rest is the delegate's bytes or a store key.
const (
	claimCheckMagic   byte = 0xAC
	claimCheckVersion byte = 0x01
	claimCheckInline  byte = 0x00
	claimCheckClaim   byte = 0x01
)

var claimCheckPrefix = []byte{claimCheckMagic, claimCheckVersion}

// ClaimCheckStore holds payloads a ClaimCheckCodec offloaded. Put stores
// content under a key of the store's choosing; Get returns false (and no
// error) for a key the store does not hold, which is retention having
// expired rather than a failure; Delete removes a key and is not an error
// for one already gone. Nothing calls Delete for you: when a payload may go
// is a retention decision.
//
// A key read from a message is untrusted input: a store must refuse, with a
// *broker.FatalError, a key that is not a key by the contract (1-200 bytes
// of [A-Za-z0-9._-], not starting with a dot), whichever store issued it.
type ClaimCheckStore interface {
	Put(ctx context.Context, content []byte) (string, error)
	Get(ctx context.Context, key string) ([]byte, bool, error)
	Delete(ctx context.Context, key string) error
}

// ClaimCheckCodec wraps a codec so that payloads of the threshold size or
// more travel as a key to a ClaimCheckStore instead of through the broker.
// Its content type is the delegate's: a claim-checked message is still the
// same document, kept somewhere else. It implements broker.Codec and
// broker.Checker and is safe for concurrent use.
//
// The codec interface has no context, so each store call is bounded by the
// codec's own timeout (ClaimCheckTimeout) rather than by the caller's
// deadline.
type ClaimCheckCodec struct {
	delegate  broker.Codec
	store     ClaimCheckStore
	threshold int
	timeout   time.Duration
}

var (
	_ broker.Codec   = (*ClaimCheckCodec)(nil)
	_ broker.Checker = (*ClaimCheckCodec)(nil)
)

// ClaimCheckOption configures NewClaimCheckCodec.
type ClaimCheckOption func(*ClaimCheckCodec) error

// ClaimCheckThreshold sets the size from which a payload is offloaded
// (default DefaultClaimCheckThreshold); 0 offloads everything. A negative
// size is refused.
func ClaimCheckThreshold(bytes int) ClaimCheckOption {
	return func(c *ClaimCheckCodec) error {
		if bytes < 0 {
			return fmt.Errorf("%w: claim-check threshold %d, want 0 or more", broker.ErrInvalidOption, bytes)
		}
		c.threshold = bytes
		return nil
	}
}

// ClaimCheckTimeout bounds each store call (default
// DefaultClaimCheckTimeout). A duration that is not positive is refused.
func ClaimCheckTimeout(d time.Duration) ClaimCheckOption {
	return func(c *ClaimCheckCodec) error {
		if d <= 0 {
			return fmt.Errorf("%w: claim-check timeout %s, want a positive duration", broker.ErrInvalidOption, d)
		}
		c.timeout = d
		return nil
	}
}

// NewClaimCheckCodec wraps delegate with store. It refuses a nil delegate or
// store and invalid options (broker.ErrInvalidOption).
func NewClaimCheckCodec(delegate broker.Codec, store ClaimCheckStore, opts ...ClaimCheckOption) (*ClaimCheckCodec, error) {
	if delegate == nil || store == nil {
		return nil, fmt.Errorf("%w: claim check needs a delegate codec and a store", broker.ErrInvalidOption)
	}
	c := &ClaimCheckCodec{delegate: delegate, store: store, threshold: DefaultClaimCheckThreshold, timeout: DefaultClaimCheckTimeout}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// ContentType is the delegate's content type, unchanged.
func (c *ClaimCheckCodec) ContentType() string { return c.delegate.ContentType() }

// Encode encodes v with the delegate and frames it: inline below the
// threshold, otherwise stored and replaced by its key. A store failure is
// returned wrapped, and nothing is published.
func (c *ClaimCheckCodec) Encode(v any) ([]byte, error) {
	body, err := c.delegate.Encode(v)
	if err != nil {
		return nil, err
	}
	if len(body) < c.threshold {
		return append([]byte{claimCheckMagic, claimCheckVersion, claimCheckInline}, body...), nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	key, err := c.store.Put(ctx, body)
	if err != nil {
		return nil, fmt.Errorf("claim check: store %d bytes: %w", len(body), err)
	}
	return append([]byte{claimCheckMagic, claimCheckVersion, claimCheckClaim}, key...), nil
}

// Decode reads a framed body (fetching a claim check from the store) or an
// unframed one, as the delegate would, into v. A key the store no longer
// holds is a *broker.DecodeError saying its retention expired; a key the
// store refuses to look up is the store's *broker.FatalError; any other
// store failure is returned wrapped, for the handler to retry.
func (c *ClaimCheckCodec) Decode(data []byte, v any) error {
	body, err := c.resolve(data)
	if err != nil {
		return err
	}
	return c.delegate.Decode(body, v)
}

// Check tells, without fetching anything, whether data can be read: an
// inline or unframed body must pass the delegate's own check (when it has
// one), a claim check must carry a non-empty UTF-8 key, and an unknown
// frame marker is refused (a *broker.DecodeError).
func (c *ClaimCheckCodec) Check(data []byte) error {
	payload, marker, framed := claimCheckFrame(data)
	switch {
	case framed && marker == claimCheckClaim:
		if len(payload) == 0 || !utf8.Valid(payload) {
			return c.decodeError(errors.New("claim check with an empty or non-UTF-8 key"))
		}
		return nil
	case framed && marker != claimCheckInline:
		return c.decodeError(fmt.Errorf("unknown claim-check marker 0x%02x", marker))
	}
	if ch, ok := c.delegate.(broker.Checker); ok {
		return ch.Check(payload)
	}
	return nil
}

// resolve returns the delegate's bytes carried or referred to by data.
func (c *ClaimCheckCodec) resolve(data []byte) ([]byte, error) {
	payload, marker, framed := claimCheckFrame(data)
	if !framed || marker == claimCheckInline {
		return payload, nil
	}
	if marker != claimCheckClaim {
		return nil, c.decodeError(fmt.Errorf("unknown claim-check marker 0x%02x", marker))
	}
	key := string(payload)
	if key == "" {
		return nil, c.decodeError(errors.New("claim check with an empty key"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	body, ok, err := c.store.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("claim check %q: %w", key, err)
	}
	if !ok {
		return nil, c.decodeError(fmt.Errorf("claim check %q is not in the store: its retention expired, or it was checked into another store", key))
	}
	return body, nil
}

func (c *ClaimCheckCodec) decodeError(err error) error {
	return &broker.DecodeError{ContentType: c.delegate.ContentType(), Err: err}
}

// ClaimCheckKeyOf returns the store key a claim-checked body refers to, and
// false for an inline or unframed body: how an operator looking at a
// dead-letter queue learns which stored object a message needs without
// fetching it.
func ClaimCheckKeyOf(body []byte) (string, bool) {
	payload, marker, framed := claimCheckFrame(body)
	if !framed || marker != claimCheckClaim {
		return "", false
	}
	return string(payload), true
}

// claimCheckFrame splits data into what follows the frame and its marker,
// or returns data whole and framed=false when it carries no frame.
func claimCheckFrame(data []byte) (payload []byte, marker byte, framed bool) {
	if len(data) < 3 || !bytes.HasPrefix(data, claimCheckPrefix) {
		return data, 0, false
	}
	return data[3:], data[2], true
}
