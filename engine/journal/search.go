package journal

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/parser"
	"github.com/expr-lang/expr/vm"
)

// ErrInvalidWhere: a --where expression (ParseWhere) that is not an
// expr-lang condition over a run.
var ErrInvalidWhere = errors.New("invalid where expression")

// FieldKind is what a Cond compares.
type FieldKind string

// The fields a Cond compares.
const (
	// FieldPayload is a field of the run's input, read as JSON: Path
	// names it from the top.
	FieldPayload FieldKind = "payload"
	FieldFlow    FieldKind = "flow"
	FieldStatus  FieldKind = "status"
	// FieldStartedAt compares the run's start with a time.
	FieldStartedAt FieldKind = "started_at"
	// FieldKey is the run's business key (Run.BusinessKey).
	FieldKey FieldKind = "key"
	// FieldID is the run's id; only "==" and CmpPrefix apply.
	FieldID FieldKind = "id"
)

// CondOp is what a Cond is.
type CondOp string

// The kinds of Cond.
const (
	CondAnd CondOp = "and"
	CondOr  CondOp = "or"
	CondNot CondOp = "not"
	// CondCmp compares Field with Value by Cmp.
	CondCmp CondOp = "cmp"
)

// The comparisons of a CondCmp: "==", "!=", "<", "<=", ">", ">=" and
// CmpPrefix.
const CmpPrefix = "startsWith"

// Cond is the part of a where expression a journal evaluates itself (in
// SQL, for the PostgreSQL journal): comparisons of a run's fields with
// constants, joined by and, or and not. A comparison of a payload field
// holds only when the input is JSON, the field is there, and its value is
// of the constant's JSON type (a string, a number or a bool) and compares
// so: a missing field is equal to nothing and unequal to nothing, and
// "!=" holds only for a field of the same type with another value. The
// payload's strings compare by == and != only.
type Cond struct {
	Op   CondOp `json:"op"`
	Args []Cond `json:"args,omitempty"`
	// Field, Path, Cmp and Value are a CondCmp's: Value is a string, a
	// float64, a bool (payload fields) or a time.Time (FieldStartedAt).
	Field FieldKind `json:"field,omitempty"`
	Path  []string  `json:"path,omitempty"`
	Cmp   string    `json:"cmp,omitempty"`
	Value any       `json:"value,omitempty"`
}

// Match reports whether run meets c, by the rules of Cond: what the
// in-memory journal evaluates, and what the SQL journal's translation
// gives.
func (c Cond) Match(run Run) bool {
	switch c.Op {
	case CondAnd:
		for _, a := range c.Args {
			if !a.Match(run) {
				return false
			}
		}
		return true
	case CondOr:
		for _, a := range c.Args {
			if a.Match(run) {
				return true
			}
		}
		return false
	case CondNot:
		return len(c.Args) == 1 && !c.Args[0].Match(run)
	case CondCmp:
		return c.matchCmp(run)
	}
	return false
}

func (c Cond) matchCmp(run Run) bool {
	switch c.Field {
	case FieldFlow, FieldStatus, FieldKey, FieldID:
		have := map[FieldKind]string{FieldFlow: run.Flow, FieldStatus: string(run.Status), FieldKey: run.BusinessKey, FieldID: run.ID}[c.Field]
		want, ok := c.Value.(string)
		if !ok {
			return false
		}
		switch c.Cmp {
		case "==":
			return have == want
		case "!=":
			return have != want
		case CmpPrefix:
			return strings.HasPrefix(have, want)
		}
		return false
	case FieldStartedAt:
		want, ok := c.Value.(time.Time)
		if !ok {
			return false
		}
		return compareHolds(c.Cmp, run.StartedAt.Compare(want))
	case FieldPayload:
		v, ok := payloadField(run.Input, c.Path)
		if !ok {
			return false
		}
		switch want := c.Value.(type) {
		case string:
			s, ok := v.(string)
			if !ok || (c.Cmp != "==" && c.Cmp != "!=") {
				return false
			}
			return compareHolds(c.Cmp, strings.Compare(s, want))
		case bool:
			b, ok := v.(bool)
			if !ok || (c.Cmp != "==" && c.Cmp != "!=") {
				return false
			}
			return (b == want) == (c.Cmp == "==")
		case float64:
			n, ok := v.(json.Number)
			if !ok {
				return false
			}
			f, err := n.Float64()
			if err != nil {
				return false
			}
			return compareHolds(c.Cmp, cmpFloat(f, want))
		}
	}
	return false
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// compareHolds says whether a comparison c whose operands compare as
// order (-1, 0, 1) holds.
func compareHolds(c string, order int) bool {
	switch c {
	case "==":
		return order == 0
	case "!=":
		return order != 0
	case "<":
		return order < 0
	case "<=":
		return order <= 0
	case ">":
		return order > 0
	case ">=":
		return order >= 0
	}
	return false
}

// payloadField is the value at path in a JSON input (numbers as
// json.Number), and whether it is there.
func payloadField(input json.RawMessage, path []string) (any, bool) {
	if len(input) == 0 {
		return nil, false
	}
	d := json.NewDecoder(bytes.NewReader(input))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, false
	}
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[k]; !ok {
			return nil, false
		}
	}
	return v, true
}

