package engine

import "errors"

// Errors of the engine, for errors.Is. A flow that cannot be built is
// dsl.ErrInvalidFlow.
var (
	// ErrUnknownFlow: no flow of that name is registered.
	ErrUnknownFlow = errors.New("unknown flow")
	// ErrFlowRegistered: a flow of that name is already registered.
	ErrFlowRegistered = errors.New("flow already registered")
	// ErrInvalidPayload: a payload that does not decode into the flow's
	// input type; nothing was published.
	ErrInvalidPayload = errors.New("payload does not fit the flow")
	// ErrInvalidConfig: a Config or an option the engine cannot use.
	ErrInvalidConfig = errors.New("invalid engine config")
	// ErrStepTimeout: a step ran past its Timeout; it is retried whatever
	// it returned.
	ErrStepTimeout = errors.New("step overran its timeout")
	// ErrNotReplayable: the run is not failed (running, completed,
	// compensated, ...), so there is nothing to replay.
	ErrNotReplayable = errors.New("run cannot be replayed")
	// ErrNotCompensable: the run is not failed with compensations to run.
	ErrNotCompensable = errors.New("run cannot be compensated")
	// ErrMessageNotFound: the run's given-up message is in none of the
	// queues where it could be.
	ErrMessageNotFound = errors.New("the run's message was not found")
	// ErrMisrouted: a message reached a step its route does not put it at
	// (it is given up: no retry can fix where it is).
	ErrMisrouted = errors.New("message is not at this step")
	// ErrNoTransactions: a flow has a Transactional step and the engine's
	// Store cannot run one (it is not a patterns.TxStore).
	ErrNoTransactions = errors.New("the idempotency store cannot run transactional steps")
)
