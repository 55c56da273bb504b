import Foundation
import XCTest
import XferTestSupport

/// A link with latency between a client and its server: `scripts/delay-proxy.py`
/// on 127.0.0.1 (this kernel has no `netem`), which holds every byte for a fixed
/// one-way delay and makes a new connection pay a round trip, as a handshake does.
/// Stopped, it says what crossed it.
final class DelayProxy {
    /// What the proxy saw (see the script's header).
    struct Seen {
        /// TCP connections accepted.
        var connections: Int
        /// Request/answer turns; on HTTP/1.1 one per request.
        var exchanges: Int
        /// The most connections waiting for an answer at once: requests in flight.
        var peakBusy: Int
    }

    let child: ChildProcess
    /// http://127.0.0.1:PORT, leading to the target.
    let url: String

    /// A proxy to the server at `target` (`http://127.0.0.1:PORT`, a path ignored).
    init(to target: String, delayMilliseconds: Int, rateMegabits: Int? = nil) throws {
        guard let port = URLComponents(string: target)?.port else { throw HarnessError("no port in \(target)") }
        let python = try TLSFront.python()
        var arguments = [repositoryRoot + "/scripts/delay-proxy.py", "--target", "127.0.0.1:\(port)",
                         "--delay-ms", String(delayMilliseconds)]
        if let rateMegabits { arguments += ["--rate-mbit", String(rateMegabits)] }
        (child, url) = try startServer("the delay proxy", executable: python, arguments: arguments)
    }

    /// Stops the proxy; what it saw.
    func stop() throws -> Seen {
        child.kill(SIGTERM)
        let lines = child.readRemaining()
        child.wait()
        guard let last = lines.last, let object = try JSONSerialization.jsonObject(with: Data(last.utf8)) as? [String: Any] else {
            throw HarnessError("the delay proxy reported nothing: \(lines) \(child.standardError)")
        }
        return Seen(connections: int(object["connections"]), exchanges: int(object["exchanges"]), peakBusy: int(object["peak_busy"]))
    }

    deinit {
        child.kill(SIGKILL)
        child.wait()
    }
}

/// Far from the server: every backend pushes a tree of small files to `xfer serve`
/// through a link with a 20 ms round trip. What would make a far push slow is
/// counted, not timed: requests per file above the protocol's minimum, requests
/// waiting for each other instead of overlapping, a new connection per file.
final class LatencyTests: XCTestCase {
    var work: TemporaryDirectory!
    let files = 96

    override func setUp() {
        work = TemporaryDirectory("xfer-latency")
    }

    override func tearDown() {
        work = nil
    }

    /// A tree of `files` files of 4 KiB.
    private func makeTree() throws -> String {
        let root = work.file("tree")
        for index in 0..<files {
            let directory = root + "/d\(index / 32)"
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            try makeTestFile(at: directory + "/f\(index).bin", size: 4096, seed: UInt64(index + 1))
        }
        return root
    }

    /// Pushes the tree with `backend` at its defaults through the proxy; what the proxy saw.
    /// `checkingArrival`: every file is also looked for in the receiver's published files.
    private func pushFar(_ backend: String, path: String = "", serving: [String] = [], checkingArrival: Bool = false) throws -> DelayProxy.Seen {
        // The receiver's links name the proxy (--public-url), as a receiver behind one is told.
        let port = try freeTCPPort()
        let proxy = try DelayProxy(to: "http://127.0.0.1:\(port)", delayMilliseconds: 10)
        let served = work.file("served-" + backend)
        let server = try ServeProcess(root: served, port: port, extraArguments: ["--public-url", proxy.url] + serving)
        defer { withExtendedLifetime(server) {} }
        let tree = try makeTree()
        defer { if checkingArrival { assertArrivedWhole(tree, in: served) } }
        let result = try runXfer([
            "push", tree, "--backend", backend, "--to", proxy.url + path, "--state", work.file("state-" + backend), "--json",
        ])
        XCTAssertEqual(result.status, 0, result.stderr)
        let completed = try XCTUnwrap(result.events.last { $0["event"] as? String == "completed" }, result.stderr)
        XCTAssertEqual((completed["files"] as? [Any])?.count, files, "\(completed)")
        return try proxy.stop()
    }

    /// Requests overlap (the window is wide, not one request at a time) and
    /// connections are kept for the next file.
    private func assertWideAndReused(_ seen: DelayProxy.Seen, _ backend: String, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertGreaterThanOrEqual(seen.peakBusy, 32, "\(backend): requests did not overlap: \(seen)", file: file, line: line)
        XCTAssertLessThanOrEqual(seen.connections, 64 + 8, "\(backend): a new connection per request: \(seen)", file: file, line: line)
    }

