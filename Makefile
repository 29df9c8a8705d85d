# sonde — the two commands a newcomer needs are `make run` and `make test`.

GO        ?= go
BIN       := bin/sonde
# Packages with goroutines, rings and shared state: tested again under -race.
# Not server/ui: its code is templates and assets, read-only after start and
# raced through server's tests, and its own tests drive a sonde built
# without -race in Chromium, which a second pass would only repeat (~25 s).
RACE_PKGS = $(filter-out %/server/ui,$(shell $(GO) list ./scheduler/... ./probe/... ./server/... ./bench/... ./config/watch/... ./config/discovery/...))
# Where `make run` serves metrics and the API.
RUN_LISTEN ?= 127.0.0.1:9123

.PHONY: build run test test-race bench generate lint clean

# CGO_ENABLED=0: a static binary, and one that can drop the capabilities of
# all its threads after start (see server/privilege).
build:
	CGO_ENABLED=0 $(GO) build -o $(BIN) ./cmd/sonde

# `make run` starts demo backends on loopback and probes them with one check
# per preset; states change within a minute. Ctrl-C stops it.
run: build
	./$(BIN) run -demo -listen $(RUN_LISTEN)

# deploy/ is a module of its own: its tests check the operator kit with
# Kubernetes and Prometheus libraries that sonde itself does not link.
# The tests that run sonde build it as `make build` does; building it first
# fills the build cache, so theirs is a link. Otherwise, where a C compiler
# makes the test builds use cgo, their first build of sonde (CGO_ENABLED=0)
# starts from nothing inside go test's 10-minute limit.
test: build
	$(GO) vet ./...
	$(GO) test ./...
	$(GO) test -race $(RACE_PKGS)
	cd deploy && $(GO) vet ./... && $(GO) test ./...

test-race:
	$(GO) test -race $(RACE_PKGS)

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./scheduler/ ./config/ ./probe/...

# Rebuilds the eBPF objects and their Go bindings (needs clang, llvm and
# libbpf-dev from Debian). The output is committed, so builds need no clang.
generate:
	$(GO) generate ./bpf/... ./bench/...

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
	cd deploy && $(GO) vet ./... && $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

clean:
	rm -rf bin
