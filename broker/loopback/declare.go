package loopback

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/acemq/acemq-flow/broker/transport"
)

// declareExchange declares e, or checks that an existing exchange of that
// name is equivalent: same kind, flags and alternate-exchange (the only
// argument RabbitMQ compares).
func (c *conn) declareExchange(e transport.Exchange) error {
	b := c.b
	if e.Name == "" {
		return defaultExchangeRefused()
	}
	if err := e.Args.Validate(); err != nil {
		return err
	}
	args := normalizeHeaders(e.Args)
	alternate, _ := args["alternate-exchange"].(string)
	if ex, ok := b.exchanges[e.Name]; ok {
		for _, d := range []struct {
			what           string
			current, asked any
		}{
			{"type", ex.kind, e.Kind},
			{"durable", ex.durable, e.Durable},
			{"auto_delete", ex.autoDelete, e.AutoDelete},
			{"internal", ex.internal, e.Internal},
			{"alternate-exchange", ex.args["alternate-exchange"], args["alternate-exchange"]},
		} {
			if !sameArg(d.current, d.asked) {
				return amqpError(transport.PreconditionFailed,
					"inequivalent arg '%s' for exchange '%s' in vhost '/': received '%v' but current is '%v'", d.what, e.Name, d.asked, d.current)
			}
		}
		return nil
	}
	if strings.HasPrefix(e.Name, "amq.") {
		return amqpError(transport.AccessRefused, "exchange name '%s' contains reserved prefix 'amq.*'", e.Name)
	}
	switch e.Kind {
	case transport.Direct, transport.Topic, transport.Fanout:
	case transport.Headers:
		return fmt.Errorf("exchange type headers: %w: the loopback does not implement headers routing", transport.ErrNotSupported)
	default:
		return amqpError(commandInvalid, "unknown exchange type '%s'", e.Kind)
	}
	b.exchanges[e.Name] = &exchange{
		name: e.Name, kind: e.Kind, durable: e.Durable, autoDelete: e.AutoDelete, internal: e.Internal,
		args: args, alternate: alternate,
	}
	return nil
}

// declareQueue declares q, or checks that an existing queue of that name is
// usable by c (405 otherwise) and equivalent (406 otherwise). An empty name
// gets a generated one, as from RabbitMQ.
func (c *conn) declareQueue(q transport.Queue) error {
	b := c.b
	if err := q.Args.Validate(); err != nil {
		return err
	}
	args := normalizeHeaders(q.Args)
	if existing, ok := b.queues[q.Name]; ok {
		if existing.exclusive != q.Exclusive || (existing.exclusive && existing.owner != c) {
			return locked(q.Name)
		}
		for _, d := range []struct {
			what           string
			current, asked bool
		}{{"durable", existing.durable, q.Durable}, {"auto_delete", existing.autoDelete, q.AutoDelete}} {
			if d.current != d.asked {
				return amqpError(transport.PreconditionFailed,
					"inequivalent arg '%s' for queue '%s' in vhost '/': received '%t' but current is '%t'", d.what, q.Name, d.asked, d.current)
			}
		}
		if key := inequivalentArg(existing.args, args); key != "" {
			return amqpError(transport.PreconditionFailed,
				"inequivalent arg '%s' for queue '%s' in vhost '/': received %s but current is %s", key, q.Name, describeArg(args, existing.args, key), describeArg(existing.args, args, key))
		}
		return nil
	}
	if strings.HasPrefix(q.Name, "amq.") {
		return amqpError(transport.AccessRefused, "queue name '%s' contains reserved prefix 'amq.*'", q.Name)
	}
	cfg, err := parseQueueArgs(args)
	if err != nil {
		return err
	}
	if cfg.quorum {
		for _, bad := range []struct {
			property string
			set      bool
		}{{"exclusive-owner", q.Exclusive}, {"non-durable", !q.Durable}, {"auto-delete", q.AutoDelete}} {
			if bad.set {
				return amqpError(transport.PreconditionFailed, "invalid property '%s' for queue '%s' in vhost '/'", bad.property, q.Name)
			}
		}
	}
	name := q.Name
	if name == "" {
		name = "amq.gen-loopback-" + b.next()
	}
	nq := &queue{name: name, durable: q.Durable, exclusive: q.Exclusive, autoDelete: q.AutoDelete, args: args, cfg: cfg}
	if q.Exclusive {
		nq.owner = c
		c.exclusive[nq] = struct{}{}
	}
	b.queues[name] = nq
	return nil
}

// describeArg words the value of args[key] as RabbitMQ does when it
// refuses a redeclaration, other being the arguments on the other side:
// "none" when args has none, the bare value when both have one, and "the
// value '20' of type 'long'" when only args has one. Conn.Declare reads
// the last form to declare a queue with the x-delivery-limit it has.
func describeArg(args, other transport.Table, key string) string {
	v, ok := args[key]
	if !ok {
		return "none"
	}
	if _, both := other[key]; both {
		return fmt.Sprintf("'%v'", v)
	}
	return fmt.Sprintf("the value '%v' of type '%s'", v, amqpType(v))
}

// amqpType is RabbitMQ's name for the AMQP field type amqp091-go sends v
// as.
func amqpType(v any) string {
	switch v.(type) {
	case bool:
		return "bool"
	case int8:
		return "byte"
	case uint8:
		return "unsignedbyte"
	case int16:
		return "short"
	case uint16:
		return "unsignedshort"
	case int32:
		return "signedint"
	case uint32:
		return "unsignedint"
	case int64, int:
		return "long"
	case float32:
		return "float"
	case float64:
		return "double"
	case string:
		return "longstr"
	case []byte:
		return "binary"
	case time.Time:
		return "timestamp"
	case transport.Table, map[string]any:
		return "table"
	case []any:
		return "array"
	default:
		return "void"
	}
}

// declareBinding binds a queue to an exchange; binding again with the same
// key and arguments does nothing.
func (c *conn) declareBinding(bd transport.Binding) error {
	if bd.Exchange == "" {
		return defaultExchangeRefused()
	}
	if err := bd.Args.Validate(); err != nil {
		return err
	}
	q, err := c.queue(bd.Queue)
	if err != nil {
		return err
	}
	ex, ok := c.b.exchanges[bd.Exchange]
	if !ok {
		return notFoundExchange(bd.Exchange)
	}
	args := normalizeHeaders(bd.Args)
	if slices.ContainsFunc(ex.bindings, func(x *binding) bool { return x.same(q, bd.Key, args) }) {
		return nil
	}
	ex.bindings = append(ex.bindings, &binding{queue: q, key: bd.Key, words: splitTopic(bd.Key), args: args})
	return nil
}

// queue finds a queue c may use: 404 when it does not exist, 405 when it is
// another connection's exclusive queue.
func (c *conn) queue(name string) (*queue, error) {
	q, ok := c.b.queues[name]
	if !ok {
		return nil, notFoundQueue(name)
	}
	if q.exclusive && q.owner != c {
		return nil, locked(name)
	}
	return q, nil
}
