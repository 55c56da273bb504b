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

    /// Hostile names in the URL: what is stored is one name directly under `raw/`, or nothing;
    /// never a file elsewhere. (The same corpus over the object store: HostileNameTests.)
    func testHostileNamesLandUnderRawOrNowhere() throws {
        try SuiteStorage.requireDisk("it lists the receiver's directory (HostileNameTests covers the object store)")
        let work = TemporaryDirectory("xfer-raw-names")
        let server = try ServeProcess(root: work.file("server"))
        let file = work.file("a.bin")
        try makeTestFile(at: file, size: 100)
        for (encoded, expected) in Self.hostileRawNames {
            let reply = try put(file, to: server.url + "/raw/" + encoded)
            switch expected {
            case .stored(let name):
                XCTAssertEqual(reply.code, "201", "\(encoded): \(reply.body)")
                XCTAssertTrue(FileManager.default.fileExists(atPath: work.file("server/raw/" + name)), encoded)
            case .refused:
                XCTAssertTrue(reply.code.hasPrefix("4"), "\(encoded): \(reply.code) \(reply.body)")
            }
        }
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: work.path).sorted(), ["a.bin", "server"])
        let stored = try FileManager.default.contentsOfDirectory(atPath: work.file("server/raw"))
        for name in stored { XCTAssertFalse(name.utf8.contains(UInt8(ascii: "/")), name) }
        // As bytes: Swift's String equality is canonical, and NFC and NFD spellings are two files.
        XCTAssertEqual(
            Set(stored.map { Array($0.utf8) }),
            Set(Self.hostileRawNames.compactMap { if case .stored(let name) = $0.1 { Array(name.utf8) } else { nil } }))
        let top = try FileManager.default.contentsOfDirectory(atPath: work.file("server")).filter { !["raw", "uploads", "downloads", "trash", "upload-urls.key"].contains($0) }
        XCTAssertEqual(top, [], "nothing beside the receiver's own directories")
    }

    enum NameOutcome { case stored(String), refused }

    /// Percent-encoded names for `PUT /raw/NAME`, and what becomes of each.
    static let hostileRawNames: [(String, NameOutcome)] = [
        ("..%2F%CC%81pwned", .stored("\u{301}pwned")),
        ("..%2F..%2Fescaped.bin", .stored("escaped.bin")),
        ("%2E%2E", .refused),
        ("%C0%AF", .refused),
        ("%C0%AE%C0%AE%C0%AFx", .refused),
        ("%FF", .refused),
        ("a%00b", .stored("a_b")),
        ("photo%E2%80%AEgpj.exe", .refused),
        ("nel%C2%85x", .refused),
        ("caf%C3%A9.bin", .stored("caf\u{E9}.bin")),
        ("cafe%CC%81.bin", .stored("cafe\u{301}.bin")),
        (String(repeating: "x", count: 256), .refused),
        (String(repeating: "y", count: 4096), .refused),
        ("..%5C..%5Cwin.bin", .stored("win.bin")),
    ]

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
