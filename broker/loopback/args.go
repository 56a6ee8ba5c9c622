package loopback

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/acemq/acemq-flow/broker/transport"
)

// Values of x-overflow.
const (
	overflowDropHead         = "drop-head"
	overflowRejectPublish    = "reject-publish"
	overflowRejectPublishDLX = "reject-publish-dlx"
)

// queueConfig is what a queue's arguments mean to the loopback; -1 is
// "no limit" for the numbers.
type queueConfig struct {
	quorum        bool
	ttl           time.Duration
	hasDLX        bool
	dlx           string
	hasDLRK       bool
	dlrk          string
	maxLength     int64
	maxBytes      int64
	overflow      string
	deliveryLimit int64
	singleActive  bool
}

// equivalenceArgs are the arguments RabbitMQ 3.10 compares when a queue is
// declared again; any others may differ.
var equivalenceArgs = []string{
	"x-expires", "x-message-ttl", "x-dead-letter-exchange", "x-dead-letter-routing-key",
	"x-max-length", "x-max-length-bytes", "x-max-in-memory-length", "x-max-in-memory-bytes",
	"x-max-priority", "x-overflow", "x-queue-mode", "x-queue-version", "x-single-active-consumer",
	"x-queue-type", "x-quorum-initial-group-size", "x-delivery-limit", "x-dead-letter-strategy",
	"x-queue-master-locator", "x-initial-cluster-size", "x-max-age", "x-stream-max-segment-size-bytes",
}

// parseQueueArgs reads the arguments of a new queue. It refuses what
// RabbitMQ refuses (406) and what the loopback does not implement
// (transport.ErrNotSupported).
func parseQueueArgs(args transport.Table) (queueConfig, error) {
	cfg := queueConfig{ttl: -1, maxLength: -1, maxBytes: -1, deliveryLimit: -1, overflow: overflowDropHead}
	invalid := func(key string, why string, a ...any) error {
		return amqpError(transport.PreconditionFailed, "invalid arg '%s': %s", key, fmt.Sprintf(why, a...))
	}
	for key, v := range args {
		switch key {
		case "x-queue-type":
			switch v {
			case "classic":
			case "quorum":
				cfg.quorum = true
			case "stream":
				return cfg, fmt.Errorf("x-queue-type stream: %w: the loopback does not implement streams; use a real broker", transport.ErrNotSupported)
			default:
				return cfg, invalid(key, "unsupported queue type %v", v)
			}
		case "x-expires", "x-max-priority":
			return cfg, fmt.Errorf("argument %s: %w: the loopback does not implement it; use a real broker", key, transport.ErrNotSupported)
		case "x-message-ttl", "x-max-length", "x-max-length-bytes", "x-delivery-limit":
			n, ok := transport.Int(v)
			if !ok {
				return cfg, invalid(key, "expected integer, got %T", v)
			}
			if n < 0 {
				return cfg, invalid(key, "value_negative %d", n)
			}
			switch key {
			case "x-message-ttl":
				cfg.ttl = transport.MaxTTL
				if n < int64(transport.MaxTTL/time.Millisecond) {
					cfg.ttl = time.Duration(n) * time.Millisecond
				}
			case "x-max-length":
				cfg.maxLength = n
			case "x-max-length-bytes":
				cfg.maxBytes = n
			default:
				cfg.deliveryLimit = n
			}
		case "x-dead-letter-exchange", "x-dead-letter-routing-key":
			s, ok := v.(string)
			if !ok {
				return cfg, invalid(key, "expected string, got %T", v)
			}
			if key == "x-dead-letter-exchange" {
				cfg.hasDLX, cfg.dlx = true, s
			} else {
				cfg.hasDLRK, cfg.dlrk = true, s
			}
		case "x-overflow":
			switch v {
			case overflowDropHead, overflowRejectPublish, overflowRejectPublishDLX:
				cfg.overflow = v.(string)
			default:
				return cfg, invalid(key, "invalid_overflow %v", v)
			}
		case "x-single-active-consumer":
			b, ok := v.(bool)
			if !ok {
				return cfg, invalid(key, "expected bool, got %T", v)
			}
			cfg.singleActive = b
		}
	}
	if cfg.hasDLRK && !cfg.hasDLX {
		return cfg, invalid("x-dead-letter-routing-key", "routing_key_but_no_dlx_defined")
	}
	return cfg, nil
}

// inequivalentArg names the first argument RabbitMQ would find different
// between an existing queue's arguments and a redeclaration's, or "".
func inequivalentArg(current, received transport.Table) string {
	for _, key := range equivalenceArgs {
		c, inC := current[key]
		r, inR := received[key]
		if key == "x-queue-type" {
			// A queue declared without a type is classic.
			if !inC {
				c, inC = "classic", true
			}
			if !inR {
				r, inR = "classic", true
			}
		}
		if inC != inR || !sameArg(c, r) {
			return key
		}
	}
	return ""
}

// sameArg compares argument values; integers of different widths with the
// same value are the same, as RabbitMQ sees them.
func sameArg(a, b any) bool {
	x, okA := transport.Int(a)
	y, okB := transport.Int(b)
	if okA && okB {
		return x == y
	}
	return reflect.DeepEqual(a, b)
}

// refuseStreamArgs refuses the basic.consume arguments that only mean
// something to a stream (x-stream-offset and the other x-stream-*): the
// loopback has no streams, and ignoring them would read an ordinary queue
// as if it were one.
func refuseStreamArgs(args transport.Table) error {
	for _, key := range slices.Sorted(maps.Keys(args)) {
		if strings.HasPrefix(key, "x-stream-") {
			return fmt.Errorf("consume argument %s: %w: the loopback does not implement streams; use a real broker", key, transport.ErrNotSupported)
		}
	}
	return nil
}
