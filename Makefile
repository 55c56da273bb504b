# xfer — the two commands that matter: `make demo` and `make test`.
# Both install the system packages they need first (apt-get, as root or via sudo).

SWIFT ?= swift
# Three packages: the engine (the root one), the receiver (Receiver/, which
# apps embed in their own servers) and the command (CLI/, over both), so that
# an app embedding the engine resolves none of what the others need.
CLI = --package-path CLI
# The receiver's package builds in the command's build folder: it holds every module the
# receiver needs already, so its tests cost seconds instead of a second build of Hummingbird.
RECEIVER = --package-path Receiver --scratch-path CLI/.build

.PHONY: all build-deps deps python-tools build release man deb dist test-dist test test-linkage api-check test-objectstore test-store-faults test-package test-pull-prefix test-half-open torture demo bench clean install install-files uninstall

all: build

# Installs only what is missing, so a machine that has everything is not touched:
# `build-deps` what building xfer and `make demo` need, `deps` also what the tests run against.
build-deps:
	@./scripts/install-deps.sh build

deps:
	@./scripts/install-deps.sh test

# The Python servers and clients the end-to-end tests talk to (.tools/, from PyPI).
python-tools: deps
	@./scripts/install-python-tools.sh

build: deps
	$(SWIFT) build
	$(SWIFT) build $(CLI)
	$(SWIFT) build $(RECEIVER)

# The release build links the Swift runtime and Foundation statically, so that `xfer` runs where no
# Swift is installed: what it loads is Debian's (libcurl, liblmdb, libisal, zlib, libc...). The
# shipped modules use FoundationEssentials only (scripts/test-linkage.sh checks it), so neither
# full Foundation nor ICU's data is in it. Then, each measured (Docs/benchmarks.md, "The
# installed binary"): -Osize (per small file 5-11 % more receiver CPU than -O, which is 2.5 MB larger and would miss
# the size goal: SWIFT_OPTIMIZATION=-O for that); a section per function (the toolchain's own libraries have
# them; SwiftPM's builds do not), so that the linker drops unused functions and folds identical
# ones (--icf=all, as Chromium links BoringSSL and Apple's linker folds Swift code); no exported
# dynamic symbols (nothing loads xfer as a library); and full RELRO (-z relro -z now). 32 MiB
# stripped, a third of 0.3.0's 102 MiB as installed. Not GNU ld: its packed relocations save
# as much, but it drops RELRO (Swift's writable .rodata sections split the relocated data).
SWIFT_OPTIMIZATION ?= -Osize
RELEASE_FLAGS = -c release --static-swift-stdlib -Xswiftc $(SWIFT_OPTIMIZATION) -Xswiftc -Xfrontend -Xswiftc -function-sections \
	-Xlinker --icf=all -Xlinker --no-export-dynamic -Xlinker -z -Xlinker relro -Xlinker -z -Xlinker now
RELEASE_BIN_DIR = $$($(SWIFT) build $(CLI) $(RELEASE_FLAGS) --show-bin-path)
release: build-deps
	$(SWIFT) build $(CLI) $(RELEASE_FLAGS) --product xfer

# The man page, made from the command's own help by swift-argument-parser's generate-manual
# plugin (which first builds every product, here in debug as `make test` does) and committed in
# CLI/Man, so that `make install`, `make deb` and `make dist` ship it without a second build in
# another configuration; InstallTests fails when it is stale. Its date (.Dd) changes only with it.
MAN_PAGES = CLI/Man
GENERATED_MAN = CLI/.build/plugins/GenerateManual/outputs/XferCLI/xfer.1
man: deps
	$(SWIFT) package $(CLI) plugin generate-manual --configuration debug
	@if [ "$$(grep -v '^\.Dd ' $(GENERATED_MAN))" != "$$(grep -v '^\.Dd ' $(MAN_PAGES)/xfer.1)" ]; then \
		cp $(GENERATED_MAN) $(MAN_PAGES)/xfer.1 && echo "man: $(MAN_PAGES)/xfer.1 updated; commit it"; fi

