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

# The version stamped into every binary, image and package: `git describe`
# of the newest vX.Y.Z tag without its v (1.2.0, or 1.2.0-3-g1a2b3c4d5e6f
# three commits later), 0.0.0-N-gHASH (N commits) before the first tag, and
# -dirty for uncommitted changes. REVISION is the commit, SOURCE_DATE_EPOCH
# its time: the date of every file in the release artefacts, which makes them
# reproducible.
VERSION ?= $(shell v=$$(git describe --tags --match 'v[0-9]*' --abbrev=12 --dirty 2>/dev/null) && echo $${v\#v} || \
	echo 0.0.0-$$(git rev-list --count HEAD)-g$$(git rev-parse --short=12 HEAD)$$(git diff --quiet HEAD || echo -dirty))
REVISION ?= $(shell git rev-parse HEAD)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct)
VERSION := $(VERSION)
REVISION := $(REVISION)
SOURCE_DATE_EPOCH := $(SOURCE_DATE_EPOCH)
LDFLAGS = -X main.version=$(VERSION) -X main.revision=$(REVISION)

.PHONY: build run test test-race bench generate lint clean

# CGO_ENABLED=0: a static binary, and one that can drop the capabilities of
# all its threads after start (see server/privilege).
build:
	CGO_ENABLED=0 $(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/sonde

# `make run` starts demo backends on loopback and probes them with one check
# per preset; states change within a minute. Ctrl-C stops it.
run: build
	./$(BIN) run -demo -listen $(RUN_LISTEN)

# deploy/ is a module of its own: its tests check the operator kit with
# Kubernetes and Prometheus libraries that sonde itself does not link.
test:
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
