import Foundation
import XCTest
import XferTestSupport

/// The Debian package and the receiver's service (packaging/, scripts/make-deb.sh), on the
/// debug build: the unit as systemd reads it, the command line it runs with the shipped
/// defaults, `xfer serve`'s XFER_SERVE_* variables, and the package's shape. Nothing is
/// installed; DistTests (`make test-dist`) installs the release package.
final class PackagingTests: XCTestCase {
    var work: TemporaryDirectory!

    override func setUp() {
        work = TemporaryDirectory("xfer-packaging")
    }

    override func tearDown() {
        work = nil
    }

    /// systemd's own reading of the unit finds nothing to say, and does say something about a
    /// misspelled directive (which it ignores with exit status 0: the check is its silence).
    func testSystemdAcceptsTheUnitAndNotAMisspelledCopy() throws {
        let unit = try String(contentsOfFile: packagingDirectory + "/xfer-serve.service", encoding: .utf8)
        XCTAssertEqual(try UnitFile(unit).execStart.first, "/usr/bin/xfer", "the unit runs the packaged binary")
        // `verify` checks that ExecStart's binary exists and is executable: before the package
        // is installed there is no /usr/bin/xfer, so the copy runs the debug build (DistTests
        // verifies the installed unit as it is). --man=no: its man page is not installed either.
        let good = work.file("good/xfer-serve.service")
        try writeFile(unit.replacingOccurrences(of: "ExecStart=/usr/bin/xfer ", with: "ExecStart=\(xferExecutable) "), to: good)
        let accepted = try systemdAnalyzeVerify(good, manPages: false)
        XCTAssertEqual(accepted.status, 0, accepted.output)
        XCTAssertEqual(accepted.output, "", "systemd-analyze verify had something to say")

        let misspelled = work.file("bad/xfer-serve.service")
        try writeFile(
            try String(contentsOfFile: good, encoding: .utf8).replacingOccurrences(of: "\nProtectSystem=", with: "\nProtectSytem="),
            to: misspelled)
        let refused = try systemdAnalyzeVerify(misspelled, manPages: false)
        XCTAssertTrue(refused.output.contains("Unknown key") && refused.output.contains("ProtectSytem"), refused.output)
    }

    /// What the service runs: ExecStart with the environment systemd makes of the shipped
    /// /etc/default/xfer-serve, overriding only what a test must (its root, a free port, its
    /// token file). It listens, takes a push with the token, refuses one without.
    func testTheUnitsCommandLineWithTheShippedDefaultsTakesAPushWithTheToken() throws {
        let unit = try UnitFile(try String(contentsOfFile: packagingDirectory + "/xfer-serve.service", encoding: .utf8))
        XCTAssertEqual(unit.environmentFile, "/etc/default/xfer-serve")
        let defaults = try systemdEnvironment(try String(contentsOfFile: packagingDirectory + "/xfer-serve.default", encoding: .utf8))
        // The shipped values the service depends on: its state directory, and a token.
        XCTAssertEqual(defaults["XFER_SERVE_ROOT"], "/var/lib/xfer-serve")
        XCTAssertEqual(defaults["XFER_SERVE_AUTH_TOKEN_FILE"], "/etc/xfer-serve/auth-token")
        XCTAssertEqual(defaults["XFER_SERVE_HOST"], "127.0.0.1")
        XCTAssertEqual(defaults["XFER_SERVE_PORT"], "8080")
        XCTAssertTrue(defaults.values.contains(""), "the file lists variables left empty (unset)")

        let token = "tok-\(UUID().uuidString)"
        let tokenFile = work.file("auth-token")
        let root = work.file("root")
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        // As the service runs, where the test may switch users (as root, CI): a user that owns
        // neither the token nor anything else, reading the token (root's, mode 0640) through a
        // supplementary group, as DynamicUser= and SupplementaryGroups= make it; the group is
        // `users` (100) here. It must not be warned that the group can read the token.
        var asService: [String] = []
        if getuid() == 0 {
            try writeFile(token + "\n", to: tokenFile, mode: 0o640)
            XCTAssertEqual(chown(tokenFile, 0, 100), 0)
            XCTAssertEqual(chown(root, 65534, 65534), 0)
            asService = ["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--groups=100", "--"]
        } else {
            try writeFile(token + "\n", to: tokenFile, mode: 0o600)
        }
        // And under the unit's MemoryDenyWriteExecute=, as the kernel applies it.
        let receiver = try startUnitCommandLine(
            unit, binary: xferExecutable, defaults: defaults, wrapper: try memoryDenyWriteExecute() + asService,
            overrides: ["XFER_SERVE_ROOT": root, "XFER_SERVE_PORT": "0", "XFER_SERVE_HOST": "127.0.0.1", "XFER_SERVE_AUTH_TOKEN_FILE": tokenFile])
        defer { receiver.child.kill(SIGTERM); receiver.child.wait() }
        XCTAssertTrue(receiver.url.hasPrefix("http://127.0.0.1:"), receiver.url)

        let file = work.file("a.bin")
        try makeTestFile(at: file, size: 300_000)
        let refused = try runXfer(["push", file, "--backend", "patch", "--to", receiver.url, "--state", work.file("state-1")], environment: ["XFER_TOKEN": ""])
        XCTAssertEqual(refused.status, 1, refused.stderr)
        XCTAssertTrue(refused.stderr.contains("401"), refused.stderr)
        let pushed = try runXfer(["push", file, "--backend", "patch", "--to", receiver.url, "--token-file", tokenFile, "--state", work.file("state-2")])
        XCTAssertEqual(pushed.status, 0, pushed.stderr)
        XCTAssertEqual(try sha256sum(try servedFile(root: root, "a.bin")), try sha256sum(file))
        receiver.child.kill(SIGTERM)
        receiver.child.wait()
        XCTAssertFalse(receiver.child.standardError.contains("can be read by other users"), receiver.child.standardError)
    }

