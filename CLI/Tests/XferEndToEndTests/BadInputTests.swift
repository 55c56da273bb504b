import Foundation
import XCTest
import XferTestSupport

/// The bad-input table of Docs/reliability.md: every row ends with one line on
/// stderr ("xfer: ..."), nothing on stdout, the documented exit code — and the
/// state directory it ran against still resumes a job afterwards.
final class BadInputTests: XCTestCase {
    var work: TemporaryDirectory!

    override func setUp() {
        work = TemporaryDirectory("xfer-bad")
    }

    override func tearDown() {
        work = nil
    }

    private var state: String { work.file("state") }

    private func assertOneLine(
        _ result: RunResult, _ label: String, exit code: Int32, mentions fragment: String,
        file: StaticString = #filePath, line: UInt = #line
    ) {
        XCTAssertEqual(result.status, code, "\(label): \(result.stderr)", file: file, line: line)
        XCTAssertEqual(result.stderr.split(separator: "\n").count, 1, "\(label): one line, got \(result.stderr)", file: file, line: line)
        XCTAssertTrue(result.stderr.hasPrefix("xfer: "), "\(label): \(result.stderr)", file: file, line: line)
        XCTAssertTrue(
            result.stderr.lowercased().contains(fragment.lowercased()), "\(label): expected '\(fragment)' in \(result.stderr)",
            file: file, line: line)
        XCTAssertFalse(result.stderr.contains("Fatal error") || result.stderr.contains("Stack dump"), label, file: file, line: line)
        XCTAssertTrue(result.stdout.isEmpty, "\(label): nothing on stdout, got \(result.stdout)", file: file, line: line)
    }

