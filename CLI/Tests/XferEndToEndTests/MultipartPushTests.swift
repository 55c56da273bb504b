import Foundation
import XCTest
import XferTestSupport

/// `xfer push --backend multipart` end to end: the real binary against a real
/// `xfer serve`, several files in one source, failed merges driven by
/// `--fail-merge`, and SIGKILLs at moments reached deterministically (a
/// JSON event on the client's stdout, or a `held ...` line on the server's).
final class MultipartPushTests: XCTestCase {
    /// Small fragments give small files several, so tests stay fast.
    static let fragment = 64 << 10

    var work: TemporaryDirectory!
    var server: ServeProcess!

    override func setUpWithError() throws {
        work = TemporaryDirectory("xfer-multipart")
        server = try ServeProcess(root: serverRoot)
    }

    override func tearDown() {
        server = nil
        work = nil
    }

    private var serverRoot: String { work.file("server") }
    private var state: String { work.file("state") }

    private func arguments(_ files: [String], _ extra: [String] = []) -> [String] {
        ["push"] + files + ["--backend", "multipart", "--to", server.url, "--state", state] + extra
    }

    /// Three files: empty, smaller than a fragment, and of many fragments (`fragments` of them).
    private func makeThreeFiles(fragment: Int = MultipartPushTests.fragment, fragments: Int = 6) throws -> [String] {
        let sizes = [("empty.bin", 0), ("small.txt", 1000), ("many.mp4", (fragments - 1) * fragment + 12345)]
        return try sizes.enumerated().map { index, entry in
            let path = work.file(entry.0)
            try makeTestFile(at: path, size: entry.1, seed: UInt64(index + 1))
            return path
        }
    }

    /// Restarts the receiver on the same root and port (a push's job is keyed by the URL), with
    /// `hooks`; SIGKILL, so nothing is tidied on the way out.
    private func restartServer(_ hooks: [String] = []) throws {
        let port = server.port
        server.child.kill(SIGKILL)
        server.child.wait()
        server = try ServeProcess(root: serverRoot, port: port, extraArguments: hooks)
    }

    // MARK: Checks

    private func completedURLs(_ result: RunResult, file: StaticString = #filePath, line: UInt = #line) throws -> [String] {
        XCTAssertEqual(result.status, 0, result.stderr, file: file, line: line)
        let last = try XCTUnwrap(result.lastEvent, file: file, line: line)
        XCTAssertEqual(last["event"] as? String, "completed", "\(last)", file: file, line: line)
        let files = try XCTUnwrap(last["files"] as? [[String: Any]], file: file, line: line)
        return files.compactMap { $0["url"] as? String }
    }

    /// One URL per file, in order, each serving exactly that file's bytes under its own name.
    private func assertDelivered(_ paths: [String], at urls: [String], file: StaticString = #filePath, line: UInt = #line) throws {
        XCTAssertEqual(urls.count, paths.count, "one URL per file: \(urls)", file: file, line: line)
        for (path, url) in zip(paths, urls) {
            let name = (path as NSString).lastPathComponent
            XCTAssertEqual(Self.decodedName(of: url), name, url, file: file, line: line)
            XCTAssertEqual(try downloadSHA256(url, into: work), try sha256sum(path), "\(name) byte-identical", file: file, line: line)
        }
    }

    private static func decodedName(of url: String) -> String? {
        url.components(separatedBy: "/").last?.removingPercentEncoding
    }

    private static func fileID(of url: String) -> String {
        url.components(separatedBy: "/downloads/").last?.components(separatedBy: "/").first ?? ""
    }

    private func chunkEvents(_ result: RunResult, file index: Int) -> Int {
        result.events.filter { $0["event"] as? String == "chunk" && int($0["file"]) == index }.count
    }

