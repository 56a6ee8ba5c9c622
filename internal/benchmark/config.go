package benchmark

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultN is how many messages each figure measures unless Config.N says
// otherwise: on a 2-core machine running RabbitMQ and PostgreSQL too, a
// whole run takes about a minute.
const DefaultN = 10000

// DefaultLadderDelay is the mean delay of the ladder figure's messages.
const DefaultLadderDelay = 2 * time.Second

// Config says where and how much to measure. URL is required; the zero
// value of every other field is its default.
type Config struct {
	// URL is the broker: amqp:// or amqps:// for RabbitMQ, memory://NAME
	// for the embedded in-process broker (give it a name: a bare memory://
	// is a broker per connection).
	URL string
	// DB is the PostgreSQL database for the journal and outbox figures
	// (nil = those figures are skipped).
	DB *pgxpool.Pool
	// DatabaseName is how the report names DB (never with a password).
	DatabaseName string
	// N is how many messages (runs, requests, records) each figure
	// measures (0 = DefaultN). The ladder figure uses N/5.
	N int
	// ID makes the names of everything a run declares its own: 1 to 12
	// lower-case letters and digits ("" = random ones). Queues and
	// exchanges start with Prefix(ID), tables with TablePrefix(ID).
	ID string
	// FanoutItems is how many items the fan-out's one run hands out, and
	// how many one-step runs its baseline makes (0 = 10 N).
	FanoutItems int
	// LadderDelay is the mean delay of the ladder figure's messages, which
	// are spread from half to one and a half of it and scheduled over one
	// LadderDelay; the baseline's TTL is LadderDelay (0 =
	// DefaultLadderDelay).
	LadderDelay time.Duration
	// Logger receives the library's logs (nil = discarded).
	Logger *slog.Logger
	// Progress hears when each part of the measurement starts (nil =
	// nobody). It is called from the measuring goroutine, between
	// measurements, never while one is timed.
	Progress func(Step)
}

// Step is a part of a run: Name is starting, Done of Total parts are
// finished (Total is 0 when a scenario runs on its own, outside Run).
type Step struct {
	Name        string
	Done, Total int
}

// Prefix starts the name of every queue and exchange a run with this ID
// declares.
func Prefix(id string) string { return "acemq-bench." + id }

// TablePrefix starts the name of every table a run with this ID creates.
func TablePrefix(id string) string { return "acemq_bench_" + id + "_" }

// validID is what an ID may be: it goes into table names.
var validID = regexp.MustCompile(`^[a-z0-9]{1,12}$`)

// withDefaults fills in the defaults.
func (c Config) withDefaults() (Config, error) {
	if c.URL == "" {
		return c, fmt.Errorf("benchmark: no broker URL")
	}
	if c.N < 0 {
		return c, fmt.Errorf("benchmark: %d messages, want at least 1", c.N)
	}
	if c.N == 0 {
		c.N = DefaultN
	}
	if c.ID == "" {
		c.ID = randomHex(6)
	}
	if !validID.MatchString(c.ID) {
		return c, fmt.Errorf("benchmark: ID %q, want 1 to 12 lower-case letters and digits", c.ID)
	}
	if c.FanoutItems < 0 {
		return c, fmt.Errorf("benchmark: %d fan-out items, want at least 1", c.FanoutItems)
	}
	if c.FanoutItems == 0 {
		c.FanoutItems = 10 * c.N
	}
	if c.LadderDelay <= 0 {
		c.LadderDelay = DefaultLadderDelay
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// rabbit reports whether the broker is RabbitMQ, which the amqp091-go
// baselines need.
func (c Config) rabbit() bool {
	return strings.HasPrefix(c.URL, "amqp://") || strings.HasPrefix(c.URL, "amqps://")
}

// step says that the part called name starts.
func (c Config) step(name string) {
	if c.Progress != nil {
		c.Progress(Step{Name: name})
	}
}

// name is a queue or exchange name of this run's own: the run's prefix,
// what it is for, and a random part.
func (c Config) name(what string) string {
	return Prefix(c.ID) + "." + what + "." + randomHex(4)
}

// randomHex is n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}
