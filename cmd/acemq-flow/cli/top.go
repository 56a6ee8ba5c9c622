package cli

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"
	"github.com/spf13/cobra"

	"github.com/acemq/acemq-flow/engine/fleet"
)

// DefaultTopFrom is the worker top reads unless told otherwise: the
// address the README gives --metrics-addr.
const DefaultTopFrom = "http://127.0.0.1:9464"

// topWindow is how many refreshes the rates and percentiles are taken
// over: ten seconds at the default interval, short enough to follow a
// change, long enough not to flicker.
const topWindow = 10

// topScrapeTimeout bounds one scrape: past the worker's own bound on
// reading queue depths from the broker (observe.DepthTimeout), so that a
// slow broker is not taken for a worker that does not answer.
const topScrapeTimeout = 5 * time.Second

// topMaxBody bounds what top reads of one /metrics answer.
const topMaxBody = 16 << 20

func (a *app) topCommand() *cobra.Command {
	var (
		from     []string
		key      sortKey
		interval time.Duration
		bf       brokerFlags
		output   outputFormat
	)
	cmd := &cobra.Command{
		Use:   "top",
		Short: "A live view of the workers, their flows and steps, their queues and the ladder",
		Long: "Show, refreshed every --interval, the flows and steps of the workers whose metrics endpoints\n" +
			"--from names (`acemq-flow worker --metrics-addr`): runs leaving each flow, and steps done, per\n" +
			"second; failures per second; step functions running now; the 50th and 99th percentiles of\n" +
			"runs' and steps' durations; and the messages waiting in dead-letter queues. Rates and\n" +
			"percentiles are over the last ten refreshes, summed over the workers. An endpoint that does\n" +
			"not answer is shown down with its error, and asked again at the next refresh.\n\n" +
			"With --database-url, the workers as they report themselves to the run journal (up, draining\n" +
			"or lost, ready or why not, what they hold); with --url, each step's queue depth (QUEUE) and\n" +
			"dead letters as the broker counts them now, and the scheduler ladder's backlog and lateness:\n" +
			"the fleet view of the dashboard's /fleet page. Nothing is declared on the broker.\n\n" +
			"Keys: s (or tab) sorts by the next column, S by the previous, r reverses the order, the\n" +
			"arrows, PgUp, PgDn, Home and End scroll, q quits. With -o json, top reads everything twice,\n" +
			"--interval apart (the rates are over that interval), prints one JSON document and exits.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if interval < 100*time.Millisecond {
				return fmt.Errorf("--interval %s: want at least 100ms", interval)
			}
			sources := make([]string, 0, len(from))
			for _, f := range from {
				u, err := metricsURL(f)
				if err != nil {
					return err
				}
				sources = append(sources, u)
			}
			if len(sources) == 0 {
				return errors.New("--from: name at least one metrics endpoint, e.g. " + DefaultTopFrom)
			}
			f, err := a.openTopFleet(cmd, bf)
			if err != nil {
				return err
			}
			if f != nil {
				defer f.close()
			}
			// Scrapes still running when top quits stop with it.
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			m := newTopModel(ctx, sources, key, interval)
			m.fleet = f
			if output == outputJSON {
				return topJSON(ctx, cmd, m)
			}
			p := tea.NewProgram(m, tea.WithContext(ctx), tea.WithAltScreen(),
				tea.WithInput(cmd.InOrStdin()), tea.WithOutput(cmd.OutOrStdout()))
			if _, err := p.Run(); err != nil && ctx.Err() == nil {
				return fmt.Errorf("top: %w", err)
			}
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&from, "from", []string{DefaultTopFrom}, "metrics endpoints of the workers, comma-separated: http://host:port (/metrics is added)")
	cmd.Flags().Var(&key, "sort", "column to sort by first: name, runs, failures, in-flight, p50, p99, queue or dlq")
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "how often to read the endpoints")
	cmd.Flags().StringVar(&bf.url, "url", "", urlUsage+" (optional: the queues' depths and the ladder's backlog come from it)")
	addLadderFlag(cmd.Flags(), &bf.ladder)
	addOutputFlag(cmd, &output)
	return cmd
}