    /// The receiver's source records (`root/sources/*.json`).
    private func sourceRecords() throws -> [[String: Any]] {
        let directory = serverRoot + "/sources"
        return try FileManager.default.contentsOfDirectory(atPath: directory).sorted().map { name in
            let data = try Data(contentsOf: URL(fileURLWithPath: directory + "/" + name))
            return try XCTUnwrap(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        }
    }

    /// Starts a push, waits until the server withholds the request its `--hold` names, then
    /// kills the push with SIGKILL: it dies not knowing what became of that request.
    private func pushKilledAtHold(_ arguments: [String], expecting hold: String, file: StaticString = #filePath, line: UInt = #line) throws {
        let client = try ChildProcess(executable: xferExecutable, arguments: arguments)
        let seen = waitForHold(client: client)
        client.kill(SIGKILL)
        XCTAssertEqual(client.wait(), 128 + SIGKILL, "the push must die by SIGKILL, not end: \(client.standardError)", file: file, line: line)
        XCTAssertEqual(seen, hold, file: file, line: line)
    }

    /// The server's next `held ...` line; a push that ends first (a bug worth seeing) ends the
    /// wait instead of freezing the run.
    private func waitForHold(client: ChildProcess) -> String? {
        let serverProcess = server.child
        let outcome = FirstOutcome()
        Thread.detachNewThread {
            outcome.finish(serverProcess.readLine { $0.hasPrefix("held ") } ?? "server ended")
        }
        Thread.detachNewThread {
            client.process.waitUntilExit()
            outcome.finish("push ended first")
        }
        return outcome.wait(timeout: 300)
    }

    // MARK: Sizes and order

    func testThreeFilesOfDifferentSizesArriveInOrderByteIdentical() throws {
        try SuiteStorage.requireDisk("it reads the sources and files in the receiver's directory")
        // The backend's own 512 KiB fragments: the large file has 11.
        let paths = try makeThreeFiles(fragment: 512 << 10, fragments: 11)
        let result = try runXfer(arguments(paths))
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(result.stderrWithoutProgress, "", "no noise on a non-terminal stderr, only progress lines")
        try assertDelivered(paths, at: result.stdout)
        XCTAssertEqual(Set(result.stdout.map(Self.fileID)).count, 3, "each file is its own upload")

        let records = try sourceRecords()
        XCTAssertEqual(records.count, 1, "one push, one source")
        XCTAssertEqual(records.first?["fileIds"] as? [String], result.stdout.map(Self.fileID), "file ids in the files' order")
    }

    func testFragmentsOfAllFilesShareTheConcurrencyAndTheZeroByteFileSendsOne() throws {
        let paths = try makeThreeFiles(fragments: 20)
        // Two in flight, so the order of completions shows the order of scheduling: with the
        // default window of small requests all 22 are in flight at once and finish in any order.
        let result = try runXfer(arguments(paths, ["--chunk-size", "64KiB", "--concurrency", "2", "--json"]))
        try assertDelivered(paths, at: try completedURLs(result))
        XCTAssertEqual(chunkEvents(result, file: 0), 1, "a zero-byte file is one empty fragment")
        XCTAssertEqual(chunkEvents(result, file: 1), 1)
        XCTAssertEqual(chunkEvents(result, file: 2), 20)
        let order = result.events.filter { $0["event"] as? String == "chunk" }.map { int($0["file"]) }
        let lastOfLarge = try XCTUnwrap(order.lastIndex(of: 2))
        XCTAssertLessThan(try XCTUnwrap(order.firstIndex(of: 0)), lastOfLarge, "small files do not wait for the large one: \(order)")
        XCTAssertLessThan(try XCTUnwrap(order.firstIndex(of: 1)), lastOfLarge, "small files do not wait for the large one: \(order)")
    }

    func testNonASCIIAndQuotedNamesArriveIntact() throws {
        try SuiteStorage.requireDisk("it reads the sources and files in the receiver's directory")
        let names = ["视频 01.mp4", "say \"hi\".txt"]
        let paths = try names.enumerated().map { index, name in
            let path = work.file(name)
            try makeTestFile(at: path, size: 150_000 + index, seed: UInt64(index + 9))
            return path
        }
        let result = try runXfer(arguments(paths, ["--chunk-size", "64KiB"]))
        XCTAssertEqual(result.status, 0, result.stderr)
        try assertDelivered(paths, at: result.stdout)
        for (name, url) in zip(names, result.stdout) {
            let onDisk = serverRoot + "/downloads/" + Self.fileID(of: url) + "/" + name
            XCTAssertTrue(FileManager.default.fileExists(atPath: onDisk), "the server stores it as \(name)")
        }
    }

    // MARK: Failed merges

    func testAFailedMergeRollsThatFileBackAndTheNextRoundSucceeds() throws {
        try restartServer(["--fail-merge", "1@1"])
        let paths = try makeThreeFiles(fragments: 4)
        // The middle file gets several fragments too, so its re-send is visible.
        try makeTestFile(at: paths[1], size: 3 * Self.fragment + 1, seed: 2)
        let result = try runXfer(arguments(paths, ["--chunk-size", "64KiB", "--json"]))
        try assertDelivered(paths, at: try completedURLs(result))

        let resends = result.events.filter { $0["event"] as? String == "resending" }
        XCTAssertEqual(resends.map { int($0["file"]) }, [1], "only the failed file is rolled back, once")
        XCTAssertEqual(resends.first.map { int($0["chunks"]) }, 4)
        XCTAssertTrue((resends.first?["reason"] as? String)?.contains("assemble") ?? false, "\(resends)")
        XCTAssertEqual(chunkEvents(result, file: 0), 1)
        XCTAssertEqual(chunkEvents(result, file: 1), 2 * 4, "every fragment of the failed file went twice")
        XCTAssertEqual(chunkEvents(result, file: 2), 4)
    }

    func testAMergeThatFailsEveryRoundEndsInOneClearErrorAndKeepsState() throws {
        try SuiteStorage.requireDisk("it reads the sources and files in the receiver's directory")
        try restartServer(["--fail-merge", "1000"])
        let paths = try makeThreeFiles(fragments: 3)
        let failed = try runXfer(arguments(paths, ["--chunk-size", "64KiB", "--json"]))
        XCTAssertEqual(failed.status, 1, failed.stderr)
        XCTAssertEqual(failed.stderr.split(separator: "\n").count, 1, "one line: \(failed.stderr)")
        XCTAssertTrue(failed.stderr.hasPrefix("xfer: "), failed.stderr)
        XCTAssertTrue(failed.stderr.contains("failed to assemble"), failed.stderr)
        XCTAssertTrue(failed.stderr.contains("3 rounds"), failed.stderr)
        XCTAssertTrue(failed.stderr.contains("state kept"), failed.stderr)
        for path in paths { XCTAssertTrue(failed.stderr.contains(path), "names \(path): \(failed.stderr)") }
        // Three checks: two rollbacks of all three files, then the error.
        XCTAssertEqual(failed.events.filter { $0["event"] as? String == "resending" }.count, 2 * 3)
        XCTAssertEqual(failed.lastEvent?["event"] as? String, "failed")
        XCTAssertEqual(failed.lastEvent.map { int($0["exitCode"]) }, 1)

        try restartServer()
        let resumed = try runXfer(arguments(paths, ["--chunk-size", "64KiB", "--json"]))
        XCTAssertEqual(resumed.events.first?["resumed"] as? Bool, true, "the same job carries on")
        try assertDelivered(paths, at: try completedURLs(resumed))
        XCTAssertEqual(try sourceRecords().count, 1, "still the one source")
    }

    // MARK: SIGKILL and resume

    func testKilledBeforePreloadsAnswerIsStoredTheRerunGetsTheSameFileIds() throws {
        try SuiteStorage.requireDisk("it reads the sources and files in the receiver's directory")
        try restartServer(["--hold", "/fileSection/preLoad.do"])
        let paths = try makeThreeFiles(fragments: 3)
        let push = arguments(paths, ["--chunk-size", "64KiB"])
        try pushKilledAtHold(push, expecting: "held POST /fileSection/preLoad.do #1")
        let created = try XCTUnwrap(try sourceRecords().first?["fileIds"] as? [String], "the server created the source")

        let rerun = try runXfer(push)
        XCTAssertEqual(rerun.status, 0, rerun.stderr)
        try assertDelivered(paths, at: rerun.stdout)
        XCTAssertEqual(try sourceRecords().count, 1, "the re-run asked again with the same sourceId")
        XCTAssertEqual(rerun.stdout.map(Self.fileID), created, "and got the same file ids")
    }

    func testMoreFilesThanASourceHoldsGoAsSeveralSourcesAndAKillBetweenTheirPreloadsLosesNone() throws {
        try SuiteStorage.requireDisk("it reads the sources in the receiver's directory")
        // xfer serve takes at most 1,000 files a source: 1,001 files make two.
        let tree = work.file("tree")
        try FileManager.default.createDirectory(atPath: tree, withIntermediateDirectories: true)
        for index in 0..<1_001 { try Data("file \(index)\n".utf8).write(to: URL(fileURLWithPath: tree + "/f\(index).txt")) }
        try restartServer(["--hold", "/fileSection/preLoad.do@2"])
        let push = arguments([tree])
        try pushKilledAtHold(push, expecting: "held POST /fileSection/preLoad.do #2")
        XCTAssertEqual(try sourceRecords().count, 2, "the server took both preloads")

        try restartServer()
        let rerun = try runXfer(push)
        XCTAssertEqual(rerun.status, 0, rerun.stderr)
        let records = try sourceRecords()
        XCTAssertEqual(records.count, 2, "the re-run asked again with the same sourceIds")
        XCTAssertEqual(records.compactMap { ($0["fileIds"] as? [String])?.count }.sorted(), [1, 1_000])
        let stored = Set(records.flatMap { $0["fileIds"] as? [String] ?? [] })
        XCTAssertEqual(rerun.stdout.count, 1_001)
        XCTAssertEqual(Set(rerun.stdout.map(Self.fileID)), stored, "every file under an id its source's preload gave")
        let byName = Dictionary(rerun.stdout.map { (Self.decodedName(of: $0) ?? "", $0) }, uniquingKeysWith: { first, _ in first })
        for name in ["f0.txt", "f999.txt", "f1000.txt"] {
            let url = try XCTUnwrap(byName[name], name)
            XCTAssertEqual(try downloadSHA256(url, into: work), try sha256sum(tree + "/" + name), name)
        }
    }

    func testKilledBetweenFragmentsResumesWithoutForgettingAcknowledgedOnes() throws {
        try SuiteStorage.requireDisk("it reads the sources and files in the receiver's directory")
        let paths = try makeThreeFiles(fragments: 48)
        let push = arguments(paths, ["--chunk-size", "64KiB", "--json"])
        let first = try ChildProcess(executable: xferExecutable, arguments: push)
        var acknowledged = 0
        var fragments = 0
        while let line = first.readLine() {
            guard line.contains("\"event\":\"chunk\"") else { continue }
            let event = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
            acknowledged = int(event?["doneBytes"])
            fragments += 1
            if fragments == 10 {
                first.kill(SIGKILL)
                break
            }
        }
        XCTAssertEqual(first.wait(), 128 + SIGKILL, "the first run must die by SIGKILL, not finish: \(first.standardError)")
        XCTAssertEqual(fragments, 10)

        let second = try runXfer(push)
        let started = try XCTUnwrap(second.events.first)
        XCTAssertEqual(started["resumed"] as? Bool, true)
        XCTAssertGreaterThanOrEqual(int(started["doneBytes"]), acknowledged, "nothing acknowledged is forgotten")
        let sentAgain = second.events.filter { $0["event"] as? String == "chunk" }.count
        XCTAssertLessThanOrEqual(sentAgain, 50 - 10, "acknowledged fragments are not sent again")
        try assertDelivered(paths, at: try completedURLs(second))
        XCTAssertEqual(try sourceRecords().count, 1)
    }

    func testKilledDuringTheMergeCheckResumesWithoutResending() throws {
        try restartServer(["--hold", "/fileSection/isFinish.do"])
        let paths = try makeThreeFiles(fragments: 3)
        let push = arguments(paths, ["--chunk-size", "64KiB", "--json"])
        // The client's stdout is not read until it is killed: --json output of this size fits the pipe.
        try pushKilledAtHold(push, expecting: "held POST /fileSection/isFinish.do #1")

        let rerun = try runXfer(push)
        XCTAssertEqual(rerun.events.first?["resumed"] as? Bool, true)
        XCTAssertEqual(rerun.events.filter { $0["event"] as? String == "chunk" }.count, 0, "every fragment was acknowledged")
        try assertDelivered(paths, at: try completedURLs(rerun))
    }
}

// MARK: - The receiver's side of the contract, driven by curl

/// The `multipart` receiver spoken to directly with curl (another client's
/// multipart encoding): idempotent preLoad, refusals, the merge check and
/// delete, and durability across a SIGKILL of the receiver.
final class MultipartReceiverTests: XCTestCase {
    var work: TemporaryDirectory!
    var server: ServeProcess!

