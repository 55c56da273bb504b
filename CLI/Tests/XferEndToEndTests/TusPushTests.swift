import Foundation
import XCTest
import XferTestSupport

/// A tus server from PyPI (`resumable-upload`) on 127.0.0.1, started through
/// Tests/Tools/tustool.py, which reports the port the system chose.
final class TusServer {
    let child: ChildProcess
    /// The creation URL, `http://127.0.0.1:PORT/files/`.
    let url: String

    init(directory: String, arguments: [String] = []) throws {
        let python = try pythonTool(venv: "venv-tus")
        (child, url) = try startServer(
            "the tus server", executable: python,
            arguments: [packageRoot + "/Tests/Tools/tustool.py", "serve", "--upload-dir", directory + "/uploads",
                        "--db-path", directory + "/uploads.db", "--enable-downloads"] + arguments)
    }

    deinit {
        child.kill(SIGKILL)
        child.wait()
    }
}

/// `--backend tus` end to end: real xfer processes (SIGKILLed mid-push),
/// real LMDB and libcurl, against the PyPI tus server `resumable-upload`;
/// files read back by GET at their upload URL with curl.
final class TusPushTests: XCTestCase {
    var work: TemporaryDirectory!
    let chunk = 1 << 20

    override func setUp() {
        work = TemporaryDirectory("xfer-tus")
    }

    override func tearDown() {
        work = nil
    }

    private var state: String { work.file("state") }

    private func arguments(_ files: [String], to url: String, concurrency: Int = 3) -> [String] {
        ["push"] + files + ["--backend", "tus", "--to", url, "--state", state, "--chunk-size", "1MiB",
                            "--concurrency", String(concurrency)]
    }

    private func assertServed(_ url: String, equals file: String, line: UInt = #line) throws {
        XCTAssertEqual(try downloadSHA256(url, into: work), try sha256sum(file), "\(url) differs from \(file)", line: line)
    }

    /// `Upload-Concat` of the upload at `url`, as the server reports it.
    private func concatHeader(_ url: String) throws -> String? {
        let child = try ChildProcess(executable: "/usr/bin/curl", arguments: ["-fsSI", "-H", "Tus-Resumable: 1.0.0", url])
        let lines = child.readRemaining()
        XCTAssertEqual(child.wait(), 0)
        return lines.first { $0.lowercased().hasPrefix("upload-concat:") }
    }

    /// Starts a push with --json and SIGKILLs it once `chunks` chunks are acknowledged.
    private func killedPush(_ arguments: [String], afterChunks chunks: Int) throws {
        let child = try ChildProcess(executable: xferExecutable, arguments: arguments + ["--json"])
        var acknowledged = 0
        while acknowledged < chunks, let line = child.readLine() {
            if line.contains("\"event\":\"chunk\"") { acknowledged += 1 }
        }
        child.kill(SIGKILL)
        XCTAssertEqual(child.wait(), 128 + SIGKILL, "the push ended before it was killed: \(child.standardError)")
    }

    func testFilesGoAsParallelPartialUploadsConcatenatedIdentical() throws {
        let server = try TusServer(directory: work.file("server"))
        let empty = work.file("empty.bin"), small = work.file("small.bin"), large = work.file("large.bin")
        try makeTestFile(at: empty, size: 0)
        try makeTestFile(at: small, size: 700, seed: 2)
        try makeTestFile(at: large, size: 5 * chunk + 333, seed: 3)

        let result = try runXfer(arguments([empty, small, large], to: server.url))
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(result.stdout.count, 3, "\(result.stdout)")
        for (url, file) in zip(result.stdout, [empty, small, large]) {
            XCTAssertTrue(url.hasPrefix(server.url), url)
            try assertServed(url, equals: file)
        }
        // The server offers concatenation: the large file is a final upload of partial ones.
        XCTAssertTrue(try concatHeader(result.stdout[2])?.contains("final") == true)
    }