    /// Rows over arguments, files and the state directory, for push, resume,
    /// status, cancel, list and serve. A job left unfinished before them
    /// resumes after them.
    func testBadArgumentsFilesAndNamesGetOneLineAndTheirExitCode() throws {
        let file = work.file("ok.bin")
        try makeTestFile(at: file, size: 300_000)
        // An unfinished job: its receiver goes away after one attempt.
        var server = try ServeProcess(root: work.file("server"))
        let port = server.port
        let url = server.url
        server.stop()
        let unfinished = try runXfer(["push", file, "--backend", "patch", "--to", url, "--state", state, "--max-attempts", "1"])
        XCTAssertEqual(unfinished.status, 1, unfinished.stderr)

        try FileManager.default.createDirectory(atPath: work.file("dir"), withIntermediateDirectories: true)
        let fifo = work.file("fifo")
        XCTAssertEqual(mkfifo(fifo, 0o600), 0)
        XCTAssertEqual(symlink(work.file("loop-b"), work.file("loop-a")), 0)
        XCTAssertEqual(symlink(work.file("loop-a"), work.file("loop-b")), 0)
        let blocker = work.file("blocker")
        _ = FileManager.default.createFile(atPath: blocker, contents: Data("x".utf8))
        let busy = try RawListener(.hangUp)
        let emptyTokenFile = work.file("empty-token")
        _ = FileManager.default.createFile(atPath: emptyTokenFile, contents: Data("\n".utf8), attributes: [.posixPermissions: 0o600])
        let push = ["push", file, "--backend", "patch", "--to", url]

        let rows: [(String, [String], Int32, String)] = [
            ("push: missing file", ["push", work.file("nope.bin"), "--backend", "patch", "--to", url], 2, "no such file"),
            ("push: an empty directory", ["push", work.file("dir"), "--backend", "patch", "--to", url], 2, "holds no file to send"),
            ("push: a FIFO to a protocol that takes no stream", ["push", fifo, "--backend", "patch", "--to", url], 2,
             "is a FIFO, a stream: --backend patch cannot take a stream of unknown length; s3 and tus can"),
            ("push: /dev/zero", ["push", "/dev/zero", "--backend", "patch", "--to", url], 2, "not a regular file"),
            ("push: a symlink loop", ["push", work.file("loop-a"), "--backend", "patch", "--to", url], 2, "symbolic links"),
            ("push: no file", ["push", "--backend", "patch", "--to", url], 2, "at least one file"),
            ("push: no --backend", ["push", file, "--to", url], 2, "--backend is required"),
            ("push: unknown backend", ["push", file, "--backend", "carrier-pigeon", "--to", url], 2, "one of the following: patch, multipart, sequence, s3, tus, ietf"),
            ("push: no --to", ["push", file, "--backend", "patch"], 2, "--to URL is required"),
            ("push: --interop-version 7", ["push", file, "--backend", "ietf", "--to", url, "--interop-version", "7"], 2, "must be 6 or 8"),
            ("sync: a missing directory", ["sync", work.file("nope"), "s3://bucket/p"], 2, "not a directory"),
            ("sync: a file for a directory", ["sync", file, "s3://bucket/p"], 2, "not a directory"),
            ("sync: two directories", ["sync", work.file("dir"), work.file("dir")], 2, "between a directory and s3://"),
            ("sync: a bad shard", ["sync", work.file("dir"), "s3://bucket/p", "--shard", "3/3"], 2, "0 ≤ K < N"),
            ("sync: --max-delete alone", ["sync", work.file("dir"), "s3://bucket/p", "--max-delete", "3"], 2, "name --delete too"),
            ("sync: --checksum and --size-only", ["sync", work.file("dir"), "s3://bucket/p", "--checksum", "--size-only"], 2, "pick one"),
            ("sync: a local --backup-dir for S3", ["sync", work.file("dir"), "s3://bucket/p", "--backup-dir", work.file("old")], 2, "name s3://BUCKET/PREFIX"),
            ("sync: an S3 --backup-dir for a directory", ["sync", "s3://bucket/p", work.file("dir"), "--backup-dir", "s3://bucket/old"], 2, "name a local directory"),
            ("sync: --files-from with --delete", ["sync", work.file("dir"), "s3://bucket/p", "--files-from", file, "--delete"], 2, "cannot go with --delete"),
            ("push: --interop-version for patch", push + ["--interop-version", "6"], 2, "is for --backend ietf"),
            ("push: URL without scheme colon", push.dropLast() + ["http//nope"], 2, "not a usable URL"),
            ("push: ftp URL", push.dropLast() + ["ftp://127.0.0.1/"], 2, "not a usable URL"),
            ("push: unclosed IPv6 bracket", push.dropLast() + ["http://[::1"], 2, "not a usable URL"),
            ("push: --chunk-size 0", push + ["--chunk-size", "0"], 2, "chunk size must be between"),
            ("push: --chunk-size abc", push + ["--chunk-size", "abc"], 2, "chunk-size"),
            ("push: --chunk-size 2TiB", push + ["--chunk-size", "2TiB"], 2, "between 1 byte and 1 GiB"),
            ("push: --concurrency 0", push + ["--concurrency", "0"], 2, "concurrency"),
            ("push: --concurrency 100000", push + ["--concurrency", "100000"], 2, "concurrency"),
            ("push: --max-attempts 0", push + ["--max-attempts", "0"], 2, "attempts per request"),
            ("push: header without colon", push + ["--header", "NoColon"], 2, "--header"),
            ("push: header with a space in its name", push + ["--header", "Bad Name: x"], 2, "invalid field name"),
            ("push: unknown option", push + ["--bogus"], 2, "unknown option"),
            ("push: state under a regular file", push + ["--state", blocker + "/state"], 3, "state"),
            ("push: --cacert missing", push + ["--cacert", work.file("none.pem")], 2, "cacert"),
            ("push: --connect-timeout -1", push + ["--connect-timeout", "-1"], 2, "connect-timeout"),
            ("push: --token and --token-file", push + ["--token", "t", "--token-file", emptyTokenFile], 2, "not both"),
            ("push: --token-file missing", push + ["--token-file", work.file("no-token")], 2, "no such file"),
            ("push: --token-file empty", push + ["--token-file", emptyTokenFile], 2, "first line is empty"),
            ("push: --token-file a directory", push + ["--token-file", work.file("dir")], 2, "is a directory"),
            ("push: --proxy without a scheme", push + ["--proxy", "127.0.0.1:3128"], 2, "a proxy URL starts with http://"),
            ("push: --proxy ftp://", push + ["--proxy", "ftp://127.0.0.1:21"], 2, "--proxy"),
            ("resume: --token-file missing", ["resume", "--token-file", work.file("no-token")], 2, "--token-file"),
            ("cancel: --proxy empty", ["cancel", "nope", "--proxy", ""], 2, "--proxy"),
            ("resume: unknown job", ["resume", "0123456789abcdef"], 2, "no job"),
            ("resume: a path as job id", ["resume", "../../etc"], 2, "no job"),
            ("resume: --concurrency 0", ["resume", "--concurrency", "0"], 2, "concurrency"),
            ("resume: --low-speed-time 0", ["resume", "--low-speed-time", "0"], 2, "low-speed-time"),
            ("status: unknown job", ["status", "nope"], 2, "no job"),
            ("status: no job named", ["status"], 2, "missing expected argument"),
            ("cancel: unknown job", ["cancel", "nope"], 2, "no job"),
            ("list: stray argument", ["list", "extra"], 2, "unexpected argument"),
            ("serve: --port 70000", ["serve", "--root", work.file("srv"), "--port", "70000"], 2, "--port"),
            ("serve: port in use", ["serve", "--root", work.file("srv"), "--port", String(busy.port)], 2, "address already in use"),
            ("serve: root is a file", ["serve", "--root", blocker], 2, "not a directory"),
            ("serve: unknown host", ["serve", "--root", work.file("srv"), "--host", "no-such-host.invalid"], 2, "cannot serve"),
            ("serve: --max-chunk-size 0", ["serve", "--root", work.file("srv"), "--max-chunk-size", "0"], 2, "max-chunk-size"),
            ("serve: --faults nonsense", ["serve", "--root", work.file("srv"), "--faults", "flood=2"], 2, "--faults"),
            ("serve: no --root", ["serve"], 2, "--root"),
            ("serve: --storage of no kind", ["serve", "--storage", "ftp://bucket"], 2, "--storage must be disk or s3://"),
            ("serve: --storage s3 without a bucket", ["serve", "--storage", "s3://"], 2, "--storage"),
            ("serve: --expire-after nonsense", ["serve", "--root", work.file("srv"), "--expire-after", "soon"], 2, "--expire-after"),
            ("serve: --max-uploads-in-memory 0", ["serve", "--root", work.file("srv"), "--max-uploads-in-memory", "0"], 2, "--max-uploads-in-memory"),
            ("serve: --endpoint on disk", ["serve", "--root", work.file("srv"), "--endpoint", "http://127.0.0.1:1"], 2, "--endpoint"),
            ("serve: --auth-token with a space", ["serve", "--root", work.file("srv"), "--auth-token", "a b"], 2, "auth-token"),
        ]
        XCTAssertGreaterThanOrEqual(rows.count, 25)
        for (label, arguments, code, fragment) in rows {
            var arguments = arguments
            if arguments[0] != "serve", !arguments.contains("--state") { arguments += ["--state", state] }
            assertOneLine(try runXfer(arguments), label, exit: code, mentions: fragment)
        }
        // The test switches are not the production command's: hidden from its help, refused
        // outside a test environment (the harness sets XFER_TEST_HOOKS=1 for every child).
        let help = try runXfer(["serve", "--help"])
        XCTAssertEqual(help.status, 0, help.stderr)
        for flag in ["--faults", "--fault-seed", "--fault-downloads", "--fail-merge", "--patch-chunk-size", "--hold", "--stall", "--claim-lifetime"] {
            XCTAssertFalse(help.stdout.joined(separator: "\n").contains(flag), "xfer serve --help lists \(flag)")
        }
        assertOneLine(
            try runXfer(["serve", "--root", work.file("srv"), "--faults", "503=0.1"], environment: ["XFER_TEST_HOOKS": ""]),
            "serve: a test switch outside tests", exit: 2, mentions: "XFER_TEST_HOOKS=1")
        if getuid() != 0 {
            let unreadable = work.file("secret.bin")
            try makeTestFile(at: unreadable, size: 10)
            chmod(unreadable, 0)
            assertOneLine(
                try runXfer(["push", unreadable, "--backend", "patch", "--to", url, "--state", state]), "push: unreadable file",
                exit: 2, mentions: "permission denied")
        }

        // None of that touched the unfinished job: back on its port, it resumes to the end.
        server = try ServeProcess(root: work.file("server"), port: port)
        let resumed = try runXfer(["resume", "--state", state, "--json"])
        XCTAssertEqual(resumed.status, 0, resumed.stderr)
        let completed = try XCTUnwrap(resumed.events.last { $0["event"] as? String == "completed" })
        let fileURL = try XCTUnwrap((completed["files"] as? [[String: Any]])?.first?["url"] as? String)
        XCTAssertEqual(try downloadSHA256(fileURL, into: work), try sha256sum(file))
        server.stop()
    }

