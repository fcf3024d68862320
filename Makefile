.PHONY: demo test build completions chaos goreleaser release-check release-snapshot cross

demo:
	./scripts/demo.sh

test:
	./scripts/test.sh

build:
	go build -o bin/leasectl .

completions:
	go generate ./cmd

# The full fault suite (internal/chaos); `make test` and CI run its bounded
# version. Needs root for the network partition.
chaos:
	bash -c '. scripts/lib.sh && ensure_deps'
	go test ./internal/chaos -count=1 -v -timeout 60m -args -full

# goreleaser, pinned: installed with go install when missing (the Go module
# proxy once; it works offline afterwards).
GORELEASER_VERSION := v2.15.1
GORELEASER := $(or $(shell command -v goreleaser 2>/dev/null),$(shell go env GOPATH)/bin/goreleaser)

goreleaser:
	@test -x "$(GORELEASER)" || go install github.com/goreleaser/goreleaser/v2@$(GORELEASER_VERSION)

release-check: goreleaser
	$(GORELEASER) check

# A snapshot of the release for this machine's platform, into dist/, with
# the release's build flags and ldflags; offline. `goreleaser build
# --snapshot --clean` without --single-target builds all six targets.
release-snapshot: release-check
	$(GORELEASER) build --snapshot --clean --single-target
	./dist/leasectl_*/leasectl version

# Build the binary and vet every package for each release target (linux,
# darwin, windows on amd64 and arm64); scripts/test.sh runs it too.
cross:
	./scripts/cross.sh