    func testPatchSendsEachSmallFileInTheRequestThatCreatesIt() throws {
        // The server's word once (OPTIONS /uploads), then one creation bringing each file.
        let seen = try pushFar("patch", checkingArrival: true)
        XCTAssertEqual(seen.exchanges, files + 1, "\(seen)")
        assertWideAndReused(seen, "patch")
    }

    func testPatchSendsThreeRequestsPerFileToAReceiverThatCreatesFromJSONOnly() throws {
        // create, the one chunk, complete: what the protocol orders there, nothing more.
        let seen = try pushFar("patch", serving: ["--patch-json-only"], checkingArrival: true)
        XCTAssertEqual(seen.exchanges, 3 * files + 1, "\(seen)")
        assertWideAndReused(seen, "patch")
    }

    /// Every file of `tree` is published whole under `served`'s downloads.
    private func assertArrivedWhole(_ tree: String, in served: String, file: StaticString = #filePath, line: UInt = #line) {
        for index in 0..<files {
            let name = "d\(index / 32)/f\(index).bin"
            let ids = Set(((try? FileManager.default.contentsOfDirectory(atPath: served + "/downloads")) ?? []).map { String($0.prefix(32)) })
            let copies = ids.filter {
                FileManager.default.contentsEqual(atPath: publishedPath(root: served, id: $0, name), andPath: tree + "/" + name)
                    && (try? servedFile(root: served, name)) != nil
            }
            XCTAssertEqual(copies.count, 1, "\(name) published \(copies.count) times", file: file, line: line)
        }
    }

    func testMultipartSendsOneRequestPerFileBetweenTheJobsTwo() throws {
        // preLoad.do for the whole source, one fragment per file, one isFinish.do.
        let seen = try pushFar("multipart")
        XCTAssertEqual(seen.exchanges, files + 2, "\(seen)")
        assertWideAndReused(seen, "multipart")
    }

    func testSequenceSendsTwoRequestsPerFile() throws {
        // sequenceNo 0 (the upToken), then the one block.
        let seen = try pushFar("sequence")
        XCTAssertEqual(seen.exchanges, 2 * files, "\(seen)")
        assertWideAndReused(seen, "sequence")
    }

    func testTusSendsEachSmallFileInTheRequestThatCreatesIt() throws {
        // OPTIONS once, then one creation-with-upload POST per file: no PATCH, no concatenation.
        let seen = try pushFar("tus", path: "/files/")
        XCTAssertEqual(seen.exchanges, files + 1, "\(seen)")
        assertWideAndReused(seen, "tus")
    }

    func testIETFSendsOneRequestPerFile() throws {
        // The server's limits once (OPTIONS), then one POST per file carrying all of it.
        let seen = try pushFar("ietf", path: "/resumable/")
        XCTAssertEqual(seen.exchanges, files + 1, "\(seen)")
        assertWideAndReused(seen, "ietf")
    }

    func testSmallFilesSentWholeByTusArriveIdenticalAndResumeAfterAKill() throws {
        // The one-request path must keep the invariant: files read back byte for byte, and a
        // push killed part way sends again only what was not acknowledged.
        let server = try ServeProcess(root: work.file("served"))
        let tree = try makeTree()
        let state = work.file("state")
        let arguments = ["push", tree, "--backend", "tus", "--to", server.url + "/files/", "--state", state, "--json", "--concurrency", "2"]
        let job = try pushKilled(arguments, afterChunks: 10)
        let resumed = try runXfer(arguments)
        XCTAssertEqual(resumed.status, 0, resumed.stderr)
        let events = resumed.events
        let completed = try XCTUnwrap(events.last { $0["event"] as? String == "completed" })
        XCTAssertEqual(completed["job"] as? String, job)
        let sentAgain = events.filter { $0["event"] as? String == "chunk" }.count
        XCTAssertLessThanOrEqual(sentAgain, files - 10, "the resume sent files the first run had acknowledged")
        let urls = try XCTUnwrap(completed["files"] as? [[String: Any]])
        XCTAssertEqual(urls.count, files)
        for entry in urls.prefix(12) {
            let path = try XCTUnwrap(entry["path"] as? String)
            let url = try XCTUnwrap(entry["url"] as? String)
            XCTAssertEqual(try downloadSHA256(url, into: work), try sha256sum(path), path)
        }
    }
}
