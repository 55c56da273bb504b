import Foundation
import XCTest
import XferTestSupport

@testable import Xfer

/// The job catalog over a real LMDB store: progress counters, listing,
/// id prefixes, pruning and redaction. No network.
final class JobCatalogTests: XCTestCase {
    private var directory: TemporaryDirectory!

    override func setUp() {
        directory = TemporaryDirectory("xfer-catalog")
    }

    override func tearDown() {
        directory = nil
    }

    private func record(
        _ id: String, sizes: [Int64] = [100], chunkSize: Int = 10, phase: JobPhase = .unfinished,
        created: Date = Date(), updated: Date = Date()
    ) -> JobRecord {
        var record = JobRecord(
            id: JobID(rawValue: id), backend: "patch", target: "http://127.0.0.1:1", createdAt: created,
            updatedAt: updated, concurrency: 2,
            files: sizes.enumerated().map { index, size in
                FileRecord(
                    path: "/tmp/file\(index)",
                    identity: FileIdentity(size: size, modificationTimeNanoseconds: 1, inode: UInt64(index), device: 1),
                    chunkSize: chunkSize)
            })
        record.phase = phase
        return record
    }

    func testCountersFollowEveryKindOfChange() async throws {
        let store = try StateStore(directory: directory.path)
        let id = JobID(rawValue: "00000000000000a1")
        // 95 bytes in chunks of 10: nine full chunks and a last one of 5.
        try await store.commit(.putJob(record(id.rawValue, sizes: [95])))
        func progress() throws -> FileProgress { try XCTUnwrap(store.jobWithProgress(id)?.files.first) }

        XCTAssertEqual(try progress(), FileProgress(chunksDone: 0, lastChunkDone: false))
        try await store.commit(.markDone(job: id, file: 0, chunks: [0, 1, 2], receipts: [:]))
        // Marking a done chunk again must not count it twice.
        try await store.commit(.markDone(job: id, file: 0, chunks: [2, 9], receipts: [:]))
        XCTAssertEqual(try progress(), FileProgress(chunksDone: 4, lastChunkDone: true))
        try await store.commit(.markNotDone(job: id, file: 0, chunks: [9, 5]))
        XCTAssertEqual(try progress(), FileProgress(chunksDone: 3, lastChunkDone: false))
        var done = ChunkSet(capacity: 10)
        for chunk in [0, 4, 8, 9] { done.insert(chunk) }
        try await store.commit(.replaceDone(job: id, file: 0, done: done, receipts: [:]))
        XCTAssertEqual(try progress(), FileProgress(chunksDone: 4, lastChunkDone: true))
        XCTAssertEqual(try store.doneChunks(job: id, file: 0, capacity: 10).count, 4, "counter and bitmap agree")

        let engine = try TransferEngine(stateDirectory: directory.path)
        XCTAssertEqual(try engine.details(of: id).files.first?.doneBytes, 35, "three full chunks and the 5-byte last one")
        XCTAssertEqual(try engine.jobs().first?.doneBytes, 35)

        try await store.commit(.deleteJob(id))
        XCTAssertNil(try store.jobWithProgress(id))
        try await store.commit(.putJob(record(id.rawValue, sizes: [95])))
        XCTAssertEqual(try progress().chunksDone, 0, "a deleted job's counter is gone with it")
    }

    /// Stores written before the counters existed have bitmaps only; the
    /// count comes from the bitmap and is kept from the next change on.
    func testBitmapsWithoutCounterAreCountedOnce() async throws {
        let store = try StateStore(directory: directory.path)
        let id = JobID(rawValue: "00000000000000a2")
        try await store.commit(.putJob(record(id.rawValue, sizes: [100_000], chunkSize: 10)))
        try await store.commit(.markDone(job: id, file: 0, chunks: [1, 8191, 8192, 9_999], receipts: [:]))
        // Simulate the old layout: drop the counter, keep the bitmap.
        let env = try LMDBEnvironment(directory: directory.file("db"), mapSize: 64 << 20, maxDatabases: 8)
        let progressDB = try env.database(named: "progress")
        try env.write { txn in try txn.delete(progressDB, StateStore.fileKey(id, 0)) }

        let reopened = try StateStore(directory: directory.path)
        XCTAssertEqual(try reopened.jobWithProgress(id)?.files.first, FileProgress(chunksDone: 4, lastChunkDone: true))
        try await reopened.commit(.markDone(job: id, file: 0, chunks: [3], receipts: [:]))
        XCTAssertEqual(try reopened.jobWithProgress(id)?.files.first?.chunksDone, 5)
    }

