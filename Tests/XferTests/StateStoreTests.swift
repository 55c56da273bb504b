import Foundation
import XCTest
import XferTestSupport

@testable import Xfer

final class StateStoreTests: XCTestCase {
    private func record(_ id: String = "0123456789abcdef", files: Int = 1) -> JobRecord {
        JobRecord(
            id: JobID(rawValue: id), backend: "patch", target: "http://127.0.0.1:1", createdAt: Date(), updatedAt: Date(),
            concurrency: 4,
            files: (0..<files).map { i in
                FileRecord(
                    path: "/tmp/f\(i)", identity: FileIdentity(size: 100, modificationTimeNanoseconds: 1, inode: 2, device: 3),
                    chunkSize: 10)
            })
    }

    func testJobRoundTripsAndDeletes() async throws {
        let dir = TemporaryDirectory()
        let store = try StateStore(directory: dir.path)
        var job = record()
        job.handles.set("sourceId", "abc")
        job.files[0].handles.set("upToken", "s3cret", secret: true)
        try await store.commit(.putJob(job))
        let loaded = try XCTUnwrap(try store.job(job.id))
        XCTAssertEqual(loaded.handles["sourceId"], "abc")
        XCTAssertEqual(loaded.files[0].handles.redacted["upToken"], "<redacted>")
        XCTAssertEqual(try store.jobs().map(\.id), [job.id])

        try await store.commit(.markDone(job: job.id, file: 0, chunks: [1, 2], receipts: [2: "etag-2"]))
        try await store.commit(.deleteJob(job.id))
        XCTAssertNil(try store.job(job.id))
        XCTAssertEqual(try store.doneChunks(job: job.id, file: 0, capacity: 10).count, 0)
        XCTAssertEqual(try store.receipts(job: job.id, file: 0), [:])
    }

    func testChunkMarksAndReceipts() async throws {
        let dir = TemporaryDirectory()
        let store = try StateStore(directory: dir.path)
        let id = JobID(rawValue: "00000000000000aa")
        // Chunks on both sides of a segment boundary.
        try await store.commit(.markDone(job: id, file: 1, chunks: [0, 8191, 8192, 20_000], receipts: [8192: "e"]))
        var done = try store.doneChunks(job: id, file: 1, capacity: 30_000)
        XCTAssertEqual(done.members, [0, 8191, 8192, 20_000])
        XCTAssertEqual(try store.receipts(job: id, file: 1), [8192: "e"])
        // Another file of the same job is untouched.
        XCTAssertEqual(try store.doneChunks(job: id, file: 0, capacity: 30_000).count, 0)

        try await store.commit(.markNotDone(job: id, file: 1, chunks: [8192]))
        done = try store.doneChunks(job: id, file: 1, capacity: 30_000)
        XCTAssertEqual(done.members, [0, 8191, 20_000])
        XCTAssertEqual(try store.receipts(job: id, file: 1), [:])

        var replacement = ChunkSet(capacity: 30_000)
        replacement.insert(5)
        try await store.commit(.replaceDone(job: id, file: 1, done: replacement, receipts: [5: "r"]))
        XCTAssertEqual(try store.doneChunks(job: id, file: 1, capacity: 30_000).members, [5])
        XCTAssertEqual(try store.receipts(job: id, file: 1), [5: "r"])
    }

    func testConcurrentCommitsAllLand() async throws {
        let dir = TemporaryDirectory()
        let store = try StateStore(directory: dir.path)
        let id = JobID(rawValue: "00000000000000bb")
        try await withThrowingTaskGroup(of: Void.self) { group in
            for chunk in 0..<500 {
                group.addTask { try await store.commit(.markDone(job: id, file: 0, chunks: [chunk], receipts: [:])) }
            }
            try await group.waitForAll()
        }
        XCTAssertTrue(try store.doneChunks(job: id, file: 0, capacity: 500).isComplete)
    }

