package patterns_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/acemq/acemq-flow/broker"
	"github.com/acemq/acemq-flow/patterns"
)

func ExampleReplay() {
	ctx := context.Background()
	conn, err := broker.Open(ctx, "memory://")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close(ctx)
	if err := conn.Declare(ctx, broker.ConsumerTopology("orders.new")); err != nil {
		fmt.Println(err)
		return
	}
	// Two dead letters, as a consumer giving up on them leaves them.
	for i, reason := range []string{"timeout talking to the bank", "card declined"} {
		out, _ := conn.Prepare(ctx, map[string]int{"order": i}, broker.To("orders.new.dlq"))
		out.Message.Headers[broker.HeaderError] = reason
		out.Message.Headers[broker.HeaderQueue] = "orders.new"
		if err := conn.Send(ctx, out); err != nil {
			fmt.Println(err)
			return
		}
	}

	// The fix for the timeouts is deployed: put those back, and only those.
	result, err := patterns.Replay(ctx, conn, "orders.new.dlq",
		patterns.ReplayFilter(func(env broker.Envelope, _ []byte) bool {
			return strings.Contains(env.Error, "timeout")
		}),
		patterns.ReplayLimit(500))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(result)
	// Output:
	// moved 1, skipped 1 (drained)
}