    /// Partial uploads only when asked (a named --concurrency above 1): at its defaults a file of
    /// many chunks is one upload PATCHed in order, so the server never copies it to concatenate.
    func testAtItsDefaultsALargeFileIsOneUploadPatchedInOrder() throws {
        let server = try TusServer(directory: work.file("server"))
        let large = work.file("large.bin")
        try makeTestFile(at: large, size: 5 * chunk + 333, seed: 12)

        let result = try runXfer(["push", large, "--backend", "tus", "--to", server.url, "--state", state, "--chunk-size", "1MiB"])
        XCTAssertEqual(result.status, 0, result.stderr)
        let url = try XCTUnwrap(result.stdout.first)
        XCTAssertNil(try concatHeader(url), "a final upload of partial ones, which the defaults should not make")
        try assertServed(url, equals: large)
    }

    func testKilledParallelPushResendsOnlyWhatWasInFlight() throws {
        let server = try TusServer(directory: work.file("server"))
        let file = work.file("p.bin")
        let size = 12 * chunk + 5
        try makeTestFile(at: file, size: size, seed: 4)
        try killedPush(arguments([file], to: server.url), afterChunks: 4)

        let resumed = try runXfer(arguments([file], to: server.url) + ["--json"])
        XCTAssertEqual(resumed.status, 0, resumed.stderr)
        let started = try XCTUnwrap(resumed.events.first)
        let kept = int(started["doneBytes"])
        XCTAssertGreaterThanOrEqual(kept, 4 * chunk, "acknowledged chunks were forgotten")
        let completed = try XCTUnwrap(resumed.lastEvent)
        XCTAssertEqual(int(completed["bytesSent"]), size - kept, "only the chunks not acknowledged are sent again")
        let url = try XCTUnwrap((completed["files"] as? [[String: Any]])?.first?["url"] as? String)
        try assertServed(url, equals: file)
    }

    func testKilledSequentialPushGoesOnFromTheServersOffset() throws {
        // Without concatenation: one upload per file, PATCHed in order; the
        // resume asks HEAD for Upload-Offset and goes on from there.
        let server = try TusServer(directory: work.file("server"), arguments: ["--disable-concatenation"])
        let file = work.file("s.bin")
        let size = 10 * chunk + 77
        try makeTestFile(at: file, size: size, seed: 5)
        try killedPush(arguments([file], to: server.url), afterChunks: 3)

        let resumed = try runXfer(arguments([file], to: server.url) + ["--json"])
        XCTAssertEqual(resumed.status, 0, resumed.stderr)
        let reconciled = try XCTUnwrap(resumed.events.first { $0["event"] as? String == "reconciled" })
        XCTAssertGreaterThanOrEqual(int(reconciled["chunksOnServer"]), 3)
        let completed = try XCTUnwrap(resumed.lastEvent)
        // At most the chunk in flight is sent again, and only its part the server lacked.
        XCTAssertLessThanOrEqual(int(completed["bytesSent"]), size - int(reconciled["chunksOnServer"]) * chunk)
        let url = try XCTUnwrap((completed["files"] as? [[String: Any]])?.first?["url"] as? String)
        XCTAssertNil(try concatHeader(url))
        try assertServed(url, equals: file)
    }