// Where is a condition on runs in the expr-lang language of the flows
// (runs list --where, the dashboard's search box), over:
//
//   - payload: the run's input, read as JSON (nil when it is not JSON);
//   - flow, status, key (the business key, dsl.Key), id: strings;
//   - started_at: a time (compare it with date("2026-12-01T00:00:00Z")
//     or now() - duration("24h")).
//
// What of it a journal can evaluate itself is Cond (see ParseWhere); the
// rest is evaluated on each run the journal returns (Match).
type Where struct {
	src     string
	program *vm.Program
	cond    *Cond
	exact   bool
}

// whereEnv is the environment a Where is compiled against and run on.
func whereEnv(run Run) map[string]any {
	var payload any
	if len(run.Input) > 0 {
		d := json.NewDecoder(bytes.NewReader(run.Input))
		if err := d.Decode(&payload); err != nil {
			payload = nil
		}
	}
	return map[string]any{"payload": payload, "flow": run.Flow, "status": string(run.Status), "key": run.BusinessKey,
		"id": run.ID, "started_at": run.StartedAt}
}

// ParseWhere compiles src as a Where. It refuses, with ErrInvalidWhere, a
// text that does not compile, names something but payload, flow, status,
// key, id and started_at, or does not give a bool.
//
// The conditions joined by && at the top are translated one by one into
// Cond where each can be whole: ==, != (strings, numbers, bools), <, <=,
// >, >= (numbers, started_at), in (a list of constants), startsWith (id
// only), !, && and || of such, on payload.a.b (or payload["a"]), flow,
// status, key, id and started_at, against constants (literals, or
// expressions of no run field such as now() - duration("1h")). Anything
// else (arithmetic on a field, functions of a field, nil, string order,
// matches, contains) is left to Match.
func ParseWhere(src string) (*Where, error) {
	if strings.TrimSpace(src) == "" {
		return nil, fmt.Errorf("%w: empty", ErrInvalidWhere)
	}
	env := whereEnv(Run{})
	env["payload"] = map[string]any{}
	program, err := expr.Compile(src, expr.Env(env), expr.AsBool())
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %w", ErrInvalidWhere, src, err)
	}
	tree, err := parser.Parse(src)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %w", ErrInvalidWhere, src, err)
	}
	w := &Where{src: src, program: program, exact: true}
	var pushed []Cond
	for _, part := range conjuncts(tree.Node) {
		c, ok := translate(part)
		if !ok {
			w.exact = false
			continue
		}
		pushed = append(pushed, c)
	}
	switch len(pushed) {
	case 0:
	case 1:
		w.cond = &pushed[0]
	default:
		w.cond = &Cond{Op: CondAnd, Args: pushed}
	}
	return w, nil
}

// String is the expression's source.
func (w *Where) String() string { return w.src }

// Cond is the part a journal evaluates (Query.Where), nil when none is.
func (w *Where) Cond() *Cond { return w.cond }

