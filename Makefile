.PHONY: demo test build completions chaos

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
