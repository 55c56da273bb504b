import Foundation
import XCTest
import XferTestSupport

/// `xfer push --backend patch` end to end: the real binary, real libcurl,
/// real LMDB, and a real `xfer serve` on 127.0.0.1, with real SIGKILLs.
final class PatchPushTests: XCTestCase {
    var work: TemporaryDirectory!
    var server: ServeProcess!

    override func setUpWithError() throws {
        work = TemporaryDirectory("xfer-e2e")
        server = try ServeProcess(root: work.file("server"))
    }

    override func tearDown() {
        server = nil
        work = nil
    }

    private var state: String { work.file("state") }

    private func push(_ files: [String], _ extra: [String] = []) throws -> RunResult {
        try runXfer(["push"] + files + ["--backend", "patch", "--to", server.url, "--state", state] + extra)
    }

    func testFilesOfEverySizeArriveByteIdentical() throws {
        let files = [("empty.bin", 0), ("one.bin", 1), ("exact.bin", 2 << 20), ("many.bin", (3 << 20) + 12345)]
        for (index, (name, size)) in files.enumerated() {
            try makeTestFile(at: work.file(name), size: size, seed: UInt64(index + 1))
        }
        let paths = files.map { work.file($0.0) }
        let result = try push(paths, ["--chunk-size", "1MiB"])
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(result.stdout.count, files.count, "one URL per file: \(result.stdout)")
        for (path, url) in zip(paths, result.stdout) {
            XCTAssertTrue(url.hasSuffix("/" + (path as NSString).lastPathComponent), url)
            XCTAssertEqual(try downloadSHA256(url, into: work), try sha256sum(path), path)
        }
        XCTAssertEqual(result.stderrWithoutProgress, "", "no noise on a non-terminal stderr, only progress lines")
    }

