import Foundation
import XCTest
import XferTestSupport

/// `xfer pull`: downloads as engine jobs, against real servers on 127.0.0.1 —
/// `xfer serve`'s `/downloads/` (ranges, ETag, Repr-Digest), moto's S3
/// (ranges with If-Match, listings) and Python's `http.server` (no ranges) —
/// killed with SIGKILL and resumed.
final class PullTests: XCTestCase {
    var work: TemporaryDirectory!

    override func setUpWithError() throws {
        work = TemporaryDirectory("xfer-pull")
    }

    override func tearDown() {
        work = nil
    }

    private var state: String { work.file("state") }

    /// Pushes `file` into a fresh `xfer serve` with patch and returns its download URL.
    private func served(_ file: String, by server: ServeProcess) throws -> String {
        let push = try runXfer(["push", file, "--backend", "patch", "--to", server.url, "--state", work.file("push-state")])
        XCTAssertEqual(push.status, 0, push.stderr)
        return try XCTUnwrap(push.stdout.last)
    }

    private func partialFiles(in directory: String) -> [String] {
        let names = (FileManager.default.enumerator(atPath: directory)?.allObjects as? [String]) ?? []
        return names.filter { $0.hasSuffix(".xfer-partial") }
    }

    // MARK: xfer serve

    func testAFileFromServeArrivesByteIdenticalInRangesAndARerunFetchesNothing() throws {
        let server = try ServeProcess(root: work.file("server"))
        let source = work.file("source.bin")
        try makeTestFile(at: source, size: 5 << 20 + 12_345, seed: 7)
        let url = try served(source, by: server)
        let into = work.file("into")
        try FileManager.default.createDirectory(atPath: into, withIntermediateDirectories: true)

        let result = try runXfer(["pull", url, into + "/", "--state", state, "--chunk-size", "1MiB", "--concurrency", "3", "--json"])
        XCTAssertEqual(result.status, 0, result.stderr)
        let landed = into + "/source.bin"
        XCTAssertEqual(try sha256sum(landed), try sha256sum(source))
        XCTAssertEqual(result.events.filter { $0["event"] as? String == "chunk" }.count, 6, "six 1 MiB ranges")
        XCTAssertEqual(partialFiles(in: into), [], "the partial file became the destination")

        let again = try runXfer(["pull", url, into + "/", "--state", state, "--chunk-size", "1MiB", "--json"])
        XCTAssertEqual(again.status, 0, again.stderr)
        XCTAssertEqual(again.events.filter { $0["event"] as? String == "chunk" }.count, 0, "a complete pull fetches nothing again")
    }

    func testKill9MidPullResumesFromTheRangesMadeDurable() throws {
        let server = try ServeProcess(root: work.file("server"))
        let source = work.file("big.bin")
        try makeTestFile(at: source, size: 24 << 20, seed: 8)
        let url = try served(source, by: server)
        let target = work.file("big-copy.bin")
        let arguments = ["pull", url, target, "--state", state, "--chunk-size", "1MiB", "--concurrency", "2", "--json"]

        _ = try pushKilled(arguments, afterChunks: 3)
        XCTAssertFalse(FileManager.default.fileExists(atPath: target), "the destination appears only complete")
        XCTAssertTrue(FileManager.default.fileExists(atPath: target + ".xfer-partial"))

        let resumed = try runXfer(arguments)
        XCTAssertEqual(resumed.status, 0, resumed.stderr)
        let started = try XCTUnwrap(resumed.events.first { $0["event"] as? String == "started" })
        XCTAssertEqual(started["resumed"] as? Bool, true)
        XCTAssertGreaterThanOrEqual(int(started["doneBytes"]), 3 << 20, "every range reported before the kill was durable")
        let fetched = resumed.events.filter { $0["event"] as? String == "chunk" }.count
        XCTAssertLessThanOrEqual(fetched, 24 - 3, "the resumed run fetches only the ranges not done")
        XCTAssertEqual(try sha256sum(target), try sha256sum(source))
        XCTAssertFalse(FileManager.default.fileExists(atPath: target + ".xfer-partial"))
    }

    func testADestinationThatExistsIsLeftAloneUnlessForced() throws {
        let server = try ServeProcess(root: work.file("server"))
        let source = work.file("data.bin")
        try makeTestFile(at: source, size: 300_000, seed: 9)
        let url = try served(source, by: server)
        let target = work.file("mine.bin")
        try Data("precious".utf8).write(to: URL(fileURLWithPath: target))

        let refused = try runXfer(["pull", url, target, "--state", state])
        XCTAssertNotEqual(refused.status, 0)
        XCTAssertTrue(refused.stderr.contains("exists"), refused.stderr)
        XCTAssertEqual(try String(contentsOfFile: target, encoding: .utf8), "precious")

        let forced = try runXfer(["pull", url, target, "--state", work.file("state2"), "--force"])
        XCTAssertEqual(forced.status, 0, forced.stderr)
        XCTAssertEqual(try sha256sum(target), try sha256sum(source))
    }

