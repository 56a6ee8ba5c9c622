package dashboard

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/acemq/acemq-flow/engine/journal"
)

// The charts' geometry, in SVG user units.
const (
	chartWidth  = 760
	chartHeight = 170
	marginLeft  = 44
	marginTop   = 10
	marginBelow = 22
	// marginRight holds half the last time label, centred on the axis'
	// end ("12-06 14:00Z").
	marginRight = 44
)

// bar is one rectangle of a chart, with its tooltip.
type bar struct {
	X, Y, W, H float64
	Class      string
	Title      string
}

// tick is a labelled position on an axis.
type tick struct {
	X, Y  float64
	Label string
}

// barChart is a per-minute column chart over the last hour.
type barChart struct {
	Title, Summary string
	Width, Height  int
	Bars           []bar
	YTicks, XTicks []tick
	// Base is the y of the x axis.
	Base, Left, Right float64
}

// latencyRow is one step's p50 and p99.
type latencyRow struct {
	Flow, Step string
	N          int
	P50, P99   time.Duration
	// Y, Y50, W50, W99, X50 and X99 place the row's bars and their
	// values.
	Y, Y50, W50, W99, X50, X99 float64
}

type latencyChart struct {
	Rows          []latencyRow
	Width, Height int
	Left          float64
	Max           time.Duration
}

type chartsPage struct {
	Since, Until time.Time
	Runs         int
	Capped       bool
	Started      barChart
	Failed       barChart
	Latency      latencyChart
	// Sampled is how many runs' timelines the step times come from.
	Sampled int
	// Flow and Window are the filters, Flows and Windows what the form
	// offers; Totals the runs started in the range by status (from the
	// journal's aggregates: Aggregated).
	Flow, Window string
	Flows        []string
	Windows      []struct{ Value, Label string }
	Totals       []journal.StatusCount
	Aggregated   bool
	Bucket       time.Duration
}

// sampleBudget is how long /charts reads timelines for its step times.
const sampleBudget = 100 * time.Millisecond

// chartWindows are the ranges /charts and /failed offer ("" on /failed:
// the whole journal).
var chartWindows = []struct{ Value, Label string }{
	{"15m", "last 15 minutes"}, {"1h", "last hour"}, {"6h", "last 6 hours"},
	{"24h", "last 24 hours"}, {"168h", "last 7 days"}, {"720h", "last 30 days"},
}

// bucketWidths are the widths a chart's columns may have: the first that
// makes at most maxColumns of them.
var bucketWidths = []time.Duration{time.Minute, 5 * time.Minute, 15 * time.Minute, time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour}

const maxColumns = 120

// bucketFor is the column width of a chart over window.
func bucketFor(window time.Duration) time.Duration {
	for _, w := range bucketWidths {
		if window/w <= maxColumns {
			return w
		}
	}
	return bucketWidths[len(bucketWidths)-1]
}

// rangeOf reads a page's flow and window (a duration back from now:
// fallback when none is given, "" for the whole journal) from its query,
// or says what is wrong with them.
func (d *Dashboard) rangeOf(r *http.Request, fallback string) (journal.Range, string, string, bool) {
	q := r.URL.Query()
	rg := journal.Range{Flow: q.Get("flow")}
	window := fallback
	if q.Has("window") {
		window = q.Get("window")
	}
	if window == "" {
		return rg, window, "", true
	}
	win, err := time.ParseDuration(window)
	if err != nil || win <= 0 || win > 720*time.Hour {
		return rg, window, "No such time window: " + window + " (want a duration of at most 720h).", false
	}
	now := d.cfg.Now()
	rg.Since, rg.Until = now.Add(-win), now
	return rg, window, "", true
}