// Exact reports whether Cond is the whole expression: the runs a journal
// returns for it need no Match.
func (w *Where) Exact() bool { return w.exact }

// Match evaluates the whole expression on run; an expression that fails
// on it (a field of another type) does not match.
func (w *Where) Match(run Run) bool {
	out, err := expr.Run(w.program, whereEnv(run))
	if err != nil {
		return false
	}
	b, _ := out.(bool)
	return b
}

func conjuncts(n ast.Node) []ast.Node {
	if b, ok := n.(*ast.BinaryNode); ok && (b.Operator == "&&" || b.Operator == "and") {
		return append(conjuncts(b.Left), conjuncts(b.Right)...)
	}
	return []ast.Node{n}
}

// translate is n as a Cond, when it can be whole.
func translate(n ast.Node) (Cond, bool) {
	switch n := n.(type) {
	case *ast.BinaryNode:
		switch n.Operator {
		case "&&", "and", "||", "or":
			l, ok1 := translate(n.Left)
			r, ok2 := translate(n.Right)
			op := CondAnd
			if n.Operator == "||" || n.Operator == "or" {
				op = CondOr
			}
			return Cond{Op: op, Args: []Cond{l, r}}, ok1 && ok2
		case "==", "!=", "<", "<=", ">", ">=", CmpPrefix:
			return comparison(n.Operator, n.Left, n.Right)
		case "in":
			arr, ok := n.Right.(*ast.ArrayNode)
			if !ok || len(arr.Nodes) == 0 {
				return Cond{}, false
			}
			var or []Cond
			for _, item := range arr.Nodes {
				c, ok := comparison("==", n.Left, item)
				if !ok {
					return Cond{}, false
				}
				or = append(or, c)
			}
			if len(or) == 1 {
				return or[0], true
			}
			return Cond{Op: CondOr, Args: or}, true
		}
	case *ast.UnaryNode:
		if n.Operator == "!" || n.Operator == "not" {
			c, ok := translate(n.Node)
			return Cond{Op: CondNot, Args: []Cond{c}}, ok
		}
	case *ast.MemberNode, *ast.IdentifierNode:
		// A bare payload field: it is true.
		if f, path, ok := field(n); ok && f == FieldPayload {
			return Cond{Op: CondCmp, Field: FieldPayload, Path: path, Cmp: "==", Value: true}, true
		}
	}
	return Cond{}, false
}