    func testListingsRoundTripAndStoresWithoutThemStillList() async throws {
        // Whole seconds: a Date survives seconds-since-1970 (the record's JSON
        // and the summary) exactly only then.
        let when = Date(timeIntervalSince1970: 1_700_000_000)
        var job = record("00000000000000f1", sizes: [0, 12_345], chunkSize: 100, phase: .failed, created: when, updated: when)
        job.lastError = "transfer failed: HTTP 400"
        job.files[0].path = "/tmp/naïve vidéo 视频.bin"
        let listing = JobListing(job)
        XCTAssertEqual(JobListing(id: job.id, decoding: listing.encoded), listing)
        XCTAssertNil(JobListing(id: job.id, decoding: Array(listing.encoded.dropLast())), "a cut summary is refused")
        var unfinished = job
        unfinished.lastError = nil
        XCTAssertEqual(JobListing(id: job.id, decoding: JobListing(unfinished).encoded)?.lastError, .none)

        let store = try StateStore(directory: directory.path)
        try await store.commit(.putJob(job))
        let engine = try TransferEngine(stateDirectory: directory.path)
        let withSummary = try engine.jobs()
        // A store written before summaries existed has only the JSON record.
        let env = try LMDBEnvironment(directory: directory.file("db"), mapSize: 64 << 20, maxDatabases: 8)
        let summaries = try env.database(named: "summaries")
        try env.write { txn in try txn.delete(summaries, Array(job.id.rawValue.utf8)) }
        XCTAssertEqual(try engine.jobs(), withSummary)
        XCTAssertEqual(withSummary.first?.files, ["/tmp/naïve vidéo 视频.bin", "/tmp/file1"])
        XCTAssertEqual(withSummary.first?.lastError, "transfer failed: HTTP 400")
        XCTAssertEqual(withSummary.first?.totalBytes, 12_345)
    }

    func testListingOrdersByAgeAndHidesCompletedUnlessAsked() async throws {
        let store = try StateStore(directory: directory.path)
        let now = Date()
        try await store.commit(.putJob(record("00000000000000b3", created: now)))
        try await store.commit(.putJob(record("00000000000000b1", created: now.addingTimeInterval(-60))))
        var failed = record("00000000000000b2", created: now.addingTimeInterval(-30), updated: now)
        failed.phase = .failed
        failed.lastError = "transfer failed: HTTP 400"
        try await store.commit(.putJob(failed))
        try await store.commit(.putJob(record("00000000000000b0", phase: .completed, created: now.addingTimeInterval(-90))))

        let engine = try TransferEngine(stateDirectory: directory.path)
        let unfinished = try engine.jobs()
        XCTAssertEqual(unfinished.map(\.id.rawValue), ["00000000000000b1", "00000000000000b2", "00000000000000b3"])
        XCTAssertEqual(unfinished.map(\.state), [.unfinished, .failed, .unfinished])
        XCTAssertEqual(unfinished[1].lastError, "transfer failed: HTTP 400")
        XCTAssertNil(unfinished[0].runningProcess)

        let all = try engine.jobs(includingCompleted: true)
        XCTAssertEqual(all.first?.id.rawValue, "00000000000000b0")
        XCTAssertEqual(all.first?.state, .completed)
        XCTAssertEqual(all.first?.doneBytes, all.first?.totalBytes)
    }

    func testAJobHeldByALiveProcessIsRunning() async throws {
        let store = try StateStore(directory: directory.path)
        let id = JobID(rawValue: "00000000000000c1")
        try await store.commit(.putJob(record(id.rawValue)))
        let engine = try TransferEngine(stateDirectory: directory.path)
        do {
            let lock = try JobLock(stateDirectory: directory.path, job: id)
            XCTAssertEqual(try engine.jobs().first?.state, .running)
            XCTAssertEqual(try engine.jobs().first?.runningProcess, getpid())
            // A running job cannot be cancelled from elsewhere.
            do {
                _ = try await engine.cancelJob(id)
                XCTFail("cancelling a running job must fail")
            } catch {
                XCTAssertEqual(error.exitCode, 3)
            }
            withExtendedLifetime(lock) {}
        }
        XCTAssertEqual(try engine.jobs().first?.state, .unfinished, "the lock is released with its holder")
    }

    func testJobIDsMatchByUniquePrefix() async throws {
        let store = try StateStore(directory: directory.path)
        for id in ["abc0000000000001", "abc0000000000002", "def0000000000003"] {
            try await store.commit(.putJob(record(id)))
        }
        let engine = try TransferEngine(stateDirectory: directory.path)
        XCTAssertEqual(try engine.jobID(matching: "def").rawValue, "def0000000000003")
        XCTAssertEqual(try engine.jobID(matching: "ABC0000000000002").rawValue, "abc0000000000002")
        XCTAssertThrowsError(try engine.jobID(matching: "abc")) { error in
            XCTAssertEqual((error as? XferError)?.exitCode, 2)
            XCTAssertTrue("\(error)".contains("matches 2 jobs"), "\(error)")
        }
        for unknown in ["0", "xyz", "", "abc00000000000019"] {
            XCTAssertThrowsError(try engine.jobID(matching: unknown)) { error in
                guard case XferError.unknownJob = error else { return XCTFail("\(unknown): \(error)") }
            }
        }
    }

