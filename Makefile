# quarry — build, test and benchmark targets (SPEC §9).
GO      ?= go
PKGS    ?= ./...
BIN     ?= bin/quarry

.PHONY: build test test-short integration lint bench e2e fuzz determinism clean image demo demo-down

build:
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN) ./cmd/quarry

# Every Go test under the race detector.
test:
	$(GO) test -race -count=1 -timeout 25m $(PKGS)

# The cluster acceptance suite, long cases included (build tag integration).
integration:
	$(GO) test -race -count=1 -tags integration -timeout 30m ./integration/...

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

# The FROM-scratch image of the docker-compose demo (SPEC §9), from the static binary.
image: build
	docker build -f deploy/Dockerfile -t quarry:demo .

# The multisite demo: 2 sites x 3 peers, 3 managers, 2 NATS nodes (docker-compose.yml).
# deploy/demo-check.sh then waits for it and ingests a sample through p1.
demo: image
	docker-compose up -d

demo-down:
	docker-compose down -v

clean:
	rm -rf bin
