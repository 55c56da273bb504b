import Foundation
import XCTest
import XferTestSupport


/// The client against a receiver that misbehaves on purpose (`xfer serve
/// --faults`, seeded so every run makes the same decisions), and against a
/// receiver that is SIGKILLed and restarted mid-push. Every push must end
/// byte-identical, or fail with one clear line and resume later.
final class FaultTests: XCTestCase {
    static let backends = ["patch", "multipart", "sequence"]
    static let chunk = 64 << 10

    var work: TemporaryDirectory!

    override func setUp() {
        work = TemporaryDirectory("xfer-faults")
    }

    override func tearDown() {
        work = nil
    }

    /// SIGKILLs `server`, then starts another on the same root and port.
    private func killedAndRestarted(_ server: ServeProcess, root: String, port: Int) throws -> ServeProcess {
        server.child.kill(SIGKILL)
        server.child.wait()
        return try ServeProcess(root: root, port: port)
    }

    private func arguments(_ file: String, backend: String, server: ServeProcess, state: String, _ extra: [String] = []) -> [String] {
        ["push", file, "--backend", backend, "--to", server.url, "--state", state,
         "--chunk-size", String(Self.chunk), "--json"] + extra
    }

    /// Every fault that leaves the connection usable or cut, mixed, on every
    /// backend: the push retries its way through to identical bytes.
    func testMixedFaultsEndByteIdenticalOnEveryBackend() throws {
        let file = work.file("a.bin")
        try makeTestFile(at: file, size: 40 * Self.chunk + 777, seed: 3)
        for (index, backend) in Self.backends.enumerated() {
            let server = try ServeProcess(
                root: work.file("server-\(backend)"),
                extraArguments: SuiteStorage.patchChunks(of: Self.chunk) + ["--faults", "503=0.08,429=0.04,reset=0.08,truncate=0.08,garble=0.08",
                                 "--fault-seed", String(11 + index)])
            let result = try runXfer(arguments(file, backend: backend, server: server, state: work.file("state-\(backend)"),
                                               ["--max-attempts", "30", "--concurrency", "3"]))
            XCTAssertEqual(result.status, 0, "\(backend): \(result.stderr)")
            let retries = result.events.filter { $0["event"] as? String == "retry" }
            XCTAssertFalse(retries.isEmpty, "\(backend): the faults must have been hit")
            let url = try XCTUnwrap(completedURL(result), backend)
            XCTAssertEqual(try downloadSHA256(url, into: work), try sha256sum(file), backend)
        }
    }

    /// A chunk damaged on the way (one byte of its body changed) is refused by
    /// its digest and sent again, with the patch protocol's negotiated
    /// CRC-32C; the file arrives byte-identical.
    func testADamagedChunkIsRefusedByItsDigestAndSentAgain() throws {
        let file = work.file("a.bin")
        try makeTestFile(at: file, size: 30 * Self.chunk + 5, seed: 8)
        let server = try ServeProcess(root: work.file("server"), extraArguments: ["--faults", "damage=0.2", "--fault-seed", "2"] + SuiteStorage.patchChunks(of: Self.chunk))
        let result = try runXfer(arguments(file, backend: "patch", server: server, state: work.file("state"), ["--max-attempts", "20"]))
        XCTAssertEqual(result.status, 0, result.stderr)
        let reasons = result.events.filter { $0["event"] as? String == "retry" }.compactMap { $0["reason"] as? String }
        XCTAssertTrue(reasons.contains { $0.contains("other bytes than were sent (422)") }, "\(reasons)")
        let url = try XCTUnwrap(completedURL(result))
        XCTAssertEqual(try downloadSHA256(url, into: work), try sha256sum(file))
    }

    /// A stalled request is abandoned after --low-speed-time and retried,
    /// instead of hanging the push.
    func testStallsAreAbandonedAndRetried() throws {
        let file = work.file("a.bin")
        try makeTestFile(at: file, size: 12 * Self.chunk, seed: 4)
        for backend in Self.backends {
            let server = try ServeProcess(
                root: work.file("server-\(backend)"), extraArguments: ["--faults", "stall=0.15", "--fault-seed", "5"] + SuiteStorage.patchChunks(of: Self.chunk))
            let result = try runXfer(arguments(file, backend: backend, server: server, state: work.file("state-\(backend)"),
                                               ["--low-speed-time", "1", "--max-attempts", "20"]))
            XCTAssertEqual(result.status, 0, "\(backend): \(result.stderr)")
            let reasons = result.events.filter { $0["event"] as? String == "retry" }.compactMap { $0["reason"] as? String }
            XCTAssertTrue(reasons.contains { $0.lowercased().contains("time") }, "\(backend): a stall must time out: \(reasons)")
            let url = try XCTUnwrap(completedURL(result), backend)
            XCTAssertEqual(try downloadSHA256(url, into: work), try sha256sum(file), backend)
        }
    }

