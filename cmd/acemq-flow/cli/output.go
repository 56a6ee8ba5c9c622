package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"
)

// writeJSON writes v as one indented JSON document and a newline: what
// every command prints with --output json.
func writeJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("render as json: %w", err)
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// table writes aligned columns for people: cells separated by tabs, rows
// by newlines. Flush it when done.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer) *table {
	return &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
}

// row writes one row; a cell never holds a tab or a newline, which would
// break the columns.
func (t *table) row(cells ...string) {
	for i, c := range cells {
		cells[i] = strings.NewReplacer("\t", " ", "\r\n", " ", "\n", " ", "\r", " ").Replace(c)
	}
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

func (t *table) flush() error { return t.tw.Flush() }

// timeLayout is how a table shows a time: local, to the second, with the
// day (runs of other days are listed too).
const timeLayout = "Jan _2 15:04:05"

// timeLayoutMillis is timeLayout to the millisecond, for a run's
// timeline, whose steps are often milliseconds apart.
const timeLayoutMillis = "Jan _2 15:04:05.000"

// localTime formats t in the local time zone, "" for the zero time.
func localTime(t time.Time, layout string) string {
	if t.IsZero() {
		return ""
	}
	return t.Local().Format(layout)
}

// localTimePtr is localTime of an optional time.
func localTimePtr(t *time.Time, layout string) string {
	if t == nil {
		return ""
	}
	return localTime(*t, layout)
}

// shortDuration rounds d for reading: milliseconds under a second, ten
// milliseconds under a minute, seconds under an hour, minutes beyond.
func shortDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + shortDuration(-d)
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(10 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	default:
		return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
	}
}

// truncate cuts s to at most n runes, ending in an ellipsis when it did,
// with its line breaks made spaces: an error in a table cell.
func truncate(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// count is n with noun, made plural unless n is 1: "1 message", "2
// messages".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// shellQuote quotes s for a POSIX shell, so that a command shown to a
// person can be pasted as it is.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
