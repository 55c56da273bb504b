import Foundation
import NIOCore
import XCTest
import XferPrimitives
import Xfer
import XferTestSupport


/// `xfer push --backend sequence` end to end: the real binary against a real
/// `xfer serve`, killed with SIGKILL at the moments the protocol has to get
/// right. Every moment is reached deterministically: the server holds (or
/// stalls) a chosen request and says so on stdout, and only then is the push
/// killed.
///
/// Blocks are 64 KiB so a small file has several; request #1 to /upload is
/// sequenceNo 0, request #k+1 is block k.
final class SequencePushTests: XCTestCase {
    static let blockSize = 64 << 10

    var work: TemporaryDirectory!
    var server: ServeProcess!

    override func setUpWithError() throws {
        work = TemporaryDirectory("xfer-seq")
        server = try ServeProcess(root: serverRoot)
    }

    override func tearDown() {
        server = nil
        work = nil
    }

    private var serverRoot: String { work.file("server") }
    private var state: String { work.file("state") }

    private func arguments(_ files: [String], state: String? = nil, _ extra: [String] = []) -> [String] {
        ["push"] + files + ["--backend", "sequence", "--to", server.url, "--state", state ?? self.state,
                            "--chunk-size", String(Self.blockSize), "--json"] + extra
    }

    private func push(_ files: [String], state: String? = nil, _ extra: [String] = []) throws -> RunResult {
        try runXfer(arguments(files, state: state, extra))
    }

    /// A file of `blocks` blocks, the last one `lastBlock` bytes long.
    private func makeFile(_ name: String, blocks: Int, lastBlock: Int = 1000, seed: UInt64 = 1) throws -> String {
        let path = work.file(name)
        try makeTestFile(at: path, size: (blocks - 1) * Self.blockSize + lastBlock, seed: seed)
        return path
    }

    /// Restarts the server on the same root, with test hooks; killed, so nothing is flushed or
    /// finished on the way out. Same port when asked, so a push's job (keyed by URL) carries on.
    private func restartServer(root: String? = nil, samePort: Bool = true, _ hooks: [String] = []) throws {
        let port = server.port
        server.child.kill(SIGKILL)
        server.child.wait()
        server = try ServeProcess(root: root ?? serverRoot, port: samePort ? port : 0, extraArguments: hooks)
    }

    /// Starts a push, waits until the server withholds the request its hook names, then kills the
    /// push with SIGKILL: the client dies not knowing what became of that request.
    private func pushKilledAtHold(_ arguments: [String], expecting hold: String, file: StaticString = #filePath, line: UInt = #line) throws {
        let client = try ChildProcess(executable: xferExecutable, arguments: arguments)
        let seen = waitForHold(client: client)
        client.kill(SIGKILL)
        XCTAssertEqual(client.wait(), 128 + SIGKILL, "the push must die by SIGKILL, not end: \(client.standardError)", file: file, line: line)
        XCTAssertEqual(seen, hold, file: file, line: line)
    }

    /// The server's next hold line. Fails instead of hanging when the push ends first (a push
    /// that never reaches the hold is a bug worth seeing, not a frozen test run).
    private func waitForHold(client: ChildProcess) -> String? {
        let serverProcess = server.child
        let outcome = FirstOutcome()
        Thread.detachNewThread {
            outcome.finish(serverProcess.readLine { $0.hasPrefix("held ") || $0.hasPrefix("stalled ") } ?? "server ended")
        }
        Thread.detachNewThread {
            client.process.waitUntilExit()
            outcome.finish("push ended first")
        }
        return outcome.wait(timeout: 300)
    }

    // MARK: Checks

    private func lastEvent(_ result: RunResult, file: StaticString = #filePath, line: UInt = #line) throws -> [String: Any] {
        XCTAssertEqual(result.status, 0, result.stderr, file: file, line: line)
        let last = try XCTUnwrap(result.lastEvent, file: file, line: line)
        XCTAssertEqual(last["event"] as? String, "completed", "\(last)", file: file, line: line)
        return last
    }

    private func urls(_ result: RunResult) throws -> [String] {
        let files = try XCTUnwrap(try lastEvent(result)["files"] as? [[String: Any]])
        return files.compactMap { $0["url"] as? String }
    }

