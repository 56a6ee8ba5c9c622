# acemq-flow. `make run` needs only Go; `make test` wants RabbitMQ and
# PostgreSQL (see README.md) and skips the tests that need them otherwise.

GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/acemq/acemq-flow/cmd/acemq-flow/cli.Version=$(VERSION)

.PHONY: run test bench lint build fuzz

## run: the demo, on the embedded broker (RabbitMQ when ACEMQ_URL is set)
run:
	$(GO) run ./cmd/acemq-flow demo

# The modules of the workspace (go.work): the library (.), and beside it
# what the library does not need: the command line, the shipped flows, the
# chaos rig and the dashboard's browser tests.
MODULES  := . ./cmd/acemq-flow ./workflows ./internal/chaos ./engine/dashboard/browser
PACKAGES := $(addsuffix /...,$(MODULES))

## test: every test of every module, with the race detector
test:
	$(GO) test -race -count=1 $(PACKAGES)

## bench: the broker benchmarks (broker against plain amqp091-go)
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./broker/...

## lint: gofmt, go vet and go mod tidy (in every module) must have nothing to say
lint:
	@unformatted="$$(gofmt -l .)"; \
	if [ -n "$$unformatted" ]; then echo "gofmt -l: these files need gofmt:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet $(PACKAGES)
	@for m in $(MODULES); do \
		(cd $$m && $(GO) mod tidy -diff) || { echo "go mod tidy would change $$m/go.mod or go.sum (diff above): run it there and commit the result"; exit 1; }; \
	done

.PHONY: check-alerts

## check-alerts: promtool check rules on docs/prometheus/alerts.yml; without
## promtool (Debian: apt-get install prometheus) it says so and passes, but
## fails under ACEMQ_REQUIRE_SERVICES=1 (CI)
check-alerts:
	@if command -v promtool >/dev/null 2>&1; then \
		promtool check rules docs/prometheus/alerts.yml; \
	elif [ "$$ACEMQ_REQUIRE_SERVICES" = 1 ]; then \
		echo "check-alerts: promtool not found (apt-get install prometheus), and ACEMQ_REQUIRE_SERVICES=1"; exit 1; \
	else \
		echo "check-alerts: promtool not found (apt-get install prometheus): not checked"; \
	fi

## build: the acemq-flow binary, into bin/
build:
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/acemq-flow ./cmd/acemq-flow

## fuzz: every fuzz target for FUZZTIME each (make fuzz FUZZTIME=10s), one
## after the other, stopping at the first failure; a failing input is
## written to the package's testdata/fuzz/<target>/ for its fix to keep.
## Go 1.26 can fail a target that found nothing with a bare "context
## deadline exceeded" when -fuzztime runs out (go.dev/issue/75804, fixed in
## Go 1.27): that alone is reported and passed over.
FUZZTIME ?= 1m
FUZZ_TARGETS := \
	./broker:FuzzEnvelopeHeaders ./broker:FuzzEnvelopeFastDecoder ./broker:FuzzOutgoingUnmarshalBinary \
	./broker:FuzzStreamOffsetArg ./patterns:FuzzRoutingSlipJSON ./patterns:FuzzClaimCheckFrame \
	./patterns:FuzzStreamOffset ./dsl:FuzzFlowExpr ./engine/journal:FuzzJournalJSON ./engine/journal:FuzzJournalText
fuzz:
	@log=$$(mktemp); trap 'rm -f "$$log" "$$log.rc"' EXIT; \
	for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t#*:}; \
		echo "== $$name ($$pkg), $(FUZZTIME)"; \
		{ $(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZTIME) $$pkg; echo $$? >"$$log.rc"; } 2>&1 | tee "$$log"; \
		[ "$$(cat "$$log.rc")" = 0 ] && continue; \
		if grep -q '^    context deadline exceeded$$' "$$log" && ! grep -q 'Failing input written' "$$log"; then \
			echo "== $$name: found nothing; the failure is Go's -fuzztime race (go.dev/issue/75804)"; continue; \
		fi; \
		exit 1; \
	done

.PHONY: chaos chaos-short

## chaos: the ten chaos scenarios at full size, on a RabbitMQ node and a PostgreSQL cluster of their own (docs/chaos.md)
chaos:
	scripts/chaos.sh

## chaos-short: scenarios 1 and 4 at 2,000 runs, 7 (forks) at 5, 9 (waits and limits) and 10 (rolling deploy) at 500, what CI runs
chaos-short:
	scripts/chaos.sh -short

.PHONY: cluster cluster-short

## cluster: the cluster scenarios (a node stopped, a leaders' node killed or frozen, everything over TLS) at full size, on a three-node RabbitMQ cluster and a TLS-only PostgreSQL of their own (docs/operations.md)
cluster:
	scripts/cluster.sh

## cluster-short: scenarios 1 to 3 at 1,000 runs each, what CI runs
cluster-short:
	scripts/cluster.sh -scenarios 1,2,3 -runs 1000
