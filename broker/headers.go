package broker

// Header names of the wire contract (docs/wire.md). The x-acemq- namespace
// belongs to the engine: an application header in it is refused on publish
// and never shown to a handler among the application headers.
const (
	ReservedPrefix = "x-acemq-"

	HeaderFirstSeen     = "x-acemq-first-seen"     // int64 epoch ms; never reset
	HeaderAttempt       = "x-acemq-attempt"        // int64; 1 on first delivery
	HeaderError         = "x-acemq-error"          // why the message was given up
	HeaderQueue         = "x-acemq-queue"          // the queue a dead letter came from
	HeaderCausationID   = "x-acemq-causation-id"   // the message whose handling produced this one
	HeaderRunID         = "x-acemq-run-id"         // the pipeline or slip run
	HeaderRoute         = "x-acemq-route"          // a declared pipeline's step names
	HeaderRoutePosition = "x-acemq-route-position" // 0-based index into the route

	HeaderRoutingSlip  = "acemq-routing-slip"
	HeaderReplyTo      = "acemq-reply-to"
	HeaderReplyError   = "acemq-error"
	HeaderReplayedFrom = "acemq-replayed-from"
	HeaderReplayedAt   = "acemq-replayed-at"
	HeaderReplayCount  = "acemq-replay-count"

	HeaderScheduleExchange    = "x-schedule-exchange"
	HeaderScheduleRoutingKey  = "x-schedule-routing-key"
	HeaderScheduleDueAt       = "x-schedule-due-at"
	HeaderScheduleContentType = "x-schedule-content-type"

	HeaderStreamOffset = "x-stream-offset"
)

// brokerHeaders are what RabbitMQ adds when it dead-letters or (on a quorum
// queue) redelivers a message. They
// are dropped whenever the library moves a message: RabbitMQ silently drops
// a message whose x-death shows it cycling with no rejection in the loop.
var brokerHeaders = []string{
	"x-death", "x-first-death-reason", "x-first-death-queue", "x-first-death-exchange",
	"x-last-death-reason", "x-last-death-queue", "x-last-death-exchange", "original-expiration",
	"x-delivery-count",
}

// StripBrokerHeaders deletes from h the headers RabbitMQ adds when it
// dead-letters or redelivers a message (x-death, x-first-death-*,
// x-last-death-*, original-expiration, x-delivery-count). Call it on a
// copy of a delivery's headers before publishing the message elsewhere:
// RabbitMQ silently drops a message whose x-death shows it cycling through
// queues with no rejection in the loop.
func StripBrokerHeaders(h Table) {
	for _, k := range brokerHeaders {
		delete(h, k)
	}
}