    private func chunkEvents(_ result: RunResult) -> [Int] {
        result.events.filter { $0["event"] as? String == "chunk" }.map { int($0["chunk"]) }
    }

    /// The URL serves exactly the local file, and the server appended each block exactly once.
    private func assertDelivered(_ path: String, at url: String, blocks: Int, root: String? = nil, file: StaticString = #filePath, line: UInt = #line) throws {
        XCTAssertTrue(url.hasSuffix("/" + (path as NSString).lastPathComponent), url, file: file, line: line)
        XCTAssertEqual(try downloadSHA256(url, into: work), try sha256sum(path), "byte-identical", file: file, line: line)
        // The disk storage's own record of accepted blocks (over the object store, the bytes above).
        guard !SuiteStorage.isObjectStore else { return }
        XCTAssertEqual(
            try acceptedBlocks(uploadID(of: url), root: root ?? serverRoot), Array(1...blocks),
            "each block accepted once, in order", file: file, line: line)
    }

    private func uploadID(of url: String) -> String {
        url.components(separatedBy: "/downloads/").last?.components(separatedBy: "/").first ?? ""
    }

    /// The receiver's own record of accepted blocks (`blocks.log`: `<sequenceNo>.<crc>;`).
    private func acceptedBlocks(_ uploadID: String, root: String) throws -> [Int] {
        let text = try String(contentsOfFile: root + "/uploads/\(uploadID)/blocks.log", encoding: .utf8)
        return text.split(separator: ";").compactMap { record in
            record.trimmingCharacters(in: .whitespacesAndNewlines).split(separator: ".").first.flatMap { Int($0) }
        }
    }

    private func sequenceUploadCount(root: String? = nil) throws -> Int {
        let uploads = (root ?? serverRoot) + "/uploads"
        return try FileManager.default.contentsOfDirectory(atPath: uploads)
            .filter { FileManager.default.fileExists(atPath: "\(uploads)/\($0)/sequence.json") }.count
    }

    // MARK: Sizes

    func testAMultiBlockFileArrivesByteIdentical() throws {
        let path = work.file("video.mp4")
        try makeTestFile(at: path, size: (3 << 20) + 12345, seed: 3)
        // The backend's own 1 MiB blocks.
        let result = try runXfer(["push", path, "--backend", "sequence", "--to", server.url, "--state", state, "--json"])
        let url = try XCTUnwrap(try urls(result).first)
        XCTAssertEqual(chunkEvents(result), [0, 1, 2, 3])
        XCTAssertEqual(result.events.filter { $0["event"] as? String == "chunk" }.map { int($0["bytes"]) }, [1 << 20, 1 << 20, 1 << 20, 12345])
        try assertDelivered(path, at: url, blocks: 4)
    }

    func testAFileThatIsAnExactMultipleOfTheBlockSize() throws {
        let path = try makeFile("exact.bin", blocks: 3, lastBlock: Self.blockSize)
        let result = try push([path])
        XCTAssertEqual(result.events.filter { $0["event"] as? String == "chunk" }.map { int($0["bytes"]) }, Array(repeating: Self.blockSize, count: 3))
        try assertDelivered(path, at: try XCTUnwrap(try urls(result).first), blocks: 3)
    }

    func testAZeroByteFileIsOneEmptyBlock() throws {
        let path = work.file("empty.txt")
        try makeTestFile(at: path, size: 0)
        let result = try push([path])
        XCTAssertEqual(chunkEvents(result), [0])
        let url = try XCTUnwrap(try urls(result).first)
        try assertDelivered(path, at: url, blocks: 1)
    }

    func testTwoFilesAtOncePrintTheirURLsInTheOrderGiven() throws {
        let big = try makeFile("zz-big.bin", blocks: 12, seed: 4)
        let small = try makeFile("aa-small.bin", blocks: 2, seed: 5)
        let result = try runXfer(["push", big, small, "--backend", "sequence", "--to", server.url, "--state", state,
                                  "--chunk-size", String(Self.blockSize)])
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(result.stdout.count, 2, "\(result.stdout)")
        try assertDelivered(big, at: result.stdout[0], blocks: 12)
        try assertDelivered(small, at: result.stdout[1], blocks: 2)
        XCTAssertEqual(result.stderrWithoutProgress, "")
    }