    /// With no `--chunk-size`, a file of 64 MiB or more goes in 8 MiB chunks and a smaller one in
    /// the 1 MiB default; a size the user names is kept for every file.
    func testChunksGrowWithTheFileUnlessASizeIsNamed() throws {
        let big = work.file("big.bin"), small = work.file("small.bin")
        try makeTestFile(at: big, size: 64 << 20, seed: 5)
        try makeTestFile(at: small, size: 3 << 20, seed: 6)
        func chunkSizes(_ extra: [String], state: String) throws -> [Int] {
            let result = try runXfer(
                ["push", big, small, "--backend", "patch", "--to", server.url, "--state", state, "--json"] + extra)
            XCTAssertEqual(result.status, 0, result.stderr)
            let job = try XCTUnwrap(result.events.first?["job"] as? String)
            let status = try runXfer(["status", job, "--json", "--state", state])
            let details = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(status.stdout.joined().utf8)) as? [String: Any])
            return (details["files"] as? [[String: Any]] ?? []).map { int($0["chunkSize"]) }
        }
        XCTAssertEqual(try chunkSizes([], state: work.file("state-defaults")), [8 << 20, 1 << 20])
        XCTAssertEqual(try chunkSizes(["--chunk-size", "1MiB"], state: work.file("state-named")), [1 << 20, 1 << 20])
    }

    /// Chunk bodies stream from the file: no buffer of a chunk's size exists,
    /// so 64 MiB chunks four at a time cost the client far less memory than
    /// the 256 MiB they add up to (566 MiB at 64 MiB × 8 when each chunk was
    /// read into its own buffer). Peak RSS is sampled from /proc while the
    /// child runs (a measurement, not a synchronisation); the bound is generous.
    func testPeakMemoryDoesNotGrowWithTheChunkSize() throws {
        let file = work.file("big.bin")
        try makeTestFile(at: file, size: 256 << 20, seed: 21)
        let child = try ChildProcess(
            executable: xferExecutable,
            arguments: ["push", file, "--backend", "patch", "--to", server.url, "--state", state,
                        "--chunk-size", "64MiB", "--concurrency", "4"])
        var peakKiB = 0
        while child.process.isRunning {
            if let status = try? String(contentsOfFile: "/proc/\(child.pid)/status", encoding: .utf8),
                let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") }),
                let kib = Int(line.split(separator: " ", omittingEmptySubsequences: true)[1])
            {
                peakKiB = max(peakKiB, kib)
            }
            usleep(20_000)
        }
        XCTAssertEqual(child.wait(), 0, child.standardError)
        XCTAssertGreaterThan(peakKiB, 0, "the child's memory was never sampled")
        XCTAssertLessThan(peakKiB, 128 << 10, "peak RSS \(peakKiB / 1024) MiB with 64 MiB chunks × 4")
    }

    func testJSONEventsEndWithCompleted() throws {
        try SuiteStorage.requireDisk("it counts the client's 64 KiB chunks, which the receiver over the store raises to 8 MiB")
        try makeTestFile(at: work.file("a.bin"), size: 300_000)
        let result = try push([work.file("a.bin")], ["--chunk-size", "64KiB", "--json"])
        XCTAssertEqual(result.status, 0, result.stderr)
        let events = result.events
        XCTAssertEqual(events.count, result.stdout.count, "every stdout line is a JSON object")
        XCTAssertEqual(events.first?["event"] as? String, "started")
        XCTAssertEqual(events.filter { $0["event"] as? String == "chunk" }.count, 5)
        let last = try XCTUnwrap(result.lastEvent)
        XCTAssertEqual(last["event"] as? String, "completed")
        let files = try XCTUnwrap(last["files"] as? [[String: Any]])
        XCTAssertEqual(files.first?["path"] as? String, work.file("a.bin"))
        let url = try XCTUnwrap(files.first?["url"] as? String)
        XCTAssertEqual(try downloadSHA256(url, into: work), try sha256sum(work.file("a.bin")))
    }

    func testTheServersChunkSizeIsAdopted() throws {
        server = nil
        server = try ServeProcess(root: work.file("server2"), extraArguments: ["--patch-chunk-size", "100000"])
        try makeTestFile(at: work.file("a.bin"), size: 1_000_000)
        let result = try push([work.file("a.bin")], ["--chunk-size", "1MiB", "--json"])
        XCTAssertEqual(result.status, 0, result.stderr)
        let chunks = result.events.filter { $0["event"] as? String == "chunk" }
        XCTAssertEqual(chunks.count, 10, "1,000,000 bytes in the server's 100,000-byte chunks")
        XCTAssertEqual(chunks.map { int($0["bytes"]) }.max(), 100_000)
        let url = try XCTUnwrap((result.lastEvent?["files"] as? [[String: Any]])?.first?["url"] as? String)
        XCTAssertEqual(try downloadSHA256(url, into: work), try sha256sum(work.file("a.bin")))
    }

    /// The heart of it: SIGKILL mid-transfer, re-run, byte-identical, and
    /// no more re-sent than what was in flight.
    func testSIGKILLMidTransferResumesAndResendsAtMostWhatWasInFlight() throws {
        let size = 96 << 20
        let chunk = 64 << 10
        let concurrency = 4
        let file = work.file("big.bin")
        try makeTestFile(at: file, size: size, seed: 7)
        let arguments = ["push", file, "--backend", "patch", "--to", server.url, "--state", state,
                         "--chunk-size", String(chunk), "--concurrency", String(concurrency), "--json"]

        let first = try ChildProcess(executable: xferExecutable, arguments: arguments)
        var acknowledged = 0
        while let line = first.readLine() {
            guard line.contains("\"event\":\"chunk\"") else { continue }
            let event = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
            acknowledged = int(event?["doneBytes"])
            if acknowledged >= size / 4 {
                first.kill(SIGKILL)
                break
            }
        }
        XCTAssertEqual(first.wait(), 128 + SIGKILL, "the first run must die by SIGKILL, not finish: \(first.standardError)")
        XCTAssertGreaterThanOrEqual(acknowledged, size / 4)

        let second = try runXfer(arguments)
        XCTAssertEqual(second.status, 0, second.stderr)
        let started = try XCTUnwrap(second.events.first)
        XCTAssertEqual(started["resumed"] as? Bool, true)
        XCTAssertGreaterThanOrEqual(int(started["doneBytes"]), acknowledged, "nothing acknowledged is forgotten")
        let last = try XCTUnwrap(second.lastEvent)
        let resumed = int(last["bytesResumed"])
        let sent = int(last["bytesSent"])
        XCTAssertGreaterThanOrEqual(resumed, acknowledged)
        XCTAssertEqual(sent, size - resumed, "the resumed run sends exactly what the server lacks")

        let url = try XCTUnwrap((last["files"] as? [[String: Any]])?.first?["url"] as? String)
        XCTAssertEqual(try downloadSHA256(url, into: work), try sha256sum(file))

        // Server side: everything it received over both runs, partial bodies
        // included, exceeds the file by at most the chunks that were in flight.
        // (The one upload of this receiver: its counter is the upload's. A download link's id
        // opens no upload's status.)
        let received = int(try getJSON(server.url + "/stats")["payloadBytesReceived"])
        XCTAssertLessThanOrEqual(received - size, concurrency * chunk)
    }

    /// The last chunk's acknowledgement is not committed alone: the
    /// completion's commit covers it. Killed in between (the completion
    /// withheld unread), the next run asks the server, finds the chunk
    /// there, and sends nothing again.
    func testAKillBetweenTheLastChunkAndTheCompletionSendsNothingAgain() throws {
        server = nil
        // One chunk per file: PATCH is the 1st request under /uploads/, the completion the 2nd
        // (from a receiver that takes no file whole with its creation: then there is no completion).
        server = try ServeProcess(root: work.file("server-stall"), extraArguments: ["--stall", "/uploads/*@2", "--patch-json-only"])
        let file = work.file("one.bin")
        try makeTestFile(at: file, size: 300_000, seed: 11)
        let arguments = ["push", file, "--backend", "patch", "--to", server.url, "--state", state, "--json"]
        let first = try ChildProcess(executable: xferExecutable, arguments: arguments)
        var acknowledged = false
        while let line = first.readLine() {
            if line.contains("\"event\":\"chunk\"") {
                acknowledged = true
                break
            }
        }
        XCTAssertTrue(acknowledged, first.standardError)
        let serverProcess = server.child
        let stalled = serverProcess.readLine { $0.hasPrefix("stalled ") }
        XCTAssertEqual(stalled?.contains("/complete"), true, stalled ?? "server ended")
        first.kill(SIGKILL)
        XCTAssertEqual(first.wait(), 128 + SIGKILL, first.standardError)

        let second = try runXfer(arguments)
        XCTAssertEqual(second.status, 0, second.stderr)
        let last = try XCTUnwrap(second.lastEvent)
        XCTAssertEqual(int(last["bytesSent"]), 0, "the chunk the server holds is not sent again")
        XCTAssertEqual(int(last["bytesResumed"]), 300_000)
        let url = try XCTUnwrap((last["files"] as? [[String: Any]])?.first?["url"] as? String)
        XCTAssertEqual(try downloadSHA256(url, into: work), try sha256sum(file))
    }

    /// A small file goes in one request that creates and completes its upload. Killed while its
    /// answer is withheld (the file stored, complete), the next run knows of no upload and sends
    /// the file again, once: what was in flight, as the invariant allows. The first copy stays
    /// published, complete; the job's URL is the second's.
    func testAKillBeforeASmallFilesOneAnswerSendsItAgainOnce() throws {
        server = nil
        // OPTIONS /uploads is the 1st request to /uploads, the file's creation the 2nd.
        let root = work.file("server-hold")
        server = try ServeProcess(root: root, extraArguments: ["--hold", "/uploads@2"])
        let file = work.file("small.bin")
        try makeTestFile(at: file, size: 300_000, seed: 12)
        let arguments = ["push", file, "--backend", "patch", "--to", server.url, "--state", state, "--json"]
        let first = try ChildProcess(executable: xferExecutable, arguments: arguments)
        let held = server.child.readLine { $0.hasPrefix("held ") }
        XCTAssertEqual(held?.contains("POST /uploads"), true, held ?? "server ended")
        first.kill(SIGKILL)
        XCTAssertEqual(first.wait(), 128 + SIGKILL, first.standardError)

        let second = try runXfer(arguments)
        XCTAssertEqual(second.status, 0, second.stderr)
        let last = try XCTUnwrap(second.lastEvent)
        XCTAssertEqual(int(last["bytesSent"]), 300_000, "the file again, once")
        let url = try XCTUnwrap((last["files"] as? [[String: Any]])?.first?["url"] as? String)
        XCTAssertEqual(try downloadSHA256(url, into: work), try sha256sum(file))
        XCTAssertEqual(int(try getJSON(server.url + "/stats")["payloadBytesReceived"]), 2 * 300_000, "two requests brought it")
        if !SuiteStorage.isObjectStore {
            let published = try FileManager.default.contentsOfDirectory(atPath: root + "/downloads")
            XCTAssertEqual(published.count, 2, "the first copy is complete too: \(published)")
        }
    }

    func testASecondProcessOnTheSameJobFailsAtOnce() throws {
        let file = work.file("a.bin")
        try makeTestFile(at: file, size: 8 << 20)
        let arguments = ["push", file, "--backend", "patch", "--to", server.url, "--state", state, "--chunk-size", "64KiB", "--json"]
        let first = try ChildProcess(executable: xferExecutable, arguments: arguments)
        XCTAssertNotNil(first.readLine { $0.contains("\"event\":\"started\"") })
        first.kill(SIGSTOP)  // holds the job's lock, deterministically still running
        let second = try runXfer(arguments)
        first.kill(SIGCONT)
        XCTAssertEqual(second.status, 3)
        XCTAssertTrue(second.stderr.contains("locked by pid \(first.pid)"), second.stderr)
        XCTAssertEqual(second.stderr.split(separator: "\n").count, 1, "one line: \(second.stderr)")
        _ = first.readRemaining()
        XCTAssertEqual(first.wait(), 0, first.standardError)
    }

    func testSIGINTSavesStateExits130AndResumes() throws {
        let file = work.file("a.bin")
        try makeTestFile(at: file, size: 48 << 20)
        let arguments = ["push", file, "--backend", "patch", "--to", server.url, "--state", state, "--chunk-size", "64KiB", "--json"]
        let first = try ChildProcess(executable: xferExecutable, arguments: arguments)
        XCTAssertNotNil(first.readLine { $0.contains("\"event\":\"chunk\"") })
        first.kill(SIGINT)
        let rest = first.readRemaining()
        XCTAssertEqual(first.wait(), 130, first.standardError)
        XCTAssertTrue(rest.last?.contains("\"event\":\"failed\"") ?? false, "\(rest.suffix(2))")
        XCTAssertTrue(first.standardError.contains("interrupted"), first.standardError)

        let second = try runXfer(arguments)
        XCTAssertEqual(second.status, 0, second.stderr)
        XCTAssertEqual(second.events.first?["resumed"] as? Bool, true)
        let url = try XCTUnwrap((second.lastEvent?["files"] as? [[String: Any]])?.first?["url"] as? String)
        XCTAssertEqual(try downloadSHA256(url, into: work), try sha256sum(file))
    }

    /// A file changed between two runs holds other bytes than the server's
    /// copy of its start: the re-run sends it again from its start, and says so.
    func testAChangedFileIsSentAgainFromItsStart() throws {
        let file = work.file("a.bin")
        try makeTestFile(at: file, size: 32 << 20)
        let arguments = ["push", file, "--backend", "patch", "--to", server.url, "--state", state, "--chunk-size", "64KiB", "--json"]
        let first = try ChildProcess(executable: xferExecutable, arguments: arguments)
        XCTAssertNotNil(first.readLine { $0.contains("\"event\":\"chunk\"") })
        first.kill(SIGKILL)
        first.wait()

        try makeTestFile(at: file, size: 32 << 20, seed: 99)  // same size, new bytes and mtime
        let again = try runXfer(arguments)
        XCTAssertEqual(again.status, 0, again.stderr)
        XCTAssertEqual(again.events.first?["resumed"] as? Bool, true)
        let resend = try XCTUnwrap(again.events.first { $0["event"] as? String == "resending" })
        XCTAssertTrue((resend["reason"] as? String ?? "").contains("changed"), "\(resend)")
        XCTAssertEqual(int(again.lastEvent?["bytesSent"]), 32 << 20, "every byte of the new content is sent")
        let url = try XCTUnwrap((again.lastEvent?["files"] as? [[String: Any]])?.first?["url"] as? String)
        XCTAssertEqual(try downloadSHA256(url, into: work), try sha256sum(file))
    }

    /// The receiver is down: the push fails with exit 1 after its retries and
    /// keeps its state; once a receiver with the same state is back on the
    /// same port, the same command finishes the job.
    func testUnreachableServerFailsResumablyAndStateStaysIntact() throws {
        let file = work.file("a.bin")
        try makeTestFile(at: file, size: 3 << 20)
        let port = server.port
        let url = server.url
        server.stop()
        let arguments = ["push", file, "--backend", "patch", "--to", url, "--state", state, "--max-attempts", "2"]
        let failed = try runXfer(arguments)
        XCTAssertEqual(failed.status, 1, failed.stderr)
        XCTAssertTrue(failed.stderr.contains("could not connect"), failed.stderr)
        XCTAssertEqual(failed.stderr.split(separator: "\n").count, 1, failed.stderr)

        server = try ServeProcess(root: work.file("server"), port: port)
        let resumed = try runXfer(arguments)
        XCTAssertEqual(resumed.status, 0, resumed.stderr)
        XCTAssertEqual(try downloadSHA256(resumed.stdout[0], into: work), try sha256sum(file))
    }

    func testSecretsNeverAppearInOutput() throws {
        let file = work.file("a.bin")
        try makeTestFile(at: file, size: 200_000)
        let token = "tok-\(UUID().uuidString)"
        let header = "hdr-\(UUID().uuidString)"
        // Against a closed port so errors (which name the failing request) are printed too.
        let dead = try ServeProcess(root: work.file("dead"))
        let deadURL = dead.url
        dead.stop()
        for target in [server.url, deadURL] {
            let result = try runXfer(["push", file, "--backend", "patch", "--to", target, "--state", state, "--json",
                                      "--token", token, "--header", "X-Api-Key: \(header)", "--max-attempts", "2"])
            let everything = result.stdout.joined(separator: "\n") + result.stderr
            XCTAssertFalse(everything.contains(token), "token leaked")
            XCTAssertFalse(everything.contains(header), "header value leaked")
        }
    }
}
