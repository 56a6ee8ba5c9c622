package cli

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/engine"
	"github.com/acemq/acemq-flow/engine/observe"
)

// The series top reads from a worker's /metrics (engine/observe serves
// them under these names).
const (
	// metricRuns counts runs leaving their flow, by pipeline (the flow),
	// step and outcome.
	metricRuns = "acemq_pipeline_run_total"
	// metricRunDuration is how old runs were when they left their flow.
	metricRunDuration = "acemq_pipeline_run_duration_seconds"
	// metricStepDuration is how long step functions took, by flow, step
	// and outcome; its count is the steps done.
	metricStepDuration = "acemq_flow_step_duration_seconds"
	// metricStepsActive is the step functions running now, by flow and
	// step.
	metricStepsActive = "acemq_flow_steps_active"
	// metricQueueDepth is the ready messages of a flow's queue, by flow,
	// queue and role.
	metricQueueDepth = "acemq_queue_depth"
)

// stepFailed is the outcome of a step function that returned an error.
const stepFailed = "failed"

// hist is a cumulative histogram: counts[i] observations took at most
// bounds[i] seconds; the last bound is +Inf.
type hist struct {
	bounds []float64
	counts []float64
}

// add adds o's counts to h's. Histograms on other bounds (workers of two
// versions: the engine's step buckets started at 5 ms before 100 µs) are
// added on the bounds both have, where each one's cumulative count is
// exact: coarser, and every worker still counts.
func (h *hist) add(o hist) {
	if h.bounds == nil {
		h.bounds, h.counts = o.bounds, slices.Clone(o.counts)
		return
	}
	if slices.Equal(h.bounds, o.bounds) {
		for i, c := range o.counts {
			h.counts[i] += c
		}
		return
	}
	var bounds, counts []float64
	for i, j := 0, 0; i < len(h.bounds) && j < len(o.bounds); {
		switch {
		case h.bounds[i] < o.bounds[j]:
			i++
		case h.bounds[i] > o.bounds[j]:
			j++
		default:
			bounds, counts = append(bounds, h.bounds[i]), append(counts, h.counts[i]+o.counts[j])
			i, j = i+1, j+1
		}
	}
	h.bounds, h.counts = bounds, counts
}

// total is how many observations h holds.
func (h hist) total() float64 {
	if len(h.counts) == 0 {
		return 0
	}
	return h.counts[len(h.counts)-1]
}

// quantile is the q-quantile of h, interpolated linearly within the bucket
// it falls in, as PromQL's histogram_quantile does: NaN when h is empty,
// and the highest finite bound when it falls beyond it.
func (h hist) quantile(q float64) float64 {
	n := h.total()
	if n <= 0 || len(h.bounds) < 2 {
		return math.NaN()
	}
	rank := q * n
	i, _ := slices.BinarySearchFunc(h.counts, rank, func(c, r float64) int {
		if c < r {
			return -1
		}
		return 1
	})
	if i >= len(h.bounds)-1 {
		return h.bounds[len(h.bounds)-2]
	}
	lower, below := 0.0, 0.0
	if i > 0 {
		lower, below = h.bounds[i-1], h.counts[i-1]
	}
	inBucket := h.counts[i] - below
	if inBucket <= 0 {
		return lower
	}
	return lower + (h.bounds[i]-lower)*(rank-below)/inBucket
}

// stepKey names a step of a flow; a flow's own figures have step "".
type stepKey struct{ flow, step string }

// deadLetters is a dead-letter queue's depth and whose it is.
type deadLetters struct {
	key   stepKey
	depth float64
}

// snapshot is what one scrape of one worker's /metrics said, reduced to
// what top shows.
type snapshot struct {
	at time.Time
	// Counters (cumulative since the worker started), by flow (step "")
	// for runs leaving their flow, by step for steps done.
	done, failed map[stepKey]float64
	durations    map[stepKey]hist
	// Gauges: step functions running, and dead-letter queues' depths by
	// queue.
	active map[stepKey]float64
	dlq    map[string]deadLetters
}