// comparison is left op right as a Cond: a field on one side, a constant
// on the other (swapped when the field is on the right).
func comparison(op string, left, right ast.Node) (Cond, bool) {
	f, path, ok := field(left)
	value := right
	if !ok {
		if op == CmpPrefix {
			return Cond{}, false
		}
		if f, path, ok = field(right); !ok {
			return Cond{}, false
		}
		value = left
		op = map[string]string{"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}[op]
	}
	v, ok := constant(value)
	if !ok {
		return Cond{}, false
	}
	c := Cond{Op: CondCmp, Field: f, Path: path, Cmp: op}
	order := op != "==" && op != "!=" && op != CmpPrefix
	switch f {
	case FieldPayload:
		switch x := v.(type) {
		case string, bool:
			if order || op == CmpPrefix {
				return Cond{}, false
			}
			c.Value = x
		case int:
			c.Value = float64(x)
		case float64:
			if math.IsNaN(x) || math.IsInf(x, 0) {
				return Cond{}, false
			}
			c.Value = x
		default:
			return Cond{}, false
		}
		if op == CmpPrefix {
			return Cond{}, false
		}
	case FieldStartedAt:
		t, ok := v.(time.Time)
		if !ok || op == CmpPrefix {
			return Cond{}, false
		}
		c.Value = t.UTC()
	case FieldID:
		s, ok := v.(string)
		if !ok || (op != "==" && op != CmpPrefix) {
			return Cond{}, false
		}
		c.Value = s
	default: // flow, status, key
		s, ok := v.(string)
		if !ok || (op != "==" && op != "!=") {
			return Cond{}, false
		}
		c.Value = s
	}
	return c, true
}

// field is the run field n names: payload.a.b (or payload["a"]), flow,
// status, key, id or started_at.
func field(n ast.Node) (FieldKind, []string, bool) {
	switch n := n.(type) {
	case *ast.IdentifierNode:
		switch k := FieldKind(n.Value); k {
		case FieldFlow, FieldStatus, FieldKey, FieldID, FieldStartedAt:
			return k, nil, true
		}
	case *ast.MemberNode:
		if n.Method {
			return "", nil, false
		}
		prop, ok := n.Property.(*ast.StringNode)
		if !ok {
			return "", nil, false
		}
		if id, ok := n.Node.(*ast.IdentifierNode); ok && id.Value == "payload" {
			return FieldPayload, []string{prop.Value}, true
		}
		f, path, ok := field(n.Node)
		if !ok || f != FieldPayload {
			return "", nil, false
		}
		return FieldPayload, append(slices.Clip(path), prop.Value), true
	case *ast.ChainNode:
		return field(n.Node)
	}
	return "", nil, false
}

// constant is n's value when n reads no run field: a literal, or an
// expression of literals and functions (date("..."), now() -
// duration("1h")), evaluated now.
func constant(n ast.Node) (any, bool) {
	switch n := n.(type) {
	case *ast.StringNode:
		return n.Value, true
	case *ast.IntegerNode:
		return n.Value, true
	case *ast.FloatNode:
		return n.Value, true
	case *ast.BoolNode:
		return n.Value, true
	case *ast.NilNode:
		return nil, false
	}
	reads := false
	ast.Find(n, func(x ast.Node) bool {
		if id, ok := x.(*ast.IdentifierNode); ok && id.Value != "" {
			if _, isField := whereEnv(Run{})[id.Value]; isField {
				reads = true
			}
		}
		return reads
	})
	if reads {
		return nil, false
	}
	out, err := expr.Eval(n.String(), nil)
	if err != nil {
		return nil, false
	}
	switch out.(type) {
	case string, int, float64, bool, time.Time:
		return out, true
	}
	return nil, false
}

// MaxScan is how many runs Find reads at most, page by page, for the part
// of a Where a journal cannot evaluate.
const MaxScan = 20_000

// Found is what Find found.
type Found struct {
	// Runs are the runs that match, in the Query's order, at most its
	// Limit.
	Runs []Run
	// Scanned is how many runs the journal returned to be matched here;
	// Partial says Find stopped at MaxScan before finding Limit runs or
	// reaching the last, so that older matches may exist.
	Scanned int
	Partial bool
}

// Find returns the runs q selects that w (nil: every run) matches, newest
// first: w's Cond goes to the journal with q (Query.Where, and-ed with any
// already there), and when it is not the whole of w, the rest is matched
// here on pages of the journal's answer until q.Limit runs match or
// MaxScan runs were read. It refuses a q ordered by SoonestDue with a w
// that is not exact.
func Find(ctx context.Context, j Journal, q Query, w *Where) (Found, error) {
	limit := q.Limit
	if limit <= 0 {
		limit = DefaultLimit
	}
	if w != nil && w.cond != nil {
		if q.Where != nil {
			q.Where = &Cond{Op: CondAnd, Args: []Cond{*q.Where, *w.cond}}
		} else {
			q.Where = w.cond
		}
	}
	if w == nil || w.exact {
		q.Limit = limit
		runs, err := j.Runs(ctx, q)
		return Found{Runs: runs, Scanned: len(runs)}, err
	}
	if q.Order != NewestFirst {
		return Found{}, fmt.Errorf("%w: %q: only a where expression the journal evaluates whole orders by due time", ErrInvalidWhere, w.src)
	}
	var f Found
	q.Limit = max(limit, 500)
	for f.Scanned < MaxScan {
		page, err := j.Runs(ctx, q)
		if err != nil {
			return f, err
		}
		f.Scanned += len(page)
		for _, r := range page {
			if w.Match(r) {
				f.Runs = append(f.Runs, r)
				if len(f.Runs) == limit {
					return f, nil
				}
			}
		}
		if len(page) < q.Limit {
			return f, nil
		}
		q.Before = page[len(page)-1].StartedAt
	}
	f.Partial = true
	return f, nil
}
