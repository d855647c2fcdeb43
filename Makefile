# gend — see README.md. Every target works on a fresh Debian machine with Go 1.26.
SHELL := /bin/bash
GO ?= go
export CGO_ENABLED := 1
export CGO_CFLAGS := -O2 -Wno-deprecated-declarations
BIN := bin
TEST_TIMEOUT ?= 12m
# bench-eta: seeds per configuration (~2.7 min per job) and extra etabench flags, e.g.
# ETA_ARGS='-dists gamma:0.7,pareto:2.5 -v'.
ETA_SEEDS ?= 2
ETA_ARGS ?=

.PHONY: all build test test-unit test-e2e demo bench bench-sim bench-scheduler bench-eta bench-eta-bound bench-scale bench-controller lint fuzz deps clean

all: build

build:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/gend ./cmd/gend
	$(GO) build -o $(BIN)/genctl ./cmd/genctl
	$(GO) build -o $(BIN)/gensim ./cmd/gensim

# Test dependencies (Debian's prometheus package for promtool and the real
# Prometheus scrape test). Installs only what is missing.
deps:
	@bash scripts/test-deps.sh

# Everything CI runs: vet, unit tests with -race (fuzz seed corpora included),
# end-to-end tests on the real binaries.
test: deps build
	$(GO) vet ./...
	GEND_BIN_DIR=$(CURDIR)/$(BIN) $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...

demo: build
	@bash scripts/demo.sh

bench: bench-sim bench-controller bench-scheduler bench-eta

bench-sim: build
	$(BIN)/gensim bench

bench-controller: build
	$(GO) run ./internal/bench/cmd/benchctl controller

bench-scheduler: build
	$(GO) run ./internal/bench/cmd/benchctl scheduler

bench-eta: build bench-eta-bound
	$(GO) run ./internal/etabench -suite -seeds $(ETA_SEEDS) $(ETA_ARGS)

# bench-eta-bound: how well any estimator can know a job's remaining time
# from the requests started by each checkpoint (1,000 jobs drawn from
# gensim's length model per shape; seconds, no jobs run).
bench-eta-bound:
	$(GO) run ./internal/etabench -bound 1000 -suite -dists gamma:0.7,gamma:2,weibull:0.8,pareto:2.5,bimodal:0.4:300

bench-scale: build
	$(GO) run ./internal/scalebench -gend $(BIN)/gend

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting"; exit 1; }
	$(GO) vet ./...

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzParseLine -fuzztime 20s ./internal/input/
	$(GO) test -run '^$$' -fuzz FuzzDecodeJob -fuzztime 20s ./internal/spec/
	$(GO) test -run '^$$' -fuzz FuzzDecodeResize -fuzztime 10s ./internal/spec/
	$(GO) test -run '^$$' -fuzz FuzzAPIBodies -fuzztime 10s ./internal/httpapi/

clean:
	rm -rf $(BIN) demo