    func testListStatusAndCancelKnowPullJobs() throws {
        let server = try ServeProcess(root: work.file("server"))
        let source = work.file("list.bin")
        try makeTestFile(at: source, size: 6 << 20, seed: 10)
        let url = try served(source, by: server)
        let target = work.file("list-copy.bin")
        let arguments = ["pull", url, target, "--state", state, "--chunk-size", "1MiB", "--concurrency", "1", "--json"]
        let id = try pushKilled(arguments, afterChunks: 1)

        let list = try runXfer(["list", "--json", "--state", state])
        XCTAssertEqual(list.status, 0, list.stderr)
        let jobs = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(list.stdout.joined().utf8)) as? [[String: Any]])
        XCTAssertEqual(jobs.first?["id"] as? String, id)
        XCTAssertEqual(jobs.first?["direction"] as? String, "pull")

        let resumed = try runXfer(["resume", id, "--state", state])
        XCTAssertEqual(resumed.status, 0, resumed.stderr)
        XCTAssertEqual(try sha256sum(target), try sha256sum(source))

        // A second, killed pull is cancelled: its partial file goes with it.
        let other = work.file("other-copy.bin")
        let second = try pushKilled(["pull", url, other, "--state", state, "--chunk-size", "1MiB", "--concurrency", "1", "--json"], afterChunks: 1)
        let cancel = try runXfer(["cancel", second, "--state", state])
        XCTAssertEqual(cancel.status, 0, cancel.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: other + ".xfer-partial"))
    }

    func testNoRoomIsAOneLineErrorAndThePullGoesOnOnceThereIs() throws {
        let server = try ServeProcess(root: work.file("server"))
        let source = work.file("room.bin")
        try makeTestFile(at: source, size: 6 << 20, seed: 14)
        let url = try served(source, by: server)
        let target = work.file("room-copy.bin")
        let arguments = ["pull", url, target, "--state", state, "--chunk-size", "1MiB", "--quiet"]

        // A 2 MiB file-size limit: the partial file cannot be made 6 MiB, as on a full disk.
        let cramped = try runToEnd("/usr/bin/prlimit", ["--fsize=\(2 << 20)", xferExecutable] + arguments)
        XCTAssertEqual(cramped.status, 1, cramped.stderr)
        let lines = cramped.stderr.split(separator: "\n")
        XCTAssertEqual(lines.count, 1, cramped.stderr)
        XCTAssertTrue(cramped.stderr.contains("make room first") && cramped.stderr.contains("re-run the same command"), cramped.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: target))

        let list = try runXfer(["list", "--json", "--state", state])
        let jobs = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(list.stdout.joined().utf8)) as? [[String: Any]])
        XCTAssertEqual(jobs.first?["state"] as? String, "failed", "the job is kept, to resume")

        let roomy = try runXfer(arguments)
        XCTAssertEqual(roomy.status, 0, roomy.stderr)
        XCTAssertEqual(try sha256sum(target), try sha256sum(source))
    }

    // MARK: A server without ranges

    func testAServerThatIgnoresRangesGivesOneStreamAndRedirectsAreFollowed() throws {
        let root = work.file("www")
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        let source = root + "/plain.bin"
        try makeTestFile(at: source, size: 3 << 20 + 5, seed: 11)
        let (server, url) = try startServer(
            "python http.server", executable: "/usr/bin/python3",
            arguments: ["-u", "-c", Self.plainServer, root])
        defer {
            server.kill()
            server.wait()
        }
        let target = work.file("plain-copy.bin")
        let result = try runXfer(["pull", url + "/plain.bin", target, "--state", state, "--chunk-size", "1MiB", "--json"])
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(try sha256sum(target), try sha256sum(source))
        XCTAssertEqual(result.events.filter { $0["event"] as? String == "chunk" }.count, 1, "one stream, not ranges")

        let redirected = work.file("moved-copy.bin")
        let moved = try runXfer(["pull", url + "/moved/plain.bin", redirected, "--state", state])
        XCTAssertEqual(moved.status, 0, moved.stderr)
        XCTAssertEqual(try sha256sum(redirected), try sha256sum(source), "a redirect is followed")
    }

    /// Python's file server: it answers every GET whole (no `Accept-Ranges`), with
    /// `Last-Modified`; `/moved/PATH` redirects to `/PATH`.
    static let plainServer = """
        import functools, http.server, sys
        class Handler(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *args): pass
            def moved(self):
                if not self.path.startswith("/moved/"): return False
                self.send_response(302)
                self.send_header("Location", self.path[len("/moved"):])
                self.send_header("Content-Length", "0")
                self.end_headers()
                return True
            def do_GET(self):
                if not self.moved(): super().do_GET()
            def do_HEAD(self):
                if not self.moved(): super().do_HEAD()
        handler = functools.partial(Handler, directory=sys.argv[1])
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        print(f"listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
        server.serve_forever()
        """

    // MARK: S3 (moto)

    private func s3Push(_ paths: [String], to target: String, s3: S3Server) throws {
        let result = try runXfer(
            ["push"] + paths + ["--backend", "s3", "--to", target, "--endpoint", s3.url, "--state", work.file("push-state")],
            environment: S3Server.environment)
        XCTAssertEqual(result.status, 0, result.stderr)
    }

    func testAnObjectReplacedMidPullIsDetectedAndTheNewVersionLands() throws {
        let s3 = try S3Server()
        try s3.makeBucket("pulls")
        let first = work.file("v1.bin"), second = work.file("v2.bin")
        try makeTestFile(at: first, size: 8 << 20, seed: 12)
        try makeTestFile(at: second, size: 7 << 20 + 99, seed: 13)
        try s3Push([first], to: "s3://pulls/obj.bin", s3: s3)

        let target = work.file("obj.bin")
        let arguments = [
            "pull", "s3://pulls/obj.bin", target, "--endpoint", s3.url, "--state", state, "--chunk-size", "1MiB",
            "--concurrency", "1", "--json",
        ]
        _ = try pushKilled(arguments, afterChunks: 2, environment: S3Server.environment)
        try s3Push([second], to: "s3://pulls/obj.bin", s3: s3)

        let resumed = try runXfer(arguments, environment: S3Server.environment)
        XCTAssertEqual(resumed.status, 0, resumed.stderr)
        XCTAssertEqual(try sha256sum(target), try sha256sum(second), "the new version, never a mix")
        let note = resumed.events.first { $0["event"] as? String == "resending" }
        XCTAssertTrue((note?["reason"] as? String ?? "").contains("changed"), "\(resumed.events)")
        XCTAssertFalse(resumed.stdout.joined().contains("xfer-test-secret") || resumed.stderr.contains("xfer-test-secret"))
    }

    func testAPrefixArrivesAsATreeWithIncludesAndExcludes() throws {
        let s3 = try S3Server()
        try s3.makeBucket("trees")
        let tree = work.file("tree")
        try FileManager.default.createDirectory(atPath: tree + "/sub/deeper", withIntermediateDirectories: true)
        var files: [String] = []
        for index in 0..<12 {
            let path = tree + (index % 3 == 0 ? "/sub" : index % 3 == 1 ? "/sub/deeper" : "") + "/f\(index).dat"
            try makeTestFile(at: path, size: index == 5 ? 3 << 20 : 1000 + index, seed: UInt64(20 + index))
            files.append(path)
        }
        try makeTestFile(at: tree + "/skip.log", size: 100, seed: 40)
        try s3Push([tree], to: "s3://trees/data/", s3: s3)

        let into = work.file("copy")
        let result = try runXfer(
            ["pull", "s3://trees/data/", into, "--endpoint", s3.url, "--state", state, "--chunk-size", "1MiB", "--exclude", "*.log"],
            environment: S3Server.environment)
        XCTAssertEqual(result.status, 0, result.stderr)
        for file in files {
            let relative = String(file.dropFirst(tree.count + 1))
            XCTAssertEqual(try sha256sum(into + "/" + relative), try sha256sum(file), relative)
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: into + "/skip.log"), "--exclude left it out")
        XCTAssertEqual(partialFiles(in: into), [])
        XCTAssertEqual(result.stdout.count, 12, "one line per file written")
    }

    // MARK: Bad input

    func testBadSourcesAndDestinationsAreOneLineErrors() throws {
        let notURL = try runXfer(["pull", "ftp://example.com/x", work.file("x"), "--state", state])
        XCTAssertEqual(notURL.status, 2)
        XCTAssertEqual(notURL.stderr.split(separator: "\n").count, 1, notURL.stderr)

        let noParent = try runXfer(["pull", "http://127.0.0.1:9/x", work.file("missing/dir/x"), "--state", state])
        XCTAssertEqual(noParent.status, 2, noParent.stderr)
        XCTAssertTrue(noParent.stderr.contains("not a directory"), noParent.stderr)
    }
}
