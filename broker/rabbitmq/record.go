package rabbitmq

import (
	"reflect"
	"slices"
	"sync"

	"github.com/acemq/acemq-flow/broker/transport"
)

// topologyRecord is everything Declare declared, deduplicated and in
// declaration order, so that a new connection can declare it again.
type topologyRecord struct {
	mu   sync.Mutex
	topo transport.Topology
}

// addExchange records e, replacing an earlier declaration of the same name:
// the broker accepted this one, so it is what exists now.
func (r *topologyRecord) addExchange(e transport.Exchange) {
	e.Args = e.Args.Clone()
	r.mu.Lock()
	defer r.mu.Unlock()
	if i := slices.IndexFunc(r.topo.Exchanges, func(x transport.Exchange) bool { return x.Name == e.Name }); i >= 0 {
		r.topo.Exchanges[i] = e
		return
	}
	r.topo.Exchanges = append(r.topo.Exchanges, e)
}

// addQueue records q, replacing an earlier declaration of the same name.
func (r *topologyRecord) addQueue(q transport.Queue) {
	q.Args = q.Args.Clone()
	r.mu.Lock()
	defer r.mu.Unlock()
	if i := slices.IndexFunc(r.topo.Queues, func(x transport.Queue) bool { return x.Name == q.Name }); i >= 0 {
		r.topo.Queues[i] = q
		return
	}
	r.topo.Queues = append(r.topo.Queues, q)
}

// addBinding records b unless an identical binding is recorded.
func (r *topologyRecord) addBinding(b transport.Binding) {
	b.Args = b.Args.Clone()
	r.mu.Lock()
	defer r.mu.Unlock()
	if !slices.ContainsFunc(r.topo.Bindings, func(x transport.Binding) bool { return sameBinding(x, b) }) {
		r.topo.Bindings = append(r.topo.Bindings, b)
	}
}

// forgetQueue drops a deleted queue and the bindings that went with it.
func (r *topologyRecord) forgetQueue(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.topo.Queues = slices.DeleteFunc(r.topo.Queues, func(x transport.Queue) bool { return x.Name == name })
	r.topo.Bindings = slices.DeleteFunc(r.topo.Bindings, func(x transport.Binding) bool { return x.Queue == name })
}

// forgetExchange drops a deleted exchange and the bindings that went with it.
func (r *topologyRecord) forgetExchange(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.topo.Exchanges = slices.DeleteFunc(r.topo.Exchanges, func(x transport.Exchange) bool { return x.Name == name })
	r.topo.Bindings = slices.DeleteFunc(r.topo.Bindings, func(x transport.Binding) bool { return x.Exchange == name })
}

// forgetBinding drops a removed binding.
func (r *topologyRecord) forgetBinding(b transport.Binding) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.topo.Bindings = slices.DeleteFunc(r.topo.Bindings, func(x transport.Binding) bool { return sameBinding(x, b) })
}

// snapshot returns a copy of the record that later changes do not touch.
func (r *topologyRecord) snapshot() transport.Topology {
	r.mu.Lock()
	defer r.mu.Unlock()
	return transport.Topology{
		Exchanges: slices.Clone(r.topo.Exchanges),
		Queues:    slices.Clone(r.topo.Queues),
		Bindings:  slices.Clone(r.topo.Bindings),
	}
}

// sameBinding compares bindings the way the broker does: an empty argument
// table is the same as none.
func sameBinding(a, b transport.Binding) bool {
	if a.Queue != b.Queue || a.Exchange != b.Exchange || a.Key != b.Key {
		return false
	}
	if len(a.Args) == 0 && len(b.Args) == 0 {
		return true
	}
	return reflect.DeepEqual(a.Args, b.Args)
}
