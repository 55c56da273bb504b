import Foundation
import XCTest
import XferTestSupport
@testable import Xfer

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

    /// Garbage inside a page LMDB still accepts: the bytes of the job's record
    /// are overwritten in place (every copy in the file). The value's checksum
    /// turns that into exit 3, where the record would otherwise be misread.
    func testGarbageInsideAValidPageIsCaughtByTheValueChecksum() throws {
        try makeTestFile(at: work.file("a.bin"), size: 100_000)
        let state = work.file("damaged")
        XCTAssertEqual(try push(state: state).status, 0)
        let path = state + "/db/data.mdb"
        var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
        // The job's header and its roots hold the path as is (a layout-2 JSON record
        // held it with its slashes escaped: both are looked for).
        var hits = 0
        for needle in [Array(work.file("a.bin").utf8), Array(work.file("a.bin").replacingOccurrences(of: "/", with: "\\/").utf8)] {
        var index = 0
        while index + needle.count <= bytes.count {
            if bytes[index] == needle[0], Array(bytes[index..<(index + needle.count)]) == needle {
                // Same length, still valid UTF-8 and JSON: only a checksum can tell.
                bytes[index + needle.count - 1] = bytes[index + needle.count - 1] == UInt8(ascii: "x") ? UInt8(ascii: "y") : UInt8(ascii: "x")
                hits += 1
                index += needle.count
            } else {
                index += 1
            }
        }
        }
        XCTAssertGreaterThanOrEqual(hits, 2, "the header and the roots name the file")
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        for arguments in [["list"], ["push", work.file("a.bin"), "--backend", "patch", "--to", server.url]] {
            let result = try runXfer(arguments + ["--state", state])
            assertStateError(result, "damaged record, \(arguments[0])")
            XCTAssertTrue(result.stderr.contains("fails its checksum"), result.stderr)
        }
    }

    func testReadOnlyStateDirectoryIsAClearError() throws {
        try makeTestFile(at: work.file("a.bin"), size: 100_000)
        let state = work.file("readonly")
        XCTAssertEqual(try push(state: state).status, 0)
        chmod(state, 0o500)
        chmod(state + "/db", 0o500)
        defer {
            chmod(state, 0o700)
            chmod(state + "/db", 0o700)
        }
        if getuid() != 0 {
            assertStateError(try push(state: state), "read-only")
            return
        }
        // Root writes through permissions; an unprivileged user meets them, as
        // with someone else's state directory.
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv") else { throw XCTSkip("setpriv is needed to drop root") }
        chmod(work.path, 0o755)
        chmod(work.file("a.bin"), 0o644)
        let child = try ChildProcess(executable: "/usr/bin/setpriv", arguments: [
            "--reuid=65534", "--regid=65534", "--clear-groups", xferExecutable,
            "push", work.file("a.bin"), "--backend", "patch", "--to", server.url, "--state", state,
        ])
        let lines = child.readRemaining()
        assertStateError(RunResult(status: child.wait(), stdout: lines, stderr: child.standardError), "someone else's state")
    }

    /// A full disk, simulated with a file-size limit (RLIMIT_FSIZE): LMDB's
    /// writes fail with EFBIG where a full disk gives ENOSPC, on the same path.
    /// Opening the store and committing a new job both end with exit 3; the
    /// same push without the limit then completes.
    func testAFullDiskIsAClearErrorAndLosesNothing() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/prlimit") else { throw XCTSkip("prlimit is needed") }
        try makeTestFile(at: work.file("a.bin"), size: 100_000)
        let state = work.file("full")
        func limited(_ bytes: Int, _ files: [String]) throws -> RunResult {
            let child = try ChildProcess(executable: "/usr/bin/prlimit", arguments: [
                "--fsize=\(bytes)", xferExecutable, "push",
            ] + files + ["--backend", "patch", "--to", server.url, "--state", state])
            let lines = child.readRemaining()
            return RunResult(status: child.wait(), stdout: lines, stderr: child.standardError)
        }
        let atOpen = try limited(12 << 10, [work.file("a.bin")])
        assertStateError(atOpen, "full disk at open")
        XCTAssertTrue(atOpen.stderr.contains("too large"), atOpen.stderr)
        XCTAssertEqual(try push(state: state).status, 0, "the same push completes once there is room")

        // A job too big to record in the room left: refused before any request.
        var many: [String] = []
        for index in 0..<300 {
            let path = work.file("file-with-a-name-long-enough-to-need-room-\(index).txt")
            try Data("\(index)\n".utf8).write(to: URL(fileURLWithPath: path))
            many.append(path)
        }
        var info = stat()
        XCTAssertEqual(stat(state + "/db/data.mdb", &info), 0)
        let atCommit = try limited(Int(info.st_size), many)
        assertStateError(atCommit, "full disk at commit")
        let all = try runXfer(["push"] + many + ["--backend", "patch", "--to", server.url, "--state", state])
        XCTAssertEqual(all.status, 0, all.stderr)
        XCTAssertEqual(all.stdout.count, many.count)
    }

    /// A state directory written by another layout version is refused with
    /// one line naming both versions, and left as it was.
    func testAStateDirectoryOfAnotherLayoutIsRefusedUntouched() throws {
        try makeTestFile(at: work.file("a.bin"), size: 100_000)
        for version in ["0", "99"] {
            let state = work.file("layout-\(version)")
            XCTAssertEqual(try push(state: state).status, 0)
            do {
                let env = try LMDBEnvironment(directory: state + "/db", mapSize: 64 << 20, maxDatabases: 8)
                let meta = try env.database(named: "meta")
                try env.write { txn in try txn.put(meta, Array("layout".utf8), Array(version.utf8)) }
            }
            let before = try Data(contentsOf: URL(fileURLWithPath: state + "/db/data.mdb"))
            for arguments in [["list"], ["status", "x"]] {
                let result = try runXfer(arguments + ["--state", state])
                assertStateError(result, "layout \(version), \(arguments[0])")
                XCTAssertTrue(result.stderr.contains("layout \(version)"), result.stderr)
            }
            let result = try push(state: state)
            assertStateError(result, "layout \(version), push")
            XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: state + "/db/data.mdb")), before, "refused means untouched")
        }
    }
}
