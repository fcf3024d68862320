.PHONY: demo test build completions

demo:
	./scripts/demo.sh

test:
	./scripts/test.sh

build:
	go build -o bin/leasectl .

completions:
	go generate ./cmd