// charts draws the counts of a range (the last hour unless the page asks
// for another) from the journal: its aggregates over every run when it
// has them (journal.Aggregator), else the newest maxChartRuns runs.
func (d *Dashboard) charts(w http.ResponseWriter, r *http.Request) {
	rg, window, why, ok := d.rangeOf(r, "1h")
	if !ok || window == "" {
		d.fail(w, r, http.StatusBadRequest, cmp.Or(why, "The charts want a time window."))
		return
	}
	since, now := rg.Since, rg.Until
	width := bucketFor(now.Sub(since))
	p := chartsPage{Since: since, Until: now, Flow: rg.Flow, Window: window, Flows: d.flowNames(), Windows: chartWindows, Bucket: width}
	if p.Flow != "" && !slices.Contains(p.Flows, p.Flow) {
		p.Flows = append(p.Flows, p.Flow)
	}
	n := int((now.Sub(since) + width - 1) / width)
	started, failed := make([]float64, n), make([]float64, n)
	if agg, ok := d.journal.(journal.Aggregator); ok {
		// The step times' sample is read beside the counts, on a
		// connection of its own: the page waits for the slower of the
		// two, not for both one after the other.
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		var sampleErr error
		var wg sync.WaitGroup
		wg.Go(func() {
			var runs []journal.Run
			if runs, sampleErr = d.journal.Runs(ctx, journal.Query{Flow: rg.Flow, Since: since, Limit: d.cfg.ChartSample}); sampleErr == nil {
				p.Latency, p.Sampled = d.stepTimes(ctx, runs)
			}
		})
		chart, err := agg.Chart(ctx, rg, width)
		if err != nil {
			cancel()
		}
		wg.Wait()
		if err = cmp.Or(err, sampleErr); err != nil {
			d.journalFailed(w, r, err)
			return
		}
		for i, b := range chart.Buckets[:min(len(chart.Buckets), n)] {
			started[i], failed[i] = float64(b.Started), float64(b.Failed)
		}
		p.Totals = chart.Totals
		for _, t := range p.Totals {
			p.Runs += int(t.Runs)
		}
		p.Aggregated = true
	} else {
		runs, err := d.journal.Runs(r.Context(), journal.Query{Flow: rg.Flow, Since: since, Limit: maxChartRuns})
		if err != nil {
			d.journalFailed(w, r, err)
			return
		}
		p.Runs, p.Capped = len(runs), len(runs) == maxChartRuns
		slot := func(t time.Time) int {
			if t.Before(since) || !t.Before(now) {
				return -1
			}
			return int(t.Sub(since) / width)
		}
		for _, run := range runs {
			if i := slot(run.StartedAt); i >= 0 {
				started[i]++
			}
			if journal.FailedStatus(run.Status) {
				if i := slot(failedAt(run)); i >= 0 {
					failed[i]++
				}
			}
		}
		p.Latency, p.Sampled = d.stepTimes(r.Context(), runs)
	}
	per := width.String()
	p.Started = columns("Runs started per "+per, started, "started", since, width)
	p.Started.Summary = fmt.Sprintf("%d started, %s runs/s on average", int(sum(started)), strconv.FormatFloat(sum(started)/now.Sub(since).Seconds(), 'g', 3, 64))
	p.Failed = columns("Runs failed per "+per+" (when they stopped)", failed, "failed", since, width)
	p.Failed.Summary = fmt.Sprintf("%d failed and not replayed since: waiting for a replay, compensated or unresolved", int(sum(failed)))
	d.render(w, r, http.StatusOK, "charts", view{Nav: "charts", Title: "Charts", Page: p})
}

