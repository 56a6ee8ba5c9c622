package engine

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/parser"

	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine/journal"
)

// bulkPage is how many failed runs a bulk replay reads from the journal at
// a time while it looks for the ones its Where accepts: the runs it keeps
// are bounded by its Limit, the ones it reads by this.
const bulkPage = 500

// tieWindow is how close to a page's oldest run the next page starts: the
// journal pages by start time (Query.Before), which PostgreSQL keeps to
// the microsecond, and several runs can start within one. The next page
// reads those again and passes over the ones already seen.
const tieWindow = time.Microsecond

// whereRun is what a bulk replay's Where sees as run.
type whereRun struct {
	RunID     string    `expr:"run_id"`
	Flow      string    `expr:"flow"`
	Step      string    `expr:"step"`
	Error     string    `expr:"error"`
	Attempt   int       `expr:"attempt"`
	StartedAt time.Time `expr:"started_at"`
}

// where is a bulk replay's compiled condition.
type where struct {
	cond *dsl.Expr
	// attempt says the condition reads run.attempt, which costs a read of
	// each run's timeline.
	attempt bool
}

// compileWhere compiles req.Where (nil for none) before anything is read:
// against the input type of req.Flow when it is set, and refused with
// ErrInvalidConfig when it reads payload without one (every flow has
// payload fields of its own, so none can be checked).
func (e *Engine) compileWhere(req BulkReplay) (*where, error) {
	var input reflect.Type
	if req.Flow != "" {
		f, err := e.flow(req.Flow)
		if err != nil {
			return nil, fmt.Errorf("bulk replay: %w", err)
		}
		input = f.def.Input()
	}
	if strings.TrimSpace(req.Where) == "" {
		return nil, nil
	}
	var tree ast.Node
	if t, err := parser.Parse(req.Where); err == nil {
		tree = t.Node
	}
	if input == nil && tree != nil && reads(tree, "payload", "") {
		return nil, fmt.Errorf("%w: --where %q reads payload, whose fields are those of a flow's input: give the flow (--flow) to check them against", ErrInvalidConfig, req.Where)
	}
	cond, err := dsl.Condition(req.Where, input, map[string]any{"run": whereRun{}})
	if err != nil {
		return nil, fmt.Errorf("%w: --where %v", ErrInvalidConfig, err)
	}
	return &where{cond: cond, attempt: tree != nil && reads(tree, "run", "attempt")}, nil
}

// reads reports whether the expression tree reads the variable name, or,
// with field, that field of it.
func reads(tree ast.Node, name, field string) bool {
	return ast.Find(tree, func(n ast.Node) bool {
		if field == "" {
			id, ok := n.(*ast.IdentifierNode)
			return ok && id.Value == name
		}
		m, ok := n.(*ast.MemberNode)
		if !ok {
			return false
		}
		id, isID := m.Node.(*ast.IdentifierNode)
		prop, isString := m.Property.(*ast.StringNode)
		return isID && isString && id.Value == name && prop.Value == field
	}) != nil
}

// matches evaluates w on r: its fields, the attempt of its last step
// attempt, and its input. A condition that cannot be worked out for one
// run (its input no longer fits the flow's type, a nil it reaches
// through) declines that run rather than stopping the others.
func (e *Engine) matches(ctx context.Context, w *where, r journal.Run) bool {
	if w == nil {
		return true
	}
	run := whereRun{RunID: r.ID, Flow: r.Flow, Step: r.Step, Error: r.Error, StartedAt: r.StartedAt}
	if w.attempt {
		if tl, err := e.journal.Timeline(ctx, r.ID); err == nil {
			for _, ev := range tl {
				if ev.Kind == journal.KindStep && ev.Step == r.Step {
					run.Attempt = ev.Attempt
				}
			}
		}
	}
	ok, err := w.cond.BoolWith(r.Input, map[string]any{"run": run})
	return err == nil && ok
}

// selection is what a bulk replay chose, and counts what it looked at on
// the way (into res, reporting each run declined).
type selection struct {
	// statuses are those of the runs chosen (BulkReplay.statuses).
	statuses []journal.Status
	e        *Engine
	req      BulkReplay
	where    *where
	limit    int
	res      *BulkResult
	report   func()
}