    /// XFER_SERVE_*: a bad value is one line naming the variable, exit 2 as any bad usage; the
    /// command line wins option by option (a repeatable one's values replace the variable's);
    /// an empty variable is unset.
    func testServeReadsItsOptionsFromXferServeVariables() throws {
        let root = work.file("root")
        let badPort = try runXfer(["serve", "--root", root], environment: ["XFER_SERVE_PORT": "notaport"])
        XCTAssertEqual(badPort.status, 2, badPort.stderr)
        XCTAssertEqual(badPort.stderr.split(separator: "\n").count, 1, badPort.stderr)
        XCTAssertTrue(badPort.stderr.hasPrefix("xfer: ") && badPort.stderr.contains("XFER_SERVE_PORT"), badPort.stderr)
        XCTAssertFalse(badPort.stderr.contains("--port"), "the variable is named, not the option nobody typed: \(badPort.stderr)")
        // A value of the right type that `xfer serve` refuses once parsed is the variable's too.
        let outOfRange = try runXfer(["serve", "--root", root], environment: ["XFER_SERVE_PORT": "70000"])
        XCTAssertEqual(outOfRange.status, 2, outOfRange.stderr)
        XCTAssertTrue(outOfRange.stderr.contains("XFER_SERVE_PORT must be between 0 and 65535"), outOfRange.stderr)

        // The variable is used...
        let port = try freeTCPPort()
        let fromVariable = try startServer(
            "xfer serve", executable: xferExecutable, arguments: ["serve"], environment: ["XFER_SERVE_ROOT": root, "XFER_SERVE_PORT": String(port)])
        XCTAssertEqual(fromVariable.url, "http://127.0.0.1:\(port)")
        fromVariable.child.kill(SIGTERM)
        fromVariable.child.wait()
        // ...unless the command line names the option: the bad value is not even read.
        let commandLineWins = try startServer(
            "xfer serve", executable: xferExecutable, arguments: ["serve", "--port=0"], environment: ["XFER_SERVE_ROOT": root, "XFER_SERVE_PORT": "notaport"])
        XCTAssertNotEqual(commandLineWins.url, "http://127.0.0.1:\(port)")
        commandLineWins.child.kill(SIGTERM)
        commandLineWins.child.wait()

        // A repeatable option: the command line's values replace the variable's (whose second
        // origin is refused when it is used), they do not add to them.
        let origins = ["XFER_SERVE_ROOT": root, "XFER_SERVE_CORS_ORIGIN": "https://a.example.com https://b.example.com/path"]
        let badOrigin = try runXfer(["serve", "--port", "0"], environment: origins)
        XCTAssertEqual(badOrigin.status, 2, badOrigin.stderr)
        XCTAssertTrue(badOrigin.stderr.contains("XFER_SERVE_CORS_ORIGIN expects an origin"), badOrigin.stderr)
        let replaced = try startServer(
            "xfer serve", executable: xferExecutable, arguments: ["serve", "--port", "0", "--cors-origin", "https://c.example.com"], environment: origins)
        replaced.child.kill(SIGTERM)
        replaced.child.wait()

        // Empty is unset: an empty port is the default (0, any free one), an empty root no root.
        let emptyPort = try startServer(
            "xfer serve", executable: xferExecutable, arguments: ["serve"], environment: ["XFER_SERVE_ROOT": root, "XFER_SERVE_PORT": ""])
        emptyPort.child.kill(SIGTERM)
        emptyPort.child.wait()
        let emptyRoot = try runXfer(["serve", "--port", "0"], environment: ["XFER_SERVE_ROOT": ""])
        XCTAssertEqual(emptyRoot.status, 2, emptyRoot.stderr)
        XCTAssertTrue(emptyRoot.stderr.contains("--root is required"), emptyRoot.stderr)

        // The help says so (and asking for it reads no variable); the token has its own
        // variable, XFER_AUTH_TOKEN: XFER_SERVE_AUTH_TOKEN sets nothing.
        let help = try runXfer(["serve", "--help"], environment: ["XFER_SERVE_PORT": "notaport"]).stdout.joined(separator: "\n")
        XCTAssertTrue(help.contains("XFER_SERVE_PUBLIC_URL"), help)
        let open = try startServer(
            "xfer serve", executable: xferExecutable, arguments: ["serve"], environment: ["XFER_SERVE_ROOT": root, "XFER_SERVE_AUTH_TOKEN": "tok-x"])
        let stats = try runToEnd("/usr/bin/curl", ["-s", "-o", "/dev/null", "-w", "%{http_code}", open.url + "/stats"])
        XCTAssertEqual(stats.stdout, ["200"], "no token is required")
        open.child.kill(SIGTERM)
        open.child.wait()

        // Every variable the shipped defaults file names (commented ones too) is an option's.
        let defaults = try String(contentsOfFile: packagingDirectory + "/xfer-serve.default", encoding: .utf8)
        let named = Set(defaults.split(separator: "\n").compactMap { line -> String? in
            let text = line.drop { $0 == "#" || $0 == " " }
            guard text.hasPrefix("XFER_SERVE_"), let equals = text.firstIndex(of: "=") else { return nil }
            return String(text[..<equals])
        })
        XCTAssertGreaterThan(named.count, 8, "\(named)")
        for variable in named {
            let option = "--" + variable.dropFirst("XFER_SERVE_".count).lowercased().replacingOccurrences(of: "_", with: "-")
            XCTAssertTrue(help.contains(option + " "), "\(variable): no \(option) in xfer serve --help")
        }
    }