// metricsURL is --from's endpoint as a URL to GET: http:// when no scheme
// is given, /metrics when no path is.
func metricsURL(s string) (string, error) {
	raw := strings.TrimSpace(s)
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", fmt.Errorf("--from %q: want a metrics endpoint such as %s", s, DefaultTopFrom)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/metrics"
	}
	return u.String(), nil
}

// shortSource is an endpoint as people name it: host and port, unless
// its scheme or path says more.
func shortSource(source string) string {
	u, err := url.Parse(source)
	if err != nil || u.Scheme != "http" || u.Path != "/metrics" || u.RawQuery != "" {
		return source
	}
	return u.Host
}

// scrape reads one worker's /metrics. A failed request's error leaves out
// the URL, which top shows beside it.
func scrape(ctx context.Context, client *http.Client, source string) (snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, topScrapeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, source, nil)
	if err != nil {
		return snapshot{}, err
	}
	// The text format, which parseSnapshot reads, rather than protobuf.
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return snapshot{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return snapshot{}, fmt.Errorf("HTTP %s", resp.Status)
	}
	return parseSnapshot(http.MaxBytesReader(nil, resp.Body, topMaxBody), time.Now())
}

// scrapedMsg is one refresh: every endpoint's answer, in --from's order,
// and the fleet (nil without one to read, or when it was not read: err
// says why).
type scrapedMsg struct {
	results  []scrapeResult
	fleet    *fleet.View
	fleetErr error
}

// scrapeResult is one endpoint's answer.
type scrapeResult struct {
	snap snapshot
	err  error
}

// refreshMsg asks for the next refresh.
type refreshMsg struct{}

// topModel is top's state, as bubbletea runs it.
type topModel struct {
	ctx      context.Context
	client   *http.Client
	sources  []string
	interval time.Duration
	key      sortKey
	reverse  bool

	// windows holds each endpoint's last snapshots, oldest first (none
	// after a failure: rates are not taken across a gap, a restart); errs
	// its last failure (nil once it answers again).
	windows [][]snapshot
	errs    []error
	// fleet is where the fleet is read from (nil: nowhere); view is the
	// last read, viewErr why it was not.
	fleet   *topFleet
	view    *fleet.View
	viewErr error
	// refreshed is when the last refresh ended (zero before the first).
	refreshed time.Time
	rows      []row
	offset    int
	width     int
	height    int
}

// newTopModel is top before its first refresh, on an 80x24 screen until
// it hears otherwise.
func newTopModel(ctx context.Context, sources []string, key sortKey, interval time.Duration) *topModel {
	return &topModel{ctx: ctx, client: &http.Client{}, sources: sources, interval: interval, key: key,
		windows: make([][]snapshot, len(sources)), errs: make([]error, len(sources)), width: 80, height: 24}
}

// Init starts the first refresh.
func (m *topModel) Init() tea.Cmd { return m.scrapeAll }

// scrapeAll reads every endpoint, and the fleet, at once and reports
// them together.
func (m *topModel) scrapeAll() tea.Msg {
	out := scrapedMsg{results: make([]scrapeResult, len(m.sources))}
	var wg sync.WaitGroup
	for i, src := range m.sources {
		wg.Go(func() {
			out.results[i].snap, out.results[i].err = scrape(m.ctx, m.client, src)
		})
	}
	wg.Go(func() { out.fleet, out.fleetErr = m.fleet.read(m.ctx) })
	wg.Wait()
	return out
}

// Update takes a refresh or a key.
func (m *topModel) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case scrapedMsg:
		m.record(msg, time.Now())
		return m, tea.Tick(m.interval, func(time.Time) tea.Msg { return refreshMsg{} })
	case refreshMsg:
		return m, m.scrapeAll
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
		m.scroll(0)
	case tea.KeyMsg:
		if msg.Type == tea.KeyRunes && !msg.Alt && !msg.Paste {
			// Keys typed faster than they are read arrive together.
			var cmds []tea.Cmd
			for _, r := range msg.Runes {
				cmds = append(cmds, m.press(string(r)))
			}
			return m, tea.Batch(cmds...)
		}
		return m, m.press(msg.String())
	}
	return m, nil
}