// stepTimes are the p50 and p99 of each step of the first ChartSample of
// runs (newest first), from their timelines, and how many runs they come
// from: the timelines are read one by one, for at most sampleBudget, so
// that the page stays quick on a journal of many runs.
func (d *Dashboard) stepTimes(ctx context.Context, runs []journal.Run) (latencyChart, int) {
	sample := runs[:min(len(runs), d.cfg.ChartSample)]
	took := map[[2]string][]time.Duration{}
	began := time.Now()
	for i, run := range sample {
		if time.Since(began) > sampleBudget {
			sample = sample[:i]
			break
		}
		events, err := d.journal.Timeline(ctx, run.ID)
		if err != nil {
			continue
		}
		for _, e := range events {
			if e.Kind == journal.KindStep && !e.StartedAt.IsZero() && !e.EndedAt.Before(e.StartedAt) {
				k := [2]string{run.Flow, e.Step}
				took[k] = append(took[k], e.EndedAt.Sub(e.StartedAt))
			}
		}
	}
	return latencies(took), len(sample)
}

func sum(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s
}

// columns lays out one column per value (of width each), oldest on the
// left.
func columns(title string, values []float64, class string, since time.Time, width time.Duration) barChart {
	layout := "15:04Z"
	if width >= time.Hour {
		layout = "01-02 15:04Z"
	}
	c := barChart{Title: title, Width: chartWidth, Height: chartHeight, Left: marginLeft, Right: chartWidth - marginRight,
		Base: chartHeight - marginBelow}
	top := niceCeil(slices.Max(values))
	plotH := c.Base - marginTop
	colW := (c.Right - c.Left) / float64(len(values))
	for i, v := range values {
		h := v / top * plotH
		at := since.Add(time.Duration(i) * width)
		c.Bars = append(c.Bars, bar{X: c.Left + float64(i)*colW + 1, Y: c.Base - h, W: max(colW-2, 1), H: h, Class: class,
			Title: fmt.Sprintf("%s: %s", at.UTC().Format(layout), strconv.FormatFloat(v, 'f', -1, 64))})
	}
	for _, f := range []float64{0, 0.5, 1} {
		c.YTicks = append(c.YTicks, tick{X: c.Left - 6, Y: c.Base - f*plotH, Label: strconv.FormatFloat(f*top, 'f', -1, 64)})
	}
	step := max(len(values)/4, 1)
	for i := 0; i <= len(values); i += step {
		at := since.Add(time.Duration(i) * width)
		c.XTicks = append(c.XTicks, tick{X: c.Left + float64(i)*colW, Y: c.Base + 15, Label: at.UTC().Format(layout)})
	}
	return c
}

// niceCeil is the axis' top: 1, 2 or 5 times a power of ten, at least v
// (and at least 1).
func niceCeil(v float64) float64 {
	if v <= 1 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// latencies are each step's p50 and p99, slowest p99 first.
func latencies(took map[[2]string][]time.Duration) latencyChart {
	c := latencyChart{Width: chartWidth, Left: 260}
	for k, ds := range took {
		slices.Sort(ds)
		c.Rows = append(c.Rows, latencyRow{Flow: k[0], Step: k[1], N: len(ds), P50: quantile(ds, 0.5), P99: quantile(ds, 0.99)})
		c.Max = max(c.Max, quantile(ds, 0.99))
	}
	slices.SortFunc(c.Rows, func(a, b latencyRow) int {
		if x := cmp.Compare(b.P99, a.P99); x != 0 {
			return x
		}
		return cmp.Compare(a.Flow+"/"+a.Step, b.Flow+"/"+b.Step)
	})
	plotW := float64(chartWidth) - c.Left - 90
	for i := range c.Rows {
		row := &c.Rows[i]
		row.Y = float64(10 + i*30)
		row.Y50 = row.Y + 12
		row.W50, row.W99 = 1, 1
		if c.Max > 0 {
			row.W50 = max(float64(row.P50)/float64(c.Max)*plotW, 1)
			row.W99 = max(float64(row.P99)/float64(c.Max)*plotW, 1)
		}
		row.X50, row.X99 = c.Left+row.W50+4, c.Left+row.W99+4
	}
	c.Height = 20 + 30*len(c.Rows)
	return c
}

// quantile is the nearest-rank q-quantile of sorted ds.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(ds)))) - 1
	return ds[max(i, 0)]
}
