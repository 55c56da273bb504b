import Foundation
import XCTest
import XferTestSupport

/// A damaged or unusable state directory ends with one line and exit 3,
/// never a crash and never a push that silently starts over.
final class StateRobustnessTests: XCTestCase {
    var work: TemporaryDirectory!
    var server: ServeProcess!

    override func setUpWithError() throws {
        work = TemporaryDirectory("xfer-state")
        server = try ServeProcess(root: work.file("server"))
    }

    override func tearDown() {
        server = nil
        work = nil
    }

    private func push(state: String) throws -> RunResult {
        try runXfer(["push", work.file("a.bin"), "--backend", "patch", "--to", server.url, "--state", state])
    }

    private func assertStateError(_ result: RunResult, _ label: String, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(result.status, 3, "\(label): \(result.stderr)", file: file, line: line)
        XCTAssertEqual(result.stderr.split(separator: "\n").count, 1, "\(label): one line, got \(result.stderr)", file: file, line: line)
        XCTAssertTrue(result.stderr.hasPrefix("xfer: "), "\(label): \(result.stderr)", file: file, line: line)
        XCTAssertTrue(result.stdout.isEmpty, "\(label): nothing on stdout", file: file, line: line)
    }

    func testGarbageAndTruncatedDatabaseFilesAreAClearError() throws {
        try makeTestFile(at: work.file("a.bin"), size: 100_000)
        // A real state first, so its files exist to be damaged.
        let healthy = work.file("healthy")
        XCTAssertEqual(try push(state: healthy).status, 0)
        let data = try Data(contentsOf: URL(fileURLWithPath: healthy + "/db/data.mdb"))

        let damages: [(String, Data)] = [
            ("garbage", Data((0..<65536).map { UInt8(truncatingIfNeeded: $0 &* 7919 &+ 13) })),
            ("truncated", data.prefix(100)),
            ("empty header", Data(repeating: 0, count: 8192)),
            // Meta pages intact, data pages gone: LMDB alone would die of SIGBUS.
            ("cut after its meta pages", data.prefix(8192)),
        ]
        XCTAssertGreaterThan(data.count, 8192, "the healthy file must have pages past its two meta pages")
        for (label, bytes) in damages {
            let state = work.file("state-\(label.replacingOccurrences(of: " ", with: "-"))")
            try FileManager.default.createDirectory(atPath: state + "/db", withIntermediateDirectories: true)
            try bytes.write(to: URL(fileURLWithPath: state + "/db/data.mdb"))
            let result = try push(state: state)
            assertStateError(result, label)
            XCTAssertTrue(result.stderr.contains("cannot open"), "\(label): \(result.stderr)")
        }
    }

    func testReadOnlyStateDirectoryIsAClearError() throws {
        guard getuid() != 0 else { throw XCTSkip("root writes through read-only permissions") }
        try makeTestFile(at: work.file("a.bin"), size: 100_000)
        let state = work.file("readonly")
        XCTAssertEqual(try push(state: state).status, 0)
        chmod(state, 0o500)
        chmod(state + "/db", 0o500)
        defer {
            chmod(state, 0o700)
            chmod(state + "/db", 0o700)
        }
        assertStateError(try push(state: state), "read-only")
    }
}
