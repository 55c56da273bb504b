import Foundation
import XCTest
import XferTestSupport

/// Shell and system integration: the completion scripts xfer prints, and
/// the Makefile's install and uninstall recipes run on the debug build under
/// a temporary DESTDIR (`make install` itself builds release first).
final class InstallTests: XCTestCase {
    var work: TemporaryDirectory!

    override func setUp() {
        work = TemporaryDirectory("xfer-install")
    }

    override func tearDown() {
        work = nil
    }

    private static let subcommands = ["push", "resume", "list", "status", "cancel", "uploads", "serve"]

    func testCompletionScriptsNameEverySubcommandAndOption() throws {
        for shell in ["bash", "zsh", "fish"] {
            let result = try runXfer(["--generate-completion-script", shell])
            XCTAssertEqual(result.status, 0, "\(shell): \(result.stderr)")
            XCTAssertEqual(result.stderr, "", shell)
            let script = result.stdout.joined(separator: "\n")
            // Fish names options without their dashes.
            for word in Self.subcommands + ["token-file", "proxy", "backend"] {
                XCTAssertTrue(script.contains(word), "\(shell): '\(word)' missing")
            }
        }
        // bash itself reads the bash script: it parses, and defines the completion.
        let script = work.file("xfer.bash")
        try runXfer(["--generate-completion-script", "bash"]).stdout.joined(separator: "\n")
            .write(toFile: script, atomically: true, encoding: .utf8)
        let bash = try runToEnd("/bin/bash", ["-c", "source \"$0\" && complete -p xfer", script])
        XCTAssertEqual(bash.status, 0, bash.stderr)
        XCTAssertEqual(bash.stdout.first?.hasSuffix(" xfer"), true, "\(bash.stdout)")
    }

    /// The man page that `make install`, `make deb` and `make dist` ship is committed
    /// (CLI/Man/xfer.1), so that a release build needs no second build for the
    /// generate-manual plugin; it must be what the plugin makes of today's help.
    func testTheCommittedManPageIsWhatTheCommandsHelpMakes() throws {
        let generated = packageRoot + "/.build/plugins/GenerateManual/outputs/XferCLI/xfer.1"
        guard FileManager.default.fileExists(atPath: generated) else {
            // `make test` makes it before running the tests (with the generate-manual plugin).
            let reason = "no man page at \(generated): run `make man` (make test makes it)"
            if ProcessInfo.processInfo.environment["CI"] == "true" { throw HarnessError(reason) }
            throw XCTSkip(reason)
        }
        // The page's date (`.Dd`) is the day it was made: not a difference.
        func body(_ path: String) throws -> [Substring] {
            try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n").filter { !$0.hasPrefix(".Dd ") }
        }
        XCTAssertEqual(try body(packageRoot + "/Man/xfer.1"), try body(generated), "CLI/Man/xfer.1 is stale: run `make man` and commit it")
    }

