import Foundation
import XCTest
import XferTestSupport

/// `--backend ietf` end to end: real xfer processes (SIGKILLed mid-push), real LMDB and
/// libcurl, against `xfer serve` (interop version 8) and against Apple's `NIOResumableUpload`
/// (interop version 6, `AppleResumableServer`), whose uploads live in memory.
final class IETFPushTests: XCTestCase {
    var work: TemporaryDirectory!
    let chunk = 256 << 10

    override func setUp() {
        work = TemporaryDirectory("xfer-ietf")
    }

    override func tearDown() {
        work = nil
    }

    private var state: String { work.file("state") }

    private func arguments(_ files: [String], to url: String) -> [String] {
        ["push"] + files + ["--backend", "ietf", "--to", url, "--state", state, "--chunk-size", String(chunk), "--concurrency", "2", "--json"]
    }

    /// The `completed` event's URLs, in the files' order.
    private func completedURLs(_ result: RunResult, line: UInt = #line) throws -> [String] {
        XCTAssertEqual(result.status, 0, result.stderr, line: line)
        let last = try XCTUnwrap(result.lastEvent, line: line)
        XCTAssertEqual(last["event"] as? String, "completed", "\(last)", line: line)
        return try XCTUnwrap(last["files"] as? [[String: Any]], line: line).compactMap { $0["url"] as? String }
    }

    /// The upload URL the job keeps for its only (or first) file.
    private func uploadURL(job: String) throws -> String {
        let status = try runXfer(["status", "--json", "--state", state, job])
        let details = try JSONSerialization.jsonObject(with: Data(status.stdout.joined().utf8)) as? [String: Any]
        let handles = (details?["files"] as? [[String: Any]])?.first?["handles"] as? [String: Any]
        return try XCTUnwrap(handles?["url"] as? String, "\(String(describing: details))")
    }

    func testKilledPushToServeResumesAfterTheReceiverRestartsIdentical() throws {
        var server = try ServeProcess(root: work.file("server"))
        let large = work.file("large.bin"), small = work.file("small.bin"), empty = work.file("empty.bin")
        let size = 12 * chunk + 321
        try makeTestFile(at: large, size: size, seed: 1)
        try makeTestFile(at: small, size: 900, seed: 2)
        try makeTestFile(at: empty, size: 0)
        let target = server.url + "/resumable/in/"
        _ = try pushKilled(arguments([large], to: target), afterChunks: 3)

        // The receiver dies without warning and comes back on the same port.
        let port = server.port, root = server.root
        server.child.kill(SIGKILL)
        server.child.wait()
        server = try ServeProcess(root: root, port: port)

        let resumed = try runXfer(arguments([large], to: target))
        let reconciled = try XCTUnwrap(resumed.events.first { $0["event"] as? String == "reconciled" }, "\(resumed.events)")
        XCTAssertGreaterThanOrEqual(int(reconciled["chunksOnServer"]), 3, "acknowledged chunks were forgotten")
        let url = try XCTUnwrap(try completedURLs(resumed).first)
        // At most the two chunks in flight at the kill, and only their parts the server lacked.
        XCTAssertLessThanOrEqual(int(resumed.lastEvent?["bytesSent"]), size - 3 * chunk)
        XCTAssertEqual(try downloadSHA256(url, into: work), try sha256sum(large))
        if !SuiteStorage.isObjectStore { XCTAssertTrue(FileManager.default.fileExists(atPath: try servedFile(root: root, "in/large.bin"))) }

        // Files of one chunk (an empty one too) go in one request each.
        let urls = try completedURLs(try runXfer(arguments([small, empty], to: target)))
        XCTAssertEqual(urls.count, 2)
        for (url, file) in zip(urls, [small, empty]) { XCTAssertEqual(try downloadSHA256(url, into: work), try sha256sum(file)) }
    }

    func testCancelDeletesTheUpload() throws {
        let server = try ServeProcess(root: work.file("server"))
        let file = work.file("c.bin")
        try makeTestFile(at: file, size: 8 * chunk, seed: 3)
        let job = try pushKilled(arguments([file], to: server.url + "/resumable/"), afterChunks: 1)
        let url = try uploadURL(job: job)
        XCTAssertEqual(try curlRequest("HEAD", url, headers: ["Upload-Draft-Interop-Version: 8"], in: work).status, 204)
        let cancel = try runXfer(["cancel", job, "--state", state])
        XCTAssertEqual(cancel.status, 0, cancel.stderr)
        XCTAssertEqual(try curlRequest("HEAD", url, headers: ["Upload-Draft-Interop-Version: 8"], in: work).status, 404)
    }

    func testKilledPushToApplesServerResumesFromItsOffsetIdentical() throws {
        let server = try AppleResumableServer(directory: work.file("apple"))
        let file = work.file("a.bin")
        let size = 10 * chunk + 99
        try makeTestFile(at: file, size: size, seed: 4)
        let target = server.url + "/uploads/a.bin"
        let job = try pushKilled(arguments([file], to: target), afterChunks: 3)
        XCTAssertTrue(try uploadURL(job: job).hasPrefix(server.url + "/resumable_upload/"), "the upload is Apple's")

        let resumed = try runXfer(arguments([file], to: target))
        let reconciled = try XCTUnwrap(resumed.events.first { $0["event"] as? String == "reconciled" }, "\(resumed.events)")
        XCTAssertGreaterThanOrEqual(int(reconciled["doneBytes"]), 3 * chunk)
        XCTAssertEqual(try completedURLs(resumed).count, 1)
        // Apple's server counts every byte it received, so the resume sends only the rest.
        XCTAssertEqual(int(resumed.lastEvent?["bytesSent"]), size - int(reconciled["doneBytes"]))
        XCTAssertEqual(try sha256sum(server.directory + "/uploads/a.bin"), try sha256sum(file))
    }

    func testApplesServerRestartedForgetsTheUploadAndTheFileIsSentAnew() throws {
        var server = try AppleResumableServer(directory: work.file("apple"))
        let file = work.file("r.bin"), small = work.file("s.bin")
        try makeTestFile(at: file, size: 6 * chunk + 5, seed: 5)
        try makeTestFile(at: small, size: 1234, seed: 6)
        let target = server.url + "/tree/"
        _ = try pushKilled(arguments([file, small], to: target), afterChunks: 2)
        let port = server.port, directory = server.directory
        server.stop()
        server = try AppleResumableServer(directory: directory, port: port)

        let resumed = try runXfer(arguments([file, small], to: target))
        XCTAssertEqual(try completedURLs(resumed).count, 2)
        XCTAssertEqual(try sha256sum(directory + "/tree/r.bin"), try sha256sum(file))
        XCTAssertEqual(try sha256sum(directory + "/tree/s.bin"), try sha256sum(small))
    }
}