    /// Servers that fail before saying anything useful: each push fails with
    /// one line and exit 1, and the same command finishes once a real
    /// receiver is on that port.
    func testServersThatAnswerHTMLNothingOrNeverConnect() throws {
        let file = work.file("a.bin")
        try makeTestFile(at: file, size: 200_000)
        let html = try ServeProcess(root: work.file("server"), extraArguments: ["--faults", "garble=1"])
        let hangUp = try RawListener(.hangUp)
        let blackHole = try RawListener(.blackHole)

        let cases: [(String, String, String, () -> Void)] = [
            ("HTML instead of JSON", html.url, "not JSON", { html.stop() }),
            ("connection closed without an answer", hangUp.url, "empty reply", { hangUp.close() }),
            ("connect never completes", blackHole.url, "timed out", { blackHole.close() }),
        ]
        for (label, url, fragment, shutDown) in cases {
            let arguments = ["push", file, "--backend", "patch", "--to", url, "--state", state, "--chunk-size", "64KiB",
                             "--max-attempts", "2", "--connect-timeout", "0.5", "--low-speed-time", "2"]
            assertOneLine(try runXfer(arguments), label, exit: 1, mentions: fragment)

            shutDown()
            let port = Int(url.split(separator: ":").last!)!
            let healthy = try ServeProcess(root: work.file("server"), port: port)
            let again = try runXfer(arguments + ["--json"])
            XCTAssertEqual(again.status, 0, "\(label): \(again.stderr)")
            XCTAssertEqual(try downloadSHA256(try XCTUnwrap(completedURL(again)), into: work), try sha256sum(file), label)
            healthy.stop()
        }
    }

