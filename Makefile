GO ?= go
BIN := bin

.PHONY: build test demo fuzz bench clean

build:
	$(GO) build -o $(BIN)/ ./cmd/...

test: build
	$(GO) vet ./...
	$(GO) test -count=1 ./...

clean:
	rm -rf $(BIN)