// parseSnapshot reads a worker's /metrics in the Prometheus text format.
func parseSnapshot(r io.Reader, at time.Time) (snapshot, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return snapshot{}, fmt.Errorf("read the metrics: %w", err)
	}
	s := snapshot{at: at, done: map[stepKey]float64{}, failed: map[stepKey]float64{}, durations: map[stepKey]hist{},
		active: map[stepKey]float64{}, dlq: map[string]deadLetters{}}
	addHist := func(k stepKey, m *dto.Metric) {
		h := s.durations[k]
		h.add(histOf(m.GetHistogram()))
		s.durations[k] = h
	}
	for _, m := range fams[metricRuns].GetMetric() {
		l := labels(m)
		k := stepKey{flow: l["pipeline"]}
		s.done[k] += m.GetCounter().GetValue()
		if l["outcome"] == engine.RunFailed {
			s.failed[k] += m.GetCounter().GetValue()
		}
	}
	for _, m := range fams[metricRunDuration].GetMetric() {
		addHist(stepKey{flow: labels(m)["pipeline"]}, m)
	}
	for _, m := range fams[metricStepDuration].GetMetric() {
		l := labels(m)
		k := stepKey{flow: l["flow"], step: l["step"]}
		h := histOf(m.GetHistogram())
		s.done[k] += h.total()
		if l["outcome"] == stepFailed {
			s.failed[k] += h.total()
		}
		addHist(k, m)
	}
	for _, m := range fams[metricStepsActive].GetMetric() {
		l := labels(m)
		s.active[stepKey{flow: l["flow"], step: l["step"]}] += m.GetGauge().GetValue()
	}
	for _, m := range fams[metricQueueDepth].GetMetric() {
		l := labels(m)
		if l["role"] != observe.RoleDeadLetter {
			continue
		}
		s.dlq[l["queue"]] = deadLetters{key: stepKey{flow: l["flow"], step: dlqStep(l["flow"], l["queue"])}, depth: m.GetGauge().GetValue()}
	}
	return s, nil
}