    func testPruneDropsOnlyCompletedJobsPastTheRetention() async throws {
        let store = try StateStore(directory: directory.path)
        let old = Date().addingTimeInterval(-7200)
        try await store.commit(.putJob(record("00000000000000d1", phase: .completed, updated: old)))
        try await store.commit(.markDone(job: JobID(rawValue: "00000000000000d1"), file: 0, chunks: [0], receipts: [0: "r"]))
        try await store.commit(.putJob(record("00000000000000d2", phase: .completed, updated: Date())))
        try await store.commit(.putJob(record("00000000000000d3", phase: .unfinished, updated: old)))
        // Completed long ago, then pushed again: its index entry is stale.
        try await store.commit(.putJob(record("00000000000000d4", phase: .completed, updated: old)))
        try await store.commit(.putJob(record("00000000000000d4", phase: .unfinished, updated: Date())))
        _ = try JobLock(stateDirectory: directory.path, job: JobID(rawValue: "00000000000000d1"))

        let engine = try TransferEngine(stateDirectory: directory.path, finishedJobRetention: .seconds(3600))
        let pruned = try await engine.pruneCompletedJobs()
        XCTAssertEqual(pruned.map(\.rawValue), ["00000000000000d1"])
        XCTAssertEqual(
            try engine.jobs(includingCompleted: true).map(\.id.rawValue).sorted(),
            ["00000000000000d2", "00000000000000d3", "00000000000000d4"])
        XCTAssertEqual(try store.receipts(job: JobID(rawValue: "00000000000000d1"), file: 0), [:])
        XCTAssertFalse(FileManager.default.fileExists(atPath: directory.file("locks/00000000000000d1.lock")))
        let again = try await engine.pruneCompletedJobs()
        XCTAssertEqual(again, [], "pruning twice finds nothing more")
    }

    func testTargetsAreShownWithoutCredentialsOrQuery() {
        XCTAssertEqual(TransferEngine.displayURL("https://uploads.example.com/v1"), "https://uploads.example.com/v1")
        XCTAssertEqual(
            TransferEngine.displayURL("https://alice:hunter2@uploads.example.com/v1?key=s3cret"),
            "https://alice:***@uploads.example.com/v1?…")
        XCTAssertFalse(TransferEngine.displayURL("http://h/p?sig=abc#frag").contains("abc"))
    }

    func testErrorsForUnknownJobsExitWith2() async throws {
        let engine = try TransferEngine(stateDirectory: directory.path)
        let id = JobID(rawValue: "00000000000000e1")
        XCTAssertThrowsError(try engine.details(of: id)) { XCTAssertEqual(($0 as? XferError)?.exitCode, 2) }
        do {
            _ = try await engine.resume(id, using: [])
            XCTFail("resuming an unknown job must fail")
        } catch {
            XCTAssertEqual(error, .unknownJob(id.rawValue))
        }
        do {
            _ = try await engine.cancelJob(id)
            XCTFail("cancelling an unknown job must fail")
        } catch {
            XCTAssertEqual(error.exitCode, 2)
        }
    }

    /// `xfer list` with many jobs. Timing on a shared 2-core machine is too
    /// noisy to assert in every run; `XFER_BENCH=1` runs it and prints the time.
    func testListingTenThousandJobs() async throws {
        guard ProcessInfo.processInfo.environment["XFER_BENCH"] != nil else { return }
        // XFER_BENCH_STATE keeps the store for timing `xfer list` itself.
        let path = ProcessInfo.processInfo.environment["XFER_BENCH_STATE"] ?? directory.path
        let store = try StateStore(directory: path)
        var changes: [StateChange] = []
        for index in 0..<10_000 {
            let id = JobID(rawValue: String(format: "%016x", index))
            changes.append(.putJob(record(id.rawValue, sizes: [1 << 30, 5 << 20], chunkSize: 1 << 20)))
            changes.append(.markDone(job: id, file: 0, chunks: Array(0..<(index % 1024)), receipts: [:]))
        }
        try await store.commit(changes)
        let engine = try TransferEngine(stateDirectory: path)
        let clock = ContinuousClock()
        var jobs: [JobSummary] = []
        let elapsed = try clock.measure { jobs = try engine.jobs() }
        print("listing 10,000 jobs took \(elapsed)")
        let raw = try clock.measure { _ = try store.listings() }
        print("  of which store reads + decode: \(raw)")
        let decodeOnly = try clock.measure { _ = try store.jobs() }
        print("  decode only: \(decodeOnly)")
        XCTAssertEqual(jobs.count, 10_000)
        XCTAssertEqual(jobs.first(where: { $0.id.rawValue == String(format: "%016x", 1000) })?.doneBytes, 1000 << 20)
    }
}
