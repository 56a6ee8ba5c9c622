# acemq-flow. `make run` needs only Go; `make test` wants RabbitMQ and
# PostgreSQL (see README.md) and skips the tests that need them otherwise.

GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/acemq/acemq-flow/cmd/acemq-flow/cli.Version=$(VERSION)

.PHONY: run test bench lint build

## run: the demo, on the embedded broker (RabbitMQ when ACEMQ_URL is set)
run:
	$(GO) run ./cmd/acemq-flow demo

## test: every test, with the race detector
test:
	$(GO) test -race -count=1 ./...

## bench: the broker benchmarks (broker against plain amqp091-go)
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./broker/...

## lint: gofmt, go vet and go mod tidy must have nothing to say
lint:
	@unformatted="$$(gofmt -l .)"; \
	if [ -n "$$unformatted" ]; then echo "gofmt -l: these files need gofmt:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	@$(GO) mod tidy -diff || { echo "go mod tidy would change go.mod/go.sum (diff above): run it and commit the result"; exit 1; }

## build: the acemq-flow binary, into bin/
build:
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/acemq-flow ./cmd/acemq-flow