// record keeps a refresh's snapshots and fleet, and works the rows out
// again.
func (m *topModel) record(msg scrapedMsg, now time.Time) {
	var answering [][]snapshot
	for i, r := range msg.results {
		m.errs[i] = r.err
		if r.err != nil {
			m.windows[i] = nil
			continue
		}
		w := append(m.windows[i], r.snap)
		if len(w) > topWindow+1 {
			w = w[len(w)-topWindow-1:]
		}
		m.windows[i] = w
		answering = append(answering, w)
	}
	m.view, m.viewErr = msg.fleet, msg.fleetErr
	m.refreshed = now
	m.rows = sortRows(mergeFleet(aggregate(answering), m.view, len(answering) > 0), m.key, m.reverse)
	m.scroll(0)
}

// up is how many endpoints answered the last refresh (none before it).
func (m *topModel) up() int {
	n := 0
	for i := range m.sources {
		if m.errs[i] == nil && len(m.windows[i]) > 0 {
			n++
		}
	}
	return n
}

// press acts on a key; q and ctrl+c quit.
func (m *topModel) press(k string) tea.Cmd {
	page := max(m.tableHeight()-1, 1)
	n := sortKey(len(sortKeys))
	switch k {
	case "q", "ctrl+c":
		return tea.Quit
	case "s", "tab":
		m.resort((m.key+1)%n, m.reverse)
	case "S", "shift+tab":
		m.resort((m.key+n-1)%n, m.reverse)
	case "r":
		m.resort(m.key, !m.reverse)
	case "up", "k":
		m.scroll(-1)
	case "down", "j":
		m.scroll(1)
	case "pgup":
		m.scroll(-page)
	case "pgdown", " ":
		m.scroll(page)
	case "home", "g":
		m.offset = 0
	case "end", "G":
		m.scroll(len(m.rows))
	}
	return nil
}

// resort orders the rows by key, reversed or not.
func (m *topModel) resort(key sortKey, reverse bool) {
	m.key, m.reverse = key, reverse
	m.rows = sortRows(m.rows, key, reverse)
}

// scroll moves the table by n rows, within its bounds.
func (m *topModel) scroll(n int) {
	m.offset = max(min(m.offset+n, len(m.rows)-m.tableHeight()), 0)
}

// Styles of top's screen.
var (
	topTitleStyle  = lipgloss.NewStyle().Bold(true)
	topHeaderStyle = lipgloss.NewStyle().Reverse(true)
	topFlowStyle   = lipgloss.NewStyle().Bold(true)
	topErrorStyle  = lipgloss.NewStyle().Foreground(lipgloss.Color("9"))
	topNoteStyle   = lipgloss.NewStyle().Faint(true)
	topFooterStyle = lipgloss.NewStyle().Faint(true)
)

// topColumns are the figures' titles and widths, right-aligned after the
// name column.
var topColumns = []struct {
	title string
	width int
}{{"RUNS/S", 8}, {"FAIL/S", 8}, {"IN FLIGHT", 10}, {"P50", 8}, {"P99", 8}, {"QUEUE", 7}, {"DLQ", 7}}

// maxErrorLines caps the lines naming workers that do not answer, so that
// the table keeps most of the screen.
func (m *topModel) maxErrorLines() int { return max(m.height/3, 1) }

// errorLines name the endpoints that did not answer the last refresh.
func (m *topModel) errorLines() []string {
	var out []string
	for i, err := range m.errs {
		if err != nil {
			out = append(out, fmt.Sprintf("down: %s: %v", shortSource(m.sources[i]), err))
		}
	}
	if n := m.maxErrorLines(); len(out) > n {
		out = append(out[:n-1], fmt.Sprintf("%d of %d endpoints do not answer (%d not shown)", len(out), len(m.sources), len(out)-n+1))
	}
	return out
}

// fleetLines are the fleet's summary and its workers' lines, the workers
// taking at most a quarter of the screen.
func (m *topModel) fleetLines() []string {
	summary, workers := fleetLines(m.view, m.viewErr, max(m.height/4, 1))
	if summary == "" {
		return nil
	}
	return append([]string{summary}, workers...)
}

// tableHeight is how many rows fit between the title, the error and
// fleet lines and the table's header above, and the footer below.
func (m *topModel) tableHeight() int {
	return max(m.height-3-len(m.errorLines())-len(m.fleetLines()), 1)
}