    // MARK: SIGKILL at each moment

    /// Killed while sequenceNo 0's answer is withheld: the server made an upload, the client never
    /// stored its upToken. The re-run opens the file again; the orphan costs nothing.
    func testKilledBeforeTheUpTokenIsStored() throws {
        try SuiteStorage.requireDisk("it counts the uploads in the receiver's directory")
        try restartServer(samePort: false, ["--hold", "/upload@1"])
        let path = try makeFile("a.bin", blocks: 3)
        try pushKilledAtHold(arguments([path]), expecting: "held POST /upload #1")

        let second = try push([path])
        XCTAssertEqual(second.events.first?["resumed"] as? Bool, true)
        XCTAssertEqual(int(second.events.first?["doneBytes"]), 0)
        XCTAssertEqual(chunkEvents(second), [0, 1, 2])
        try assertDelivered(path, at: try XCTUnwrap(try urls(second).first), blocks: 3)
        XCTAssertEqual(try sequenceUploadCount(), 2, "the first upToken's upload is orphaned, the second one completed")
    }

    /// Killed with the upToken stored but block 1 never processed (stalled unread).
    func testKilledRightAfterTheUpTokenIsStored() throws {
        try SuiteStorage.requireDisk("it counts the uploads in the receiver's directory")
        try restartServer(samePort: false, ["--stall", "/upload@2"])
        let path = try makeFile("a.bin", blocks: 3)
        try pushKilledAtHold(arguments([path]), expecting: "stalled POST /upload #2")

        let second = try push([path])
        XCTAssertEqual(chunkEvents(second), [0, 1, 2])
        try assertDelivered(path, at: try XCTUnwrap(try urls(second).first), blocks: 3)
        XCTAssertEqual(try sequenceUploadCount(), 1, "the stored upToken is reused, not replaced")
    }

    /// Killed mid-block: the server accepted block 3, the client never heard. The re-run sends
    /// block 3 again; the server replays its answer and appends nothing.
    func testKilledMidBlockReplaysTheBlockWithoutAppendingItTwice() throws {
        try SuiteStorage.requireDisk("it counts the uploads in the receiver's directory")
        try restartServer(samePort: false, ["--hold", "/upload@4"])
        let path = try makeFile("a.bin", blocks: 5)
        try pushKilledAtHold(arguments([path]), expecting: "held POST /upload #4")
        let upload = try XCTUnwrap(try FileManager.default.contentsOfDirectory(atPath: serverRoot + "/uploads").first)
        XCTAssertEqual(try acceptedBlocks(upload, root: serverRoot), [1, 2, 3], "the server did accept block 3")

        let second = try push([path])
        XCTAssertEqual(int(second.events.first?["doneBytes"]), 2 * Self.blockSize, "blocks 1 and 2 were acknowledged")
        XCTAssertEqual(chunkEvents(second), [2, 3, 4], "block 3 again (a replay), then the rest")
        let url = try XCTUnwrap(try urls(second).first)
        XCTAssertEqual(uploadID(of: url), upload)
        try assertDelivered(path, at: url, blocks: 5)
    }

    /// Killed after the server completed the file on the last block but before the client
    /// recorded that answer: the re-run replays only the last block and gets the same URL.
    func testKilledAfterTheLastBlocksAnswerBeforeItWasRecorded() throws {
        try SuiteStorage.requireDisk("it counts the uploads in the receiver's directory")
        try restartServer(samePort: false, ["--hold", "/upload@5"])
        let path = try makeFile("a.bin", blocks: 4)
        try pushKilledAtHold(arguments([path]), expecting: "held POST /upload #5")
        let upload = try XCTUnwrap(try FileManager.default.contentsOfDirectory(atPath: serverRoot + "/uploads").first)
        XCTAssertTrue(FileManager.default.fileExists(atPath: serverRoot + "/uploads/\(upload)/complete.json"), "the server completed it")

        let second = try push([path])
        XCTAssertEqual(int(second.events.first?["doneBytes"]), 3 * Self.blockSize)
        XCTAssertEqual(chunkEvents(second), [3], "only the last block is sent again")
        let url = try XCTUnwrap(try urls(second).first)
        XCTAssertEqual(uploadID(of: url), upload, "the same upload's URL")
        try assertDelivered(path, at: url, blocks: 4)
        XCTAssertEqual(try sequenceUploadCount(), 1, "not opened again")
    }

