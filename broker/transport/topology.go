package transport

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"
)

// Exchange kinds.
const (
	Direct  = "direct"
	Topic   = "topic"
	Fanout  = "fanout"
	Headers = "headers"
)

// Exchange describes an exchange declaration.
type Exchange struct {
	Name       string
	Kind       string
	Durable    bool
	AutoDelete bool
	Internal   bool
	Args       Table
}

// Queue describes a queue declaration.
type Queue struct {
	Name       string
	Durable    bool
	Exclusive  bool
	AutoDelete bool
	Args       Table
}

// Binding binds a queue to an exchange with a routing key (a pattern for a
// topic exchange, ignored by a fanout).
type Binding struct {
	Queue    string
	Exchange string
	Key      string
	Args     Table
}

// Topology is a set of exchanges, queues and bindings that can be declared,
// printed and compared as one value.
type Topology struct {
	Exchanges []Exchange
	Queues    []Queue
	Bindings  []Binding
}

// Merge returns t with everything in others appended, dropping exact
// duplicates. A later declaration of the same name with different
// properties is kept, so that declaring the result fails loudly rather than
// one of the two silently winning.
func (t Topology) Merge(others ...Topology) Topology {
	out := Topology{
		Exchanges: slices.Clone(t.Exchanges),
		Queues:    slices.Clone(t.Queues),
		Bindings:  slices.Clone(t.Bindings),
	}
	for _, o := range others {
		for _, e := range o.Exchanges {
			if !slices.ContainsFunc(out.Exchanges, func(x Exchange) bool { return reflect.DeepEqual(x, e) }) {
				out.Exchanges = append(out.Exchanges, e)
			}
		}
		for _, q := range o.Queues {
			if !slices.ContainsFunc(out.Queues, func(x Queue) bool { return reflect.DeepEqual(x, q) }) {
				out.Queues = append(out.Queues, q)
			}
		}
		for _, b := range o.Bindings {
			if !slices.ContainsFunc(out.Bindings, func(x Binding) bool { return reflect.DeepEqual(x, b) }) {
				out.Bindings = append(out.Bindings, b)
			}
		}
	}
	return out
}

// Equal reports whether t and o declare the same things, in any order.
func (t Topology) Equal(o Topology) bool { return t.String() == o.String() }

// String renders the topology one declaration a line, sorted, so that two
// topologies can be compared and a diff read by a person.
func (t Topology) String() string {
	var lines []string
	for _, e := range t.Exchanges {
		lines = append(lines, fmt.Sprintf("exchange %s %s%s%s", quoteName(e.Name), e.Kind,
			flags(map[string]bool{"durable": e.Durable, "auto-delete": e.AutoDelete, "internal": e.Internal}), args(e.Args)))
	}
	for _, q := range t.Queues {
		lines = append(lines, fmt.Sprintf("queue %s%s%s", quoteName(q.Name),
			flags(map[string]bool{"durable": q.Durable, "exclusive": q.Exclusive, "auto-delete": q.AutoDelete}), args(q.Args)))
	}
	for _, b := range t.Bindings {
		lines = append(lines, fmt.Sprintf("binding %s -> %s key %s%s", quoteName(b.Exchange), quoteName(b.Queue), quoteName(b.Key), args(b.Args)))
	}
	sort.SliceStable(lines, func(i, j int) bool {
		return order(lines[i]) < order(lines[j]) || (order(lines[i]) == order(lines[j]) && lines[i] < lines[j])
	})
	return strings.Join(lines, "\n")
}

func order(line string) int {
	switch {
	case strings.HasPrefix(line, "exchange"):
		return 0
	case strings.HasPrefix(line, "queue"):
		return 1
	default:
		return 2
	}
}

func quoteName(s string) string {
	if s == "" {
		return `""`
	}
	return s
}

func flags(f map[string]bool) string {
	var on []string
	for _, k := range slices.Sorted(maps.Keys(f)) {
		if f[k] {
			on = append(on, k)
		}
	}
	if len(on) == 0 {
		return ""
	}
	return " " + strings.Join(on, " ")
}

func args(a Table) string {
	if len(a) == 0 {
		return ""
	}
	parts := make([]string, 0, len(a))
	for _, k := range slices.Sorted(maps.Keys(a)) {
		parts = append(parts, fmt.Sprintf("%s=%v", k, a[k]))
	}
	return " {" + strings.Join(parts, ", ") + "}"
}
