# xfer — the two commands that matter: `make demo` and `make test`.
# Both install the system packages they need first (apt-get, as root or via sudo).

SWIFT ?= swift

.PHONY: all deps python-tools build release test torture demo bench clean

all: build

# Installs only what is missing, so a machine that has everything is not touched.
deps:
	@./scripts/install-deps.sh

# The Python servers and clients the end-to-end tests talk to (.tools/, from PyPI).
python-tools: deps
	@./scripts/install-python-tools.sh

build: deps
	$(SWIFT) build

release: deps
	$(SWIFT) build -c release --product xfer

test: python-tools
	$(SWIFT) build --build-tests
	$(SWIFT) test --skip-build

# Kill -9 torture, long version (the short one runs inside `make test`): per
# backend TRIALS pushes SIGKILLed KILLS times each against a receiver injecting
# FAULTS, then run to the end; one line per trial and a summary (Docs/reliability.md).
TRIALS ?= 20
KILLS ?= 4
FAULTS ?= 503=0.03,429=0.01,reset=0.03,truncate=0.03,garble=0.02
SEED ?= 42
torture: python-tools
	$(SWIFT) build --build-tests
	XFER_TORTURE_TRIALS=$(TRIALS) XFER_TORTURE_KILLS=$(KILLS) XFER_TORTURE_FAULTS='$(FAULTS)' XFER_TORTURE_SEED=$(SEED) \
		$(SWIFT) test --skip-build --filter TortureTests

# Pushes a 256 MiB file to a local `xfer serve`, kills the push with SIGKILL
# half way, resumes it, and checks the SHA-256 of what the receiver serves.
demo: release
	./scripts/demo.sh "$$($(SWIFT) build -c release --show-bin-path)/xfer"

# Benchmarks (issue 7): release build, everything on 127.0.0.1 against `xfer serve`;
# prints a table and rewrites the generated part of Docs/benchmarks.md (~25 min).
# ONLY=s3 runs xfer (Content-MD5, and --part-checksum crc32) against `aws s3 cp` (with and without its
# CRC32s) and `rclone copy` on a moto S3 server.
# QUICK=1 for a short run; BUILD_DIR=DIR to use binaries built elsewhere (no build then).
bench: python-tools
	@./scripts/install-bench-deps.sh
	@if [ -z "$(BUILD_DIR)" ]; then \
		$(SWIFT) build -c release --product xfer && \
		$(SWIFT) build -c release --product xfer-store-bench; fi
	BENCH_COMMAND="$(if $(ONLY),ONLY=$(ONLY) )$(if $(QUICK),QUICK=$(QUICK) )$(if $(BUILD_DIR),BUILD_DIR=$(BUILD_DIR) )make bench" BUILD_DIR="$(BUILD_DIR)" QUICK="$(QUICK)" python3 Benchmarks/run.py

clean:
	rm -rf .build