// labels are a sample's labels by name.
func labels(m *dto.Metric) map[string]string {
	out := make(map[string]string, len(m.GetLabel()))
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// histOf is a parsed histogram as a hist, ending at +Inf.
func histOf(h *dto.Histogram) hist {
	var out hist
	for _, b := range h.GetBucket() {
		out.bounds = append(out.bounds, b.GetUpperBound())
		out.counts = append(out.counts, bucketCount(b))
	}
	if n := len(out.bounds); n == 0 || !math.IsInf(out.bounds[n-1], 1) {
		total := float64(h.GetSampleCount())
		if h.SampleCountFloat != nil {
			total = h.GetSampleCountFloat()
		}
		out.bounds = append(out.bounds, math.Inf(1))
		out.counts = append(out.counts, total)
	}
	return out
}

// bucketCount is a bucket's count, which the text format gives as an
// integer or, when it is not one, a float.
func bucketCount(b *dto.Bucket) float64 {
	if b.CumulativeCountFloat != nil {
		return b.GetCumulativeCountFloat()
	}
	return float64(b.GetCumulativeCount())
}

// dlqStep is the step whose dead-letter queue is queue: the engine names
// it <flow>.<step>.dlq.
func dlqStep(flow, queue string) string {
	q := strings.TrimSuffix(queue, broker.DeadLetterSuffix)
	if s, ok := strings.CutPrefix(q, flow+"."); ok {
		return s
	}
	return q
}

// increase is how much a counter grew over vals, oldest first, a drop
// counted as a restart from zero (the worker restarted), as PromQL's
// increase does.
func increase(vals []float64) float64 {
	total := 0.0
	for i := 1; i < len(vals); i++ {
		if d := vals[i] - vals[i-1]; d >= 0 {
			total += d
		} else {
			total += vals[i]
		}
	}
	return total
}

// row is one line of top: a flow (step "") or one of its steps. Rates
// and quantiles are over the window; NaN is unknown (one scrape so far,
// or nothing observed in the window).
type row struct {
	flow, step string
	// rate is runs leaving the flow per second, or the step's completions
	// (any outcome); failRate the failed ones.
	rate, failRate float64
	inFlight       float64
	// p50 and p99 are of run durations for a flow, of the step function's
	// time for a step, in seconds.
	p50, p99 float64
	dlq      float64
	// queue is the messages ready in the step's queue (its steps' for a
	// flow), from the broker (mergeFleet); NaN when unknown.
	queue float64
}

// aggregate is the rows of the workers' windows (each oldest first, the
// newest a scrape that answered): rates and percentiles over each
// window, summed over the workers; in flight summed; dead-letter depths,
// which every worker reads from the same broker, taken once per queue.
func aggregate(windows [][]snapshot) []row {
	type acc struct {
		row
		durations hist
	}
	all := map[stepKey]*acc{}
	var get func(k stepKey) *acc
	get = func(k stepKey) *acc {
		a, ok := all[k]
		if !ok {
			a = &acc{row: row{flow: k.flow, step: k.step, rate: math.NaN(), failRate: math.NaN(), queue: math.NaN()}}
			all[k] = a
			if k.step != "" {
				get(stepKey{flow: k.flow}) // every step's flow has a row
			}
		}
		return a
	}
	dlq := map[string]deadLetters{}
	for _, w := range windows {
		if len(w) == 0 {
			continue
		}
		first, last := w[0], w[len(w)-1]
		secs := last.at.Sub(first.at).Seconds()
		for k := range last.done {
			a := get(k)
			if len(w) < 2 || secs <= 0 {
				continue
			}
			a.rate = addKnown(a.rate, increase(series(w, func(s snapshot) float64 { return s.done[k] }))/secs)
			a.failRate = addKnown(a.failRate, increase(series(w, func(s snapshot) float64 { return s.failed[k] }))/secs)
		}
		for k, h := range last.durations {
			a := get(k)
			if len(w) >= 2 {
				a.durations.add(windowIncrease(w, k, h))
			}
		}
		for k, v := range last.active {
			get(k).inFlight += v
			get(stepKey{flow: k.flow}).inFlight += v
		}
		for q, d := range last.dlq {
			if seen, ok := dlq[q]; !ok || d.depth > seen.depth {
				dlq[q] = d
			}
		}
	}
	for _, d := range dlq {
		get(d.key).dlq += d.depth
		get(stepKey{flow: d.key.flow}).dlq += d.depth
	}
	out := make([]row, 0, len(all))
	for _, a := range all {
		a.p50, a.p99 = a.durations.quantile(0.5), a.durations.quantile(0.99)
		out = append(out, a.row)
	}
	return out
}

// series is one value of every snapshot of a window.
func series(w []snapshot, value func(snapshot) float64) []float64 {
	out := make([]float64, len(w))
	for i, s := range w {
		out[i] = value(s)
	}
	return out
}

// windowIncrease is what histogram k of the window's last snapshot, last,
// grew by over the window, bucket by bucket.
func windowIncrease(w []snapshot, k stepKey, last hist) hist {
	out := hist{bounds: last.bounds, counts: make([]float64, len(last.counts))}
	for i := range last.counts {
		out.counts[i] = increase(series(w, func(s snapshot) float64 {
			h := s.durations[k]
			if !slices.Equal(h.bounds, last.bounds) {
				return 0
			}
			return h.counts[i]
		}))
	}
	return out
}

// addKnown adds two rates of which either may be unknown (NaN).
func addKnown(a, b float64) float64 {
	switch {
	case math.IsNaN(a):
		return b
	case math.IsNaN(b):
		return a
	}
	return a + b
}

// sortKey is what top sorts its rows by.
type sortKey int

// The sort keys, in the order the s key cycles through them.
const (
	sortName sortKey = iota
	sortRate
	sortFailures
	sortInFlight
	sortP50
	sortP99
	sortQueue
	sortDLQ
)

// sortKeys are the keys' names on --sort and in top's title.
var sortKeys = []struct{ flag, title string }{
	sortName:     {"name", "name"},
	sortRate:     {"runs", "runs/s"},
	sortFailures: {"failures", "failures/s"},
	sortInFlight: {"in-flight", "in flight"},
	sortP50:      {"p50", "p50"},
	sortP99:      {"p99", "p99"},
	sortQueue:    {"queue", "queue"},
	sortDLQ:      {"dlq", "dead letters"},
}

func (k *sortKey) String() string { return sortKeys[*k].flag }

func (k *sortKey) Set(s string) error {
	for i, sk := range sortKeys {
		if sk.flag == s {
			*k = sortKey(i)
			return nil
		}
	}
	names := make([]string, len(sortKeys))
	for i, sk := range sortKeys {
		names[i] = sk.flag
	}
	return fmt.Errorf("unknown sort key %q, want one of %s", s, strings.Join(names, ", "))
}

func (k *sortKey) Type() string { return "key" }

// value is the row's figure that key sorts by.
func (r row) value(key sortKey) float64 {
	switch key {
	case sortRate:
		return r.rate
	case sortFailures:
		return r.failRate
	case sortInFlight:
		return r.inFlight
	case sortP50:
		return r.p50
	case sortP99:
		return r.p99
	case sortQueue:
		return r.queue
	case sortDLQ:
		return r.dlq
	}
	return 0
}

// sortRows orders rows as top shows them: each flow followed by its steps,
// flows by key and the steps of a flow by key; names A to Z, figures
// largest first (reverse turns either round), unknown figures last, and
// names breaking ties. Every flow with steps has a row of its own in rows,
// as aggregate makes them.
func sortRows(rows []row, key sortKey, reverse bool) []row {
	byKey := func(a, b row) int {
		c := 0
		if key == sortName {
			c = cmp.Compare(a.step, b.step)
			if a.step == "" {
				c = cmp.Compare(a.flow, b.flow)
			}
		} else {
			va, vb := a.value(key), b.value(key)
			switch {
			case math.IsNaN(va) && math.IsNaN(vb):
			case math.IsNaN(va):
				return 1
			case math.IsNaN(vb):
				return -1
			default:
				c = cmp.Compare(vb, va)
			}
		}
		if reverse {
			c = -c
		}
		if c != 0 {
			return c
		}
		return cmp.Or(cmp.Compare(a.flow, b.flow), cmp.Compare(a.step, b.step))
	}
	var flows []row
	steps := map[string][]row{}
	for _, r := range rows {
		if r.step == "" {
			flows = append(flows, r)
		} else {
			steps[r.flow] = append(steps[r.flow], r)
		}
	}
	slices.SortFunc(flows, byKey)
	out := make([]row, 0, len(rows)+len(flows))
	for _, f := range flows {
		out = append(out, f)
		s := steps[f.flow]
		slices.SortFunc(s, byKey)
		out = append(out, s...)
	}
	return out
}