    func testInstallPutsBinaryManPageAndCompletionsUnderPrefixAndUninstallRemovesThem() throws {
        let stage = work.file("stage")
        let variables = ["DESTDIR=\(stage)", "PREFIX=/opt/xfer"]
        let install = try make(["install-files", "BIN_DIR=\(productsDirectory)"] + variables)
        XCTAssertEqual(install.status, 0, install.stderr)

        let root = stage + "/opt/xfer"
        let installed = [
            "bin/xfer", "share/man/man1/xfer.1", "share/bash-completion/completions/xfer",
            "share/zsh/site-functions/_xfer", "share/fish/vendor_completions.d/xfer.fish",
        ]
        for path in installed {
            let attributes = try FileManager.default.attributesOfItem(atPath: root + "/" + path)
            XCTAssertGreaterThan((attributes[.size] as? NSNumber)?.intValue ?? 0, 0, path)
            let mode = (attributes[.posixPermissions] as? NSNumber)?.intValue ?? 0
            XCTAssertEqual(mode, path.hasPrefix("bin/") ? 0o755 : 0o644, "\(path): \(String(mode, radix: 8))")
        }
        // Installed stripped, its symbols kept by build id (as Debian's -dbgsym packages do).
        let sections = try runToEnd("/usr/bin/readelf", ["-S", "-W", root + "/bin/xfer"]).stdout.joined(separator: "\n")
        XCTAssertFalse(sections.contains(".symtab"), "the installed xfer is stripped")
        XCTAssertTrue(sections.contains(".gnu_debuglink"), "and names its debug file")
        let debugFiles = try FileManager.default.subpathsOfDirectory(atPath: root + "/lib/debug/.build-id").filter { $0.hasSuffix(".debug") }
        XCTAssertEqual(debugFiles.count, 1, "\(debugFiles)")
        let debugSections = try runToEnd("/usr/bin/readelf", ["-S", "-W", root + "/lib/debug/.build-id/" + (debugFiles.first ?? "")])
        XCTAssertTrue(debugSections.stdout.joined(separator: "\n").contains(".symtab"), "the debug file holds the symbols")
        let manual = try String(contentsOfFile: root + "/share/man/man1/xfer.1", encoding: .utf8)
        XCTAssertTrue(manual.contains(".Dt XFER 1"), "an mdoc page for xfer(1)")
        for subcommand in Self.subcommands {
            XCTAssertTrue(manual.contains(subcommand), "the page describes \(subcommand)")
        }
        let help = try runToEnd(root + "/bin/xfer", ["--help"])
        XCTAssertEqual(help.status, 0, help.stderr)
        XCTAssertTrue(help.stdout.joined().contains("push"))

        let uninstall = try make(["uninstall"] + variables)
        XCTAssertEqual(uninstall.status, 0, uninstall.stderr)
        for path in installed + debugFiles.map({ "lib/debug/.build-id/" + $0 }) {
            XCTAssertFalse(FileManager.default.fileExists(atPath: root + "/" + path), "\(path) is left")
        }
    }

    /// `make demo` installs what building xfer needs and nothing of what the
    /// tests run against (no Ceph, haproxy, tinyproxy, SQLite); `make test` all of it.
    func testDemoInstallsOnlyWhatBuildingXferNeeds() throws {
        let demo = try make(["-n", "demo"])
        XCTAssertEqual(demo.status, 0, demo.stderr)
        let recipe = demo.stdout.joined(separator: "\n")
        XCTAssertTrue(recipe.contains("install-deps.sh build"), recipe)
        XCTAssertFalse(recipe.contains("install-deps.sh test"), recipe)
        let test = try make(["-n", "test"])
        XCTAssertTrue(test.stdout.joined(separator: "\n").contains("install-deps.sh test"), test.stderr)

        // As on a fresh machine: no command found (the headers are this machine's).
        func wanted(_ purpose: String) throws -> Set<String> {
            let result = try runToEnd(
                "/usr/bin/env", ["-i", "PATH=/nonexistent", "DRY_RUN=1", "/bin/bash", repositoryRoot + "/scripts/install-deps.sh", purpose])
            XCTAssertEqual(result.status, 0, result.stderr)
            return Set(result.stdout.joined(separator: " ").split(separator: " ").map(String.init))
        }
        let forBuild = try wanted("build")
        let forTest = try wanted("test")
        // binutils: GNU ld for the release link, strip and objcopy; dpkg-dev: `make deb`'s Depends.
        XCTAssertTrue(forBuild.isSuperset(of: ["curl", "python3", "pkg-config", "binutils", "dpkg-dev"]), "\(forBuild)")
        XCTAssertTrue(
            forBuild.filter {
                $0.hasPrefix("ceph") || $0 == "radosgw" || $0 == "haproxy" || $0.hasPrefix("tinyproxy") || $0 == "chromium"
                    || $0 == "lintian" || $0 == "bubblewrap" || $0 == "systemd"
            }.isEmpty,
            "\(forBuild)")
        XCTAssertTrue(
            forTest.isSuperset(
                of: forBuild.union(["ceph-mon", "ceph-osd", "radosgw", "haproxy", "tinyproxy-bin", "chromium", "lintian", "bubblewrap", "systemd"])),
            "\(forTest)")
    }

    /// Runs `make` in the repository with `arguments`, not as a part of the
    /// `make test` it may run under (whose variables and job server it would inherit).
    private func make(_ arguments: [String]) throws -> RunResult {
        try runToEnd("/usr/bin/make", ["-s", "-C", repositoryRoot] + arguments, environment: ["MAKEFLAGS": "", "MFLAGS": "", "MAKELEVEL": ""])
    }
}
