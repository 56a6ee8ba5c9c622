package loopback

import (
	"reflect"
	"slices"
	"strings"

	"github.com/acemq/acemq-flow/broker/transport"
)

// exchange is a declared exchange and its bindings.
type exchange struct {
	name                          string
	kind                          string
	durable, autoDelete, internal bool
	args                          transport.Table
	// alternate is the alternate-exchange argument: where messages nothing
	// is bound to receive go instead ("" for none).
	alternate string
	// system marks the exchanges the broker pre-declares, which cannot be
	// deleted.
	system   bool
	bindings []*binding
}

// binding routes from an exchange to a queue.
type binding struct {
	queue *queue
	key   string
	// words is key split for topic matching.
	words []string
	args  transport.Table
}

func (b *binding) same(q *queue, key string, args transport.Table) bool {
	return b.queue == q && b.key == key && reflect.DeepEqual(b.args, args)
}

// route returns the queues a message published to ex with key reaches,
// each once, following alternate exchanges when nothing is bound.
func (b *Broker) route(ex *exchange, key string) []*queue {
	var out []*queue
	seen := map[*exchange]bool{}
	for ex != nil && !seen[ex] {
		seen[ex] = true
		out = ex.match(b, key)
		if len(out) > 0 || ex.alternate == "" {
			break
		}
		ex = b.exchanges[ex.alternate]
	}
	return out
}

func (ex *exchange) match(b *Broker, key string) []*queue {
	if ex.name == "" {
		if q, ok := b.queues[key]; ok {
			return []*queue{q}
		}
		return nil
	}
	var out []*queue
	var words []string
	if ex.kind == transport.Topic {
		words = splitTopic(key)
	}
	for _, bd := range ex.bindings {
		var hit bool
		switch ex.kind {
		case transport.Fanout:
			hit = true
		case transport.Topic:
			hit = topicMatch(bd.words, words)
		default:
			hit = bd.key == key
		}
		if hit && !slices.Contains(out, bd.queue) {
			out = append(out, bd.queue)
		}
	}
	return out
}

// splitTopic splits a routing key or binding pattern into its words; the
// empty key has none.
func splitTopic(key string) []string {
	if key == "" {
		return nil
	}
	return strings.Split(key, ".")
}

// topicMatch matches words against a pattern where "*" is exactly one word
// and "#" zero or more.
func topicMatch(pattern, words []string) bool {
	for len(pattern) > 0 {
		switch p := pattern[0]; p {
		case "#":
			rest := pattern[1:]
			for i := 0; i <= len(words); i++ {
				if topicMatch(rest, words[i:]) {
					return true
				}
			}
			return false
		default:
			if len(words) == 0 || (p != "*" && p != words[0]) {
				return false
			}
			pattern, words = pattern[1:], words[1:]
		}
	}
	return len(words) == 0
}

// unbind removes bd from ex and deletes ex when it is auto-delete and that
// was its last binding, as RabbitMQ does.
func (b *Broker) unbind(ex *exchange, bd *binding) {
	ex.bindings = slices.DeleteFunc(ex.bindings, func(x *binding) bool { return x == bd })
	if ex.autoDelete && len(ex.bindings) == 0 && b.exchanges[ex.name] == ex {
		delete(b.exchanges, ex.name)
	}
}
