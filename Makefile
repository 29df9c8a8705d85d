# sonde — the two commands a newcomer needs are `make run` and `make test`.

GO        ?= go
BIN       := bin/sonde
# Packages with goroutines, rings and shared state: tested again under -race.
# Not server/ui: its code is templates and assets, read-only after start and
# raced through server's tests, and its own tests drive a sonde built
# without -race in Chromium, which a second pass would only repeat (~25 s).
RACE_PKGS = $(filter-out %/server/ui,$(shell $(GO) list ./scheduler/... ./probe/... ./server/... ./bench/... ./config/watch/... ./config/discovery/... ./internal/...))
# Where `make run` serves metrics and the API.
RUN_LISTEN ?= 127.0.0.1:9123

# The version stamped into every binary, image and package: `git describe`
# of the newest vX.Y.Z tag without its v (1.2.0, or 1.2.0-3-g1a2b3c4d5e6f
# three commits later), 0.0.0-N-gHASH (N commits) before the first tag, and
# -dirty for uncommitted changes. REVISION is the commit, SOURCE_DATE_EPOCH
# its time: the date of every file in the release artefacts, which makes them
# reproducible.
# Outside a git checkout the version is devel, as for a plain go build, and
# the release targets refuse to run.
GIT_DESCRIBE := $(shell git describe --tags --match 'v[0-9]*' --abbrev=12 --dirty 2>/dev/null)
GIT_HEAD := $(shell git rev-parse --short=12 HEAD 2>/dev/null)
VERSION ?= $(if $(GIT_DESCRIBE),$(patsubst v%,%,$(GIT_DESCRIBE)),$(if $(GIT_HEAD),$(shell \
	echo 0.0.0-$$(git rev-list --count HEAD)-g$(GIT_HEAD)$$(git diff --quiet HEAD || echo -dirty)),devel))
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null)
VERSION := $(VERSION)
REVISION := $(REVISION)
SOURCE_DATE_EPOCH := $(SOURCE_DATE_EPOCH)
LDFLAGS = -X main.version=$(VERSION) -X main.revision=$(REVISION)

# Release artefacts: static binaries for each architecture under
# RELEASE_BIN, built with -trimpath so that the checkout's path is not in
# them, and packaged into DIST by deploy/release (a module of its own, so
# that sonde does not link the image and package libraries). CA_BUNDLE goes
# into the image for HTTPS checks: Debian's ca-certificates of the build
# machine.
ARCHES      ?= amd64 arm64
RELEASE_BIN ?= bin/release
DIST        ?= dist
CA_BUNDLE   ?= /etc/ssl/certs/ca-certificates.crt
RELEASE     := bin/sonde-release
RELEASE_FLAGS = -version '$(VERSION)' -revision '$(REVISION)' -epoch '$(SOURCE_DATE_EPOCH)' \
	-bin '$(RELEASE_BIN)' -arch '$(ARCHES)' -ca-bundle '$(CA_BUNDLE)' -out '$(DIST)'

.PHONY: build run test test-race bench generate lint clean version release-bin release-tool image deb release test-release

# CGO_ENABLED=0: a static binary, and one that can drop the capabilities of
# all its threads after start (see internal/privilege).
build:
	CGO_ENABLED=0 $(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/sonde

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

# The version make stamps, for scripts: make -s version.
version:
	@echo '$(VERSION)'

release-bin:
	@for arch in $(ARCHES); do \
		echo "build $(RELEASE_BIN)/linux_$$arch/sonde"; \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -trimpath -ldflags '-s -w $(LDFLAGS)' \
			-o $(RELEASE_BIN)/linux_$$arch/sonde ./cmd/sonde || exit 1; \
	done

release-tool:
	cd deploy/release && CGO_ENABLED=0 $(GO) build -o $(CURDIR)/$(RELEASE) .

# The OCI image (an image index for every architecture in ARCHES) as an
# oci-archive in DIST: load or push it with skopeo (deploy/README.md).
image: release-bin release-tool
	./$(RELEASE) image $(RELEASE_FLAGS)

# The Debian packages, one per architecture.
deb: release-bin release-tool
	./$(RELEASE) deb $(RELEASE_FLAGS)

# Everything in a fresh DIST: the image, the packages, a tarball per
# architecture and SHA256SUMS.
release: release-bin release-tool
	rm -rf $(DIST)
	./$(RELEASE) release $(RELEASE_FLAGS)

# Runs the release artefacts for real (as root: namespaces, chroot, file
# capabilities, a scratch root for dpkg), and builds the release again from
# the same binaries and from a fresh clone to compare SHA256SUMS. -v: the
# tests log what sonde printed in the image and the package, and why a
# test skipped (podman). CI runs it after `make test`.
test-release: release
	cd deploy/release && $(GO) vet ./... && \
		SONDE_DIST=$(abspath $(DIST)) SONDE_VERSION='$(VERSION)' SONDE_REVISION='$(REVISION)' \
		SONDE_EPOCH='$(SOURCE_DATE_EPOCH)' SONDE_CA_BUNDLE='$(abspath $(CA_BUNDLE))' SONDE_RELEASE_BIN=$(abspath $(RELEASE_BIN)) \
		$(GO) test -v -count=1 -timeout 20m ./...

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
	cd deploy && $(GO) vet ./... && $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
	cd deploy/release && $(GO) vet ./... && $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

clean:
	rm -rf bin $(DIST)
