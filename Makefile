.PHONY: demo test build install uninstall completions docs chaos chaos-schedule goreleaser release-check release-snapshot cross

demo:
	./scripts/demo.sh

test:
	./scripts/test.sh

build:
	CGO_ENABLED=0 go build -trimpath -o bin/leasectl .

# Installs the binary, the man pages (docs/man) and the shell completions
# (completions/) under $(PREFIX); DESTDIR stages the files elsewhere, as
# packagers do: `make install DESTDIR=/tmp/stage PREFIX=/usr`.
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
MANDIR ?= $(PREFIX)/share/man
DATADIR ?= $(PREFIX)/share

install: build
	install -d "$(DESTDIR)$(BINDIR)" "$(DESTDIR)$(MANDIR)/man1" \
		"$(DESTDIR)$(DATADIR)/bash-completion/completions" \
		"$(DESTDIR)$(DATADIR)/zsh/site-functions" \
		"$(DESTDIR)$(DATADIR)/fish/vendor_completions.d"
	install -m 0755 bin/leasectl "$(DESTDIR)$(BINDIR)/leasectl"
	install -m 0644 docs/man/*.1 "$(DESTDIR)$(MANDIR)/man1/"
	install -m 0644 completions/leasectl.bash "$(DESTDIR)$(DATADIR)/bash-completion/completions/leasectl"
	install -m 0644 completions/_leasectl "$(DESTDIR)$(DATADIR)/zsh/site-functions/_leasectl"
	install -m 0644 completions/leasectl.fish "$(DESTDIR)$(DATADIR)/fish/vendor_completions.d/leasectl.fish"

uninstall:
	rm -f "$(DESTDIR)$(BINDIR)/leasectl" \
		"$(DESTDIR)$(DATADIR)/bash-completion/completions/leasectl" \
		"$(DESTDIR)$(DATADIR)/zsh/site-functions/_leasectl" \
		"$(DESTDIR)$(DATADIR)/fish/vendor_completions.d/leasectl.fish"
	cd docs/man && for f in *.1; do rm -f "$(DESTDIR)$(MANDIR)/man1/$$f"; done

# Regenerates completions/, docs/reference/ and docs/man/ from the cobra
# commands (a test fails when they are stale).
completions docs:
	go generate ./cmd

# The full fault suite (test/chaos); `make test` and CI run its bounded
# version. Needs root for the network partition.
chaos:
	bash -c '. scripts/lib.sh && ensure_deps test'
	go test ./test/chaos -count=1 -v -timeout 60m -args -full

# The randomized fault schedule (test/schedule) with its history checker;
# `go test ./...` runs its bounded form (seed 1, 2 minutes). A failing
# seed reruns the same schedule: make chaos-schedule SEED=N. Needs root.
ifeq ($(origin SEED),undefined)
SEED := $(shell od -An -N4 -tu4 /dev/urandom | tr -d ' ')
endif
DURATION ?= 30m
HISTORY ?= $(or $(TMPDIR),/tmp)/leasectl-schedule-$(SEED).json
chaos-schedule:
	bash -c '. scripts/lib.sh && ensure_deps test'
	go test ./test/schedule -run TestSchedule -count=1 -v -timeout 3h -args -seed $(SEED) -duration $(DURATION) -history $(HISTORY)

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