    // MARK: 409

    /// The client's state is older than the server's (restored from an earlier copy): it sends
    /// block 2, the server holds 1–5 and answers 409 expecting 6, and the client skips ahead.
    func testA409MovesTheClientForward() throws {
        try SuiteStorage.requireDisk("it counts the uploads in the receiver's directory")
        let path = try makeFile("a.bin", blocks: 6)
        try restartServer(["--hold", "/upload@3"])
        try pushKilledAtHold(arguments([path]), expecting: "held POST /upload #3")  // block 2 accepted, block 1 recorded
        let olderState = work.file("state-copy")
        try FileManager.default.copyItem(atPath: state, toPath: olderState)

        try restartServer(["--hold", "/upload@4"])  // counts restart: block 2 (replay) #1 ... block 5 #4
        try pushKilledAtHold(arguments([path]), expecting: "held POST /upload #4")
        let upload = try XCTUnwrap(try FileManager.default.contentsOfDirectory(atPath: serverRoot + "/uploads").first)
        XCTAssertEqual(try acceptedBlocks(upload, root: serverRoot), [1, 2, 3, 4, 5])

        let resumed = try push([path], state: olderState)
        XCTAssertEqual(int(resumed.events.first?["doneBytes"]), Self.blockSize, "the old state knows block 1 only")
        XCTAssertEqual(chunkEvents(resumed), [5], "moved forward to block 6: blocks 2–5 are not sent again")
        try assertDelivered(path, at: try XCTUnwrap(try urls(resumed).first), blocks: 6)
    }

    /// The server's state is older than the client's (restored from an earlier copy): the client
    /// sends block 5, the server holds 1–2 and answers 409 expecting 3, and the client goes back.
    func testA409MovesTheClientBack() throws {
        try SuiteStorage.requireDisk("it counts the uploads in the receiver's directory")
        let path = try makeFile("a.bin", blocks: 6)
        try restartServer(["--hold", "/upload@3"])
        try pushKilledAtHold(arguments([path]), expecting: "held POST /upload #3")  // server holds 1–2
        // Nothing moves on the server now: the push is dead and its last request fully processed.
        let olderRoot = work.file("server-copy")
        try FileManager.default.copyItem(atPath: serverRoot, toPath: olderRoot)

        try restartServer(["--hold", "/upload@4"])
        try pushKilledAtHold(arguments([path]), expecting: "held POST /upload #4")  // client recorded 1–4

        try restartServer(root: olderRoot)
        let resumed = try push([path])
        XCTAssertEqual(int(resumed.events.first?["doneBytes"]), 4 * Self.blockSize)
        XCTAssertEqual(chunkEvents(resumed), [2, 3, 4, 5], "moved back to block 3")
        try assertDelivered(path, at: try XCTUnwrap(try urls(resumed).first), blocks: 6, root: olderRoot)
    }

    // MARK: Failures and secrets

    /// A server that lost the upload (a fresh root on the same port): one clear line, exit 1,
    /// state kept; `--restart` then starts over and succeeds.
    func testAnUnknownUpTokenFailsClearlyAndKeepsState() throws {
        try SuiteStorage.requireDisk("it counts the uploads in the receiver's directory")
        let path = try makeFile("a.bin", blocks: 4)
        let token = "tok-\(UUID().uuidString)"
        try restartServer(["--hold", "/upload@3"])
        try pushKilledAtHold(arguments([path], ["--token", token]), expecting: "held POST /upload #3")
        let lostUpload = try XCTUnwrap(try FileManager.default.contentsOfDirectory(atPath: serverRoot + "/uploads").first)
        try restartServer(root: work.file("fresh-server"))

        for _ in 0..<2 {
            let failed = try push([path], ["--token", token])
            XCTAssertEqual(failed.status, 1, failed.stderr)
            let lines = failed.stderr.split(separator: "\n")
            XCTAssertEqual(lines.count, 1, failed.stderr)
            XCTAssertTrue(failed.stderr.hasPrefix("xfer: "), failed.stderr)
            XCTAssertTrue(failed.stderr.contains("the server does not know this upload's upToken (expired?); re-run with --restart"), failed.stderr)
            XCTAssertEqual(failed.lastEvent?["event"] as? String, "failed")
            XCTAssertEqual(int(failed.lastEvent?["exitCode"]), 1)
            XCTAssertEqual(int(failed.events.first?["doneBytes"]), Self.blockSize, "state kept: block 1 is still known")
            let everything = failed.stdout.joined(separator: "\n") + failed.stderr
            XCTAssertFalse(everything.contains(lostUpload), "the upToken (which starts with the upload id) is never shown")
            XCTAssertFalse(everything.contains(token), "the token is never shown")
        }

        let restarted = try push([path], ["--restart"])
        XCTAssertEqual(restarted.events.first?["resumed"] as? Bool, false)
        try assertDelivered(path, at: try XCTUnwrap(try urls(restarted).first), blocks: 4, root: work.file("fresh-server"))
    }