// choose returns the runs to replay: those of req.RunIDs, or the failed
// runs of the journal newest first, page by page, that Where accepts, up
// to the limit.
func (s *selection) choose(ctx context.Context) ([]journal.Run, error) {
	if len(s.req.RunIDs) > 0 {
		return s.byID(ctx)
	}
	size := bulkPage
	if s.where == nil {
		// Every run read is taken.
		size = min(s.limit, bulkPage)
	}
	pages := newRunPages(s.e.journal, journal.Query{Flow: s.req.Flow, Statuses: s.statuses, Since: s.req.Since}, size)
	var chosen []journal.Run
	for len(chosen) < s.limit {
		page, err := pages.next(ctx)
		if err != nil {
			return chosen, fmt.Errorf("bulk replay: select runs: %w", err)
		}
		if len(page) == 0 {
			break
		}
		for _, r := range page {
			s.res.Selected++
			if !s.e.matches(ctx, s.where, r) {
				s.res.Skipped++
				s.report()
				continue
			}
			if chosen = append(chosen, r); len(chosen) == s.limit {
				break
			}
		}
	}
	return chosen, nil
}

// byID looks up req.RunIDs: runs that are not failed (or unknown) are
// listed in NotFailed, those of another flow or started before Since, or
// that Where declines, counted as skipped.
func (s *selection) byID(ctx context.Context) ([]journal.Run, error) {
	var chosen []journal.Run
	seen := map[string]bool{}
	for _, id := range s.req.RunIDs {
		if seen[id] || len(chosen) == s.limit {
			continue
		}
		seen[id] = true
		r, err := s.e.journal.Run(ctx, id)
		switch {
		case errors.Is(err, journal.ErrRunNotFound) || err == nil && !slices.Contains(s.statuses, r.Status):
			s.res.NotFailed = append(s.res.NotFailed, id)
			s.report()
			continue
		case err != nil:
			return chosen, fmt.Errorf("bulk replay: look up run %s: %w", id, err)
		}
		s.res.Selected++
		if s.req.Flow != "" && r.Flow != s.req.Flow || r.StartedAt.Before(s.req.Since) || !s.e.matches(ctx, s.where, r) {
			s.res.Skipped++
			s.report()
			continue
		}
		chosen = append(chosen, r)
	}
	return chosen, nil
}

// runPages reads the runs a query selects, newest first, a page at a time,
// each run once, however many share a start time.
type runPages struct {
	j    journal.Journal
	q    journal.Query
	size int
	// before is where the next page starts (zero: at the newest).
	before time.Time
	// edge holds the runs already given that start before before: the next
	// page reads them again, and passes over them. They are the runs of the
	// last tieWindow or so.
	edge map[string]time.Time
	done bool
}

func newRunPages(j journal.Journal, q journal.Query, size int) *runPages {
	return &runPages{j: j, q: q, size: size, edge: map[string]time.Time{}}
}

// next is the next page of runs not given before; empty once the query
// has no more.
func (p *runPages) next(ctx context.Context) ([]journal.Run, error) {
	for !p.done {
		q := p.q
		q.Before, q.Limit = p.before, p.size
		runs, err := p.j.Runs(ctx, q)
		if err != nil {
			return nil, err
		}
		p.done = len(runs) < p.size
		if len(runs) == 0 {
			return nil, nil
		}
		fresh := slices.DeleteFunc(slices.Clone(runs), func(r journal.Run) bool { _, seen := p.edge[r.ID]; return seen })
		// The next page starts just after this one's oldest run, so that
		// the runs sharing its start time that did not fit are read; never
		// later than this page started, or it would read them all again.
		cursor := runs[len(runs)-1].StartedAt.Add(tieWindow)
		if !p.before.IsZero() && cursor.After(p.before) {
			cursor = p.before
		}
		for id, at := range p.edge {
			if !at.Before(cursor) {
				delete(p.edge, id)
			}
		}
		for _, r := range runs {
			if r.StartedAt.Before(cursor) {
				p.edge[r.ID] = r.StartedAt
			}
		}
		if len(fresh) == 0 && !p.done {
			// A whole page started within tieWindow and was seen: read
			// more at once to get past it.
			p.size *= 2
		}
		p.before = cursor
		if len(fresh) > 0 {
			return fresh, nil
		}
	}
	return nil, nil
}
