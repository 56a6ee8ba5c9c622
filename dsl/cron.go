package dsl

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/robfig/cron/v3"
)

// CatchUp is what a cron trigger does about the ticks it missed while no
// worker ran.
type CatchUp int

const (
	// CatchUpSkip starts no run for missed ticks (the default): a trigger
	// that was down for a day does not fire a day's worth at once.
	CatchUpSkip CatchUp = iota
	// CatchUpLast starts one run for the last missed tick.
	CatchUpLast
)

// String names the policy.
func (c CatchUp) String() string {
	if c == CatchUpLast {
		return "run the last missed tick"
	}
	return "skip missed ticks"
}

// cronParser reads specs with seconds (six fields, or a descriptor such
// as @every 5m), and CRON_TZ= or TZ= for a time zone.
var cronParser = cron.NewParser(cron.Second | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// CronDef is a cron trigger being described: a schedule, and the payload
// each tick's run starts with.
type CronDef struct {
	spec    string
	catchUp CatchUp
	in      reflect.Type
	payload func(ctx context.Context, tick time.Time) (any, error)
	sched   cron.Schedule
	err     error
}

// Cron starts a run of the flow on every tick of spec: six fields with
// seconds ("0 */5 * * * *" is every five minutes), or a descriptor
// ("@every 1h", "@daily"), with "CRON_TZ=Europe/Paris " in front for a time
// zone other than UTC. payload gives the tick's run its input; it must be
// of the flow's input type. Each tick starts exactly one run however many
// workers run the flow, as long as they share a database (engine.Config
// CronGuard); its run id is made from the flow, the trigger and the tick,
// so a start tried again is the same run. A spec that does not parse is a
// build error.
func Cron[In any](spec string, payload func(ctx context.Context, tick time.Time) (In, error)) *CronDef {
	c := &CronDef{spec: spec, in: reflect.TypeFor[In]()}
	if payload == nil {
		c.err = errors.New("cron trigger with no payload function")
		return c
	}
	c.payload = func(ctx context.Context, tick time.Time) (any, error) { return payload(ctx, tick) }
	s, err := cronParser.Parse(spec)
	if err != nil {
		c.err = fmt.Errorf("cron %q: %w", spec, err)
		return c
	}
	c.sched = s
	return c
}

// CatchUpLast makes the trigger start one run for the last tick it missed
// while no worker ran, instead of skipping them all.
func (c *CronDef) CatchUpLast() *CronDef {
	c.catchUp = CatchUpLast
	return c
}

func (*CronDef) part() {}

// CronSpec is a cron trigger as the engine reads it.
type CronSpec struct {
	// Spec is the schedule as written: also the trigger's name.
	Spec    string
	CatchUp CatchUp
	sched   cron.Schedule
	payload func(ctx context.Context, tick time.Time) (any, error)
}

// Next is the first tick after t.
func (c CronSpec) Next(t time.Time) time.Time { return c.sched.Next(t) }

// Payload is the input of the run started for tick.
func (c CronSpec) Payload(ctx context.Context, tick time.Time) (any, error) {
	return c.payload(ctx, tick)
}

// Crons is the flow's cron triggers.
func (f *FlowDef) Crons() []CronSpec { return append([]CronSpec(nil), f.crons...) }
