import Foundation
import XCTest
import XferTestSupport

@testable import Xfer

final class StateStoreTests: XCTestCase {
    /// Whole seconds survive every stored form of a date exactly.
    private let when = Date(timeIntervalSince1970: 1_700_000_000)

    private func header(_ id: String = "0123456789abcdef", roots: [String] = ["/tmp"]) -> JobRecord {
        JobRecord(
            id: JobID(rawValue: id), backend: "patch", target: "http://127.0.0.1:1", createdAt: when, updatedAt: when,
            concurrency: 4, rootCount: roots.count, firstRoot: roots.first ?? "")
    }

    private func file(_ index: Int, size: Int64 = 100, chunkSize: Int = 10, root: Int = 0) -> FileRecord {
        FileRecord(
            path: "/tmp/f\(index)", relativePath: "f\(index)", root: root,
            identity: FileIdentity(size: size, modificationTimeNanoseconds: 1, inode: UInt64(index), device: 3),
            chunkSize: chunkSize)
    }

    private func createJob(
        _ store: StateStore, _ record: JobRecord, files: [FileRecord], roots: [String] = ["/tmp"]
    ) async throws {
        try await store.commit([
            .createJob(record, roots: roots),
            .putFiles(job: record.id, files: files.enumerated().map { (index: $0.offset, record: $0.element) }),
        ])
    }

    /// The store's LMDB environment opened directly, for writing what another
    /// layout (or damage) left. Open no `StateStore` on it meanwhile.
    private func rawEnvironment(_ directory: String) throws -> LMDBEnvironment {
        let db = (directory as NSString).appendingPathComponent("db")
        try FileManager.default.createDirectory(atPath: db, withIntermediateDirectories: true)
        return try LMDBEnvironment(directory: db, mapSize: 64 << 20, maxDatabases: 16)
    }

    /// Runs `body` with a store on `directory`, then waits until the store is
    /// gone (its writer queue may hold it a moment after the last commit
    /// returned), so that this process may open the environment again.
    private func withStore<T>(_ directory: String, _ body: (StateStore) async throws -> T) async throws -> T {
        weak var released: StateStore?
        let result: T
        do {
            let store = try StateStore(directory: directory)
            released = store
            result = try await body(store)
        }
        let deadline = Date().addingTimeInterval(10)
        while released != nil, Date() < deadline { try await Task.sleep(for: .milliseconds(1)) }
        XCTAssertNil(released, "the store is still open")
        return result
    }

    private func dataFile(_ directory: String) -> String {
        (directory as NSString).appendingPathComponent("db/data.mdb")
    }

    private func counters(files: Int, total: Int64, done: Int64 = 0, completed: Int = 0, failed: Int = 0) -> JobCounters {
        var counters = JobCounters()
        counters.fileCount = files
        counters.totalBytes = total
        counters.doneBytes = done
        counters.completedFiles = completed
        counters.failedFiles = failed
        return counters
    }

    // MARK: Round trips

    /// A prefix's keys deleted through a cursor: every one of them (across many pages), none of
    /// its neighbours', an empty prefix all.
    /// Keys start with the job id's 16 hex digits as 8 bytes; any other id, by the first 8 bytes
    /// of its SHA-256. File and chunk keys append big-endian numbers.
    func testKeysOfWellFormedAndOtherJobIDs() throws {
        XCTAssertEqual(StateStore.jobPrefix(JobID(rawValue: "0123456789abcdef")), [0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef])
        for other in ["0123456789ABCDEF", "0123456789abcde", "0123456789abcdeg", "", "é123456789abcdef"] {
            XCTAssertEqual(StateStore.jobPrefix(JobID(rawValue: other)), Array(SHA256Digest.of(Array(other.utf8)).prefix(8)), other)
        }
        let job = JobID(rawValue: "ffffffffffffffff")
        XCTAssertEqual(StateStore.fileKey(job, 0x0102_0304), Array(repeating: 0xff, count: 8) + [1, 2, 3, 4])
        XCTAssertEqual(StateStore.chunkKey(job, 7, 0x0a0b_0c0d), Array(repeating: 0xff, count: 8) + [0, 0, 0, 7, 10, 11, 12, 13])
    }

    func testDeleteAllRemovesExactlyThePrefixsKeys() throws {
        let dir = TemporaryDirectory()
        let env = try rawEnvironment(dir.path)
        let db = try env.database(named: "d", checksummed: true)
        func key(_ prefix: String, _ index: Int) -> [UInt8] { Array("\(prefix)\(String(format: "%06d", index))".utf8) }
        try env.write { txn in
            for index in 0..<20_000 { try txn.put(db, key("job1/", index), Array(repeating: 7, count: 40)) }
            try txn.put(db, Array("job0/z".utf8), [1])
            try txn.put(db, Array("job1".utf8), [2])
            try txn.put(db, Array("job2/a".utf8), [3])
        }
        func keys() throws -> [String] {
            try env.read { txn in
                var found: [String] = []
                try txn.forEach(db, prefix: []) { key, _ in
                    found.append(String(decoding: key, as: UTF8.self))
                    return true
                }
                return found
            }
        }
        try env.write { txn in try txn.deleteAll(db, prefix: Array("job1/".utf8)) }
        XCTAssertEqual(try keys(), ["job0/z", "job1", "job2/a"])
        try env.write { txn in try txn.deleteAll(db, prefix: Array("nothing/".utf8)) }
        XCTAssertEqual(try keys().count, 3)
        try env.write { txn in try txn.deleteAll(db, prefix: []) }
        XCTAssertEqual(try keys(), [])
    }

    func testJobRoundTripsAndDeletes() async throws {
        let dir = TemporaryDirectory()
        let store = try StateStore(directory: dir.path)
        var job = header(roots: ["/tmp/a", "/tmp/b"])
        job.handles.set("sourceId", "abc")
        var first = file(0)
        first.handles.set("upToken", "s3cret", secret: true)
        try await createJob(store, job, files: [first, file(1, root: 1)], roots: ["/tmp/a", "/tmp/b"])

        XCTAssertEqual(try store.job(job.id), job)
        XCTAssertEqual(try store.roots(job.id), ["/tmp/a", "/tmp/b"])
        XCTAssertEqual(try store.file(job: job.id, index: 0), first)
        XCTAssertEqual(try store.file(job: job.id, index: 0)?.handles["upToken"], "s3cret")
        XCTAssertEqual(try store.file(job: job.id, index: 0)?.handles.redacted["upToken"], "<redacted>")
        XCTAssertEqual(try store.file(job: job.id, index: 1)?.root, 1)
        XCTAssertNil(try store.file(job: job.id, index: 2))
        XCTAssertEqual(try store.jobIDs(withPrefix: ""), [job.id])
        XCTAssertEqual(try store.listings(), [JobListing(record: job, counters: counters(files: 2, total: 200))])

        // putJob replaces the header and nothing else.
        job.phase = .failed
        job.lastError = "transfer failed: HTTP 400"
        try await store.commit(.putJob(job))
        XCTAssertEqual(try store.job(job.id), job)
        XCTAssertEqual(try store.file(job: job.id, index: 0), first)
        XCTAssertEqual(try store.counters(job.id), counters(files: 2, total: 200))

        let plan = ChunkPlan(fileSize: 100, chunkSize: 10)
        try await store.commit(.markDone(job: job.id, file: 0, chunks: [1, 2], plan: plan, receipts: [2: "etag-2"]))
        var failing = file(1, root: 1)
        failing.failure = "HTTP 500"
        try await store.commit(.putFiles(job: job.id, files: [(index: 1, record: failing)]))
        try await store.commit(.deleteJob(job.id))
        XCTAssertNil(try store.job(job.id))
        XCTAssertNil(try store.file(job: job.id, index: 0))
        XCTAssertEqual(try store.roots(job.id), [])
        XCTAssertEqual(try store.files(job: job.id, from: 0, limit: 10).count, 0)
        XCTAssertNil(try store.fileIndex(job: job.id, root: 0, relativePath: "f0"))
        XCTAssertEqual(try store.failedFiles(job: job.id, limit: 10).count, 0)
        XCTAssertEqual(try store.counters(job.id), JobCounters())
        XCTAssertEqual(try store.fileProgress(job: job.id, file: 0), FileProgress(chunksDone: 0, bytesDone: 0))
        XCTAssertEqual(try store.doneChunks(job: job.id, file: 0, capacity: 10).count, 0)
        XCTAssertEqual(try store.receipts(job: job.id, file: 0), [:])
        XCTAssertEqual(try store.listings(), [])
        XCTAssertEqual(try store.jobIDs(withPrefix: ""), [])
    }

