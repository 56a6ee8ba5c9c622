// Package rabbitmq is the RabbitMQ implementation of [transport.Transport],
// built on github.com/rabbitmq/amqp091-go. It is the reference transport:
// the behaviour the loopback imitates and the one the product is measured on.
//
// # Connecting
//
// [Dial] opens one AMQP connection configured by a [Config] (a config
// struct: the zero value means defaults, [Config.Validate] says what is
// wrong). A failed first dial is an error; a connection lost later is
// redialled in the background with exponential backoff and jitter until
// [Transport.Close].
//
// # Clusters
//
// The URL may list the nodes of a cluster, which share user, password,
// virtual host and query: amqp://user:pass@rabbit-1:5672,rabbit-2:5672/vh.
// Dial takes the first node that accepts the connection (a [*NodesError]
// when none does); a lost connection is redialled on the next node, round
// robin, with the same backoff, and everything the transport redoes after a
// reconnect (declare, resubscribe, refuse stale deliveries) is done on
// whichever node it reached. [Transport.Node] says which node that is; the
// logs say it on every connect and reconnect.
//
// # TLS
//
// amqps:// always speaks TLS, verified against the system roots or
// cacertfile / [Config.CAFile], with a client certificate from certfile and
// keyfile ([Config.CertFile], [Config.KeyFile]) and the node's host or
// server_name_indication ([Config.ServerName]) as the name its certificate
// must carry. A certificate that does not verify is a [*TLSError] naming the
// node; TLS settings on an amqp:// URL are refused ([ErrInvalidTLS]) rather
// than ignored.
//
// # The management API
//
// What AMQP cannot do, setting a policy, goes through the management
// plugin's HTTP API: [Config.Management] finds it from the AMQP URL (the
// node's host, port 15672, https on 15671 for amqps:// with the same TLS
// settings; the URL's user, password and virtual host) or from a URL given,
// and [Management.SetPolicy] sets a [Policy]. An API that does not answer
// is [ErrManagementUnavailable]; one that refuses, a [*ManagementError].
//
// # Publishing
//
// Publishes go through a small pool of confirm-mode channels, each with many
// publishes in flight, so concurrent publishers share the confirm round
// trips instead of waiting for each in turn. Every message is persistent.
// Publish returns only after the broker's basic.ack; a mandatory publish the
// broker returned is a [*transport.ReturnedError] (basic.return is matched to
// its publish by message id, exchange and routing key), a basic.nack is
// [transport.ErrNacked], and a connection or channel lost before the confirm
// is [transport.ErrConnectionLost] (also an [*transport.AMQPError] when a
// channel exception such as publishing to a missing exchange closed it).
// A publish no frame of the negotiated frame_max could carry, or that no
// amqp091-go reader could read back, is refused before it is sent
// ([transport.CheckPublishing], [transport.ErrTooLarge]): sent, it would
// cost the whole connection.
// Publishes wait, bounded by their context, while the broker has blocked the
// connection and while the transport is between connections.
//
// # Consuming
//
// Every subscription has its own channel with basic.qos set to its prefetch
// and manual acknowledgement. Deliveries are settled one by one through
// their Settler, which refuses a second settlement and a delivery whose
// channel has since been replaced ([transport.ErrStaleDelivery]): after a
// reconnect delivery tags restart at 1, so an old tag must never reach the
// new channel. A channel whose subscription ended stays open until every
// delivery received on it is settled.
//
// # Reconnection
//
// amqp091-go's own recovery is left off. When the connection closes, every
// channel and unsettled delivery becomes stale, publishes awaiting a confirm
// fail, and the transport redials, declares again everything recorded by
// Declare (in declaration order), and resubscribes every live subscription
// on a new channel, feeding the same Deliveries channel. Each step is logged
// through the configured *slog.Logger.
package rabbitmq
