package rabbitmq

// Policy is a RabbitMQ policy: settings the broker applies to the queues
// (or exchanges) of a virtual host whose names match Pattern, without any
// redeclaration, so that a setting every client would otherwise have to
// declare alike stays out of the queue's arguments. One policy applies to
// a queue at a time: the matching one of the highest Priority.
type Policy struct {
	// Name names the policy in its virtual host; setting a policy of that
	// name again replaces it.
	Name string `json:"-"`
	// Pattern is a regular expression over the names, as RabbitMQ reads
	// it (PCRE: lookarounds work, unlike in Go's regexp).
	Pattern string `json:"pattern"`
	// ApplyTo is what it applies to: "queues", "exchanges" or "all".
	ApplyTo string `json:"apply-to"`
	// Priority orders overlapping policies; higher wins.
	Priority int `json:"priority"`
	// Definition holds the settings, such as {"delivery-limit": 20}.
	Definition map[string]any `json:"definition"`
}