    override func setUpWithError() throws {
        work = TemporaryDirectory("xfer-multipart-receiver")
        server = try ServeProcess(root: work.file("server"))
    }

    override func tearDown() {
        server = nil
        work = nil
    }

    /// POSTs with curl and returns the JSON answer (the HTTP status must be 200).
    private func post(_ path: String, _ arguments: [String]) throws -> [String: Any] {
        let child = try ChildProcess(
            executable: "/usr/bin/curl", arguments: ["-sS", "-f", "-X", "POST"] + arguments + [server.url + path])
        let body = child.readRemaining().joined(separator: "\n")
        guard child.wait() == 0 else { throw HarnessError("curl \(path) failed: \(child.standardError)") }
        return try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any], body)
    }

    private func preload(_ sourceId: String, files: Int) throws -> [String: Any] {
        try post("/fileSection/preLoad.do", ["--data-urlencode", "sourceId=\(sourceId)", "--data-urlencode", "fileCount=\(files)"])
    }

    private func fileIds(_ answer: [String: Any]) -> [String] {
        ((answer["data"] as? [String: Any])?["fileIds"] as? [String]) ?? []
    }

    private func md5(_ path: String) throws -> String {
        let child = try ChildProcess(executable: "/usr/bin/md5sum", arguments: [path])
        let line = child.readLine() ?? ""
        child.wait()
        return String(line.prefix(32))
    }

    /// Sends the whole file at `path` as fragment 0 of a one-fragment file.
    private func sendWhole(
        _ path: String, sourceId: String, fileId: String, name: String, md5 override: String? = nil, size: Int? = nil
    ) throws -> [String: Any] {
        let bytes = try XCTUnwrap(try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int)
        let block: [String: Any] = [
            "sourceId": sourceId, "fileId": fileId, "fragmentIndex": 0, "fragmentOffset": 0,
            "fragmentSize": size ?? bytes, "totalFileFragment": 1, "totalFileSize": size ?? bytes, "fileName": name,
            "fragmentMd5": try override ?? md5(path),
        ]
        let header = String(decoding: try JSONSerialization.data(withJSONObject: [block]), as: UTF8.self)
        return try post(
            "/fileSection/upload.do",
            ["-H", "file_block: \(header)", "-F", "sectionFile=@\(path);filename=\(fileId)-0.bin"])
    }

    private func isFinish(_ sourceId: String, _ ids: [String]) throws -> [String: Any] {
        try post("/fileSection/isFinish.do", ["--data-urlencode", "sourceId=\(sourceId)", "--data-urlencode", "fileIds=\(ids.joined(separator: ","))"])
    }

    private func code(_ answer: [String: Any]) -> Int { int(answer["code"]) }

    func testPreloadIsIdempotentAndDurable() throws {
        let first = try preload("src/../é 1", files: 2)
        XCTAssertEqual(code(first), 200, "\(first)")
        let ids = fileIds(first)
        XCTAssertEqual(ids.count, 2)
        XCTAssertEqual(fileIds(try preload("src/../é 1", files: 2)), ids, "the same ids again")
        XCTAssertEqual(code(try preload("src/../é 1", files: 3)), 400, "another count for the same source is refused")
        XCTAssertNotEqual(fileIds(try preload("another", files: 2)), ids)

        let port = server.port
        server.child.kill(SIGKILL)
        server.child.wait()
        server = try ServeProcess(root: work.file("server"), port: port)
        XCTAssertEqual(fileIds(try preload("src/../é 1", files: 2)), ids, "acknowledged ids survive a SIGKILL")
    }

    func testFragmentsAreCheckedAndTheMergeCheckNamesIncompleteFiles() throws {
        let ids = fileIds(try preload("s1", files: 2))
        let path = work.file("a.bin")
        try makeTestFile(at: path, size: 5000)

        let badMD5 = try sendWhole(path, sourceId: "s1", fileId: ids[0], name: "a.bin", md5: String(repeating: "0", count: 32))
        XCTAssertEqual(code(badMD5), 400)
        XCTAssertTrue((badMD5["msg"] as? String)?.contains("fragmentMd5") ?? false, "\(badMD5)")
        let badSize = try sendWhole(path, sourceId: "s1", fileId: ids[0], name: "a.bin", size: 4000)
        XCTAssertEqual(code(badSize), 400, "\(badSize)")
        XCTAssertEqual(code(try sendWhole(path, sourceId: "nope", fileId: ids[0], name: "a.bin")), 404)
        XCTAssertEqual(code(try sendWhole(path, sourceId: "s1", fileId: "0123456789abcdef0123456789abcdef", name: "a.bin")), 400)

        XCTAssertEqual(code(try sendWhole(path, sourceId: "s1", fileId: ids[0], name: "a.bin")), 200)
        XCTAssertEqual(code(try sendWhole(path, sourceId: "s1", fileId: ids[0], name: "a.bin")), 200, "re-sending is harmless")

        let partial = try isFinish("s1", ids)
        XCTAssertEqual(code(partial), 200)
        let partialData = try XCTUnwrap(partial["data"] as? [String: Any])
        XCTAssertEqual(int(partialData["finishStatus"]), 0)
        XCTAssertEqual(partialData["failFileIds"] as? String, ids[1], "the file with no fragment failed")

        let empty = work.file("empty")
        try makeTestFile(at: empty, size: 0)
        XCTAssertEqual(code(try sendWhole(empty, sourceId: "s1", fileId: ids[1], name: "empty")), 200)
        let done = try isFinish("s1", ids)
        let data = try XCTUnwrap(done["data"] as? [String: Any])
        XCTAssertEqual(int(data["finishStatus"]), 1, "\(done)")
        let urls = try XCTUnwrap(data["fileUrls"] as? [String: String])
        XCTAssertEqual(try downloadSHA256(try XCTUnwrap(urls[ids[0]]), into: work), try sha256sum(path))
        XCTAssertEqual(try downloadSHA256(try XCTUnwrap(urls[ids[1]]), into: work), try sha256sum(empty))
        XCTAssertEqual((try isFinish("s1", ids)["data"] as? [String: Any])?["fileUrls"] as? [String: String], urls, "asking again answers the same")

        XCTAssertEqual(code(try post("/fileSection/delete.do", ["--data-urlencode", "sourceId=s1", "--data-urlencode", "fileIds=\(ids.joined(separator: ","))"])), 200)
        XCTAssertEqual(code(try isFinish("s1", ids)), 404, "the source is gone")
        XCTAssertEqual(code(try post("/fileSection/delete.do", ["--data-urlencode", "sourceId=s1"])), 200, "deleting twice is fine")
    }

    func testMalformedRequestsAreRefusedWithAMessage() throws {
        XCTAssertEqual(code(try post("/fileSection/preLoad.do", ["--data", "fileCount=2"])), 400)
        XCTAssertEqual(code(try post("/fileSection/preLoad.do", ["--data", "sourceId=s&fileCount=0"])), 400)
        let missingHeader = try post("/fileSection/upload.do", ["-F", "sectionFile=@/dev/null;filename=x-0"])
        XCTAssertEqual(code(missingHeader), 400)
        XCTAssertTrue((missingHeader["msg"] as? String)?.contains("file_block") ?? false, "\(missingHeader)")
    }
}
