// Command testflows is acemq-flow built with flows of the cli tests' own,
// as a user's own main would be: the integration tests build it and run it
// as a separate process. The flows are named after CLITEST_FLOW_PREFIX so
// that tests sharing a broker never share a queue.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/cmd/acemq-flow/cli"
	"github.com/acemq/acemq-flow/dsl"
)

// Order is the test flows' payload.
type Order struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
	// FailWhile makes charge give the run up while a file exists at this
	// path: a payment service that is down until the test brings it back.
	FailWhile string `json:"fail_while,omitempty"`
}

func validate(_ context.Context, o Order) (Order, error) {
	if o.Amount < 1 {
		return o, broker.Fatal(fmt.Errorf("order %s: amount %d, want at least 1", o.ID, o.Amount))
	}
	return o, nil
}

func charge(_ context.Context, o Order) (Order, error) {
	if o.FailWhile != "" {
		if _, err := os.Stat(o.FailWhile); err == nil {
			return o, broker.Fatal(errors.New("card declined: the payment service is down"))
		}
	}
	return o, nil
}

func pass(_ context.Context, o Order) (Order, error) { return o, nil }

func refund(context.Context, Order) error { return nil }

// Approval is the signal the approvals flow waits for.
type Approval struct {
	By string `json:"by"`
}

func pay(_ context.Context, s dsl.Signalled[Order, Approval]) (Order, error) { return s.Input, nil }

func main() {
	prefix := os.Getenv("CLITEST_FLOW_PREFIX")
	if prefix == "" {
		prefix = "clitest"
	}
	// CLITEST_ORDERS_V2 builds the orders flow's next version, its first
	// step renamed: what a deploy that would strand runs looks like.
	first := "validate"
	if os.Getenv("CLITEST_ORDERS_V2") != "" {
		first = "check"
	}
	cli.Main(
		dsl.Flow(prefix+".orders",
			dsl.Step(first, validate),
			dsl.Step("charge", charge).Retry(broker.NoRetry()),
			dsl.Step("ship", pass),
			dsl.Example(Order{ID: "o-1", Amount: 42})),
		dsl.Flow(prefix+".held",
			dsl.Step("reserve", pass).Compensate(refund),
			dsl.Step("charge", charge).Retry(broker.NoRetry()).Timeout(10*time.Second),
			dsl.HoldForReplay(time.Hour)),
		dsl.Flow(prefix+".approvals",
			dsl.Step("validate", validate),
			dsl.WaitFor[Order, Approval]("approval", time.Hour),
			dsl.Step("pay", pay)),
	)
}