    func testVersionIsOneLineOfTheReleaseNumber() throws {
        let version = try runXfer(["--version"])
        XCTAssertEqual(version.status, 0, version.stderr)
        XCTAssertEqual(version.stdout.count, 1, "\(version.stdout)")
        XCTAssertNotNil(version.stdout.first?.range(of: #"^[0-9]+\.[0-9]+\.[0-9]+$"#, options: .regularExpression), "\(version.stdout)")
    }

    /// scripts/make-deb.sh on the debug build: the files of the package, its fields, the
    /// stripped binary and its symbols beside the package. It refuses the debug build unless
    /// told (the binary loads the toolchain's Swift runtime, which no package provides).
    func testMakeDebBuildsThePackagesFilesAndFields() throws {
        // The committed page (CLI/Man), which `make deb` packages.
        let manual = packageRoot + "/Man"
        let script = repositoryRoot + "/scripts/make-deb.sh"
        let out = work.file("out")
        // The debug build, whatever XFER_TEST_BINARY names: the refusal and the symbols need it.
        let debugBuild = productsDirectory + "/xfer"
        let refused = try runToEnd(script, [debugBuild, manual, out], environment: ["ALLOW_TOOLCHAIN_LIBRARIES": ""])
        XCTAssertEqual(refused.status, 2, refused.stderr)
        XCTAssertTrue(refused.stderr.contains("--static-swift-stdlib"), refused.stderr)

        // Uncompressed: xz on the debug build's 70 MB would be most of this test's time.
        let made = try runToEnd(script, [debugBuild, manual, out], environment: ["ALLOW_TOOLCHAIN_LIBRARIES": "1", "DEB_COMPRESSION": "none"])
        XCTAssertEqual(made.status, 0, made.stderr)
        let version = try XCTUnwrap(try runXfer(["--version"]).stdout.first)
        let deb = out + "/xfer_\(version)_amd64.deb"
        let debug = out + "/xfer_\(version)_amd64.debug"
        XCTAssertEqual(made.stdout, [deb, debug])

        let package = try DebianPackage(deb)
        XCTAssertEqual(package.files.keys.sorted(), DebianPackage.expectedFiles)
        for (path, entry) in package.files {
            XCTAssertEqual(entry.owner, "root/root", path)
            XCTAssertEqual(entry.mode, path == "usr/bin/xfer" ? "-rwxr-xr-x" : "-rw-r--r--", path)
        }
        XCTAssertEqual(try package.field("Package"), "xfer")
        XCTAssertEqual(try package.field("Version"), version)
        let depends = try package.field("Depends")
        for library in ["libc6", "libcurl4", "liblmdb0", "adduser"] {
            XCTAssertTrue(depends.contains(library), "Depends: \(depends)")
        }
        XCTAssertEqual(Int(try package.field("Installed-Size")), package.installedSize)
        XCTAssertEqual(try package.control("conffiles"), "/etc/default/xfer-serve\n")
        XCTAssertTrue(try package.control("postinst").contains("addgroup --system"))

        // Stripped, with a debug link to the symbols, which are the binary's.
        let unpacked = work.file("unpacked")
        XCTAssertEqual(try runToEnd("/usr/bin/dpkg-deb", ["--extract", deb, unpacked]).status, 0)
        let binary = unpacked + "/usr/bin/xfer"
        XCTAssertFalse(try sections(of: binary).contains(".symtab"), "the packaged xfer is stripped")
        XCTAssertTrue(try sections(of: debug).contains(".symtab"), "the .debug file holds the symbols")
        let link = try runToEnd("/usr/bin/readelf", ["--string-dump=.gnu_debuglink", binary])
        XCTAssertTrue(link.stdout.joined().contains("xfer_\(version)_amd64.debug"), "\(link.stdout)")
        let packaged = try runToEnd(binary, ["--version"])
        XCTAssertEqual(packaged.stdout, [version], packaged.stderr)
        // The completions are the binary's own (bash's without its #! line: it is sourced).
        let bash = try String(contentsOfFile: unpacked + "/usr/share/bash-completion/completions/xfer", encoding: .utf8)
        let generated = try runXfer(["--generate-completion-script", "bash"]).stdout
        XCTAssertTrue(generated.first?.hasPrefix("#!") == true, "\(generated.prefix(1))")
        XCTAssertEqual(bash, generated.dropFirst().joined(separator: "\n") + "\n")
    }

    private func sections(of file: String) throws -> [String] {
        let result = try runToEnd("/usr/bin/readelf", ["-S", "-W", file])
        XCTAssertEqual(result.status, 0, result.stderr)
        return result.stdout.compactMap { line in line.split(separator: " ").first { $0.hasPrefix(".") }.map(String.init) }
    }
}

/// The release's files (`make test-dist`, which runs `make dist` first and sets XFER_DIST_DIR):
/// the static binary without the toolchain, lintian's verdict, and the package installed,
/// serving and removed on this machine.
final class DistTests: XCTestCase {
    var work: TemporaryDirectory!
    var dist = ""

    override func setUpWithError() throws {
        guard let directory = ProcessInfo.processInfo.environment["XFER_DIST_DIR"], !directory.isEmpty else {
            throw XCTSkip("the release's files: make test-dist")
        }
        dist = directory
        work = TemporaryDirectory("xfer-dist")
    }

    override func tearDown() {
        work = nil
    }

    private func file(_ suffix: String) throws -> String {
        let names = try FileManager.default.contentsOfDirectory(atPath: dist).filter { $0.hasSuffix(suffix) }
        guard names.count == 1 else { throw HarnessError("\(dist): \(names.count) files ending in \(suffix): \(names)") }
        return dist + "/" + names[0]
    }

    func testChecksumsCoverTheReleaseFiles() throws {
        let sums = try String(contentsOfFile: dist + "/SHA256SUMS", encoding: .utf8)
        let named = sums.split(separator: "\n").map { String($0.split(separator: " ").last ?? "") }.sorted()
        XCTAssertEqual(named, [try file(".deb"), try file(".debug"), try file(".tar.gz")].map { ($0 as NSString).lastPathComponent }.sorted())
        let check = try runToEnd("/bin/sh", ["-c", "cd \"$0\" && sha256sum -c SHA256SUMS", dist])
        XCTAssertEqual(check.status, 0, check.stdout.joined(separator: "\n") + check.stderr)
    }

    /// The tarball's binary loads nothing of the Swift toolchain, and serves, pushes and pulls
    /// with the toolchain hidden under an empty directory (bwrap): what a machine without
    /// Swift sees. The debug build in the same sandbox does not even start, so the sandbox hides.
    func testTheReleaseBinaryWorksWithoutTheSwiftToolchain() throws {
        let extracted = work.file("tarball")
        try FileManager.default.createDirectory(atPath: extracted, withIntermediateDirectories: true)
        XCTAssertEqual(try runToEnd("/bin/tar", ["-xzf", try file(".tar.gz"), "-C", extracted]).status, 0)
        let top = try XCTUnwrap(try FileManager.default.contentsOfDirectory(atPath: extracted).first)
        let version = try XCTUnwrap(try runToEnd("/usr/bin/dpkg-deb", ["--field", try file(".deb"), "Version"]).stdout.first)
        XCTAssertEqual(top, "xfer-\(version)")
        for path in ["bin/xfer", "share/man/man1/xfer.1", "share/bash-completion/completions/xfer", "share/zsh/site-functions/_xfer",
                     "share/fish/vendor_completions.d/xfer.fish", "README", "copyright"] {
            XCTAssertTrue(FileManager.default.fileExists(atPath: "\(extracted)/\(top)/\(path)"), path)
        }
        let binary = "\(extracted)/\(top)/bin/xfer"

        let swift = try XCTUnwrap(try runToEnd("/bin/sh", ["-c", "readlink -f \"$(command -v swift)\""]).stdout.first)
        let toolchain = ((swift as NSString).deletingLastPathComponent as NSString).deletingLastPathComponent  // .../usr
        let hidden = (toolchain as NSString).deletingLastPathComponent  // /opt/swift: the whole toolchain
        let ldd = try runToEnd("/usr/bin/ldd", [binary])
        XCTAssertEqual(ldd.status, 0, ldd.stderr)
        let libraries = ldd.stdout.joined(separator: "\n")
        XCTAssertFalse(libraries.contains(hidden), libraries)
        XCTAssertFalse(libraries.contains("libswiftCore") || libraries.contains("libFoundation"), libraries)
        // GNU ld's packed relocations need glibc 2.36 (the GLIBC_ABI_DT_RELR version), which
        // dpkg-shlibdeps does not count: the package must say so, or it installs where xfer cannot start.
        let versions = try runToEnd("/usr/bin/readelf", ["-V", "-W", binary]).stdout.joined(separator: "\n")
        if versions.contains("GLIBC_ABI_DT_RELR") {
            let depends = try runToEnd("/usr/bin/dpkg-deb", ["--field", try file(".deb"), "Depends"]).stdout.joined()
            XCTAssertTrue(depends.contains("libc6 (>= 2.36)"), depends)
        }

        // --die-with-parent: SIGTERM ends bwrap alone, and its command would outlive it.
        let sandbox = ["--dev-bind", "/", "/", "--tmpfs", hidden, "--die-with-parent"]
        let bwrap = "/usr/bin/bwrap"
        let inSandbox = try runToEnd(bwrap, sandbox + [binary, "--version"])
        XCTAssertEqual(inSandbox.status, 0, inSandbox.stderr)
        XCTAssertEqual(inSandbox.stdout, [version])
        let debugBuild = try runToEnd(bwrap, sandbox + [productsDirectory + "/xfer", "--version"])
        XCTAssertNotEqual(debugBuild.status, 0, "the sandbox does not hide \(hidden): the debug build started")

        let tokenFile = work.file("token")
        try writeFile("tok-\(UUID().uuidString)\n", to: tokenFile, mode: 0o600)
        let root = work.file("root")
        // The receiver also with memory never both writable and executable (the unit's
        // MemoryDenyWriteExecute=): the static binary carries the runtime it checks.
        let command = try memoryDenyWriteExecute() + [bwrap] + sandbox + [binary, "serve", "--root", root, "--port", "0", "--auth-token-file", tokenFile]
        let receiver = try startServer("xfer serve in the sandbox", executable: command[0], arguments: Array(command.dropFirst()))
        defer { receiver.child.kill(SIGTERM); receiver.child.wait() }
        let file = work.file("a.bin")
        try makeTestFile(at: file, size: 5_000_000)
        let push = try runToEnd(bwrap, sandbox + [
            binary, "push", file, "--backend", "patch", "--to", receiver.url, "--token-file", tokenFile, "--state", work.file("state"),
        ])
        XCTAssertEqual(push.status, 0, push.stderr)
        let url = try XCTUnwrap(push.stdout.first)
        let copy = work.file("copy.bin")
        let pull = try runToEnd(bwrap, sandbox + [binary, "pull", url, copy, "--token-file", tokenFile, "--state", work.file("state")])
        XCTAssertEqual(pull.status, 0, pull.stderr)
        XCTAssertEqual(try sha256sum(copy), try sha256sum(file))
    }

    func testLintianFindsNoError() throws {
        // Every tag, informational ones and overridden ones too, printed for the record; an
        // error fails.
        let lintian = try runToEnd("/usr/bin/lintian", ["--tag-display-limit", "0", "--info", "--display-info", "--show-overrides", try file(".deb")])
        let output = lintian.stdout.joined(separator: "\n")
        print("lintian:\n\(output)\n\(lintian.stderr)")
        XCTAssertFalse(lintian.stdout.contains { $0.hasPrefix("E:") }, output)
        // Its verdict as a release check would take it (with --show-overrides it would count
        // the overridden error).
        let verdict = try runToEnd("/usr/bin/lintian", [try file(".deb")])
        XCTAssertEqual(verdict.status, 0, verdict.stdout.joined(separator: "\n") + verdict.stderr)
    }

    /// dpkg -i on this machine, the installed unit as systemd reads it, its command line with the
    /// installed defaults taking a push, then dpkg -r and --purge leave none of the package's
    /// files. Refused where an xfer package is installed already; the group the package made
    /// is removed after, so the machine is as it was.
    func testThePackageInstallsServesAndLeavesNothingBehind() throws {
        guard getuid() == 0 else { throw XCTSkip("dpkg -i needs root (CI runs as root)") }
        let installed = try runToEnd("/usr/bin/dpkg-query", ["-W", "-f", "${Status}", "xfer"])
        if installed.status == 0 && !installed.stdout.joined().contains("not-installed") {
            throw HarnessError("an xfer package is installed on this machine (\(installed.stdout.joined())): refusing to replace it; remove it (dpkg --purge xfer) to run this test")
        }
        let groupExisted = try runToEnd("/usr/bin/getent", ["group", "xfer-serve"]).status == 0
        defer {
            _ = try? runToEnd("/usr/bin/dpkg", ["--purge", "xfer"])
            if !groupExisted { _ = try? runToEnd("/usr/sbin/groupdel", ["xfer-serve"]) }
        }
        let deb = try file(".deb")
        let version = try XCTUnwrap(try runToEnd("/usr/bin/dpkg-deb", ["--field", deb, "Version"]).stdout.first)
        let install = try runToEnd("/usr/bin/dpkg", ["-i", deb])
        XCTAssertEqual(install.status, 0, install.stdout.joined(separator: "\n") + install.stderr)

        XCTAssertEqual(try runToEnd("/usr/bin/xfer", ["--version"]).stdout, [version])
        let manual = try runToEnd("/usr/bin/man", ["-w", "xfer"])
        XCTAssertEqual(manual.stdout, ["/usr/share/man/man1/xfer.1.gz"], manual.stderr)
        XCTAssertTrue(FileManager.default.fileExists(atPath: "/usr/share/bash-completion/completions/xfer"))
        XCTAssertEqual(try runToEnd("/usr/bin/getent", ["group", "xfer-serve"]).status, 0, "postinst made the group")
        let token = "/etc/xfer-serve/auth-token"
        let attributes = try FileManager.default.attributesOfItem(atPath: token)
        XCTAssertEqual((attributes[.posixPermissions] as? NSNumber)?.intValue, 0o640)
        XCTAssertEqual(attributes[.groupOwnerAccountName] as? String, "xfer-serve")
        let secret = try String(contentsOfFile: token, encoding: .utf8)
        XCTAssertNotNil(secret.range(of: #"^[0-9a-f]{64}\n$"#, options: .regularExpression), "32 random bytes in hex")

        let unitPath = "/lib/systemd/system/xfer-serve.service"
        let verified = try systemdAnalyzeVerify(unitPath, manPages: true)
        XCTAssertEqual(verified.status, 0, verified.output)
        XCTAssertEqual(verified.output, "", "systemd-analyze verify \(unitPath) had something to say")

        // The installed unit's command line with the installed defaults: only the root and the
        // port are the test's; the token is the one postinst wrote.
        let unit = try UnitFile(try String(contentsOfFile: unitPath, encoding: .utf8))
        let defaults = try systemdEnvironment(try String(contentsOfFile: try XCTUnwrap(unit.environmentFile), encoding: .utf8))
        let root = work.file("root")
        let receiver = try startUnitCommandLine(
            unit, binary: nil, defaults: defaults, overrides: ["XFER_SERVE_ROOT": root, "XFER_SERVE_PORT": "0"])
        defer { receiver.child.kill(SIGTERM); receiver.child.wait() }
        let file = work.file("a.bin")
        try makeTestFile(at: file, size: 300_000)
        let pushed = try runToEnd("/usr/bin/xfer", ["push", file, "--backend", "patch", "--to", receiver.url, "--token-file", token, "--state", work.file("state")])
        XCTAssertEqual(pushed.status, 0, pushed.stderr)
        XCTAssertEqual(try sha256sum(try servedFile(root: root, "a.bin")), try sha256sum(file))
        receiver.child.kill(SIGTERM)

        let listed = try runToEnd("/usr/bin/dpkg", ["-L", "xfer"]).stdout.filter { path in
            var isDirectory: ObjCBool = false
            return FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) && !isDirectory.boolValue
        }
        XCTAssertEqual(listed.count, DebianPackage.expectedFiles.count, "\(listed)")
        let conffiles: Set<String> = ["/etc/default/xfer-serve"]
        XCTAssertEqual(try runToEnd("/usr/bin/dpkg", ["-r", "xfer"]).status, 0)
        for path in listed where !conffiles.contains(path) {
            XCTAssertFalse(FileManager.default.fileExists(atPath: path), "\(path) is left after dpkg -r")
        }
        XCTAssertTrue(FileManager.default.fileExists(atPath: token), "a removed package keeps its configuration")
        XCTAssertEqual(try runToEnd("/usr/bin/dpkg", ["--purge", "xfer"]).status, 0)
        for path in listed + [token, "/etc/xfer-serve", "/usr/share/doc/xfer"] {
            XCTAssertFalse(FileManager.default.fileExists(atPath: path), "\(path) is left after dpkg --purge")
        }
    }
}

// MARK: - Reading what systemd and dpkg read

let packagingDirectory = repositoryRoot + "/packaging"

/// The lines of a unit file the tests use.
struct UnitFile {
    let execStart: [String]
    let environmentFile: String?

    init(_ text: String) throws {
        func value(_ key: String) -> String? {
            text.split(separator: "\n").first { $0.hasPrefix(key + "=") }.map { String($0.dropFirst(key.count + 1)) }
        }
        guard let command = value("ExecStart") else { throw HarnessError("the unit has no ExecStart=") }
        // Ours has neither quotes nor specifiers: words split on spaces are systemd's.
        execStart = command.split(separator: " ").map(String.init)
        environmentFile = value("EnvironmentFile")
    }
}

/// An EnvironmentFile= as systemd reads it: KEY=VALUE lines, blank lines and lines starting
/// with # or ; skipped, whitespace around key and value dropped, a value in matching single or
/// double quotes unquoted, a line ending in a backslash continued on the next.
func systemdEnvironment(_ text: String) throws -> [String: String] {
    var variables: [String: String] = [:]
    var pending = ""
    for raw in text.split(separator: "\n", omittingEmptySubsequences: false) {
        var line = pending + raw
        pending = ""
        if line.hasSuffix("\\") {
            line.removeLast()
            pending = line
            continue
        }
        let trimmed = line.trimmingCharacters(in: .whitespaces)
        if trimmed.isEmpty || trimmed.hasPrefix("#") || trimmed.hasPrefix(";") { continue }
        guard let equals = trimmed.firstIndex(of: "=") else { throw HarnessError("not KEY=VALUE: \(trimmed)") }
        let key = trimmed[..<equals].trimmingCharacters(in: .whitespaces)
        var value = trimmed[trimmed.index(after: equals)...].trimmingCharacters(in: .whitespaces)
        if value.count >= 2, let quote = value.first, quote == "\"" || quote == "'", value.last == quote {
            value = String(value.dropFirst().dropLast())
        }
        variables[key] = value
    }
    return variables
}

/// Starts the unit's ExecStart (its binary replaced by `binary`, when given; after `wrapper`,
/// a command that runs it as another user) with the
/// environment systemd would give it: `defaults` with `overrides`, and no XFER_SERVE_* or
/// token variable of the test process's own.
func startUnitCommandLine(
    _ unit: UnitFile, binary: String?, defaults: [String: String], wrapper: [String] = [], overrides: [String: String]
) throws -> (child: ChildProcess, url: String) {
    var environment = defaults.merging(overrides) { $1 }
    for key in ProcessInfo.processInfo.environment.keys where key.hasPrefix("XFER_SERVE_") && environment[key] == nil {
        environment[key] = ""
    }
    environment["XFER_AUTH_TOKEN"] = environment["XFER_AUTH_TOKEN"] ?? ""
    let command = wrapper + [binary ?? unit.execStart[0]] + unit.execStart.dropFirst()
    return try startServer("the unit's command line", executable: command[0], arguments: Array(command.dropFirst()), environment: environment)
}

/// The command that runs its arguments with the kernel's W^X switch on — prctl(PR_SET_MDWE,
/// PR_MDWE_REFUSE_EXEC_GAIN), what systemd's MemoryDenyWriteExecute= uses where the kernel
/// has it (6.3 and later) — once it is seen to refuse a mapping both writable and executable;
/// nothing (with a note) on an older kernel, where the check cannot be made this way.
func memoryDenyWriteExecute() throws -> [String] {
    let shim = """
        import ctypes, os, sys
        if ctypes.CDLL(None, use_errno=True).prctl(65, 1, 0, 0, 0) != 0: sys.exit(3)
        os.execv(sys.argv[1], sys.argv[1:])
        """
    let wrapper = ["/usr/bin/python3", "-c", shim]
    let probe = try runToEnd(wrapper[0], Array(wrapper.dropFirst()) + ["/usr/bin/python3", "-c", "import mmap; mmap.mmap(-1, 4096, prot=7)"])
    if probe.status == 3 {
        print("note: this kernel has no PR_SET_MDWE: xfer serve runs without the W^X switch")
        return []
    }
    guard probe.status != 0, probe.stderr.contains("PermissionError") else {
        throw HarnessError("under PR_SET_MDWE python mapped memory writable and executable (status \(probe.status)): \(probe.stderr)")
    }
    return wrapper
}

/// systemd-analyze verify's exit status and everything it printed (it warns, and exits 0,
/// for what it ignores: a unit it accepts as written leaves the output empty).
func systemdAnalyzeVerify(_ unit: String, manPages: Bool) throws -> (status: Int32, output: String) {
    let result = try runToEnd("/usr/bin/systemd-analyze", ["verify", "--man=\(manPages ? "yes" : "no")", unit])
    return (result.status, (result.stdout.joined(separator: "\n") + result.stderr).trimmingCharacters(in: .whitespacesAndNewlines))
}

/// Writes `text` to `path` (its directory made), with `mode`.
func writeFile(_ text: String, to path: String, mode: Int = 0o644) throws {
    try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
    try text.write(toFile: path, atomically: true, encoding: .utf8)
    try FileManager.default.setAttributes([.posixPermissions: mode], ofItemAtPath: path)
}

/// A .deb as dpkg-deb shows it.
struct DebianPackage {
    struct Entry {
        let mode: String
        let owner: String
        let size: Int
    }

    /// Every file the package installs (not its directories).
    static let expectedFiles = [
        "etc/default/xfer-serve", "lib/systemd/system/xfer-serve.service", "usr/bin/xfer",
        "usr/share/bash-completion/completions/xfer", "usr/share/doc/xfer/changelog.gz", "usr/share/doc/xfer/copyright",
        "usr/share/fish/vendor_completions.d/xfer.fish", "usr/share/lintian/overrides/xfer", "usr/share/man/man1/xfer.1.gz",
        "usr/share/zsh/vendor-completions/_xfer",
    ]

    let path: String
    /// Files by path (without the leading ./).
    let files: [String: Entry]
    let directories: Int

    init(_ path: String) throws {
        self.path = path
        let listing = try runToEnd("/usr/bin/dpkg-deb", ["--contents", path])
        guard listing.status == 0 else { throw HarnessError("dpkg-deb --contents \(path): \(listing.stderr)") }
        var files: [String: Entry] = [:]
        var directories = 0
        for line in listing.stdout {
            // -rwxr-xr-x root/root  12345 2026-01-01 00:00 ./usr/bin/xfer
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            guard fields.count >= 6 else { continue }
            let name = String(fields[5].dropFirst(2))
            if fields[0].hasPrefix("d") {
                if !name.isEmpty { directories += 1 }
            } else {
                files[name] = Entry(mode: String(fields[0]), owner: String(fields[1]), size: Int(fields[2]) ?? -1)
            }
        }
        self.files = files
        self.directories = directories
    }

    /// Installed-Size as dpkg-gencontrol counts it: each file's KiB rounded up, 1 per directory.
    var installedSize: Int {
        files.values.reduce(directories) { $0 + ($1.size + 1023) / 1024 }
    }

    func field(_ name: String) throws -> String {
        let result = try runToEnd("/usr/bin/dpkg-deb", ["--field", path, name])
        guard result.status == 0 else { throw HarnessError("dpkg-deb --field \(name): \(result.stderr)") }
        return result.stdout.joined(separator: "\n")
    }

    func control(_ file: String) throws -> String {
        let result = try runToEnd("/usr/bin/dpkg-deb", ["--info", path, file])
        guard result.status == 0 else { throw HarnessError("dpkg-deb --info \(file): \(result.stderr)") }
        return result.stdout.map { $0 + "\n" }.joined()
    }
}
