package rabbitmq

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Defaults applied by Dial to zero fields of Config.
const (
	DefaultPublishChannels = 4
	DefaultMaxInFlight     = 256
	DefaultReconnectMin    = 100 * time.Millisecond
	DefaultReconnectMax    = 5 * time.Second
	DefaultHeartbeat       = 10 * time.Second
	DefaultDialTimeout     = 30 * time.Second
	DefaultConnectionName  = "acemq-flow"
	DefaultSettleGrace     = time.Second
)

// The limits Validate enforces: AMQP counts channels and in-flight
// publishes in 16 bits, and a pool larger than this only adds contention.
const (
	maxPublishChannels = 64
	maxInFlight        = 65535
)

// ErrInvalidConfig is what every Config.Validate error matches with errors.Is.
var ErrInvalidConfig = errors.New("rabbitmq: invalid config")

// Config configures a Transport. The zero value is valid and means the
// defaults above.
type Config struct {
	// Logger receives connection events; nil means slog.Default().
	Logger *slog.Logger
	// ConnectionName is shown by the broker (connection_name client
	// property); empty means DefaultConnectionName.
	ConnectionName string
	// PublishChannels is the number of confirm-mode channels publishes are
	// spread over; 0 means DefaultPublishChannels.
	PublishChannels int
	// MaxInFlight bounds the publishes awaiting a confirm on one publish
	// channel; 0 means DefaultMaxInFlight.
	MaxInFlight int
	// ReconnectMin and ReconnectMax bound the redial backoff, which starts at
	// ReconnectMin, doubles per failed attempt up to ReconnectMax, and is
	// jittered by up to a half either way. Each attempt dials the next node
	// of the URL's list, starting with the one after the node lost. Zero
	// means the defaults.
	ReconnectMin time.Duration
	ReconnectMax time.Duration
	// Heartbeat is the AMQP heartbeat interval proposed to the broker; 0
	// means DefaultHeartbeat. A heartbeat query parameter in the URL wins.
	Heartbeat time.Duration
	// DialTimeout bounds one TCP connect plus TLS and AMQP handshake; 0
	// means DefaultDialTimeout.
	DialTimeout time.Duration
	// TLS configures amqps:// connections; nil means TLS 1.2 or later, the
	// system roots and each node's host as server name. CAFile, CertFile,
	// KeyFile and ServerName are applied on top of it. Set for an amqp://
	// URL, Dial refuses it rather than connect without TLS.
	TLS *tls.Config
	// CAFile is a PEM file of the CAs that sign the broker's certificates
	// (instead of the system roots); CertFile and KeyFile a PEM client
	// certificate and its key, for brokers that ask for one; ServerName the
	// name every node's certificate must be issued to ("" = each node's
	// host). The URL's query parameters cacertfile, certfile, keyfile and
	// server_name_indication win over them. The files are read again on
	// every redial, so a renewed certificate is picked up.
	CAFile     string
	CertFile   string
	KeyFile    string
	ServerName string
	// SettleGrace is how long a consumer channel stays open after the last
	// settlement on it, and how long Close waits after the transport's last
	// settlement, before closing: RabbitMQ 3.10's quorum queues undo
	// acknowledgements still on their way to the queue when the channel that
	// sent them closes (measured: 327 and 556 of 1,000 acks undone, the
	// messages redelivered). 0 means DefaultSettleGrace.
	SettleGrace time.Duration
}

// Validate reports the first field of c that Dial would refuse: negative
// durations or counts, counts above what AMQP can express, and a
// ReconnectMin above ReconnectMax.
func (c Config) Validate() error {
	switch {
	case c.PublishChannels < 0 || c.PublishChannels > maxPublishChannels:
		return fmt.Errorf("%w: PublishChannels %d is outside 0..%d", ErrInvalidConfig, c.PublishChannels, maxPublishChannels)
	case c.MaxInFlight < 0 || c.MaxInFlight > maxInFlight:
		return fmt.Errorf("%w: MaxInFlight %d is outside 0..%d", ErrInvalidConfig, c.MaxInFlight, maxInFlight)
	case c.ReconnectMin < 0:
		return fmt.Errorf("%w: ReconnectMin %v is negative", ErrInvalidConfig, c.ReconnectMin)
	case c.SettleGrace < 0:
		return fmt.Errorf("%w: SettleGrace %v is negative", ErrInvalidConfig, c.SettleGrace)
	case c.ReconnectMax < 0:
		return fmt.Errorf("%w: ReconnectMax %v is negative", ErrInvalidConfig, c.ReconnectMax)
	case c.Heartbeat < 0:
		return fmt.Errorf("%w: Heartbeat %v is negative", ErrInvalidConfig, c.Heartbeat)
	case c.DialTimeout < 0:
		return fmt.Errorf("%w: DialTimeout %v is negative", ErrInvalidConfig, c.DialTimeout)
	}
	d := c.withDefaults()
	if d.ReconnectMin > d.ReconnectMax {
		return fmt.Errorf("%w: ReconnectMin %v is above ReconnectMax %v", ErrInvalidConfig, d.ReconnectMin, d.ReconnectMax)
	}
	return nil
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.ConnectionName == "" {
		c.ConnectionName = DefaultConnectionName
	}
	if c.PublishChannels == 0 {
		c.PublishChannels = DefaultPublishChannels
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.ReconnectMin == 0 {
		c.ReconnectMin = DefaultReconnectMin
	}
	if c.ReconnectMax == 0 {
		c.ReconnectMax = max(DefaultReconnectMax, c.ReconnectMin)
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.SettleGrace == 0 {
		c.SettleGrace = DefaultSettleGrace
	}
	return c
}
