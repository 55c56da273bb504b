import Foundation
import XCTest
import XferTestSupport

/// `PUT /raw/{name}`, the plain one-stream upload the benchmarks compare xfer with.
final class ReceiverRawTests: XCTestCase {
    private func put(_ file: String, to url: String) throws -> (code: String, body: String) {
        let curl = try ChildProcess(executable: "/usr/bin/curl", arguments: ["-sS", "-w", "\n%{http_code}", "-T", file, url])
        let lines = curl.readRemaining()
        XCTAssertEqual(curl.wait(), 0, curl.standardError)
        return (lines.last ?? "", lines.dropLast().joined(separator: "\n"))
    }

    func testAWholeFileArrivesInOneStreamUnderTheRawDirectoryOnly() throws {
        try SuiteStorage.requireDisk("it reads and breaks the receiver's directory (ObjectStorageTests covers PUT /raw over the store)")
        let work = TemporaryDirectory("xfer-raw")
        let server = try ServeProcess(root: work.file("server"), extraArguments: ["--max-upload-size", "1MiB"])
        let file = work.file("a.bin")
        try makeTestFile(at: file, size: 700_000)

        let stored = try put(file, to: server.url + "/raw/a.bin")
        XCTAssertEqual(stored.code, "201", stored.body)
        XCTAssertTrue(stored.body.contains("\"bytes\":700000"), stored.body)
        XCTAssertEqual(try sha256sum(work.file("server/raw/a.bin")), try sha256sum(file))

        // A name that tries to climb out lands inside raw/ under its last component.
        let climbing = try put(file, to: server.url + "/raw/..%2F..%2Fescaped.bin")
        XCTAssertEqual(climbing.code, "201", climbing.body)
        XCTAssertTrue(FileManager.default.fileExists(atPath: work.file("server/raw/escaped.bin")))
        XCTAssertFalse(FileManager.default.fileExists(atPath: work.file("escaped.bin")))

        let big = work.file("big.bin")
        try makeTestFile(at: big, size: 2 << 20)
        let refused = try put(big, to: server.url + "/raw/big.bin")
        XCTAssertEqual(refused.code, "413", refused.body)
        XCTAssertFalse(FileManager.default.fileExists(atPath: work.file("server/raw/big.bin")))
        XCTAssertEqual(int(try getJSON(server.url + "/stats")["payloadBytesReceived"]), 1_400_000, "the refused body was never read")
    }

    func testAStorageFailureIsA500WhoseDetailsGoOnlyToTheLog() throws {
        try SuiteStorage.requireDisk("it reads and breaks the receiver's directory (ObjectStorageTests covers PUT /raw over the store)")
        let work = TemporaryDirectory("xfer-raw")
        let server = try ServeProcess(root: work.file("server"))
        // `raw/` cannot be made: a file is in its place.
        XCTAssertTrue(FileManager.default.createFile(atPath: work.file("server/raw"), contents: Data("x".utf8)))
        let file = work.file("a.bin")
        try makeTestFile(at: file, size: 1000)

        let failed = try put(file, to: server.url + "/raw/a.bin")
        XCTAssertEqual(failed.code, "500", failed.body)
        XCTAssertTrue(failed.body.contains("storage error"), failed.body)
        XCTAssertFalse(failed.body.contains(work.file("server")), "a path reached the client: \(failed.body)")
        server.stop()
        XCTAssertTrue(server.child.standardError.contains("Storage failure"), server.child.standardError)
    }
}
