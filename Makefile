# xfer — the two commands that matter: `make demo` and `make test`.
# Both install the system packages they need first (apt-get, as root or via sudo).

SWIFT ?= swift

.PHONY: all deps build release test demo clean

all: build

# Installs only what is missing, so a machine that has everything is not touched.
deps:
	@./scripts/install-deps.sh

build: deps
	$(SWIFT) build

release: deps
	$(SWIFT) build -c release --product xfer

test: deps
	$(SWIFT) build --build-tests
	$(SWIFT) test --skip-build

# Pushes a 256 MiB file to a local `xfer serve`, kills the push with SIGKILL
# half way, resumes it, and checks the SHA-256 of what the receiver serves.
demo: release
	./scripts/demo.sh "$$($(SWIFT) build -c release --show-bin-path)/xfer"

clean:
	rm -rf .build
