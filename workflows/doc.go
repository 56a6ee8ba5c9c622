// Package workflows holds the flows shipped with the acemq-flow binary
// ([Flows]), and the demo that `make run` shows.
//
// # place-order
//
// [PlaceOrder] takes an [Order] through validate, charge (compensated by
// a refund), reserve (two branches side by side, joined: reserve the
// stock, compensated by releasing it; book a courier, compensated by
// cancelling the booking), a wait until the order's ship_at, and ship; a digital
// order is neither reserved nor shipped. A run given up after its card
// was charged is held for a replay for ten minutes, then compensated.
// [NewPlaceOrder] builds the same flow under another name on other
// services.
//
// The shipped flow runs on stand-in services ([StandIns]): a payment
// gateway, an inventory and a courier that do nothing but answer, and
// whose answer each order chooses, so that every path of the flow can be
// tried by hand:
//
//	card 4000 0000 0000 0002       charge: declined, given up at once; nothing to undo
//	card 4000 0000 0000 0119       charge: the gateway times out once, then approves (a retry)
//	item "unobtainium"             reserve-stock: out of stock, given up and held; the other
//	                               branch comes back; then the booking is cancelled and the
//	                               charge refunded
//	address containing "Atlantis"  book-courier: the courier refuses, given up and held;
//	                               then the stock is released and the charge refunded
//	ship_at in the future          the run waits on the scheduler ladder until then
//	digital: true                  reserve and ship are skipped
//	ACEMQ_DEMO_OUTAGE=ship         (in the worker's environment) ship's courier is down
//	                               (also charge or reserve): retried, given up within
//	                               about ten seconds, held for replay
//
// The operator's walkthrough: start a worker with ACEMQ_DEMO_OUTAGE=ship,
// start a run; ship is retried and given up, and the run shows as failed;
// restart the worker without the variable and replay the run, which
// completes.
//
// # approve-refund
//
// [ApproveRefund] puts a hold on a refund's amount, waits up to two days
// for a person's approval (the signal "approval", an [Approval], sent
// with `acemq-flow signal <run-id> approval --payload ...`), and pays the
// refund or not as it says; a run that waits past that, or is cancelled
// (`acemq-flow cancel`), has its hold released.
package workflows