    func testMapGrowsWhenFull() async throws {
        let dir = TemporaryDirectory()
        let store = try StateStore(directory: dir.path, initialMapSize: 256 << 10)
        let before = store.mapSize
        let id = JobID(rawValue: "00000000000000cc")
        for batch in 0..<40 {
            let chunks = Array((batch * 8192)..<((batch + 1) * 8192))
            try await store.commit(.markDone(job: id, file: 0, chunks: chunks, receipts: Dictionary(uniqueKeysWithValues: chunks.prefix(200).map { ($0, String(repeating: "x", count: 40)) })))
        }
        XCTAssertGreaterThan(store.mapSize, before)
        XCTAssertTrue(try store.doneChunks(job: id, file: 0, capacity: 40 * 8192).isComplete)
    }

    func testRefusesAnotherLayoutVersion() async throws {
        let dir = TemporaryDirectory()
        do {
            let store = try StateStore(directory: dir.path)
            try await store.commit(.putJob(record()))
        }
        // Simulate a store written by another layout.
        let env = try LMDBEnvironment(directory: dir.file("db"), mapSize: 64 << 20, maxDatabases: 8)
        let meta = try env.database(named: "meta")
        try env.write { txn in try txn.put(meta, Array("layout".utf8), Array("0".utf8)) }
        XCTAssertThrowsError(try StateStore(directory: dir.path)) { error in
            guard case XferError.stateUnavailable(let message) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(message.contains("layout 0"), message)
        }
    }

    func testMigratesLayout1ByAddingChecksums() async throws {
        let dir = TemporaryDirectory()
        let job = record()
        do {
            let store = try StateStore(directory: dir.path)
            try await store.commit(.putJob(job))
            try await store.commit(.markDone(job: job.id, file: 0, chunks: [0, 2, 5], receipts: [2: "etag-2"]))
        }
        // Rewrite it as layout 1 wrote it: the same values without their CRC-32.
        do {
            let env = try LMDBEnvironment(directory: dir.file("db"), mapSize: 64 << 20, maxDatabases: 8)
            // Opened before the write: opening a database inside one would wait on the writer lock it holds.
            let databases = try ["jobs", "chunks", "receipts", "progress", "finished", "summaries"].map { try env.database(named: $0) }
            let meta = try env.database(named: "meta")
            try env.write { txn in
                for db in databases {
                    var entries: [([UInt8], [UInt8])] = []
                    try txn.forEach(db, prefix: []) { key, value in
                        entries.append((key, value))
                        return true
                    }
                    for (key, value) in entries { try txn.put(db, key, Array(value.dropLast(4))) }
                }
                try txn.put(meta, Array("layout".utf8), Array("1".utf8))
            }
        }
        let store = try StateStore(directory: dir.path)
        XCTAssertEqual(try store.job(job.id)?.id, job.id)
        XCTAssertEqual(try store.doneChunks(job: job.id, file: 0, capacity: 10).members, [0, 2, 5])
        XCTAssertEqual(try store.receipts(job: job.id, file: 0), [2: "etag-2"])
    }

    func testADamagedValueIsAnErrorNotAnAnswer() async throws {
        let dir = TemporaryDirectory()
        let job = record()
        do {
            let store = try StateStore(directory: dir.path)
            try await store.commit(.putJob(job))
            try await store.commit(.markDone(job: job.id, file: 0, chunks: [0], receipts: [:]))
        }
        // One bit flipped in the stored bitmap: without the checksum this would read as chunk 1 done.
        do {
            let env = try LMDBEnvironment(directory: dir.file("db"), mapSize: 64 << 20, maxDatabases: 8)
            let chunks = try env.database(named: "chunks")
            try env.write { txn in
                var entries: [([UInt8], [UInt8])] = []
                try txn.forEach(chunks, prefix: []) { key, value in
                    entries.append((key, value))
                    return true
                }
                XCTAssertEqual(entries.count, 1)
                for (key, var value) in entries {
                    value[0] |= 0b10
                    try txn.put(chunks, key, value)
                }
            }
        }
        let store = try StateStore(directory: dir.path)
        XCTAssertThrowsError(try store.doneChunks(job: job.id, file: 0, capacity: 10)) { error in
            guard case XferError.stateUnavailable(let message) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(message.contains("fails its checksum"), message)
        }
    }