    /// A server whose SHA-256 differs from the file's: the push fails
    /// ("verification failed", exit 1) and so does every re-run, never a
    /// silent success.
    func testAServerReportingAnotherSHA256FailsEveryTime() throws {
        let file = work.file("a.bin")
        try makeTestFile(at: file, size: 100_000)
        let server = try ServeProcess(root: work.file("server"), extraArguments: ["--faults", "digest=1"])
        let arguments = ["push", file, "--backend", "patch", "--to", server.url, "--state", state]
        for run in 1...2 {
            assertOneLine(try runXfer(arguments), "different SHA-256, run \(run)", exit: 1, mentions: "verification failed")
        }
    }

    /// A file that shrinks while it is pushed fails (exit 1, one line naming
    /// the change, state kept); the re-run sends its new content from the
    /// start, as re-running a copy should.
    func testAFileThatShrinksDuringThePushFailsAndTheReRunSendsItsNewContent() throws {
        let file = work.file("a.bin")
        try makeTestFile(at: file, size: 200_000)
        // Sequence sends blocks one by one on a fixed path, so the third is a
        // deterministic moment: the receiver stores it, then holds its answer.
        let server = try ServeProcess(root: work.file("server"), extraArguments: ["--hold", "/upload@3"])
        let arguments = ["push", file, "--backend", "sequence", "--to", server.url, "--state", state,
                         "--chunk-size", "16KiB", "--low-speed-time", "1"]
        let push = try ChildProcess(executable: xferExecutable, arguments: arguments)
        XCTAssertNotNil(server.child.readLine { $0.hasPrefix("held ") })
        XCTAssertEqual(truncate(file, 50_000), 0)
        let lines = push.readRemaining()
        let status = push.wait()
        assertOneLine(
            RunResult(status: status, stdout: lines, stderr: push.standardError), "shrank mid-push", exit: 1,
            mentions: "changed during the push")

        let again = try runXfer(arguments + ["--json"])
        XCTAssertEqual(again.status, 0, again.stderr)
        XCTAssertTrue(again.events.contains { $0["event"] as? String == "resending" }, "the file is sent again from its start")
        XCTAssertEqual(try downloadSHA256(try XCTUnwrap(completedURL(again)), into: work), try sha256sum(file))
    }

    /// Files larger than the receiver accepts are refused before any byte is
    /// stored, with the receiver's reason, for every backend.
    func testAFileLargerThanTheReceiverAcceptsIsRefusedUpFront() throws {
        let file = work.file("a.bin")
        try makeTestFile(at: file, size: 300_000)
        let server = try ServeProcess(root: work.file("server"), extraArguments: ["--max-upload-size", "100KiB"])
        for backend in ["patch", "multipart", "sequence"] {
            let result = try runXfer(["push", file, "--backend", backend, "--to", server.url, "--state", state])
            assertOneLine(result, "\(backend): too large", exit: 1, mentions: "larger than this receiver accepts")
        }
        XCTAssertEqual(int(try getJSON(server.url + "/stats")["payloadBytesReceived"]), 0, "no byte of the file was taken")
    }
}
