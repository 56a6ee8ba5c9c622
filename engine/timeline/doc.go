// Package timeline reads a run's timeline (journal.Event, in order) as a
// person reads it: the run's own events apart from its forks' (a
// dsl.Parallel's branches, a dsl.ForEach's items), each fork's branches
// with their steps and where each stands, the child runs a run started and
// the parent run a child belongs to, and long runs of alike events (the
// compensation of every item of a large ForEach) shortened. `acemq-flow
// runs show` and the dashboard's run page both show runs through it.
//
// It only reads what the engine wrote, by the keys and outcomes the
// engine gives its events (engine/fork.go, engine/child.go): it holds no
// state and does no I/O but [HandedOut], which asks a journal that keeps
// joins (journal.JoinStore) how far each fork's join has got.
//
// Grouping is one pass over the timeline; a fork's branches are kept in
// index order, so that a page of them ([Fork.Page]) or one of them
// ([Fork.Find]) is found without walking them all.
package timeline