    func testUnwritableDirectoryIsAClearError() throws {
        let dir = TemporaryDirectory()
        let readOnly = dir.file("ro")
        try FileManager.default.createDirectory(atPath: readOnly, withIntermediateDirectories: true)
        try FileManager.default.setAttributes([.posixPermissions: 0o500], ofItemAtPath: readOnly)
        defer { try? FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: readOnly) }
        if getuid() == 0 {
            // root ignores permission bits; a path under a regular file fails for everyone.
            let blocker = dir.file("file")
            _ = FileManager.default.createFile(atPath: blocker, contents: Data("x".utf8))
            XCTAssertThrowsError(try StateStore(directory: blocker + "/state")) { error in
                XCTAssertEqual((error as? XferError)?.exitCode, 3)
            }
        } else {
            XCTAssertThrowsError(try StateStore(directory: readOnly + "/state")) { error in
                XCTAssertEqual((error as? XferError)?.exitCode, 3)
            }
        }
    }

    func testStateDirectoryIsPrivate() throws {
        let dir = TemporaryDirectory()
        let path = dir.file("state")
        _ = try StateStore(directory: path)
        let mode = try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int
        XCTAssertEqual(mode, 0o700)
        let dataMode = try FileManager.default.attributesOfItem(atPath: path + "/db/data.mdb")[.posixPermissions] as? Int
        XCTAssertEqual(dataMode, 0o600)
    }

    /// A child process commits chunk acknowledgements and reports each one;
    /// it is killed with SIGKILL mid-stream. Every acknowledgement it
    /// reported must be in the store when it is reopened.
    func testReopenAfterSIGKILLKeepsEveryReportedCommit() throws {
        let dir = TemporaryDirectory()
        let child = try ChildProcess(
            executable: Bundle.main.executablePath ?? CommandLine.arguments[0],
            arguments: ["XferTests.StateStoreTests/testChildWriter"],
            environment: ["XFER_TEST_CHILD_STATE": dir.path])
        var reported: [Int] = []
        while reported.count < 300, let line = child.readLine() {
            if line.hasPrefix("committed "), let chunk = Int(line.dropFirst("committed ".count)) {
                reported.append(chunk)
            }
        }
        child.kill(SIGKILL)
        XCTAssertEqual(child.wait(), 128 + SIGKILL)
        XCTAssertEqual(reported.count, 300, "the child stopped early: \(child.standardError.suffix(500))")

        let store = try StateStore(directory: dir.path)
        let done = try store.doneChunks(job: JobID(rawValue: "00000000000000dd"), file: 0, capacity: 100_000)
        for chunk in reported { XCTAssertTrue(done.contains(chunk), "chunk \(chunk) was reported committed but is lost") }
        XCTAssertNotNil(try store.job(JobID(rawValue: "00000000000000dd")))
    }

    /// Child half of the test above; does nothing in a normal run.
    func testChildWriter() async throws {
        guard let path = ProcessInfo.processInfo.environment["XFER_TEST_CHILD_STATE"] else { return }
        let store = try StateStore(directory: path)
        try await store.commit(.putJob(record("00000000000000dd")))
        for chunk in 0..<100_000 {
            try await store.commit(.markDone(job: JobID(rawValue: "00000000000000dd"), file: 0, chunks: [chunk], receipts: [:]))
            FileHandle.standardOutput.write(Data("committed \(chunk)\n".utf8))
        }
    }
}