    func testTheTokenIsNeverPrinted() throws {
        let path = try makeFile("a.bin", blocks: 2)
        let token = "tok-\(UUID().uuidString)"
        let json = try push([path], ["--token", token])
        XCTAssertEqual(json.status, 0, json.stderr)
        let plain = try runXfer(["push", path, "--backend", "sequence", "--to", server.url, "--state", work.file("state2"),
                                 "--token", token])
        XCTAssertEqual(plain.status, 0, plain.stderr)
        // Against a closed port, so the failure (which names the failing request) is printed too.
        server.child.kill(SIGKILL)
        server.child.wait()
        let failed = try runXfer(arguments([path], state: work.file("state3"), ["--token", token, "--max-attempts", "2"]))
        XCTAssertEqual(failed.status, 1, failed.stderr)
        for result in [json, plain, failed] {
            let everything = result.stdout.joined(separator: "\n") + result.stderr
            XCTAssertFalse(everything.contains(token), "token leaked: \(everything)")
        }
        XCTAssertTrue(failed.stderr.contains("could not connect"), failed.stderr)
    }
}

// MARK: - The receiver's side of the contract, driven by curl

/// The `sequence` receiver spoken to directly with curl: the replay, 409, 401 and refusal rules,
/// and a restart after SIGKILL.
final class SequenceReceiverTests: XCTestCase {
    var work: TemporaryDirectory!
    var server: ServeProcess!

    override func setUpWithError() throws {
        work = TemporaryDirectory("xfer-seq-rx")
        server = try ServeProcess(root: work.file("server"))
    }

    override func tearDown() {
        server = nil
        work = nil
    }

    /// 3 blocks of 4 bytes: "0123", "4567", "89".
    private let data = Array("0123456789".utf8)
    private let blockSize = 4

    private func blockBytes(_ sequenceNo: Int) -> [UInt8] {
        Array(data[(sequenceNo - 1) * blockSize..<min(sequenceNo * blockSize, data.count)])
    }

    private struct Answer {
        var status: Int
        var code: Int
        var msg: String
        var data: [String: Any]
    }