    /// 429's Retry-After wins over the backoff's jittered delay.
    func testRetryAfterIsHonoured() throws {
        let file = work.file("a.bin")
        try makeTestFile(at: file, size: 8 * Self.chunk, seed: 6)
        let server = try ServeProcess(root: work.file("server"), extraArguments: ["--faults", "429=0.3", "--fault-seed", "1"] + SuiteStorage.patchChunks(of: Self.chunk))
        let result = try runXfer(arguments(file, backend: "patch", server: server, state: work.file("state"), ["--max-attempts", "20"]))
        XCTAssertEqual(result.status, 0, result.stderr)
        let throttled = result.events.filter { ($0["reason"] as? String)?.contains("429") == true }
        XCTAssertFalse(throttled.isEmpty, "some requests must have been throttled")
        for event in throttled {
            XCTAssertEqual((event["delaySeconds"] as? NSNumber)?.doubleValue, 1, "Retry-After: 1 is the delay")
        }
        let url = try XCTUnwrap(completedURL(result))
        XCTAssertEqual(try downloadSHA256(url, into: work), try sha256sum(file))
    }

    /// A server that always fails: the attempt cap ends the push with one
    /// clear line (exit 1), and the same command finishes once it is healthy.
    func testAttemptCapFailsClearlyAndResumes() throws {
        let file = work.file("a.bin")
        try makeTestFile(at: file, size: 6 * Self.chunk, seed: 8)
        for backend in Self.backends {
            let root = work.file("server-\(backend)")
            let healthy = try ServeProcess(root: root)
            let port = healthy.port
            let state = work.file("state-\(backend)")
            let args = arguments(file, backend: backend, server: healthy, state: state, ["--max-attempts", "3"])
            healthy.stop()
            let failing = try ServeProcess(root: root, port: port, extraArguments: ["--faults", "503=1"])
            let failed = try runXfer(args)
            XCTAssertEqual(failed.status, 1, "\(backend): \(failed.stderr)")
            XCTAssertTrue(failed.stderr.contains("gave up after 3 attempts"), "\(backend): \(failed.stderr)")
            XCTAssertTrue(failed.stderr.contains("503"), "\(backend): \(failed.stderr)")
            XCTAssertEqual(failed.stderr.split(separator: "\n").count, 1, "\(backend): \(failed.stderr)")
            failing.stop()

            let back = try ServeProcess(root: root, port: port)
            let resumed = try runXfer(args)
            XCTAssertEqual(resumed.status, 0, "\(backend): \(resumed.stderr)")
            let url = try XCTUnwrap(completedURL(resumed), backend)
            XCTAssertEqual(try downloadSHA256(url, into: work), try sha256sum(file), backend)
            back.stop()
        }
    }