// View draws the screen: title, workers that do not answer, the table,
// and the keys; never wider or taller than the terminal.
func (m *topModel) View() string {
	w := max(m.width, 20)
	var lines []string
	line := func(style lipgloss.Style, s string) {
		lines = append(lines, style.Render(ansi.Truncate(s, w, "…")))
	}
	order := "↓"
	if m.reverse != (m.key == sortName) {
		order = "↑"
	}
	endpoints := count(len(m.sources), "endpoint")
	if !m.refreshed.IsZero() {
		endpoints = fmt.Sprintf("endpoints %d up, %d down", m.up(), len(m.sources)-m.up())
	}
	title := fmt.Sprintf("acemq-flow top · %s · sort: %s %s · last %s", endpoints,
		sortKeys[m.key].title, order, shortDuration(m.interval*topWindow))
	if !m.refreshed.IsZero() {
		title += " · " + m.refreshed.Format("15:04:05")
	}
	line(topTitleStyle, title)
	for _, e := range m.errorLines() {
		line(topErrorStyle, e)
	}
	for i, f := range m.fleetLines() {
		style := topNoteStyle
		if i == 1 {
			style = topHeaderStyle
		}
		line(style, f)
	}
	nameWidth := w
	for _, c := range topColumns {
		nameWidth -= c.width
	}
	nameWidth = max(nameWidth, 8)
	header := padRight("FLOW / STEP", nameWidth)
	for _, c := range topColumns {
		header += padLeft(c.title, c.width)
	}
	line(topHeaderStyle, header)
	height := m.tableHeight()
	switch {
	case m.refreshed.IsZero():
		line(topNoteStyle, "reading "+strings.Join(m.sources, ", ")+" …")
	case len(m.rows) == 0 && len(m.errorLines()) < len(m.sources):
		line(topNoteStyle, "no flow metrics yet: has a flow run on these workers (acemq-flow worker --metrics-addr)?")
	}
	for _, r := range m.rows[m.offset:min(m.offset+height, len(m.rows))] {
		name, style := "  "+r.step, lipgloss.NewStyle()
		if r.step == "" {
			name, style = r.flow, topFlowStyle
		}
		s := padRight(ansi.Truncate(name, nameWidth-1, "…"), nameWidth)
		for i, v := range []string{rate(r.rate), rate(r.failRate), fmt.Sprintf("%.0f", r.inFlight),
			seconds(r.p50), seconds(r.p99), count0(r.queue), fmt.Sprintf("%.0f", r.dlq)} {
			s += padLeft(v, topColumns[i].width)
		}
		line(style, s)
	}
	for len(lines) < m.height-1 {
		lines = append(lines, "")
	}
	lines = lines[:max(m.height-1, 1)]
	footer := "s/S sort · r reverse · ↑↓ PgUp PgDn scroll · q quit"
	if len(m.rows) > 0 {
		footer += fmt.Sprintf(" · rows %d-%d of %d", m.offset+1, min(m.offset+height, len(m.rows)), len(m.rows))
	}
	line(topFooterStyle, footer)
	return strings.Join(lines, "\n")
}

// padRight pads s with spaces to width cells.
func padRight(s string, width int) string {
	return s + strings.Repeat(" ", max(width-ansi.StringWidth(s), 0))
}

// padLeft right-aligns s in width cells.
func padLeft(s string, width int) string {
	return strings.Repeat(" ", max(width-ansi.StringWidth(s), 0)) + s
}

// count0 shows a count: "-" when unknown.
func count0(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.0f", v)
}

// rate shows a rate per second: "-" when unknown.
func rate(v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case v >= 10_000:
		return fmt.Sprintf("%.1fk", v/1000)
	}
	return fmt.Sprintf("%.1f", v)
}

// seconds shows a duration given in seconds, to about three figures: "-"
// when unknown.
func seconds(v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case v < 0.001:
		return fmt.Sprintf("%.0fµs", v*1e6)
	case v < 0.01:
		return fmt.Sprintf("%.1fms", v*1e3)
	case v < 1:
		return fmt.Sprintf("%.0fms", v*1e3)
	case v < 60:
		return fmt.Sprintf("%.2fs", v)
	}
	return shortDuration(time.Duration(v * float64(time.Second)))
}
