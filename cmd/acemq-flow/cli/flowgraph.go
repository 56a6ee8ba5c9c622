package cli

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/acemq/acemq-flow/engine"
)

// graphWidth is the width flows show draws a flow's graph in: a branch
// longer than that goes on on the next line.
const graphWidth = 80

// Branches are numbered from 0 everywhere the command line shows them, as
// the run journal says them ("branch 0 arrived", "item 0 arrived") and as
// FlowInfo's JSON has them (on_branch).

// flowPlace is one step of a flow in the order flows show draws it: a
// step of the route (branch < 0), or a step of a fork's branch right
// after its fork.
type flowPlace struct {
	step engine.StepInfo
	// pos is the place on the route (from 1) of the step or of the fork
	// it is on a branch of.
	pos int
	// fork and branch say which fork's branch the step is on (branch -1
	// on the route).
	fork   *engine.StepInfo
	branch int
}

// title is what the step's block in the details is called: "step 2", or
// "step 2, branch 0" / "step 3, each item" on a fork's branch.
func (p flowPlace) title() string {
	switch {
	case p.branch < 0:
		return fmt.Sprintf("step %d", p.pos)
	case p.fork.Fork.Kind == "foreach":
		return fmt.Sprintf("step %d, each item", p.pos)
	}
	return fmt.Sprintf("step %d, branch %d", p.pos, p.branch)
}

// flowPlaces lists fi's steps in the order flows show draws them: each
// step of the route, a fork followed by its branches' steps, branch by
// branch. A step on a branch FlowInfo names no fork for comes last, as a
// step of the route.
func flowPlaces(fi engine.FlowInfo) []flowPlace {
	byName := make(map[string]engine.StepInfo, len(fi.Steps))
	for _, s := range fi.Steps {
		byName[s.Name] = s
	}
	var (
		out  []flowPlace
		seen = map[string]bool{}
		pos  = 0
	)
	for _, s := range fi.Steps {
		if s.OnFork != "" {
			continue
		}
		pos++
		out = append(out, flowPlace{step: s, pos: pos, branch: -1})
		seen[s.Name] = true
		if s.Fork == nil {
			continue
		}
		fork := s
		for b, names := range s.Fork.Branches {
			for _, n := range names {
				bs, ok := byName[n]
				if !ok || seen[n] {
					continue
				}
				seen[n] = true
				out = append(out, flowPlace{step: bs, pos: pos, fork: &fork, branch: b})
			}
		}
	}
	for _, s := range fi.Steps {
		if !seen[s.Name] {
			pos++
			out = append(out, flowPlace{step: s, pos: pos, branch: -1})
		}
	}
	return out
}

// forkSummary says what a fork is in a few words: "parallel, 2
// branches", "for each item, at most 4 in flight".
func forkSummary(f *engine.ForkInfo) string {
	if f.Kind == "foreach" {
		if f.Concurrency > 0 {
			return fmt.Sprintf("for each item, at most %d in flight", f.Concurrency)
		}
		return "for each item"
	}
	if len(f.Branches) == 1 {
		return f.Kind + ", 1 branch"
	}
	return fmt.Sprintf("%s, %d branches", f.Kind, len(f.Branches))
}

// flowGraph draws fi's route for a person, one step a line, numbered as
// the details are; a fork's branches hang under it as a tree, each
// branch's steps in order on a line of their own (wrapped at width), then
// where the join sends the run:
//
//	1  validate
//	2  fulfil  parallel, 2 branches
//	   ├─ branch 0: pick → reserve
//	   └─ branch 1: book
//	      join → notify
//	3  notify
func flowGraph(fi engine.FlowInfo, width int) []string {
	var route []engine.StepInfo
	for _, p := range flowPlaces(fi) {
		if p.branch < 0 {
			route = append(route, p.step)
		}
	}
	numWidth := len(strconv.Itoa(len(route)))
	indent := strings.Repeat(" ", numWidth+2)
	var lines []string
	for i, s := range route {
		line := fmt.Sprintf("%*d  %s", numWidth, i+1, s.Name)
		switch {
		case s.Fork != nil:
			line += "  " + forkSummary(s.Fork)
		case s.External:
			line += "  (served by another service)"
		case s.Child != "":
			line += "  starts a child run of " + s.Child
		case s.Wait != nil:
			then := "then fails"
			if s.Wait.OnTimeout {
				then = "then goes on"
			}
			line += fmt.Sprintf("  waits for signal %s (at most %s, %s)", s.Name, s.Wait.Timeout, then)
		}
		lines = append(lines, line)
		if s.Fork == nil {
			continue
		}
		for b, names := range s.Fork.Branches {
			last := b == len(s.Fork.Branches)-1
			tee, bar := "├─ ", "│  "
			if last {
				tee, bar = "└─ ", "   "
			}
			label := fmt.Sprintf("branch %d: ", b)
			if s.Fork.Kind == "foreach" {
				label = "each item: "
			}
			first := indent + tee + label
			rest := indent + bar + strings.Repeat(" ", utf8.RuneCountInString(label))
			lines = append(lines, wrapChain(first, rest, names, width)...)
		}
		next := "done"
		if i+1 < len(route) {
			next = route[i+1].Name
		}
		lines = append(lines, indent+"   join → "+next)
	}
	return lines
}

// wrapChain writes names joined by arrows after first, going on after
// rest on the next line where a line would grow past width (a name longer
// than a line has one of its own).
func wrapChain(first, rest string, names []string, width int) []string {
	var (
		lines []string
		line  = first
		start = true
	)
	for i, n := range names {
		piece := n
		if i < len(names)-1 {
			piece += " →" // the arrow ends the line it breaks

		}
		if !start && utf8.RuneCountInString(line)+1+utf8.RuneCountInString(piece) > width {
			lines = append(lines, line)
			line, start = rest, true
		}
		if !start {
			line += " "
		}
		line += piece
		start = false
	}
	return append(lines, line)
}