    func testChunkMarksAcrossSegmentBoundariesAndReceipts() async throws {
        let dir = TemporaryDirectory()
        let store = try StateStore(directory: dir.path)
        let id = JobID(rawValue: "00000000000000aa")
        // 30,000 chunks of 10 bytes, the last one of 7.
        let plan = ChunkPlan(fileSize: 299_997, chunkSize: 10)
        try await createJob(store, header(id.rawValue), files: [file(0, size: 299_997), file(1, size: 299_997)])

        // Chunks on both sides of a segment boundary, and the short last one.
        try await store.commit(
            .markDone(job: id, file: 1, chunks: [0, 8191, 8192, 20_000, 29_999], plan: plan, receipts: [8192: "e"]))
        var done = try store.doneChunks(job: id, file: 1, capacity: plan.count)
        XCTAssertEqual(done.members, [0, 8191, 8192, 20_000, 29_999])
        XCTAssertEqual(try store.receipts(job: id, file: 1), [8192: "e"])
        XCTAssertEqual(try store.fileProgress(job: id, file: 1), FileProgress(chunksDone: 5, bytesDone: 47))
        // Another file of the same job is untouched.
        XCTAssertEqual(try store.doneChunks(job: id, file: 0, capacity: plan.count).count, 0)
        XCTAssertEqual(try store.fileProgress(job: id, file: 0), FileProgress(chunksDone: 0, bytesDone: 0))
        // Chunks the plan does not have are ignored.
        try await store.commit(.markDone(job: id, file: 1, chunks: [-1, 30_000], plan: plan, receipts: [:]))
        XCTAssertEqual(try store.doneChunks(job: id, file: 1, capacity: plan.count).count, 5)
        XCTAssertEqual(try store.counters(id).doneBytes, 47)

        try await store.commit(.markNotDone(job: id, file: 1, chunks: [8192], plan: plan))
        done = try store.doneChunks(job: id, file: 1, capacity: plan.count)
        XCTAssertEqual(done.members, [0, 8191, 20_000, 29_999])
        XCTAssertEqual(try store.receipts(job: id, file: 1), [:])
        XCTAssertEqual(try store.fileProgress(job: id, file: 1), FileProgress(chunksDone: 4, bytesDone: 37))

        var replacement = ChunkSet(capacity: plan.count)
        replacement.insert(5)
        try await store.commit(.replaceDone(job: id, file: 1, done: replacement, plan: plan, receipts: [5: "r"]))
        XCTAssertEqual(try store.doneChunks(job: id, file: 1, capacity: plan.count).members, [5])
        XCTAssertEqual(try store.receipts(job: id, file: 1), [5: "r"])
        XCTAssertEqual(try store.fileProgress(job: id, file: 1), FileProgress(chunksDone: 1, bytesDone: 10))
        XCTAssertEqual(try store.counters(id).doneBytes, 10)
    }