    /// POSTs one form with curl (fields in the given order, then the block part).
    private func post(_ fields: [(String, String)], block: [UInt8], filename: String = "digits.txt") throws -> Answer {
        let blockFile = work.file("block-\(UUID().uuidString.prefix(8))")
        _ = FileManager.default.createFile(atPath: blockFile, contents: Data(block))
        let bodyFile = work.file("answer-\(UUID().uuidString.prefix(8))")
        var arguments = ["-sS", "-o", bodyFile, "-w", "%{http_code}", "-H", "Expect:"]
        for (name, value) in fields { arguments += ["--form-string", "\(name)=\(value)"] }
        arguments += ["-F", "block=@\(blockFile);filename=\(filename);type=application/octet-stream", server.url + "/upload"]
        let child = try ChildProcess(executable: "/usr/bin/curl", arguments: arguments)
        let status = Int(child.readRemaining().joined()) ?? 0
        guard child.wait() == 0 else { throw HarnessError("curl failed: \(child.standardError)") }
        let json = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: bodyFile))) as? [String: Any] ?? [:]
        return Answer(status: status, code: int(json["code"]), msg: json["msg"] as? String ?? "", data: json["data"] as? [String: Any] ?? [:])
    }

    private func open(size: Int? = nil) throws -> String {
        let answer = try post(fields(0, upToken: "", crc: "", size: size), block: [])
        XCTAssertEqual(answer.status, 200)
        XCTAssertEqual(answer.code, 0, answer.msg)
        return try XCTUnwrap(answer.data["upToken"] as? String)
    }

    private func fields(_ sequenceNo: Int, upToken: String, crc: String, size: Int? = nil, blockSize: Int? = nil) -> [(String, String)] {
        [("sequenceNo", String(sequenceNo)), ("blockSize", String(blockSize ?? self.blockSize)),
         ("totFileSize", String(size ?? data.count)), ("suffix", "txt"), ("token", "ignored"), ("upToken", upToken), ("crc", crc)]
    }

    private func send(_ sequenceNo: Int, token: String, bytes: [UInt8]? = nil, crc: String? = nil) throws -> Answer {
        let bytes = bytes ?? blockBytes(sequenceNo)
        return try post(fields(sequenceNo, upToken: token, crc: crc ?? CRC32.hex(Checksums.crc32(bytes))), block: bytes)
    }

    private func blocksLog(_ token: String) throws -> String {
        try String(contentsOfFile: work.file("server") + "/uploads/\(token.prefix(32))/blocks.log", encoding: .utf8)
    }

    func testBlocksInOrderThenReplaysGetTheSameAnswer() throws {
        let token = try open()
        XCTAssertEqual(token.count, 64)

        let first = try send(1, token: token)
        XCTAssertEqual(first.code, 0, first.msg)
        XCTAssertEqual(int(first.data["nextSequenceNo"]), 2)
        XCTAssertNil(first.data["fileUrl"])
        let again = try send(1, token: token)
        XCTAssertEqual(again.code, 0)
        XCTAssertEqual(int(again.data["nextSequenceNo"]), 2, "a replay of the latest block gets the same answer")

        XCTAssertEqual(try send(2, token: token).code, 0)
        let last = try send(3, token: token)
        XCTAssertEqual(last.code, 0, last.msg)
        let url = try XCTUnwrap(last.data["fileUrl"] as? String)
        XCTAssertTrue(url.hasSuffix("/digits.txt"), url)
        let replay = try send(3, token: token)
        XCTAssertEqual(replay.code, 0)
        XCTAssertEqual(replay.data["fileUrl"] as? String, url, "the last block's replay carries the same URL")

        // An older block: the upload is complete, so the server expects "the block after the last".
        let older = try send(1, token: token)
        XCTAssertEqual(older.code, 409)
        XCTAssertEqual(int(older.data["expectedSequenceNo"]), 4)

        XCTAssertEqual(try blocksLog(token).split(separator: ";").count, 3, "nothing was appended twice")
        XCTAssertEqual(try downloadSHA256(url, into: work), try sha256(of: data))
    }

    func testOutOfOrderBlocksGetA409NamingTheExpectedOne() throws {
        let token = try open()
        let ahead = try send(3, token: token)
        XCTAssertEqual(ahead.status, 200)
        XCTAssertEqual(ahead.code, 409)
        XCTAssertEqual(int(ahead.data["expectedSequenceNo"]), 1)
        XCTAssertEqual(try send(1, token: token).code, 0)
        XCTAssertEqual(try send(2, token: token).code, 0)
        // Behind by more than one: the client is told to move forward.
        let behind = try send(1, token: token)
        XCTAssertEqual(behind.code, 409)
        XCTAssertEqual(int(behind.data["expectedSequenceNo"]), 3)
    }

    func testDamagedConflictingAndMalformedBlocksChangeNothing() throws {
        let token = try open()
        let damaged = try send(1, token: token, crc: "00000000")
        XCTAssertEqual(damaged.code, 422, damaged.msg)
        XCTAssertEqual(int(try send(2, token: token).data["expectedSequenceNo"]), 1, "a damaged block is not accepted")

        let short = try send(1, token: token, bytes: Array("012".utf8))
        XCTAssertEqual(short.code, 400, short.msg)
        XCTAssertTrue(short.msg.contains("must have 4 bytes"), short.msg)
        let long = try send(1, token: token, bytes: Array("01234".utf8))
        XCTAssertEqual(long.code, 400, long.msg)

        XCTAssertEqual(try send(1, token: token).code, 0)
        let conflict = try send(1, token: token, bytes: Array("abcd".utf8))
        XCTAssertEqual(conflict.code, 412, conflict.msg)

        let badCRC = try post(fields(2, upToken: token, crc: "ABCDEF01"), block: blockBytes(2))
        XCTAssertEqual(badCRC.code, 400)
        let otherSize = try post(fields(2, upToken: token, crc: CRC32.hex(Checksums.crc32(blockBytes(2))), blockSize: 5), block: blockBytes(2))
        XCTAssertEqual(otherSize.code, 400, otherSize.msg)
        let beyond = try send(4, token: token, bytes: [])
        XCTAssertEqual(beyond.code, 400, beyond.msg)
        let missing = try post([("sequenceNo", "2"), ("upToken", token)], block: blockBytes(2))
        XCTAssertEqual(missing.code, 400)
        XCTAssertTrue(missing.msg.contains("blockSize"), missing.msg)

        XCTAssertEqual(try blocksLog(token).split(separator: ";").count, 1, "only block 1 was ever accepted")
        XCTAssertEqual(int(try send(3, token: token).data["expectedSequenceNo"]), 2)
    }

    func testUnknownUpTokensGet401() throws {
        let token = try open()
        var forged = Array(token)
        forged[40] = forged[40] == "0" ? "1" : "0"
        for candidate in [String(forged), String(repeating: "a", count: 64), "nope", String(token.prefix(32)), ""] {
            let answer = try send(1, token: candidate)
            XCTAssertEqual(answer.status, 200)
            XCTAssertEqual(answer.code, 401, candidate)
        }
        XCTAssertEqual(try send(1, token: token).code, 0, "the real token still works")
    }

    func testAZeroByteFileIsOneEmptyBlock() throws {
        let token = try open(size: 0)
        let answer = try post(fields(1, upToken: token, crc: "00000000", size: 0), block: [])
        XCTAssertEqual(answer.code, 0, answer.msg)
        let url = try XCTUnwrap(answer.data["fileUrl"] as? String)
        XCTAssertEqual(try downloadSHA256(url, into: work), try sha256(of: []))
    }

    func testAcceptedBlocksSurviveSIGKILL() throws {
        let token = try open()
        XCTAssertEqual(try send(1, token: token).code, 0)
        server.child.kill(SIGKILL)
        server.child.wait()
        server = try ServeProcess(root: work.file("server"))
        XCTAssertEqual(int(try send(1, token: token).data["nextSequenceNo"]), 2, "replayed from disk")
        XCTAssertEqual(int(try send(3, token: token).data["expectedSequenceNo"]), 2)
        XCTAssertEqual(try send(2, token: token).code, 0)
        let last = try send(3, token: token)
        let url = try XCTUnwrap(last.data["fileUrl"] as? String)
        XCTAssertEqual(try downloadSHA256(url, into: work), try sha256(of: data))
    }

    func testRequestsThatAreNotTheProtocolAreRefused() throws {
        // No multipart body at all.
        let child = try ChildProcess(executable: "/usr/bin/curl", arguments: ["-sS", "-d", "sequenceNo=0", server.url + "/upload"])
        let body = child.readRemaining().joined()
        XCTAssertEqual(child.wait(), 0)
        let json = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any])
        XCTAssertEqual(int(json["code"]), 400)
        // sequenceNo 0 must come with an empty block.
        let nonEmpty = try post(fields(0, upToken: "", crc: ""), block: [1])
        XCTAssertEqual(nonEmpty.code, 400)
        XCTAssertEqual(nonEmpty.msg, "the block of sequenceNo 0 must be empty")
        // The block part must follow the fields.
        let early = try post([], block: [])
        XCTAssertEqual(early.code, 400)
        XCTAssertTrue(early.msg.contains("missing"), early.msg)
    }

    private func sha256(of bytes: [UInt8]) throws -> String {
        let path = work.file("expected-\(UUID().uuidString.prefix(8))")
        _ = FileManager.default.createFile(atPath: path, contents: Data(bytes))
        return try sha256sum(path)
    }
}
