package benchmark

import "time"

// Which way a figure is better.
const (
	HigherIsBetter = "higher"
	LowerIsBetter  = "lower"
)

// Result is one figure: a value of the project's, its baseline measured in
// the same run, and the CPU each used per message.
type Result struct {
	// Scenario is the scenario it belongs to: core, flow, ladder, outbox
	// or request.
	Scenario string `json:"scenario"`
	// Name says what was measured ("confirmed publish").
	Name string `json:"name"`
	// Unit is Value's unit ("msg/s", "runs/s", "ms").
	Unit string `json:"unit"`
	// Better is HigherIsBetter or LowerIsBetter.
	Better string `json:"better"`
	// Value is the project's figure.
	Value float64 `json:"value"`
	// Baseline says what Value is compared with ("" = nothing: the
	// baseline could not be measured here, see Note).
	Baseline string `json:"baseline,omitempty"`
	// BaselineValue is the baseline's figure, in Unit.
	BaselineValue float64 `json:"baseline_value,omitempty"`
	// Ratio is Value / BaselineValue: above 1 is better when Better is
	// higher, worse when it is lower.
	Ratio float64 `json:"ratio,omitempty"`
	// CPU is this process's user+system CPU time per message the
	// project's side moved, in microseconds (0 = not measured, or shown on
	// the row of the same measurement's throughput).
	CPU float64 `json:"cpu_us_per_msg,omitempty"`
	// BaselineCPU is the same for the baseline.
	BaselineCPU float64 `json:"baseline_cpu_us_per_msg,omitempty"`
	// CPURatio is CPU / BaselineCPU: how many times the baseline's CPU per
	// message the project used.
	CPURatio float64 `json:"cpu_ratio,omitempty"`
	// Messages is how many operations (messages, runs, requests, records)
	// each side measured.
	Messages int `json:"messages"`
	// Note says more: what a message is here, why there is no baseline.
	Note string `json:"note,omitempty"`
}

// figure is a Result with the project's value alone; compare adds the
// baseline.
func figure(scenario, name, unit, better string, value float64, m Measurement) Result {
	return Result{Scenario: scenario, Name: name, Unit: unit, Better: better, Value: value, Messages: m.Ops}
}

// withCPU adds the CPU per message of the project's side.
func (r Result) withCPU(m Measurement) Result {
	r.CPU = m.CPUPerMessage()
	return r
}

// compare adds the baseline called name, its value and (when withCPU) its
// CPU per message, and works out the ratios.
func (r Result) compare(name string, value float64, m Measurement, withCPU bool) Result {
	r.Baseline, r.BaselineValue = name, value
	if withCPU {
		r.BaselineCPU = m.CPUPerMessage()
	}
	return r.ratios()
}

// ratios works out Ratio and CPURatio from the values, leaving them 0
// where a side is missing.
func (r Result) ratios() Result {
	r.Ratio, r.CPURatio = 0, 0
	if r.BaselineValue > 0 {
		r.Ratio = r.Value / r.BaselineValue
	}
	if r.CPU > 0 && r.BaselineCPU > 0 {
		r.CPURatio = r.CPU / r.BaselineCPU
	}
	return r
}

// noted adds a note.
func (r Result) noted(note string) Result {
	if r.Note != "" && note != "" {
		r.Note += "; "
	}
	r.Note += note
	return r
}

// Report is what Run measured.
type Report struct {
	// Broker says which broker was measured: "RabbitMQ 3.10.8 at
	// amqp://guest@127.0.0.1:5672/" or "the embedded in-process broker".
	Broker string `json:"broker"`
	// Database is the PostgreSQL database of the journal and outbox
	// figures ("" = none: those figures were not measured).
	Database string `json:"database,omitempty"`
	// N is the messages per figure.
	N int `json:"n"`
	// CPUs is GOMAXPROCS, and NumCPU the machine's CPUs.
	CPUs   int `json:"gomaxprocs"`
	NumCPU int `json:"num_cpu"`
	// GoVersion is the Go the binary was built with.
	GoVersion string `json:"go_version"`
	// Prefix starts the name of every queue and exchange the run declared
	// (all deleted when it ended).
	Prefix string `json:"prefix"`
	// Started is when the run started; Seconds how long it took.
	Started time.Time `json:"started"`
	Seconds float64   `json:"seconds"`
	// Results are the figures, scenario by scenario.
	Results []Result `json:"results"`
	// Skipped says which scenarios were not measured, and why.
	Skipped []string `json:"skipped,omitempty"`
}