    func testConcurrentCommitsAllLand() async throws {
        let dir = TemporaryDirectory()
        let store = try StateStore(directory: dir.path)
        let id = JobID(rawValue: "00000000000000bb")
        let plan = ChunkPlan(fileSize: 4_995, chunkSize: 10)
        try await createJob(store, header(id.rawValue), files: [file(0, size: 4_995)])
        let more = (1...200).map { file($0, size: 7) }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for chunk in 0..<500 {
                group.addTask { try await store.commit(.markDone(job: id, file: 0, chunks: [chunk], plan: plan, receipts: [:])) }
            }
            for (offset, record) in more.enumerated() {
                group.addTask { try await store.commit(.putFiles(job: id, files: [(index: offset + 1, record: record)])) }
            }
            try await group.waitForAll()
        }
        XCTAssertTrue(try store.doneChunks(job: id, file: 0, capacity: 500).isComplete)
        XCTAssertEqual(try store.fileProgress(job: id, file: 0), FileProgress(chunksDone: 500, bytesDone: 4_995))
        XCTAssertEqual(try store.counters(id), counters(files: 201, total: 4_995 + 200 * 7, done: 4_995))
    }

    func testMapGrowsWhenFull() async throws {
        let dir = TemporaryDirectory()
        let store = try StateStore(directory: dir.path, initialMapSize: 256 << 10)
        let before = store.mapSize
        let id = JobID(rawValue: "00000000000000cc")
        let plan = ChunkPlan(fileSize: 40 * 8192, chunkSize: 1)
        try await createJob(store, header(id.rawValue), files: [file(0, size: 40 * 8192, chunkSize: 1)])
        for batch in 0..<40 {
            let chunks = Array((batch * 8192)..<((batch + 1) * 8192))
            let receipts = Dictionary(uniqueKeysWithValues: chunks.prefix(200).map { ($0, String(repeating: "x", count: 40)) })
            try await store.commit(.markDone(job: id, file: 0, chunks: chunks, plan: plan, receipts: receipts))
        }
        XCTAssertGreaterThan(store.mapSize, before)
        XCTAssertTrue(try store.doneChunks(job: id, file: 0, capacity: 40 * 8192).isComplete)
        XCTAssertEqual(try store.counters(id).doneBytes, 40 * 8192)
        XCTAssertEqual(try store.receipts(job: id, file: 0).count, 40 * 200)
    }

    // MARK: Counters

    func testCountersFollowEveryKindOfChange() async throws {
        let dir = TemporaryDirectory()
        let store = try StateStore(directory: dir.path)
        let id = JobID(rawValue: "00000000000000a1")
        try await store.commit(.createJob(header(id.rawValue), roots: ["/tmp"]))
        XCTAssertEqual(try store.counters(id), JobCounters())

        // New files add to the count and the total.
        try await store.commit(.putFiles(job: id, files: [(0, file(0, size: 95)), (1, file(1, size: 200))]))
        XCTAssertEqual(try store.counters(id), counters(files: 2, total: 295))
        // Replacing a file with another size adjusts the total, not the count.
        try await store.commit(.putFiles(job: id, files: [(1, file(1, size: 250))]))
        XCTAssertEqual(try store.counters(id), counters(files: 2, total: 345))
        // A URL completes a file; setting it again does not count twice.
        var complete = file(1, size: 250)
        complete.url = "https://files.example/f1"
        try await store.commit(.putFiles(job: id, files: [(1, complete)]))
        try await store.commit(.putFiles(job: id, files: [(1, complete)]))
        XCTAssertEqual(try store.counters(id), counters(files: 2, total: 345, done: 250, completed: 1), "a complete file is all done")
        // Without its URL it is not complete, and has nothing done.
        try await store.commit(.putFiles(job: id, files: [(1, file(1, size: 250))]))
        XCTAssertEqual(try store.counters(id), counters(files: 2, total: 345))
        // A failure is counted and listed, and cleared by the next record without one.
        var failing = file(0, size: 95)
        failing.failure = "HTTP 500"
        try await store.commit(.putFiles(job: id, files: [(0, failing)]))
        XCTAssertEqual(try store.counters(id), counters(files: 2, total: 345, failed: 1))
        let failed = try store.failedFiles(job: id, limit: 10)
        XCTAssertEqual(failed.map(\.index), [0])
        XCTAssertEqual(failed.first?.record, failing)
        XCTAssertEqual(try store.failedFiles(job: id, limit: 0).count, 0)
        try await store.commit(.putFiles(job: id, files: [(0, file(0, size: 95))]))
        XCTAssertEqual(try store.counters(id), counters(files: 2, total: 345))
        XCTAssertEqual(try store.failedFiles(job: id, limit: 10).count, 0)

        // 95 bytes in chunks of 10: nine full chunks and a last one of 5.
        let plan = ChunkPlan(fileSize: 95, chunkSize: 10)
        func progress() throws -> FileProgress { try store.fileProgress(job: id, file: 0) }
        XCTAssertEqual(try progress(), FileProgress(chunksDone: 0, bytesDone: 0))
        try await store.commit(.markDone(job: id, file: 0, chunks: [0, 1, 2], plan: plan, receipts: [:]))
        XCTAssertEqual(try progress(), FileProgress(chunksDone: 3, bytesDone: 30))
        // Marking a done chunk again must not count it twice.
        try await store.commit(.markDone(job: id, file: 0, chunks: [2, 9], plan: plan, receipts: [:]))
        XCTAssertEqual(try progress(), FileProgress(chunksDone: 4, bytesDone: 35))
        try await store.commit(.markDone(job: id, file: 0, chunks: [9, 9], plan: plan, receipts: [:]))
        XCTAssertEqual(try progress(), FileProgress(chunksDone: 4, bytesDone: 35))
        XCTAssertEqual(try store.counters(id).doneBytes, 35)
        try await store.commit(.markNotDone(job: id, file: 0, chunks: [9, 5], plan: plan))
        XCTAssertEqual(try progress(), FileProgress(chunksDone: 3, bytesDone: 30))
        XCTAssertEqual(try store.counters(id).doneBytes, 30)
        var done = ChunkSet(capacity: plan.count)
        for chunk in [0, 4, 8, 9] { done.insert(chunk) }
        try await store.commit(.replaceDone(job: id, file: 0, done: done, plan: plan, receipts: [:]))
        XCTAssertEqual(try progress(), FileProgress(chunksDone: 4, bytesDone: 35))
        XCTAssertEqual(try store.doneChunks(job: id, file: 0, capacity: plan.count).count, 4, "counter and bitmap agree")
        // Progress of the other file adds up in the job's counter, in one batch too.
        let plan1 = ChunkPlan(fileSize: 250, chunkSize: 10)
        try await store.commit([
            .markDone(job: id, file: 1, chunks: [0, 1], plan: plan1, receipts: [:]),
            .markDone(job: id, file: 1, chunks: [24], plan: plan1, receipts: [:]),
            .markNotDone(job: id, file: 0, chunks: [0], plan: plan),
        ])
        XCTAssertEqual(try store.counters(id), counters(files: 2, total: 345, done: 25 + 30))
        try await store.commit(.replaceDone(job: id, file: 1, done: ChunkSet(capacity: plan1.count), plan: plan1, receipts: [:]))
        XCTAssertEqual(try store.counters(id).doneBytes, 25)
        XCTAssertEqual(try store.fileProgress(job: id, file: 1), FileProgress(chunksDone: 0, bytesDone: 0))
        // Completing a file drops its bitmap, receipts and progress, and counts its size.
        try await store.commit(.markDone(job: id, file: 1, chunks: [3], plan: plan1, receipts: [3: "etag"]))
        try await store.commit(.putFiles(job: id, files: [(1, complete)]))
        XCTAssertEqual(try store.counters(id), counters(files: 2, total: 345, done: 25 + 250, completed: 1))
        XCTAssertEqual(try store.fileProgress(job: id, file: 1), FileProgress(chunksDone: 0, bytesDone: 0), "not kept")
        XCTAssertEqual(try store.receipts(job: id, file: 1), [:])
        XCTAssertTrue(try store.doneChunks(job: id, file: 1, capacity: plan1.count).isComplete)

        let engine = try TransferEngine(stateDirectory: dir.path, store: store)
        let details = try engine.details(of: id)
        XCTAssertEqual(details.files.first?.doneBytes, 25, "two full chunks and the 5-byte last one")
        XCTAssertEqual(details.files.first?.chunksDone, 3)
        XCTAssertEqual(details.files.last?.doneBytes, 250, "a complete file is all done")
        XCTAssertEqual(try engine.jobs().first?.doneBytes, 25 + 250)
        XCTAssertEqual(try engine.jobs().first?.completedFiles, 1)

        // The header alone does not touch them.
        var record = header(id.rawValue)
        record.phase = .failed
        try await store.commit(.putJob(record))
        XCTAssertEqual(try store.counters(id), counters(files: 2, total: 345, done: 25 + 250, completed: 1))

        try await store.commit(.deleteJob(id))
        XCTAssertEqual(try store.counters(id), JobCounters())
        XCTAssertEqual(try progress(), FileProgress(chunksDone: 0, bytesDone: 0))
        try await store.commit(.createJob(header(id.rawValue), roots: ["/tmp"]))
        try await store.commit(.putFiles(job: id, files: [(0, file(0, size: 95))]))
        XCTAssertEqual(try store.counters(id), counters(files: 1, total: 95), "a deleted job's counters are gone with it")
        XCTAssertEqual(try progress().chunksDone, 0)
    }

    // MARK: Files

    func testFilesPageInIndexOrder() async throws {
        let dir = TemporaryDirectory()
        let store = try StateStore(directory: dir.path)
        let id = JobID(rawValue: "00000000000000f1")
        // Index 256 and 65,536 sort after 255 and 65,535 only if the index is big-endian.
        let indexes = Array(0..<300) + [65_535, 65_536, 1 << 24]
        try await store.commit(.createJob(header(id.rawValue), roots: ["/tmp"]))
        try await store.commit(.putFiles(job: id, files: indexes.reversed().map { (index: $0, record: file($0)) }))
        // Another job's files must not leak into the pages.
        try await createJob(store, header("00000000000000f2"), files: [file(0), file(1)])

        var seen: [Int] = []
        var start = 0
        while true {
            let page = try store.files(job: id, from: start, limit: 7)
            XCTAssertLessThanOrEqual(page.count, 7)
            guard let last = page.last else { break }
            for (index, record) in page { XCTAssertEqual(record, file(index)) }
            seen += page.map(\.index)
            start = last.index + 1
        }
        XCTAssertEqual(seen, indexes)
        XCTAssertEqual(try store.files(job: id, from: 298, limit: 3).map(\.index), [298, 299, 65_535])
        XCTAssertEqual(try store.files(job: id, from: 300, limit: 100).map(\.index), [65_535, 65_536, 1 << 24])
        XCTAssertEqual(try store.files(job: id, from: (1 << 24) + 1, limit: 10).count, 0)
        XCTAssertEqual(try store.files(job: id, from: 0, limit: 0).count, 0)
        XCTAssertEqual(try store.files(job: id, from: -5, limit: 2).map(\.index), [0, 1])
        XCTAssertEqual(try store.counters(id).fileCount, indexes.count)
    }

    func testFileIndexFindsFilesByRootAndRelativePath() async throws {
        let dir = TemporaryDirectory()
        let store = try StateStore(directory: dir.path)
        let id = JobID(rawValue: "00000000000000f3")
        func named(_ relativePath: String, root: Int, size: Int64 = 10) -> FileRecord {
            FileRecord(
                path: "/root\(root)/" + relativePath, relativePath: relativePath, root: root,
                identity: FileIdentity(size: size, modificationTimeNanoseconds: 1, inode: 1, device: 1), chunkSize: 4)
        }
        // Longer than an LMDB key can hold: keyed by its start and a SHA-256 of the whole.
        let deep = (0..<60).map { "directory-\($0)" }.joined(separator: "/") + "/file.bin"
        let deepSibling = (0..<60).map { "directory-\($0)" }.joined(separator: "/") + "/other.bin"
        XCTAssertGreaterThan(deep.utf8.count, 480)
        XCTAssertEqual(Array(deep.utf8.prefix(400)), Array(deepSibling.utf8.prefix(400)), "the two share the key's prefix")
        let key = StateStore.pathKey(id, 0, deep)
        XCTAssertLessThanOrEqual(key.count, 511)
        XCTAssertEqual(Array(key.suffix(32)), SHA256Digest.of(Array(deep.utf8)))
        // At the limit a path is kept whole.
        let prefixLength = StateStore.fileKey(id, 0).count
        let atLimit = String(repeating: "a", count: 480 - prefixLength)
        XCTAssertEqual(StateStore.pathKey(id, 0, atLimit), StateStore.fileKey(id, 0) + Array(atLimit.utf8))
        XCTAssertNotEqual(StateStore.pathKey(id, 0, atLimit + "b"), StateStore.fileKey(id, 0) + Array((atLimit + "b").utf8))

        let files = [
            named("a/b.txt", root: 0), named("a/b.txt", root: 1), named(deep, root: 0), named(deepSibling, root: 0),
            named("naïve 视频.bin", root: 1), named(atLimit, root: 0), named(atLimit + "b", root: 0),
        ]
        try await createJob(store, header(id.rawValue, roots: ["/root0", "/root1"]), files: files, roots: ["/root0", "/root1"])
        for (index, file) in files.enumerated() {
            XCTAssertEqual(try store.fileIndex(job: id, root: file.root, relativePath: file.relativePath), index, file.relativePath)
        }
        XCTAssertNil(try store.fileIndex(job: id, root: 2, relativePath: "a/b.txt"))
        XCTAssertNil(try store.fileIndex(job: id, root: 0, relativePath: "a/b"))
        XCTAssertNil(try store.fileIndex(job: id, root: 1, relativePath: deep))
        XCTAssertNil(try store.fileIndex(job: JobID(rawValue: "00000000000000f4"), root: 0, relativePath: "a/b.txt"))
        XCTAssertEqual(try store.file(job: id, index: 2)?.relativePath, deep)

        // A file that moves is found at its new place only.
        try await store.commit(.putFiles(job: id, files: [(index: 0, record: named("a/c.txt", root: 0))]))
        XCTAssertNil(try store.fileIndex(job: id, root: 0, relativePath: "a/b.txt"))
        XCTAssertEqual(try store.fileIndex(job: id, root: 0, relativePath: "a/c.txt"), 0)
        XCTAssertEqual(try store.fileIndex(job: id, root: 1, relativePath: "a/b.txt"), 1)
        XCTAssertEqual(try store.counters(id).fileCount, files.count)
    }

    /// A change to one file writes that file's keys and the job's counters,
    /// never the other files' records.
    ///
    /// File 7's record is stored in a form that decodes but that encoding it
    /// again would not produce (a varint padded to two bytes): a store that
    /// rewrote the job's files would change those bytes.
    func testAChangeToOneFileLeavesEveryOtherFileAsStored() async throws {
        let dir = TemporaryDirectory()
        let id = JobID(rawValue: "00000000000000e0")
        let count = 20_000
        let plan = ChunkPlan(fileSize: 100, chunkSize: 10)
        try await withStore(dir.path) { store in
            try await createJob(store, header(id.rawValue), files: (0..<count).map { file($0) })
            XCTAssertEqual(try store.counters(id), counters(files: count, total: Int64(count) * 100))
        }
        let watched = [0, 1, 4, 7, 999, 10_000, count - 1]
        func stored() throws -> [Int: [UInt8]] {
            let env = try rawEnvironment(dir.path)
            let files = try env.database(named: "files", checksummed: true)
            return try env.read { txn in
                var result: [Int: [UInt8]] = [:]
                for index in watched + [3, 5] { result[index] = try txn.get(files, StateStore.fileKey(id, index)) }
                return result
            }
        }
        // Padded: the root (0) as the two-byte varint 0x80 0x00. (The store
        // writes a path that follows from the root as a form byte, as here.)
        let original = StoredFile.body(of: file(7), rootPath: "/tmp")
        let rootOffset = 1 + 1 + 1 + file(7).relativePath.utf8.count  // version, path form, relative path
        XCTAssertEqual(original[rootOffset], 0)
        let padded = Array(original[..<rootOffset]) + [0x80, 0x00] + Array(original[(rootOffset + 1)...])
        XCTAssertEqual(StoredFile.decode(body: padded, server: nil, url: nil, roots: ["/tmp"], target: ""), file(7))
        do {
            let env = try rawEnvironment(dir.path)
            let files = try env.database(named: "files", checksummed: true)
            try env.write { txn in try txn.put(files, StateStore.fileKey(id, 7), padded) }
        }
        let before = try stored()
        XCTAssertEqual(before[7], padded)
        XCTAssertEqual(before[0], StoredFile.body(of: file(0), rootPath: "/tmp"))

        try await withStore(dir.path) { store in
            try await store.commit(.markDone(job: id, file: 3, chunks: [0, 9], plan: plan, receipts: [9: "r"]))
            var changed = file(5, size: 150)
            changed.isOpen = true
            changed.handles.set("uploadId", "u-5")
            try await store.commit(.putFiles(job: id, files: [(index: 5, record: changed)]))
            try await store.commit(.putFiles(job: id, files: [(index: count, record: file(count))]))
            XCTAssertEqual(try store.file(job: id, index: 7), file(7))
            XCTAssertEqual(try store.file(job: id, index: 5), changed)
            XCTAssertEqual(
                try store.counters(id), counters(files: count + 1, total: Int64(count + 1) * 100 + 50, done: 20))
        }
        let after = try stored()
        for index in watched {
            XCTAssertEqual(after[index], before[index], "file \(index)'s record was rewritten")
        }
        XCTAssertEqual(after[3], before[3], "progress is not kept in the file's record")
        XCTAssertNotEqual(after[5], before[5])
    }

    // MARK: Layouts

    func testRefusesANewerLayoutAndLeavesTheFileAlone() async throws {
        let dir = TemporaryDirectory()
        try await withStore(dir.path) { store in
            try await createJob(store, header(), files: [file(0)])
        }
        do {
            let env = try rawEnvironment(dir.path)
            let meta = try env.database(named: "meta")
            try env.write { txn in try txn.put(meta, Array("layout".utf8), Array("4".utf8)) }
            try env.sync()
        }
        let before = try Data(contentsOf: URL(fileURLWithPath: dataFile(dir.path)))
        XCTAssertThrowsError(try StateStore(directory: dir.path)) { error in
            guard let error = error as? XferError, error.kind == .stateUnavailable, let message = error.reason else { return XCTFail("\(error)") }
            XCTAssertTrue(message.contains("layout 4"), message)
            XCTAssertTrue(message.contains("a newer xfer"), message)
            XCTAssertTrue(message.contains("layout 3"), message)
            XCTAssertFalse(message.contains("\n"), "one line: \(message)")
        }
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: dataFile(dir.path))), before, "the store is left as it was")
    }

    /// A newer xfer may keep other databases than this one: refusing its
    /// layout must not create this one's in its file either.
    func testRefusesANewerLayoutWithOtherDatabasesAndLeavesTheFileAlone() throws {
        let dir = TemporaryDirectory()
        do {
            let env = try rawEnvironment(dir.path)
            let meta = try env.database(named: "meta")
            let other = try env.database(named: "objects", checksummed: true)
            try env.write { txn in
                try txn.put(meta, Array("layout".utf8), Array("4".utf8))
                try txn.put(other, Array("0123456789abcdef".utf8), [1, 2, 3])
            }
            try env.sync()
        }
        let before = try Data(contentsOf: URL(fileURLWithPath: dataFile(dir.path)))
        XCTAssertThrowsError(try StateStore(directory: dir.path)) { error in
            guard let error = error as? XferError, error.kind == .stateUnavailable, let message = error.reason else { return XCTFail("\(error)") }
            XCTAssertTrue(message.contains("layout 4") && message.contains("a newer xfer"), message)
        }
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: dataFile(dir.path))), before, "the store is left as it was")
    }

    func testRefusesAnUnknownOlderLayoutInOneLine() async throws {
        let dir = TemporaryDirectory()
        try await withStore(dir.path) { store in
            try await createJob(store, header(), files: [file(0)])
        }
        do {
            let env = try rawEnvironment(dir.path)
            let meta = try env.database(named: "meta")
            try env.write { txn in try txn.put(meta, Array("layout".utf8), Array("0".utf8)) }
            try env.sync()
        }
        let before = try Data(contentsOf: URL(fileURLWithPath: dataFile(dir.path)))
        XCTAssertThrowsError(try StateStore(directory: dir.path)) { error in
            guard let error = error as? XferError, error.kind == .stateUnavailable, let message = error.reason else { return XCTFail("\(error)") }
            XCTAssertTrue(message.contains("layout 0"), message)
            XCTAssertTrue(message.contains("an older xfer"), message)
            XCTAssertTrue(message.contains("layout 3"), message)
            XCTAssertFalse(message.contains("\n"), "one line: \(message)")
        }
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: dataFile(dir.path))), before)
    }

    /// What the release before layout 3 kept: two jobs, one of them completed.
    private struct LegacyFixture {
        static let unfinished = JobID(rawValue: "00000000000000a1")
        static let completed = JobID(rawValue: "00000000000000b2")
        /// 20,000 chunks of 10 bytes, the last of 5.
        static let bigPlan = ChunkPlan(fileSize: 199_995, chunkSize: 10)
        static let bigDone = Array(0..<10_000) + [19_999]

        let created = Date(timeIntervalSince1970: 1_700_000_000)
        /// Whole seconds, two hours ago: due for pruning with a retention of one.
        let completedAt = Date(timeIntervalSince1970: (Date().timeIntervalSince1970 - 7200).rounded(.down))

        var jobs: [LegacyLayout.Job] {
            var secret = ServerHandles()
            secret.set("uploadId", "u-1")
            secret.set("token", "s3cret", secret: true)
            var jobHandles = ServerHandles()
            jobHandles.set("sourceId", "abc")
            return [
                LegacyLayout.Job(
                    id: Self.unfinished, backend: "patch", target: "https://user:pw@uploads.example/v1?sig=x",
                    createdAt: created, updatedAt: created.addingTimeInterval(60), phase: .unfinished, lastError: nil,
                    concurrency: 4, isStarted: true, handles: jobHandles,
                    files: [
                        .init(
                            path: "/data/photos/été 2023.jpg",
                            identity: FileIdentity(size: 1000, modificationTimeNanoseconds: 11, inode: 21, device: 1),
                            chunkSize: 100, isOpen: true, handles: secret, url: "https://uploads.example/f/1"),
                        .init(
                            path: "/data/big.bin",
                            identity: FileIdentity(size: 199_995, modificationTimeNanoseconds: 12, inode: 22, device: 1),
                            chunkSize: 10, isOpen: true, handles: ServerHandles(["uploadId": "u-2"]), url: nil),
                        .init(
                            path: "/data/notes.txt",
                            identity: FileIdentity(size: 300, modificationTimeNanoseconds: 13, inode: 23, device: 1),
                            chunkSize: 100, isOpen: false, handles: ServerHandles(), url: nil),
                    ]),
                LegacyLayout.Job(
                    id: Self.completed, backend: "tus", target: "https://tus.example/files", createdAt: created,
                    updatedAt: completedAt, phase: .completed, lastError: nil, concurrency: 2, isStarted: false,
                    handles: ServerHandles(),
                    files: [
                        .init(
                            path: "/srv/report.pdf",
                            identity: FileIdentity(size: 4096, modificationTimeNanoseconds: 14, inode: 24, device: 2),
                            chunkSize: 1024, isOpen: true, handles: ServerHandles(["uploadUrl": "https://tus.example/files/9"]),
                            url: "https://tus.example/files/9"),
                    ]),
            ]
        }

        /// Done chunks by job and file, as bitmaps.
        var done: [(job: JobID, file: Int, plan: ChunkPlan, chunks: [Int])] {
            [
                (Self.unfinished, 0, ChunkPlan(fileSize: 1000, chunkSize: 100), Array(0..<10)),
                (Self.unfinished, 1, Self.bigPlan, Self.bigDone),
                (Self.completed, 0, ChunkPlan(fileSize: 4096, chunkSize: 1024), Array(0..<4)),
            ]
        }

        static let receipts: [Int: String] = [0: "etag-0", 8192: "etag-8192", 19_999: "etag-last"]

        /// Writes it as layout `layout` (1: values as they are; 2: with their CRC-32).
        func write(to directory: String, layout: Int) throws {
            let db = (directory as NSString).appendingPathComponent("db")
            try FileManager.default.createDirectory(atPath: db, withIntermediateDirectories: true)
            let env = try LMDBEnvironment(directory: db, mapSize: 64 << 20, maxDatabases: 8)
            let sealed = layout >= 2
            // Opened before the write: opening a database inside one would wait on the writer lock it holds.
            let meta = try env.database(named: "meta")
            let jobsDB = try env.database(named: "jobs", checksummed: sealed)
            let chunksDB = try env.database(named: "chunks", checksummed: sealed)
            let receiptsDB = try env.database(named: "receipts", checksummed: sealed)
            let progressDB = try env.database(named: "progress", checksummed: sealed)
            let finishedDB = try env.database(named: "finished", checksummed: sealed)
            let summariesDB = try env.database(named: "summaries", checksummed: sealed)
            let jobs = self.jobs
            let done = self.done
            try env.write { txn in
                try txn.put(meta, Array("layout".utf8), Array(String(layout).utf8))
                for job in jobs {
                    let key = Array(job.id.rawValue.utf8)
                    try txn.put(jobsDB, key, Array(try LegacyLayout.encoder.encode(job)))
                    try txn.put(summariesDB, key, [0x01, 0x02, 0x03, 0x04])
                    if job.phase == .completed {
                        let seconds = UInt64(job.updatedAt.timeIntervalSince1970)
                        let time = (0..<8).map { UInt8((seconds >> UInt64(56 - 8 * $0)) & 0xff) }
                        try txn.put(finishedDB, time + key, [1])
                    }
                }
                for entry in done {
                    var set = ChunkSet(capacity: entry.plan.count)
                    for chunk in entry.chunks { set.insert(chunk) }
                    let fileKey = LegacyLayout.fileKey(entry.job, entry.file)
                    for segment in 0..<set.segmentCount {
                        try txn.put(chunksDB, fileKey + StateStore.u32Bytes(UInt32(segment)), set.segmentBytes(segment))
                    }
                    // Layout 2's counter: the done chunks, u64 LE.
                    let count = UInt64(entry.chunks.count)
                    try txn.put(progressDB, fileKey, (0..<8).map { UInt8((count >> UInt64(8 * $0)) & 0xff) })
                }
                for (chunk, receipt) in Self.receipts {
                    try txn.put(
                        receiptsDB, LegacyLayout.fileKey(Self.unfinished, 1) + StateStore.u32Bytes(UInt32(chunk)), Array(receipt.utf8))
                }
            }
            try env.sync()
        }
    }

    private func checkMigrated(_ fixture: LegacyFixture, in directory: String) async throws {
        let unfinished = LegacyFixture.unfinished
        let completed = LegacyFixture.completed
        let before: Data
        try await withStore(directory) { store in
            let legacy = fixture.jobs[0]
            var jobHandles = ServerHandles()
            jobHandles.set("sourceId", "abc")
            XCTAssertEqual(
                try store.job(unfinished),
                JobRecord(
                    id: unfinished, backend: "patch", target: "https://user:pw@uploads.example/v1?sig=x",
                    createdAt: fixture.created, updatedAt: fixture.created.addingTimeInterval(60), phase: .unfinished,
                    lastError: nil, concurrency: 4, isStarted: true, handles: jobHandles, rootCount: 3,
                    firstRoot: "/data/photos/été 2023.jpg"))
            XCTAssertEqual(try store.roots(unfinished), legacy.files.map(\.path))
            let files = try store.files(job: unfinished, from: 0, limit: 100)
            XCTAssertEqual(files.map(\.index), [0, 1, 2])
            for (index, record) in files {
                let old = legacy.files[index]
                XCTAssertEqual(
                    record,
                    FileRecord(
                        path: old.path, relativePath: (old.path as NSString).lastPathComponent, root: index,
                        identity: old.identity, chunkSize: old.chunkSize, isOpen: old.isOpen, handles: old.handles,
                        url: old.url, failure: nil))
            }
            XCTAssertEqual(files.first?.record.relativePath, "été 2023.jpg")
            XCTAssertEqual(files.first?.record.handles.redacted["token"], "<redacted>")
            XCTAssertEqual(try store.fileIndex(job: unfinished, root: 0, relativePath: "été 2023.jpg"), 0)
            XCTAssertEqual(try store.fileIndex(job: unfinished, root: 1, relativePath: "big.bin"), 1)
            XCTAssertEqual(try store.fileIndex(job: unfinished, root: 2, relativePath: "notes.txt"), 2)
            XCTAssertNil(try store.fileIndex(job: unfinished, root: 0, relativePath: "big.bin"))

            // Recounted from the bitmaps, with their bytes: the last chunk of big.bin is 5 bytes.
            // The complete file keeps no bitmap or progress: its URL says it is all done.
            XCTAssertEqual(try store.fileProgress(job: unfinished, file: 0), FileProgress(chunksDone: 0, bytesDone: 0))
            XCTAssertTrue(try store.doneChunks(job: unfinished, file: 0, capacity: 10).isComplete)
            XCTAssertEqual(try store.fileProgress(job: unfinished, file: 1), FileProgress(chunksDone: 10_001, bytesDone: 100_005))
            XCTAssertEqual(try store.fileProgress(job: unfinished, file: 2), FileProgress(chunksDone: 0, bytesDone: 0))
            XCTAssertEqual(
                try store.counters(unfinished),
                counters(files: 3, total: 1000 + 199_995 + 300, done: 1000 + 100_005, completed: 1))
            XCTAssertEqual(
                try store.doneChunks(job: unfinished, file: 1, capacity: LegacyFixture.bigPlan.count).members,
                LegacyFixture.bigDone)
            XCTAssertEqual(try store.receipts(job: unfinished, file: 1), LegacyFixture.receipts)
            XCTAssertEqual(try store.receipts(job: unfinished, file: 0), [:])

            XCTAssertEqual(try store.job(completed)?.phase, .completed)
            XCTAssertEqual(try store.job(completed)?.updatedAt, fixture.completedAt)
            XCTAssertEqual(try store.roots(completed), ["/srv/report.pdf"])
            XCTAssertEqual(try store.counters(completed), counters(files: 1, total: 4096, done: 4096, completed: 1))
            XCTAssertEqual(try store.listings().map(\.record.id), [unfinished, completed])
        }
        do {
            let env = try rawEnvironment(directory)
            let meta = try env.database(named: "meta")
            let summaries = try env.database(named: "summaries")
            try env.read { txn in
                XCTAssertEqual(try txn.get(meta, Array("layout".utf8)).map { String(decoding: $0, as: UTF8.self) }, "3")
                var left = 0
                try txn.forEach(summaries, prefix: []) { _, _ in
                    left += 1
                    return true
                }
                XCTAssertEqual(left, 0, "layout 2's summaries are dropped")
            }
        }
        before = try Data(contentsOf: URL(fileURLWithPath: dataFile(directory)))
        // Opening again finds layout 3 and changes nothing.
        try await withStore(directory) { store in
            XCTAssertEqual(try store.counters(unfinished).doneBytes, 101_005)
            XCTAssertEqual(try store.fileProgress(job: unfinished, file: 1).chunksDone, 10_001)
        }
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: dataFile(directory))), before, "a second open migrates nothing")

        let store = try StateStore(directory: directory)
        let engine = try TransferEngine(stateDirectory: directory, store: store)
        let listed = try engine.jobs(includingCompleted: true)
        XCTAssertEqual(listed.map(\.id), [unfinished, completed])
        XCTAssertEqual(listed.first?.paths, fixture.jobs[0].files.map(\.path))
        XCTAssertEqual(listed.first?.doneBytes, 101_005)
        XCTAssertEqual(listed.first?.completedFiles, 1)
        XCTAssertEqual(listed.first?.target, "https://user:***@uploads.example/v1?…")
        XCTAssertEqual(listed.last?.paths, ["/srv/report.pdf"])

        // The migrated `finished` index still finds the completed job.
        let pruned = try await store.pruneCompletedJobs(finishedBefore: Date().addingTimeInterval(-3600))
        XCTAssertEqual(pruned, [completed])
        XCTAssertNil(try store.job(completed))
        XCTAssertEqual(try store.roots(completed), [])
        XCTAssertNotNil(try store.job(unfinished))
        // And the migrated job takes new changes.
        try await store.commit(.markDone(job: unfinished, file: 2, chunks: [2], plan: ChunkPlan(fileSize: 300, chunkSize: 100), receipts: [:]))
        XCTAssertEqual(try store.counters(unfinished).doneBytes, 101_105)
    }

    func testMigratesLayout2() async throws {
        let dir = TemporaryDirectory()
        let fixture = LegacyFixture()
        try fixture.write(to: dir.path, layout: 2)
        try await checkMigrated(fixture, in: dir.path)
    }

    func testMigratesLayout1() async throws {
        let dir = TemporaryDirectory()
        let fixture = LegacyFixture()
        try fixture.write(to: dir.path, layout: 1)
        try await checkMigrated(fixture, in: dir.path)
    }

    func testAnUnreadableLegacyRecordIsAnErrorAndTheStoreStaysLayout2() throws {
        let dir = TemporaryDirectory()
        try LegacyFixture().write(to: dir.path, layout: 2)
        do {
            let env = try rawEnvironment(dir.path)
            let jobs = try env.database(named: "jobs", checksummed: true)
            try env.write { txn in try txn.put(jobs, Array("00000000000000c3".utf8), Array("{\"id\":".utf8)) }
        }
        XCTAssertThrowsError(try StateStore(directory: dir.path)) { error in
            guard let error = error as? XferError, error.kind == .stateUnavailable, let message = error.reason else { return XCTFail("\(error)") }
            XCTAssertTrue(message.contains("00000000000000c3"), message)
        }
        let env = try rawEnvironment(dir.path)
        let meta = try env.database(named: "meta")
        let files = try env.database(named: "files", checksummed: true)
        try env.read { txn in
            XCTAssertEqual(try txn.get(meta, Array("layout".utf8)), Array("2".utf8), "the migration is all or nothing")
            XCTAssertNil(try txn.get(files, StateStore.fileKey(LegacyFixture.unfinished, 0)))
        }
    }

    // MARK: Damage and permissions

    func testADamagedValueIsAnErrorNotAnAnswer() async throws {
        let dir = TemporaryDirectory()
        let job = header()
        let plan = ChunkPlan(fileSize: 100, chunkSize: 10)
        try await withStore(dir.path) { store in
            try await createJob(store, job, files: [file(0)])
            try await store.commit(.markDone(job: job.id, file: 0, chunks: [0], plan: plan, receipts: [:]))
        }
        // One bit flipped in the stored bitmap: without the checksum this would read as chunk 1 done.
        // And one in a file's record.
        do {
            let env = try rawEnvironment(dir.path)
            let chunks = try env.database(named: "chunks")
            let files = try env.database(named: "files")
            try env.write { txn in
                for db in [chunks, files] {
                    var entries: [([UInt8], [UInt8])] = []
                    try txn.forEach(db, prefix: []) { key, value in
                        entries.append((key, value))
                        return true
                    }
                    XCTAssertEqual(entries.count, 1)
                    for (key, var value) in entries {
                        value[0] ^= 0b10
                        try txn.put(db, key, value)
                    }
                }
            }
        }
        let store = try StateStore(directory: dir.path)
        XCTAssertThrowsError(try store.doneChunks(job: job.id, file: 0, capacity: 10)) { error in
            guard let error = error as? XferError, error.kind == .stateUnavailable, let message = error.reason else { return XCTFail("\(error)") }
            XCTAssertTrue(message.contains("fails its checksum"), message)
        }
        XCTAssertThrowsError(try store.file(job: job.id, index: 0)) { error in
            guard let error = error as? XferError, error.kind == .stateUnavailable, let message = error.reason else { return XCTFail("\(error)") }
            XCTAssertTrue(message.contains("fails its checksum"), message)
        }
    }

    func testARecordThatDoesNotDecodeIsAnError() async throws {
        let dir = TemporaryDirectory()
        let job = header()
        try await withStore(dir.path) { store in
            try await createJob(store, job, files: [file(0)])
        }
        // Sealed correctly, but of a record version this xfer does not know.
        do {
            let env = try rawEnvironment(dir.path)
            let files = try env.database(named: "files", checksummed: true)
            try env.write { txn in
                var record = StoredFile.body(of: file(0), rootPath: nil)
                record[0] = 9
                try txn.put(files, StateStore.fileKey(job.id, 0), record)
            }
        }
        let store = try StateStore(directory: dir.path)
        XCTAssertThrowsError(try store.file(job: job.id, index: 0)) { error in
            guard let error = error as? XferError, error.kind == .stateUnavailable, let message = error.reason else { return XCTFail("\(error)") }
            XCTAssertTrue(message.contains("unreadable"), message)
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
                guard (error as? XferError)?.kind == .stateUnavailable else { return XCTFail("\(error)") }
            }
        } else {
            XCTAssertThrowsError(try StateStore(directory: readOnly + "/state")) { error in
                guard (error as? XferError)?.kind == .stateUnavailable else { return XCTFail("\(error)") }
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

    // MARK: Crash

    /// A child process commits chunk acknowledgements and reports each one;
    /// it is killed with SIGKILL mid-stream. Every acknowledgement it
    /// reported must be in the store when it is reopened, with counters that
    /// agree with the bitmap.
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

        let id = JobID(rawValue: "00000000000000dd")
        let store = try StateStore(directory: dir.path)
        let done = try store.doneChunks(job: id, file: 0, capacity: 100_000)
        for chunk in reported { XCTAssertTrue(done.contains(chunk), "chunk \(chunk) was reported committed but is lost") }
        XCTAssertNotNil(try store.job(id))
        XCTAssertEqual(try store.file(job: id, index: 0), file(0, size: 1_000_000))
        let progress = try store.fileProgress(job: id, file: 0)
        XCTAssertEqual(progress.chunksDone, done.count, "the counter is committed with the bitmap")
        XCTAssertEqual(progress.bytesDone, Int64(done.count) * 10)
        XCTAssertEqual(try store.counters(id), counters(files: 1, total: 1_000_000, done: progress.bytesDone))
    }

    /// Child half of the test above. XCTest can run only a `test` method in
    /// the child process, so in a normal run it is skipped, and says why.
    func testChildWriter() async throws {
        guard let path = ProcessInfo.processInfo.environment["XFER_TEST_CHILD_STATE"] else {
            throw XCTSkip("the child half of testReopenAfterSIGKILLKeepsEveryReportedCommit: runs only as that test's child process")
        }
        let store = try StateStore(directory: path)
        let id = JobID(rawValue: "00000000000000dd")
        let plan = ChunkPlan(fileSize: 1_000_000, chunkSize: 10)
        try await createJob(store, header(id.rawValue), files: [file(0, size: 1_000_000)])
        for chunk in 0..<100_000 {
            try await store.commit(.markDone(job: id, file: 0, chunks: [chunk], plan: plan, receipts: [:]))
            FileHandle.standardOutput.write(Data("committed \(chunk)\n".utf8))
        }
    }

    // MARK: Binary forms

    func testFileRecordsRoundTripAndRefuseDamage() {
        var handles = ServerHandles()
        handles.set("uploadId", "u-1")
        handles.set("token", "s3cret ключ", secret: true)
        handles.set("", "empty key")
        var full = FileRecord(
            path: "/tmp/naïve vidéo 视频.bin", relativePath: "dir/naïve vidéo 视频.bin", root: 70_000,
            identity: FileIdentity(size: 1 << 40, modificationTimeNanoseconds: -5, inode: .max, device: 1 << 63),
            chunkSize: 8 << 20, isOpen: true, handles: handles, url: "https://files.example/ü?x=1",
            failure: "HTTP 500: ошибка")
        let bare = FileRecord(
            path: "", relativePath: "", root: 0, identity: FileIdentity(size: 0, modificationTimeNanoseconds: 0, inode: 0, device: 0),
            chunkSize: 1)
        func roundTrip(_ record: FileRecord, target: String = "https://files.example") -> FileRecord? {
            StoredFile.decode(
                body: StoredFile.body(of: record, rootPath: nil), server: StoredFile.server(of: record),
                url: record.url.map { StoredFile.url($0, of: record, target: target) }, roots: [], target: target)
        }
        for record in [full, bare] {
            XCTAssertEqual(roundTrip(record), record)
            XCTAssertEqual(StoredFile.decode(whole: StoredFile.whole(record)), record)
        }
        let decoded = roundTrip(full)
        XCTAssertEqual(decoded?.handles.redacted["token"], "<redacted>")
        XCTAssertEqual(decoded?.handles["token"], "s3cret ключ")
        XCTAssertEqual(decoded?.handles.redacted["uploadId"], "u-1")
        full.url = nil
        XCTAssertNil(roundTrip(full)?.url ?? nil)
        XCTAssertEqual(roundTrip(full), full)
        full.failure = nil
        full.url = ""
        XCTAssertEqual(roundTrip(full), full, "an empty URL is not no URL")

        // What a URL repeats of the target, a handle and the relative path is
        // named, not written; the URL comes back byte for byte, a decomposed
        // "é" too (String comparison would take it for the composed one).
        var tree = FileRecord(
            path: "/data/a/e\u{301}t\u{e9}.bin", relativePath: "a/e\u{301}t\u{e9}.bin", root: 0,
            identity: FileIdentity(size: 5, modificationTimeNanoseconds: 1, inode: 2, device: 3), chunkSize: 5, isOpen: true)
        tree.handles.set("uploadId", "0123456789abcdef0123456789abcdef")
        tree.handles.set("secret", "0123456789abcdef0123456789abcdef0", secret: true)
        tree.url = "http://127.0.0.1:8080/downloads/0123456789abcdef0123456789abcdef/a/e\u{301}t\u{e9}.bin"
        let short = StoredFile.url(tree.url!, of: tree, target: "http://127.0.0.1:8080")
        XCTAssertLessThan(short.count, 25, "the URL is stored as what it adds")
        XCTAssertFalse(String(decoding: short, as: UTF8.self).contains("0123456789abcdef0"), "a secret handle is never named")
        let back = StoredFile.decode(
            body: StoredFile.body(of: tree, rootPath: "/data"), server: StoredFile.server(of: tree), url: short, roots: ["/data"],
            target: "http://127.0.0.1:8080")
        XCTAssertEqual(back, tree)
        XCTAssertEqual(back.map { Array($0.url!.utf8) }, Array(tree.url!.utf8))
        var composed = tree
        composed.url = "http://127.0.0.1:8080/downloads/x/a/\u{e9}t\u{e9}.bin"
        let kept = StoredFile.decode(
            body: StoredFile.body(of: composed, rootPath: nil), server: StoredFile.server(of: composed),
            url: StoredFile.url(composed.url!, of: composed, target: ""), roots: [], target: "")
        XCTAssertEqual(kept.map { Array($0.url!.utf8) }, Array(composed.url!.utf8))

        let body = StoredFile.body(of: full, rootPath: nil)
        for length in 0..<body.count {
            XCTAssertNil(StoredFile.decode(body: Array(body.prefix(length)), server: nil, url: nil, roots: [], target: ""), "cut to \(length) bytes")
        }
        XCTAssertNil(StoredFile.decode(body: body + [0], server: nil, url: nil, roots: [], target: ""), "trailing bytes")
        let server = StoredFile.server(of: full)!
        for length in 0..<server.count {
            XCTAssertNil(StoredFile.decode(body: body, server: Array(server.prefix(length)), url: nil, roots: [], target: ""))
        }
        var otherVersion = body
        otherVersion[0] = 9
        XCTAssertNil(StoredFile.decode(body: otherVersion, server: nil, url: nil, roots: [], target: ""))
    }

    func testJobRecordsRoundTripAndRefuseDamage() {
        var handles = ServerHandles()
        handles.set("sourceId", "abc")
        handles.set("key", "s3cret", secret: true)
        let id = JobID(rawValue: "0123456789abcdef")
        var full = JobRecord(
            id: id, backend: "s3", target: "https://bücket.example/prefix/ü", createdAt: Date(timeIntervalSince1970: 1_700_000_000.25),
            updatedAt: Date(timeIntervalSince1970: 1_700_000_123.5), phase: .failed, lastError: "transfer failed: HTTP 400 — nein",
            concurrency: 16, isStarted: true, handles: handles, rootCount: 3, firstRoot: "/données/视频",
            rules: TreeRules(includes: ["*.jpg", "é*"], excludes: ["tmp/**"], followSymlinks: true))
        let bare = JobRecord(
            id: id, backend: "", target: "", createdAt: Date(timeIntervalSince1970: 0), updatedAt: Date(timeIntervalSince1970: 0),
            concurrency: 0, rootCount: 0, firstRoot: "")
        for record in [full, bare] {
            XCTAssertEqual(JobRecord(id: id, decoding: record.encoded), record)
        }
        XCTAssertEqual(JobRecord(id: id, decoding: full.encoded)?.handles.redacted["key"], "<redacted>")
        XCTAssertEqual(JobRecord(id: JobID(rawValue: "ffffffffffffffff"), decoding: full.encoded)?.id.rawValue, "ffffffffffffffff")
        for phase in [JobPhase.unfinished, .completed, .failed] {
            full.phase = phase
            full.lastError = phase == .failed ? "x" : nil
            XCTAssertEqual(JobRecord(id: id, decoding: full.encoded), full)
        }

        let encoded = full.encoded
        for length in 0..<encoded.count {
            XCTAssertNil(JobRecord(id: id, decoding: Array(encoded.prefix(length))), "cut to \(length) bytes")
        }
        XCTAssertNil(JobRecord(id: id, decoding: encoded + [0]), "trailing bytes")
        var stream = full
        stream.isStream = true
        XCTAssertEqual(JobRecord(id: id, decoding: stream.encoded), stream)
        XCTAssertEqual(stream.encoded.count, encoded.count + 1, "a stream's record is a file push's plus its marker")
        XCTAssertNil(JobRecord(id: id, decoding: stream.encoded + [1]), "trailing bytes after the marker")
        var otherVersion = encoded
        otherVersion[0] = 0
        XCTAssertNil(JobRecord(id: id, decoding: otherVersion))
    }

    func testCountersRoundTripAndRefuseDamage() {
        let full = counters(files: 100_000, total: 1 << 50, done: (1 << 50) - 7, completed: 99_999, failed: 1)
        for value in [full, JobCounters()] {
            XCTAssertEqual(JobCounters(decoding: value.encoded), value)
        }
        let encoded = full.encoded
        XCTAssertEqual(encoded.count, 40)
        for length in 0..<encoded.count {
            XCTAssertNil(JobCounters(decoding: Array(encoded.prefix(length))), "cut to \(length) bytes")
        }
        XCTAssertNil(JobCounters(decoding: encoded + [0]), "trailing bytes")
    }

    /// A path that follows from its root is stored as a marker and rebuilt
    /// from the root on reading; any other path is stored whole.
    func testPathsThatFollowFromTheirRootAreStoredOnce() {
        func body(_ record: FileRecord, _ root: String?) -> [UInt8] { StoredFile.body(of: record, rootPath: root) }
        func decode(_ body: [UInt8], _ roots: [String]) -> FileRecord? {
            StoredFile.decode(body: body, server: nil, url: nil, roots: roots, target: "")
        }
        var inTree = file(0)
        inTree.path = "/data/photos/2024/a b.jpg"
        inTree.relativePath = "2024/a b.jpg"
        let compact = body(inTree, "/data/photos")
        XCTAssertLessThan(compact.count, body(inTree, nil).count - 20)
        XCTAssertEqual(decode(compact, ["/data/photos"]), inTree)
        var named = file(1)
        named.path = "/data/one.bin"
        named.relativePath = "one.bin"
        named.root = 1
        XCTAssertEqual(decode(body(named, "/data/one.bin"), ["/x", "/data/one.bin"]), named)
        var underSlash = file(2)
        underSlash.path = "/etc.txt"
        underSlash.relativePath = "etc.txt"
        XCTAssertEqual(decode(body(underSlash, "/"), ["/"]), underSlash)
        // Elsewhere than its root says: stored whole.
        XCTAssertEqual(decode(body(inTree, "/other"), ["/other"]), inTree)
        // A marker whose root is unknown is unreadable, not a wrong path.
        XCTAssertNil(decode(compact, []))
        // A path canonically equal to its root and relative path joined, but of other bytes (NFD
        // against NFC): kept whole, so it decodes to the bytes it had.
        var decomposed = file(3)
        decomposed.path = "/data/cafe\u{301}.txt"
        decomposed.relativePath = "caf\u{E9}.txt"
        XCTAssertEqual(decomposed.path, FileRecord.join("/data", decomposed.relativePath))
        XCTAssertFalse(FileRecord.path(decomposed.path, isJoinOf: "/data", decomposed.relativePath))
        XCTAssertEqual(decode(body(decomposed, "/data"), ["/data"]).map { Array($0.path.utf8) }, Array(decomposed.path.utf8))
        XCTAssertTrue(FileRecord.path("/data/a/b", isJoinOf: "/data", "a/b"))
        XCTAssertTrue(FileRecord.path("/a", isJoinOf: "/", "a"))
        XCTAssertFalse(FileRecord.path("/data/a/bc", isJoinOf: "/data", "a/b"))
        XCTAssertFalse(FileRecord.path("/datx/a/b", isJoinOf: "/data", "a/b"))
        XCTAssertFalse(FileRecord.path("/data-a/b", isJoinOf: "/data", "a/b"))
    }

    /// A file's name is what follows its relative path's last '/' byte.
    func testAFilesNameIsItsLastComponent() {
        func name(_ relativePath: String) -> String {
            var record = file(0)
            record.relativePath = relativePath
            return record.name
        }
        XCTAssertEqual(name("photos/2024/a b.jpg"), "a b.jpg")
        XCTAssertEqual(name("one.bin"), "one.bin")
        XCTAssertEqual(name(""), "")
        XCTAssertEqual(name("a/b/"), "b")
        // A combining mark after the slash starts the name, as on disk.
        XCTAssertEqual(Array(name("a/\u{301}x").utf8), Array("\u{301}x".utf8))
    }

    /// The check that ends a run: the first file of the job without a URL, other jobs aside.
    func testFirstFileWithoutURLIsTheFirstGapOfItsJobOnly() async throws {
        let dir = TemporaryDirectory()
        let store = try StateStore(directory: dir.path)
        func withURL(_ index: Int) -> FileRecord {
            var record = file(index)
            record.url = "http://127.0.0.1:1/f\(index)"
            return record
        }
        let id = JobID(rawValue: "00000000000000a1")
        try await createJob(store, header(id.rawValue), files: [withURL(0), withURL(1), file(2), withURL(3), file(4)])
        // Another job, sorted before and after, with files lacking URLs.
        try await createJob(store, header("00000000000000a0"), files: [file(0)])
        try await createJob(store, header("00000000000000a2"), files: [file(0)])
        XCTAssertEqual(try store.firstFileWithoutURL(job: id), 2)
        try await store.commit(.putFiles(job: id, files: [(index: 2, record: withURL(2))]))
        XCTAssertEqual(try store.firstFileWithoutURL(job: id), 4)
        try await store.commit(.putFiles(job: id, files: [(index: 4, record: withURL(4))]))
        XCTAssertNil(try store.firstFileWithoutURL(job: id))
        XCTAssertNil(try store.firstFileWithoutURL(job: JobID(rawValue: "00000000000000ff")))
    }
}