    func testResumeGoesOnMidChunkWhenTheServerHoldsPartOfOne() throws {
        let server = try TusServer(directory: work.file("server"), arguments: ["--disable-concatenation"])
        let file = work.file("m.bin")
        let size = 4 * chunk
        try makeTestFile(at: file, size: size, seed: 6)
        try killedPush(arguments([file], to: server.url), afterChunks: 1)
        // Another client (curl) appends half a chunk behind xfer's back:
        // the server now holds 1.5 chunks, or more if the kill came late.
        let status = try runXfer(["status", "--json", "--state", state, try onlyJob()])
        let details = try JSONSerialization.jsonObject(with: Data(status.stdout.joined().utf8)) as? [String: Any]
        let uploadURL = try XCTUnwrap(((details?["files"] as? [[String: Any]])?.first?["handles"] as? [String: Any])?["url"] as? String)
        let offset = try serverOffset(uploadURL)
        if offset % chunk == 0, offset < size {
            let half = work.file("half.bin")
            let whole = try Data(contentsOf: URL(fileURLWithPath: file))
            try whole.subdata(in: offset..<(offset + chunk / 2)).write(to: URL(fileURLWithPath: half))
            let patch = try ChildProcess(executable: "/usr/bin/curl", arguments: [
                "-fsS", "-X", "PATCH", "-H", "Tus-Resumable: 1.0.0", "-H", "Upload-Offset: \(offset)",
                "-H", "Content-Type: application/offset+octet-stream", "--data-binary", "@" + half, uploadURL,
            ])
            _ = patch.readRemaining()
            XCTAssertEqual(patch.wait(), 0, patch.standardError)
        }
        let held = try serverOffset(uploadURL)

        let resumed = try runXfer(arguments([file], to: server.url) + ["--json"])
        XCTAssertEqual(resumed.status, 0, resumed.stderr)
        let completed = try XCTUnwrap(resumed.lastEvent)
        XCTAssertEqual(int(completed["bytesSent"]), size - held, "the resume did not go on from the server's offset")
        try assertServed(uploadURL, equals: file)
    }

    func testResumeAfterTheUploadExpiredStartsANewOne() throws {
        // The server forgets an upload 3 s after its creation (expiration).
        let server = try TusServer(directory: work.file("server"), arguments: ["--disable-concatenation", "--upload-expiry", "3"])
        let file = work.file("e.bin")
        let size = 4 * chunk + 11
        try makeTestFile(at: file, size: size, seed: 10)
        try killedPush(arguments([file], to: server.url), afterChunks: 1)
        let status = try runXfer(["status", "--json", "--state", state, try onlyJob()])
        let details = try JSONSerialization.jsonObject(with: Data(status.stdout.joined().utf8)) as? [String: Any]
        let expired = try XCTUnwrap(((details?["files"] as? [[String: Any]])?.first?["handles"] as? [String: Any])?["url"] as? String)
        // Wait for the server, not for a guessed time: until HEAD says the upload is gone.
        let deadline = Date().addingTimeInterval(30)
        var code = ""
        while Date() < deadline {
            code = try headStatus(expired)
            if code == "410" || code == "404" { break }
            usleep(100_000)
        }
        XCTAssertTrue(code == "410" || code == "404", "the upload did not expire: HEAD answered \(code)")

        let resumed = try runXfer(arguments([file], to: server.url) + ["--json"])
        XCTAssertEqual(resumed.status, 0, resumed.stderr)
        let completed = try XCTUnwrap(resumed.lastEvent)
        XCTAssertEqual(int(completed["bytesSent"]), size, "an expired upload's bytes must all be sent again")
        let url = try XCTUnwrap((completed["files"] as? [[String: Any]])?.first?["url"] as? String)
        XCTAssertNotEqual(url, expired)
        try assertServed(url, equals: file)
    }

    private func headStatus(_ url: String) throws -> String {
        let head = try ChildProcess(executable: "/usr/bin/curl", arguments: [
            "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-I", "-H", "Tus-Resumable: 1.0.0", url,
        ])
        let code = head.readRemaining().joined()
        head.wait()
        return code
    }

    func testCancelTerminatesTheUpload() throws {
        let server = try TusServer(directory: work.file("server"), arguments: ["--disable-concatenation"])
        let file = work.file("c.bin")
        try makeTestFile(at: file, size: 6 * chunk, seed: 7)
        try killedPush(arguments([file], to: server.url), afterChunks: 1)
        let id = try onlyJob()
        let status = try runXfer(["status", "--json", "--state", state, id])
        let details = try JSONSerialization.jsonObject(with: Data(status.stdout.joined().utf8)) as? [String: Any]
        let uploadURL = try XCTUnwrap(((details?["files"] as? [[String: Any]])?.first?["handles"] as? [String: Any])?["url"] as? String)

        let cancel = try runXfer(["cancel", id, "--state", state])
        XCTAssertEqual(cancel.status, 0, cancel.stderr)
        XCTAssertTrue(cancel.stdout.contains { $0.contains("DELETE") }, "\(cancel.stdout)")
        let head = try ChildProcess(executable: "/usr/bin/curl", arguments: ["-sS", "-o", "/dev/null", "-w", "%{http_code}", "-I", "-H", "Tus-Resumable: 1.0.0", uploadURL])
        let code = head.readRemaining().joined()
        head.wait()
        XCTAssertTrue(code == "404" || code == "410", "HEAD after termination answered \(code)")
    }

