# quarry — build, test and benchmark targets (SPEC §9).
GO      ?= go
PKGS    ?= ./...
BIN     ?= bin/quarry

.PHONY: build test test-short lint bench e2e fuzz determinism clean

build:
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN) ./cmd/quarry

# Every Go test under the race detector.
test:
	$(GO) test -race -count=1 -timeout 25m $(PKGS)

test-short:
	$(GO) test -short -count=1 $(PKGS)

lint:
	$(GO) vet $(PKGS)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# Every fuzz target for a bounded time (FUZZTIME=10s each).
fuzz:
	FUZZTIME=$(or $(FUZZTIME),10s) bash .ci/fuzz

# The FSM determinism test, many random logs (issue 2 asks for -count=20 in CI).
determinism:
	$(GO) test -race -count=20 -run 'TestDeterminism' ./fsm/

bench: build
	$(GO) run ./integration/bench -bin $(BIN) $(BENCHFLAGS)

clean:
	rm -rf bin