    /// The receiver dies by SIGKILL mid-push and comes back on the same root
    /// and port: the running push rides through on its retries.
    func testReceiverKilledAndRestartedMidPush() throws {
        let file = work.file("a.bin")
        let size = 160 * Self.chunk + 99
        try makeTestFile(at: file, size: size, seed: 9)
        for backend in Self.backends {
            let root = work.file("server-\(backend)")
            var server = try ServeProcess(root: root)
            let port = server.port
            let push = try ChildProcess(
                executable: xferExecutable,
                arguments: arguments(file, backend: backend, server: server, state: work.file("state-\(backend)"),
                                     ["--concurrency", "2", "--max-attempts", "12"]))
            XCTAssertNotNil(push.readLine { line in
                line.contains("\"event\":\"chunk\"")
                    && int((try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])?["doneBytes"]) >= size / 4
            }, "\(backend): the push must make progress first: \(push.standardError)")
            server = try killedAndRestarted(server, root: root, port: port)
            let rest = push.readRemaining()
            XCTAssertEqual(push.wait(), 0, "\(backend): \(push.standardError)")
            let completed = rest.last.flatMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
            let url = try XCTUnwrap((completed?["files"] as? [[String: Any]])?.first?["url"] as? String, "\(backend): \(rest.suffix(2))")
            XCTAssertEqual(try downloadSHA256(url, into: work), try sha256sum(file), backend)
            server.stop()
        }
    }

    /// Small files created whole by tus and the IETF draft (one sync round each on the receiver)
    /// through a receiver SIGKILLed once 80 of them were acknowledged, then restarted on the same
    /// root: the push ends, and every file is published whole, those acknowledged before the
    /// kill (which the push does not send again) included.
    func testReceiverKilledDuringSmallFilesCreatedWhole() throws {
        let tree = work.file("tree")
        var paths: [String] = []
        for index in 0..<240 {
            try FileManager.default.createDirectory(atPath: tree + "/d\(index % 6)", withIntermediateDirectories: true)
            let path = "d\(index % 6)/f\(index)"
            try makeTestFile(at: tree + "/" + path, size: 1 + index * 997 % 9_000, seed: UInt64(index + 1))
            paths.append(path)
        }
        for (backend, endpoint) in [("ietf", "/resumable/"), ("tus", "/files/")] {
            let root = work.file("server-\(backend)")
            var server = try ServeProcess(root: root)
            let port = server.port
            let push = try ChildProcess(
                executable: xferExecutable,
                arguments: ["push", tree, "--backend", backend, "--to", server.url + endpoint, "--state", work.file("state-\(backend)"),
                            "--json", "--max-attempts", "12"])
            var acknowledged = 0
            XCTAssertNotNil(push.readLine { line in
                if line.contains("\"event\":\"fileCompleted\"") { acknowledged += 1 }
                return acknowledged >= 80
            }, "\(backend): \(push.standardError)")
            server = try killedAndRestarted(server, root: root, port: port)
            let rest = push.readRemaining()
            XCTAssertEqual(push.wait(), 0, "\(backend): \(push.standardError)")
            for path in paths {
                let served = try servedFile(root: root, path)
                XCTAssertEqual(FileManager.default.contents(atPath: served), FileManager.default.contents(atPath: tree + "/" + path), "\(backend) \(path)")
            }
            // And the restarted receiver knows each as complete: its download URL serves it.
            let completed = rest.last.flatMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
            let files = try XCTUnwrap(completed?["files"] as? [[String: Any]], "\(backend): \(rest.suffix(2))")
            XCTAssertEqual(files.count, paths.count, backend)
            for file in files.prefix(30) {
                // `path`: the file pushed, as the push named it (absolute here).
                let path = try XCTUnwrap(file["path"] as? String), url = try XCTUnwrap(file["url"] as? String)
                XCTAssertEqual(try downloadSHA256(url, into: work), try sha256sum(path), "\(backend) \(path)")
            }
            server.stop()
        }
    }

    func testBadTimeoutsAndAuthTokensAreRefused() throws {
        let file = work.file("a.bin")
        try makeTestFile(at: file, size: 10)
        let push = ["push", file, "--backend", "patch", "--to", "http://127.0.0.1:1", "--state", work.file("state")]
        let cases: [([String], String)] = [
            (push + ["--low-speed-time", "0"], "--low-speed-time"),
            (push + ["--connect-timeout", "-1"], "--connect-timeout"),
            (push + ["--connect-timeout", "soon"], "connect-timeout"),
            (["serve", "--root", work.file("server"), "--auth-token", ""], "--auth-token"),
            (["serve", "--root", work.file("server"), "--auth-token", "has space"], "--auth-token"),
        ]
        for (arguments, fragment) in cases {
            let result = try runXfer(arguments)
            XCTAssertEqual(result.status, 2, "\(arguments): \(result.stderr)")
            XCTAssertTrue(result.stderr.contains(fragment), "\(arguments): \(result.stderr)")
            XCTAssertFalse(result.stderr.contains("has space"), "the token is never echoed")
        }
    }

    func testMalformedFaultSpecIsRefused() throws {
        for spec in ["503", "nope=0.1", "503=2", "503=0.6,reset=0.6", "503=0.1,503=0.2"] {
            let result = try runXfer(["serve", "--root", work.file("server"), "--faults", spec])
            XCTAssertEqual(result.status, 2, "\(spec): \(result.stderr)")
            XCTAssertTrue(result.stderr.contains("--faults"), "\(spec): \(result.stderr)")
        }
    }
}

/// The URL of the first file of a `--json` push's `completed` event.
func completedURL(_ result: RunResult) -> String? {
    guard let last = result.lastEvent, last["event"] as? String == "completed" else { return nil }
    return (last["files"] as? [[String: Any]])?.first?["url"] as? String
}