    /// A file sent as partial uploads has nothing else on the server: cancel
    /// deletes each acknowledged partial upload, named by the job's receipts.
    func testCancelDeletesTheAcknowledgedPartialUploads() throws {
        let directory = work.file("server")
        let server = try TusServer(directory: directory)
        let file = work.file("pc.bin")
        try makeTestFile(at: file, size: 12 * chunk, seed: 11)
        try killedPush(arguments([file], to: server.url), afterChunks: 3)
        let id = try onlyJob()

        let cancel = try runXfer(["cancel", id, "--state", state])
        XCTAssertEqual(cancel.status, 0, cancel.stderr)
        XCTAssertGreaterThanOrEqual(cancel.stdout.filter { $0.contains("DELETE") }.count, 3, "\(cancel.stdout)")
        // What is left is at most the partial uploads in flight at the kill (never acknowledged, so unknown to the job).
        let left = ((try? FileManager.default.contentsOfDirectory(atPath: directory + "/uploads")) ?? []).filter { !$0.hasPrefix(".") }
        XCTAssertLessThanOrEqual(left.count, 4, "acknowledged partial uploads were left: \(left)")
    }

    func testPushToXferServeSurvivesALostAnswerAndSIGKILL() throws {
        // The 6th request under /files/ (a partial upload) is processed and
        // its answer withheld: the client gives up on it, sends the chunk as
        // a new partial upload, and the orphan is never concatenated.
        let server = try ServeProcess(root: work.file("server"), extraArguments: ["--hold", "/files/*@6"])
        let creation = server.url + "/files/"
        let file = work.file("x.bin")
        let size = 16 * chunk + 99
        try makeTestFile(at: file, size: size, seed: 8)
        // Over the object store a concatenation of 17 small partials (read back from the store and
        // sent as one part) takes longer than the 1 s a withheld answer is given here.
        let push = arguments([file], to: creation) + ["--low-speed-time", SuiteStorage.isObjectStore ? "5" : "1"]
        try killedPush(push, afterChunks: 8)
        XCTAssertEqual(server.child.readLine()?.hasPrefix("held POST /files/"), true, "no answer was withheld")

        let resumed = try runXfer(push + ["--json"])
        XCTAssertEqual(resumed.status, 0, resumed.stderr)
        let completed = try XCTUnwrap(resumed.lastEvent)
        let url = try XCTUnwrap((completed["files"] as? [[String: Any]])?.first?["url"] as? String)
        XCTAssertTrue(url.hasPrefix(creation), url)
        try assertServed(url, equals: file)
        // Re-sent: the withheld chunk, and at most the 3 in flight at the kill.
        let received = int(try getJSON(server.url + "/stats")["payloadBytesReceived"])
        XCTAssertLessThanOrEqual(received, size + 4 * chunk)
    }

    private func onlyJob() throws -> String {
        let list = try runXfer(["list", "--all", "--json", "--state", state])
        let jobs = try JSONSerialization.jsonObject(with: Data(list.stdout.joined().utf8)) as? [[String: Any]]
        return try XCTUnwrap(jobs?.first?["id"] as? String)
    }

    private func serverOffset(_ url: String) throws -> Int {
        let child = try ChildProcess(executable: "/usr/bin/curl", arguments: ["-fsSI", "-H", "Tus-Resumable: 1.0.0", url])
        let lines = child.readRemaining()
        XCTAssertEqual(child.wait(), 0)
        let line = try XCTUnwrap(lines.first { $0.lowercased().hasPrefix("upload-offset:") })
        return Int(line.split(separator: ":")[1].trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
    }
}