# `make install` (PREFIX, default /usr/local; DESTDIR for staging): the release
# xfer, stripped, its symbols in PREFIX/lib/debug/.build-id/ as Debian's -dbgsym packages keep
# them (`gdb -iex 'set debug-file-directory PREFIX/lib/debug'` reads them), its man page and bash,
# zsh and fish completions.
PREFIX ?= /usr/local
BIN_TARGET = $(DESTDIR)$(PREFIX)/bin
MAN_TARGET = $(DESTDIR)$(PREFIX)/share/man/man1
BASH_COMPLETIONS = $(DESTDIR)$(PREFIX)/share/bash-completion/completions
ZSH_COMPLETIONS = $(DESTDIR)$(PREFIX)/share/zsh/site-functions
FISH_COMPLETIONS = $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d
DEBUG_SYMBOLS = $(DESTDIR)$(PREFIX)/lib/debug/.build-id

install: release
	@$(MAKE) --no-print-directory install-files BIN_DIR="$(RELEASE_BIN_DIR)"

# Copies the xfer in BIN_DIR and the man page in MAN_PAGES, and writes the
# completion scripts that xfer prints. Builds nothing, so that `make test`
# can install its debug build under a temporary DESTDIR.
install-files:
	@test -x "$(BIN_DIR)/xfer" || { echo "install-files: no xfer in BIN_DIR='$(BIN_DIR)'" >&2; exit 1; }
	@ls $(MAN_PAGES)/*.1 >/dev/null 2>&1 || { echo "install-files: no man page in $(MAN_PAGES); run 'make man'" >&2; exit 1; }
	install -d "$(BIN_TARGET)" "$(MAN_TARGET)" "$(BASH_COMPLETIONS)" "$(ZSH_COMPLETIONS)" "$(FISH_COMPLETIONS)"
	install -m 755 "$(BIN_DIR)/xfer" "$(BIN_TARGET)/xfer"
	./scripts/split-debug.sh "$(BIN_TARGET)/xfer" "$(DEBUG_SYMBOLS)/$$(./scripts/split-debug.sh --id "$(BIN_TARGET)/xfer").debug"
	install -m 644 $(MAN_PAGES)/*.1 "$(MAN_TARGET)/"
	"$(BIN_DIR)/xfer" --generate-completion-script bash > "$(BASH_COMPLETIONS)/xfer"
	"$(BIN_DIR)/xfer" --generate-completion-script zsh > "$(ZSH_COMPLETIONS)/_xfer"
	"$(BIN_DIR)/xfer" --generate-completion-script fish > "$(FISH_COMPLETIONS)/xfer.fish"
	chmod 644 "$(BASH_COMPLETIONS)/xfer" "$(ZSH_COMPLETIONS)/_xfer" "$(FISH_COMPLETIONS)/xfer.fish"

# `make deb`: DIST_DIR/xfer_VERSION_ARCH.deb (and the binary's symbols, .debug) from the release
# build and the man page (scripts/make-deb.sh); BIN_DIR=DIR packages the xfer in DIR instead.
# `make dist`: the release's files in DIST_DIR — the package, a tarball, the symbols, SHA256SUMS
# (scripts/dist.sh; CHANGELOG.md, "Releasing").
DIST_DIR ?= dist
# The man page is the committed one (CLI/Man, see `man`): the plugin's build of every product,
# without the release flags, would relink xfer over the static one.
deb: release
	./scripts/make-deb.sh "$(or $(BIN_DIR),$(RELEASE_BIN_DIR))/xfer" $(MAN_PAGES) $(DIST_DIR)

dist: release
	BIN_DIR="$(or $(BIN_DIR),$(RELEASE_BIN_DIR))" MAN_DIR=$(MAN_PAGES) DIST_DIR=$(DIST_DIR) ./scripts/dist.sh

uninstall:
	@if [ -f "$(BIN_TARGET)/xfer" ]; then rm -f "$(DEBUG_SYMBOLS)/$$(./scripts/split-debug.sh --id "$(BIN_TARGET)/xfer").debug"; fi
	rm -f "$(BIN_TARGET)/xfer" "$(MAN_TARGET)/xfer.1" "$(MAN_TARGET)"/xfer.*.1 \
		"$(BASH_COMPLETIONS)/xfer" "$(ZSH_COMPLETIONS)/_xfer" "$(FISH_COMPLETIONS)/xfer.fish"

# The engine's tests (and the example program the end-to-end tests run), the
# receiver's route-level tests (no sockets), then the command's end-to-end
# tests. The man page is made from the debug build here, for InstallTests to compare with
# the committed one (CLI/Man/xfer.1).
# All three packages build in the command's build folder (the engine's and the
# receiver's modules are the command's own), so nothing is compiled twice.
ENGINE = --scratch-path CLI/.build
test: python-tools
	$(SWIFT) build $(CLI) --build-tests
	$(SWIFT) build $(ENGINE) --build-tests
	$(SWIFT) test $(ENGINE) --skip-build
	$(SWIFT) build $(RECEIVER) --build-tests
	$(SWIFT) test $(RECEIVER) --skip-build
	$(SWIFT) package $(CLI) plugin generate-manual --configuration debug
	SWIFT="$(SWIFT)" ./scripts/test-end-to-end.sh
	SWIFT="$(SWIFT)" ./scripts/test-linkage.sh

# An app of its own that mounts the receiver's routes (Receiver/Tests/Fixtures/LinkageApp),
# built in the command's build folder (its one file, and Hummingbird again: SwiftPM builds a
# dependency of another root package anew, ~20 s), links neither LMDB nor libcurl: the receiver
# does not depend on the engine. Last in `make test`, so the command is not rebuilt after it.
test-linkage: deps
	$(SWIFT) build $(RECEIVER)
	SWIFT="$(SWIFT)" ./scripts/test-linkage.sh

# The end-to-end suites of every protocol the receiver speaks, run again with the
# receiver on the Ceph gateway's S3 (`xfer serve --storage s3://...`) instead of a
# directory: the same tests (SuiteStorage in the harness), ~10 min. `make test`
# runs the short version (ObjectStorageTests, LoadBalancedReceiverTests, the torture
# on two receivers over Ceph).
OBJECT_STORE_SUITES = PatchPushTests|ReceiverPatchTests|MultipartPushTests|SequencePushTests|TusPushTests|TusReceiverTests|IETFPushTests|IETFReceiverTests|ReceiverRawTests|ReceiverTreeTests|TreePushTests|StreamPushTests|FaultTests|UploadPageTests|HookPolicyTests|SlowClientTests
test-objectstore: python-tools
	$(SWIFT) build $(CLI) --build-tests
	XFER_TEST_STORAGE=ceph $(SWIFT) test $(CLI) --skip-build --filter '$(OBJECT_STORE_SUITES)'

# The receiver on the Ceph gateway behind the store-fault proxy (CLI/Tests/Tools/storefaults.py,
# Docs/reliability.md "The store failing"), long version: a receiver killed after each of the
# ~45 store requests of a tus, an ietf and a patch upload in turn, and 3,000 tiny appends
# (~17 min; `make test` kills at 7 of them per protocol and sends 200 appends: ~3 min).
test-store-faults: python-tools
	$(SWIFT) build $(CLI) --build-tests
	XFER_STORE_FAULT_KILLS=all $(SWIFT) test $(CLI) --skip-build --filter StoreFaultTests

# `xfer pull` of a prefix of 5,000 objects from the Ceph gateway, killed twice and run to its end
# (~2 min; `make test` runs it with 1,000).
test-pull-prefix: python-tools
	$(SWIFT) build $(CLI) --build-tests
	XFER_PULL_PREFIX_OBJECTS=5000 $(SWIFT) test $(CLI) --skip-build --filter CephPullTests/testAPrefixOfSmallObjectsKilledTwiceArrivesWhole

# 10,000 half-open connections (half a request head each) against `xfer serve` at its default
# limits: /health answers within 100 ms while they are held, and the receiver closes every one
# (~2 min; `make test` opens 1,000).
test-half-open: python-tools
	$(SWIFT) build $(CLI) --build-tests
	XFER_HALF_OPEN_CONNECTIONS=10000 $(SWIFT) test $(CLI) --skip-build --filter SlowClientTests/testHalfOpenConnectionsAreClosedWithinTheHeadTimeoutWhileHealthAnswers

# The release as users get it (~15 min from nothing; PackagingTests are the short half in
# `make test`): `make dist`, then DistTests on its files — the binary loads nothing from the
# Swift toolchain and serves, pushes and pulls with the toolchain hidden (bwrap), lintian
# finds no error, and the package installs (dpkg -i, as root), its service's command line takes
# a push, and `dpkg -r` and `--purge` leave none of its files. Refused where an xfer package
# is installed already: it is not the test's to replace.
test-dist: deps dist
	$(SWIFT) build $(CLI) --build-tests
	XFER_DIST_DIR="$(abspath $(DIST_DIR))" $(SWIFT) test $(CLI) --skip-build --filter DistTests

# What a newcomer's app does (Docs/backend-guide.md, section 0): a package made
# from the guide's text resolves 3 packages, builds the engine from nothing and
# pushes a file to `xfer serve` (~4 min; `make test` checks only the resolution).
test-package: python-tools
	$(SWIFT) build $(CLI) --build-tests
	XFER_FRESH_PACKAGE_BUILD=1 $(SWIFT) test $(CLI) --skip-build --filter FreshPackageTests

# Kill -9 torture, long version (the short one runs inside `make test`): per
# backend TRIALS pushes SIGKILLed KILLS times each against a receiver injecting
# FAULTS, then run to the end; one line per trial and a summary (Docs/reliability.md).
TRIALS ?= 20
KILLS ?= 4
FAULTS ?= 503=0.03,429=0.01,reset=0.03,truncate=0.03,garble=0.02
SEED ?= 42
torture: python-tools
	$(SWIFT) build $(CLI) --build-tests
	XFER_TORTURE_TRIALS=$(TRIALS) XFER_TORTURE_KILLS=$(KILLS) XFER_TORTURE_FAULTS='$(FAULTS)' XFER_TORTURE_SEED=$(SEED) \
		$(SWIFT) test $(CLI) --skip-build --filter TortureTests

# The public API of the engine's library products against the last release,
# recorded in API/N.N.N/: fails on a break not named in api-breakage-allowlist.txt
# (seconds after `make test`; no git tag needed; Docs/backend-guide.md, "Versions").
# .ci/run runs it after `make test`.
api-check: deps
	SWIFT="$(SWIFT)" API_SCRATCH=CLI/.build ./scripts/api-check.sh

# Pushes a 256 MiB file to a local `xfer serve`, kills the push with SIGKILL
# half way, resumes it, and checks the SHA-256 of what the receiver serves.
demo: release
	./scripts/demo.sh "$(RELEASE_BIN_DIR)/xfer"

# Benchmarks (issue 7): release build, everything on 127.0.0.1 against `xfer serve`;
# prints a table and rewrites the generated part of Docs/benchmarks.md (~25 min).
# ONLY=s3 runs xfer (Content-MD5, and --part-checksum crc32) against `aws s3 cp` (with and without its
# CRC32s) and `rclone copy` on a moto S3 server. ONLY=objectstore: `xfer serve --storage s3://` on the
# Ceph gateway (1 and 2 instances behind haproxy) beside s5cmd straight to it and the receiver on disk.
# QUICK=1 for a short run; BUILD_DIR=DIR (xfer, apple-resumable-server) and STORE_BENCH_DIR=DIR
# (xfer-store-bench) to use binaries built elsewhere (no build then).
bench: python-tools
	@./scripts/install-bench-deps.sh
	@if [ -z "$(BUILD_DIR)" ]; then \
		$(SWIFT) build $(CLI) $(RELEASE_FLAGS) --product xfer && \
		$(SWIFT) build $(CLI) $(RELEASE_FLAGS) --product apple-resumable-server && \
		$(SWIFT) build -c release --product xfer-store-bench; fi
	BENCH_COMMAND="$(if $(ONLY),ONLY=$(ONLY) )$(if $(QUICK),QUICK=$(QUICK) )$(if $(BUILD_DIR),BUILD_DIR=$(BUILD_DIR) )make bench" BUILD_DIR="$(BUILD_DIR)" STORE_BENCH_DIR="$(STORE_BENCH_DIR)" QUICK="$(QUICK)" python3 Benchmarks/run.py

clean:
	rm -rf .build Receiver/.build CLI/.build
