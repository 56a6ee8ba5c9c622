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
	// ErrRunInFlight: StartAgain was asked of a run that has not finished
	// (running, waiting, compensating): it is not started twice at once.
	ErrRunInFlight = errors.New("run has not finished")
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
	// ErrUnknownStep: a message's route names a step its flow does not
	// have (a route from another version of the flow, or a foreign
	// publisher's mistake). It is given up before its step runs, to the
	// step's dead-letter queue, where a replay can send it on once the flow
	// has the step.
	ErrUnknownStep = errors.New("route names an unknown step")
	// ErrDeliveryLimit: a delivery came back unsettled DeliveryLimit times
	// (every worker that took it died or lost its connection holding it);
	// it is given up without running its step again.
	ErrDeliveryLimit = errors.New("delivery limit reached")
	// ErrNoTransactions: a flow has a Transactional step and the engine's
	// Store cannot run one (it is not a patterns.TxStore).
	ErrNoTransactions = errors.New("the idempotency store cannot run transactional steps")
	// ErrNoJoins: a flow has a Parallel or a ForEach and the engine's
	// journal is no journal.JoinStore, so its joins have nowhere to live.
	ErrNoJoins = errors.New("the journal keeps no joins")
	// ErrNoLimits: a flow has a step with a ConcurrencyKey or a RateLimit
	// and the engine's journal is no journal.LimitStore, so its limits
	// have nowhere to live.
	ErrNoLimits = errors.New("the journal keeps no limits")
	// ErrEndInBranch: a step on a branch of a Parallel or a ForEach
	// returned dsl.End. A branch cannot end its run, so the branch is
	// given up (and the run fails) instead.
	ErrEndInBranch = errors.New("a branch cannot end its run")
	// ErrChildEnded: a step of a child run returned dsl.End, so the child
	// returned nothing to its parent: it fails, and so does the parent's
	// Child step.
	ErrChildEnded = errors.New("a child run ended early")
	// ErrNoSuchWait: a signal named no WaitFor of the run's flow.
	ErrNoSuchWait = errors.New("no such wait")
	// ErrRunEnded: a signal to a run that is over.
	ErrRunEnded = errors.New("the run is over")
	// ErrSignalTaken: a second signal, with another payload, to a wait
	// that had one.
	ErrSignalTaken = errors.New("the wait has its signal already")
	// ErrSignalTimedOut: a signal to a wait that timed out before it came.
	ErrSignalTimedOut = errors.New("the wait timed out before the signal came")
	// ErrChildFailed: the child run of a Child step failed.
	ErrChildFailed = errors.New("child run failed")
)
