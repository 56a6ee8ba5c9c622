// Package dsl is the flow description language of acemq-flow: a flow is a
// named sequence of typed steps, delays and steps other services serve,
// with compensations, retry policies, timeouts and per-run conditions.
// Everything here is a pure value with no I/O; package engine compiles a
// flow to topology and handlers and runs it.
//
//	var PlaceOrder = dsl.Flow("place-order",
//		dsl.Step("validate", validate), // func(context.Context, Order) (Order, error)
//		dsl.Step("charge", charge).Compensate(refund).Retry(broker.Exponential(5, time.Second)),
//		dsl.Delay(30*time.Minute),
//		dsl.Step("ship", ship).When(`payload.digital == false`),
//		dsl.External("invoice"),
//	)
//
// # Building
//
// A flow is validated when it is built and keeps its first error, which
// [FlowDef.Err] returns and engine.Register refuses: an empty flow, a
// name or step name that is not a plain identifier, a step named twice, a
// step whose input type is not the payload the step before it produces, a
// delay with nothing after it, a When on an External step (or on the step
// after one, whose hop the other service makes), an expression that does
// not compile against the payload type. Every error is a *[BuildError]
// naming the flow and the step, and matches [ErrInvalidFlow].
//
// # Steps
//
// A step is a typed function, func(context.Context, In) (Out, error). It
// returns the next step's payload; [End] as its error to end the run well
// there; another error to be retried by the step's policy; or an error
// wrapped with broker.Fatal to be given up at once. Payloads travel as JSON
// unless the flow names another codec ([WithCodec]).
//
// # Expressions
//
// When, DelayUntil and OrderedBy take expr-lang expressions over the
// payload, named payload, with fields by their JSON names
// (payload.digital, payload.ship_at). They are compiled once, when the
// flow is built, against the payload's Go type, so a misspelt field or a
// comparison of a string with a number is a build error with its column,
// not a surprise at run time.
//
// Package dsl deliberately imports neither broker nor persistence: a retry
// policy or a codec is any value with the methods the engine needs
// ([RetryPolicy], [Codec]), which broker.RetryPolicy and broker's codecs
// are.
package dsl
