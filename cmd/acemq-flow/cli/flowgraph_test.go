package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/acemq/acemq-flow/dsl"
	"github.com/acemq/acemq-flow/engine"
)

// forkFlow is a flow with a Parallel of two branches (the first of two
// steps, one with a compensation) and a ForEach, between two steps.
func forkFlow(name string) *dsl.FlowDef {
	return dsl.Flow(name,
		dsl.Step("validate", keep),
		dsl.Parallel("fulfil",
			dsl.Branch(dsl.Step("pick", keep),
				dsl.Step("reserve", keep).Compensate(func(context.Context, unitOrder) error { return nil })),
			dsl.Branch(dsl.Step("book", keep)),
		).Join(func(_ context.Context, o unitOrder, _, _ unitOrder) (unitOrder, error) { return o, nil }),
		dsl.ForEach("each",
			func(_ context.Context, o unitOrder) ([]int, error) { return make([]int, o.Amount), nil },
			dsl.Step("square", func(_ context.Context, i int) (int, error) { return i * i, nil }).
				Compensate(func(context.Context, int) error { return nil }),
			func(_ context.Context, o unitOrder, _ []int) (unitOrder, error) { return o, nil }).Concurrency(4),
		dsl.Step("notify", keep))
}

// section is the lines of text from the line that is heading up to the
// next empty line, each without the spaces a table pads its last cells
// with.
func section(t *testing.T, text, heading string) string {
	t.Helper()
	lines := strings.Split(text, "\n")
	start := slices.Index(lines, heading)
	require.GreaterOrEqual(t, start, 0, "no line %q in\n%s", heading, text)
	var out []string
	for _, l := range lines[start:] {
		if l == "" {
			break
		}
		out = append(out, strings.TrimRight(l, " "))
	}
	return strings.Join(out, "\n") + "\n"
}

// TestFlowsShowDrawsForks: flows show draws the route with the Parallel's
// branches and the ForEach's step under their forks, then shows every
// step's details in the drawing's order, each branch's steps named by
// where they are; its JSON carries the forks and where each branch step
// is.
func TestFlowsShowDrawsForks(t *testing.T) {
	t.Parallel()
	inv := invocation{flows: []*dsl.FlowDef{forkFlow("unit.shop")}}
	r := executeWith(t, inv, "flows", "show", "unit.shop")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, `route:
  1  validate
  2  fulfil  parallel, 2 branches
     ├─ branch 0: pick → reserve
     └─ branch 1: book
        join → each
  3  each  for each item, at most 4 in flight
     └─ each item: square
        join → notify
  4  notify
`, section(t, r.stdout, "route:"))
	var titles []string
	for _, l := range strings.Split(r.stdout, "\n") {
		if strings.HasPrefix(l, "step ") {
			titles = append(titles, strings.Join(strings.Fields(l), " "))
		}
	}
	require.Equal(t, []string{"step 1 validate", "step 2 fulfil", "step 2, branch 0 pick", "step 2, branch 0 reserve",
		"step 2, branch 1 book", "step 3 each", "step 3, each item square", "step 4 notify"}, titles)
	for _, want := range []string{
		`(?m)^  fork\s+parallel, 2 branches; its queue takes the branches back and runs the join$`,
		`(?m)^  fork\s+for each item, at most 4 in flight; its queue takes the branches back and runs the join$`,
		`(?m)^  compensation\s+unit\.shop\.compensate\.reserve$`,
		`(?m)^  takes\s+int -> int$`,
	} {
		require.Regexp(t, want, r.stdout)
	}

	r = executeWith(t, inv, "flows", "show", "unit.shop", "-o", "json")
	require.Zero(t, r.code, r.stderr)
	var fi engine.FlowInfo
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &fi))
	require.Len(t, fi.Steps, 8)
	require.Equal(t, &engine.ForkInfo{Kind: "parallel", Branches: [][]string{{"pick", "reserve"}, {"book"}}}, fi.Steps[1].Fork)
	require.Equal(t, &engine.ForkInfo{Kind: "foreach", Branches: [][]string{{"square"}}, Concurrency: 4}, fi.Steps[2].Fork)
	var raw struct {
		Steps []map[string]any `json:"steps"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &raw))
	book := raw.Steps[slices.IndexFunc(fi.Steps, func(s engine.StepInfo) bool { return s.Name == "book" })]
	require.Equal(t, "fulfil", book["on_fork"])
	require.Equal(t, float64(1), book["on_branch"])
	require.NotContains(t, raw.Steps[0], "fork", "a step that is no fork says nothing of forks")
	require.NotContains(t, raw.Steps[0], "on_fork")
}

// TestFlowGraphWrapsLongBranches: a branch too long for one line goes on
// on the next, under its first step, the tree's line beside it; the
// route's numbers line up past nine steps; a fork that ends the route
// joins to done.
func TestFlowGraphWrapsLongBranches(t *testing.T) {
	t.Parallel()
	long := []string{"check-the-warehouse-stock", "reserve-the-items", "pick-the-items-off-the-shelf", "pack-them", "label-the-parcel"}
	fi := engine.FlowInfo{Name: "f"}
	for i := range 9 {
		fi.Steps = append(fi.Steps, engine.StepInfo{Name: fmt.Sprintf("s%d", i+1)})
	}
	fi.Steps = append(fi.Steps, engine.StepInfo{Name: "ship", Fork: &engine.ForkInfo{Kind: "parallel", Branches: [][]string{long, {"call"}}}})
	for _, n := range long {
		fi.Steps = append(fi.Steps, engine.StepInfo{Name: n, OnFork: "ship"})
	}
	fi.Steps = append(fi.Steps, engine.StepInfo{Name: "call", OnFork: "ship", OnBranch: 1, External: true})
	lines := flowGraph(fi, graphWidth-2)
	require.Equal(t, []string{
		" 9  s9",
		"10  ship  parallel, 2 branches",
		"    ├─ branch 0: check-the-warehouse-stock → reserve-the-items →",
		"    │            pick-the-items-off-the-shelf → pack-them → label-the-parcel",
		"    └─ branch 1: call",
		"       join → done",
	}, lines[8:])
	for _, l := range lines {
		require.LessOrEqual(t, utf8.RuneCountInString(l), graphWidth-2, l)
	}
	places := flowPlaces(fi)
	require.Len(t, places, len(fi.Steps))
	require.Equal(t, "step 10, branch 1", places[len(places)-1].title())
}
