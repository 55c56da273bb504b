import Foundation
import XCTest
import XferTestSupport

@testable import Xfer

/// The job catalog over a real LMDB store: listing, details, id prefixes,
/// pruning and redaction. No network.
final class JobCatalogTests: XCTestCase {
    private var directory: TemporaryDirectory!

    override func setUp() {
        directory = TemporaryDirectory("xfer-catalog")
    }

    override func tearDown() {
        directory = nil
    }

    private func record(
        _ id: String, phase: JobPhase = .unfinished, created: Date = Date(), updated: Date = Date(),
        roots: [String] = ["/tmp"]
    ) -> JobRecord {
        JobRecord(
            id: JobID(rawValue: id), backend: "patch", target: "http://127.0.0.1:1", createdAt: created, updatedAt: updated,
            phase: phase, concurrency: 2, rootCount: roots.count, firstRoot: roots[0])
    }

    private func files(_ sizes: [Int64], chunkSize: Int = 10, under root: String = "/tmp") -> [(index: Int, record: FileRecord)] {
        sizes.enumerated().map { index, size in
            (
                index,
                FileRecord(
                    path: "\(root)/file\(index)", relativePath: "file\(index)", root: 0,
                    identity: FileIdentity(size: size, modificationTimeNanoseconds: 1, inode: UInt64(index), device: 1),
                    chunkSize: chunkSize)
            )
        }
    }

    /// Creates job `id` with one file per size, as a push records it.
    @discardableResult
    private func create(
        _ store: StateStore, _ id: String, sizes: [Int64] = [100], chunkSize: Int = 10, phase: JobPhase = .unfinished,
        created: Date = Date(), updated: Date = Date(), roots: [String] = ["/tmp"]
    ) async throws -> JobRecord {
        let header = record(id, phase: phase, created: created, updated: updated, roots: roots)
        try await store.commit([
            .createJob(header, roots: roots),
            .putFiles(job: header.id, files: files(sizes, chunkSize: chunkSize, under: roots[0])),
        ])
        return header
    }

    func testListingsShowHeadersCountersAndPaths() async throws {
        let store = try StateStore(directory: directory.path)
        let when = Date(timeIntervalSince1970: 1_700_000_000)
        let roots = ["/tmp/naïve vidéo 视频", "/tmp/other"]
        var failed = try await create(
            store, "00000000000000f1", sizes: [0, 12_345], chunkSize: 100, phase: .failed, created: when, updated: when,
            roots: roots)
        failed.lastError = "transfer failed: HTTP 400"
        try await store.commit(.putJob(failed))
        var broken = files([0, 12_345], chunkSize: 100, under: roots[0])[1].record
        broken.failure = "HTTP 400"
        try await store.commit([
            .putFiles(job: failed.id, files: [(index: 1, record: broken)]),
            .markDone(
                job: failed.id, file: 1, chunks: [0, 123], plan: ChunkPlan(fileSize: 12_345, chunkSize: 100), receipts: [:]),
        ])
        try await create(store, "00000000000000f2", sizes: [10, 20, 30], created: when.addingTimeInterval(1), roots: ["/srv/one"])

        XCTAssertEqual(
            try store.listings(),
            [
                JobListing(record: failed, counters: try store.counters(failed.id)),
                JobListing(record: try XCTUnwrap(try store.job(JobID(rawValue: "00000000000000f2"))), counters: try store.counters(JobID(rawValue: "00000000000000f2"))),
            ])
        let engine = try TransferEngine(stateDirectory: directory.path, store: store)
        let listed = try engine.jobs()
        XCTAssertEqual(listed.map(\.id.rawValue), ["00000000000000f1", "00000000000000f2"])
        let first = listed[0]
        XCTAssertEqual(first.paths, roots)
        XCTAssertEqual(first.state, .failed)
        XCTAssertEqual(first.lastError, "transfer failed: HTTP 400")
        XCTAssertEqual(first.fileCount, 2)
        XCTAssertEqual(first.totalBytes, 12_345)
        XCTAssertEqual(first.doneBytes, 145, "a full chunk and the 45-byte last one")
        XCTAssertEqual(first.failedFiles, 1)
        XCTAssertEqual(first.completedFiles, 0)
        XCTAssertEqual(first.createdAt, when)
        XCTAssertEqual(listed[1].paths, ["/srv/one"])
        XCTAssertEqual(listed[1].fileCount, 3)
        XCTAssertEqual(listed[1].totalBytes, 60)
        XCTAssertNil(listed[1].lastError)
    }

    func testListingOrdersByAgeAndHidesCompletedUnlessAsked() async throws {
        let store = try StateStore(directory: directory.path)
        let now = Date()
        try await create(store, "00000000000000b3", created: now)
        try await create(store, "00000000000000b1", created: now.addingTimeInterval(-60))
        var failed = try await create(store, "00000000000000b2", created: now.addingTimeInterval(-30), updated: now)
        failed.phase = .failed
        failed.lastError = "transfer failed: HTTP 400"
        try await store.commit(.putJob(failed))
        try await create(store, "00000000000000b0", phase: .completed, created: now.addingTimeInterval(-90))

        let engine = try TransferEngine(stateDirectory: directory.path, store: store)
        let unfinished = try engine.jobs()
        XCTAssertEqual(unfinished.map(\.id.rawValue), ["00000000000000b1", "00000000000000b2", "00000000000000b3"])
        XCTAssertEqual(unfinished.map(\.state), [.unfinished, .failed, .unfinished])
        XCTAssertEqual(unfinished[1].lastError, "transfer failed: HTTP 400")
        XCTAssertNil(unfinished[0].runningProcess)

        let all = try engine.jobs(includingCompleted: true)
        XCTAssertEqual(all.first?.id.rawValue, "00000000000000b0")
        XCTAssertEqual(all.first?.state, .completed)
        XCTAssertEqual(all.first?.doneBytes, all.first?.totalBytes)
        XCTAssertEqual(all.first?.totalBytes, 100)
    }

    func testAJobHeldByALiveProcessIsRunning() async throws {
        let store = try StateStore(directory: directory.path)
        let id = JobID(rawValue: "00000000000000c1")
        try await create(store, id.rawValue)
        let engine = try TransferEngine(stateDirectory: directory.path, store: store)
        do {
            let lock = try JobLock(stateDirectory: directory.path, job: id)
            XCTAssertEqual(try engine.jobs().first?.state, .running)
            XCTAssertEqual(try engine.jobs().first?.runningProcess, getpid())
            XCTAssertEqual(try engine.details(of: id).summary.state, .running)
            // A running job cannot be cancelled from elsewhere.
            do {
                _ = try await engine.cancelJob(id)
                XCTFail("cancelling a running job must fail")
            } catch {
                guard error.kind == .jobLocked else { return XCTFail("\(error)") }
            }
            withExtendedLifetime(lock) {}
        }
        XCTAssertEqual(try engine.jobs().first?.state, .unfinished, "the lock is released with its holder")
        XCTAssertNotNil(try store.job(id))
    }

    func testJobIDsMatchByUniquePrefix() async throws {
        let store = try StateStore(directory: directory.path)
        for id in ["abc0000000000001", "abc0000000000002", "def0000000000003"] {
            try await create(store, id)
        }
        let engine = try TransferEngine(stateDirectory: directory.path, store: store)
        XCTAssertEqual(try engine.jobID(matching: "def").rawValue, "def0000000000003")
        XCTAssertEqual(try engine.jobID(matching: "ABC0000000000002").rawValue, "abc0000000000002")
        XCTAssertEqual(try engine.jobID(matching: " abc0000000000001 ").rawValue, "abc0000000000001")
        XCTAssertThrowsError(try engine.jobID(matching: "abc")) { error in
            XCTAssertTrue((error as? XferError)?.isBadInput == true, "\(error)")
            XCTAssertTrue("\(error)".contains("matches 2 jobs"), "\(error)")
        }
        for unknown in ["0", "xyz", "", "abc00000000000019"] {
            XCTAssertThrowsError(try engine.jobID(matching: unknown)) { error in
                guard (error as? XferError)?.kind == .unknownJob else { return XCTFail("\(unknown): \(error)") }
            }
        }
    }

    func testDetailsPageThroughFilesAndListFailures() async throws {
        let store = try StateStore(directory: directory.path)
        // More files than one page of the store (4,096).
        let count = 5_000
        var header = try await create(store, "00000000000000e2", sizes: Array(repeating: 95, count: count))
        header.handles.set("key", "s3cret", secret: true)
        header.handles.set("sourceId", "abc")
        try await store.commit(.putJob(header))
        var changed: [(index: Int, record: FileRecord)] = []
        for index in [1, 4_097, 4_999] {
            var record = files(Array(repeating: 95, count: count))[index].record
            record.failure = "HTTP 500 for \(index)"
            record.handles.set("token", "t-\(index)", secret: true)
            changed.append((index, record))
        }
        try await store.commit(.putFiles(job: header.id, files: changed))
        try await store.commit(
            .markDone(job: header.id, file: 4_097, chunks: [0, 9], plan: ChunkPlan(fileSize: 95, chunkSize: 10), receipts: [:]))

        let engine = try TransferEngine(stateDirectory: directory.path, store: store)
        let all = try engine.details(of: header.id)
        XCTAssertEqual(all.files.map(\.index), Array(0..<count))
        XCTAssertEqual(all.files[4_097].doneBytes, 15)
        XCTAssertEqual(all.files[4_097].chunksDone, 2)
        XCTAssertEqual(all.files[4_097].chunkCount, 10)
        XCTAssertEqual(all.files[4_097].relativePath, "file4097")
        XCTAssertEqual(all.files[1].handles["token"], "<redacted>")
        XCTAssertEqual(all.handles, ["key": "<redacted>", "sourceId": "abc"])
        XCTAssertEqual(all.failedFiles.map(\.index), [1, 4_097, 4_999])
        XCTAssertEqual(all.failedFiles.map(\.failure), ["HTTP 500 for 1", "HTTP 500 for 4097", "HTTP 500 for 4999"])
        XCTAssertEqual(all.summary.failedFiles, 3)
        XCTAssertEqual(all.summary.fileCount, count)
        XCTAssertEqual(all.summary.totalBytes, Int64(count) * 95)
        XCTAssertEqual(all.summary.doneBytes, 15)

        let some = try engine.details(of: header.id, files: .first(3), failureLimit: 2)
        XCTAssertEqual(some.files.map(\.index), [0, 1, 2])
        XCTAssertEqual(some.failedFiles.map(\.index), [1, 4_097])
        XCTAssertEqual(try engine.details(of: header.id, files: .first(0)).files.count, 0)
        XCTAssertEqual(try engine.details(of: header.id, files: .first(4_100)).files.last?.index, 4_099)
    }

    func testPruneDropsOnlyCompletedJobsPastTheRetention() async throws {
        let store = try StateStore(directory: directory.path)
        let old = Date().addingTimeInterval(-7200)
        let d1 = JobID(rawValue: "00000000000000d1")
        try await create(store, d1.rawValue, phase: .completed, updated: old)
        try await store.commit(
            .markDone(job: d1, file: 0, chunks: [0], plan: ChunkPlan(fileSize: 100, chunkSize: 10), receipts: [0: "r"]))
        try await create(store, "00000000000000d2", phase: .completed, updated: Date())
        try await create(store, "00000000000000d3", phase: .unfinished, updated: old)
        // Completed long ago, then pushed again: its index entry is stale.
        try await create(store, "00000000000000d4", phase: .completed, updated: old)
        try await store.commit(.putJob(record("00000000000000d4", phase: .unfinished, updated: Date())))
        _ = try JobLock(stateDirectory: directory.path, job: d1)

        let engine = try TransferEngine(
            stateDirectory: directory.path, store: store, finishedJobRetention: .seconds(3600))
        let pruned = try await engine.pruneCompletedJobs()
        XCTAssertEqual(pruned, [d1])
        XCTAssertEqual(
            try engine.jobs(includingCompleted: true).map(\.id.rawValue).sorted(),
            ["00000000000000d2", "00000000000000d3", "00000000000000d4"])
        // Everything under the job's id is gone.
        XCTAssertNil(try store.job(d1))
        XCTAssertEqual(try store.counters(d1), JobCounters())
        XCTAssertEqual(try store.roots(d1), [])
        XCTAssertEqual(try store.files(job: d1, from: 0, limit: 10).count, 0)
        XCTAssertNil(try store.fileIndex(job: d1, root: 0, relativePath: "file0"))
        XCTAssertEqual(try store.fileProgress(job: d1, file: 0), FileProgress(chunksDone: 0, bytesDone: 0))
        XCTAssertEqual(try store.doneChunks(job: d1, file: 0, capacity: 10).count, 0)
        XCTAssertEqual(try store.receipts(job: d1, file: 0), [:])
        XCTAssertFalse(FileManager.default.fileExists(atPath: directory.file("locks/00000000000000d1.lock")))
        // The others keep their files.
        XCTAssertEqual(try store.counters(JobID(rawValue: "00000000000000d2")).fileCount, 1)
        XCTAssertNotNil(try store.file(job: JobID(rawValue: "00000000000000d4"), index: 0))
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

    func testListingsShowTargetsWithoutCredentials() async throws {
        let store = try StateStore(directory: directory.path)
        var header = record("00000000000000a9")
        header.target = "https://alice:hunter2@uploads.example.com/v1?key=s3cret"
        try await store.commit([.createJob(header, roots: ["/tmp"]), .putFiles(job: header.id, files: files([1]))])
        let engine = try TransferEngine(stateDirectory: directory.path, store: store)
        XCTAssertEqual(try engine.jobs().first?.target, "https://alice:***@uploads.example.com/v1?…")
        XCTAssertEqual(try engine.details(of: header.id).summary.target, "https://alice:***@uploads.example.com/v1?…")
    }

    func testErrorsForUnknownJobsSayTheJobIsUnknown() async throws {
        let store = try StateStore(directory: directory.path)
        let engine = try TransferEngine(stateDirectory: directory.path, store: store)
        let id = JobID(rawValue: "00000000000000e1")
        XCTAssertThrowsError(try engine.details(of: id)) { XCTAssertEqual($0 as? XferError, .unknownJob(id.rawValue)) }
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
            XCTAssertEqual(error, .unknownJob(id.rawValue))
        }
    }

    /// `xfer list` with many jobs. Timing on a shared 2-core machine is too
    /// noisy to assert in every run; `XFER_BENCH=1` runs it and prints the time.
    /// `localUploads` finds the files of the backend's jobs by a handle (an
    /// S3 upload id), with what their job will do with the upload.
    func testLocalUploadsAreFoundByTheirHandleWithWhatTheirJobWillDo() async throws {
        let store = try StateStore(directory: directory.path)
        let key = HandleKey("uploadId")
        func job(
            _ id: String, backend: String = "s3", target: String = "s3://bkt", phase: JobPhase = .unfinished, stream: Bool = false,
            uploads: [String?], completed: Set<Int> = []
        ) async throws {
            var header = record(id, phase: phase)
            header.backend = backend
            header.target = target
            header.isStream = stream
            var listed = files(Array(repeating: 100, count: uploads.count))
            for (index, upload) in uploads.enumerated() {
                if let upload { listed[index].record.handles.set(key, upload) }
                if completed.contains(index) { listed[index].record.url = "s3://bkt/file\(index)" }
            }
            try await store.commit([.createJob(header, roots: ["/tmp"]), .putFiles(job: header.id, files: listed)])
        }
        try await job("00000000000000a1", uploads: ["U1", "U2", nil], completed: [1])
        try await job("00000000000000a2", phase: .completed, uploads: ["U3"], completed: [0])
        try await job("00000000000000a3", stream: true, uploads: ["U4"])
        try await job("00000000000000a4", uploads: ["U5"])
        try await job("00000000000000a5", backend: "tus", uploads: ["U6"])
        try await job("00000000000000a6", target: "s3://elsewhere", uploads: ["U7"])
        let engine = try TransferEngine(stateDirectory: directory.path, store: store)
        let lock = try JobLock(stateDirectory: directory.path, job: JobID(rawValue: "00000000000000a4"))
        defer { withExtendedLifetime(lock) {} }

        let found = try engine.localUploads(of: "s3", identifiedBy: key) { target, _ in target != "s3://elsewhere" }
        XCTAssertEqual(Set(found.keys), ["U1", "U2", "U3", "U4", "U5"])
        XCTAssertEqual(found["U1"]?.state, .resumable)
        XCTAssertEqual(found["U1"]?.job, JobID(rawValue: "00000000000000a1"))
        XCTAssertEqual(found["U1"]?.path, "/tmp/file0")
        XCTAssertEqual(found["U2"]?.state, .finished, "a completed file needs its upload no more")
        XCTAssertEqual(found["U2"]?.file, 1)
        XCTAssertEqual(found["U3"]?.state, .finished)
        XCTAssertEqual(found["U4"]?.state, .notResumable, "a stream is never resumed")
        XCTAssertEqual(found["U5"]?.state, .running(pid: getpid()))
        XCTAssertEqual(found["U5"]?.handles[key], "U5")
        XCTAssertEqual(try engine.localUploads(of: "s3", identifiedBy: key).count, 6, "every job of the backend by default")
    }

    /// Many jobs are listed with their counters read, not derived by reading
    /// every file's progress: a thousand in a normal run, ten thousand with
    /// their times printed under `XFER_BENCH=1` (a measurement, not a test
    /// that times itself).
    func testListingManyJobs() async throws {
        let bench = ProcessInfo.processInfo.environment["XFER_BENCH"] != nil
        let count = bench ? 10_000 : 1_000
        // XFER_BENCH_STATE keeps the store for timing `xfer list` itself.
        let path = ProcessInfo.processInfo.environment["XFER_BENCH_STATE"] ?? directory.path
        let store = try StateStore(directory: path)
        let plan = ChunkPlan(fileSize: 1 << 30, chunkSize: 1 << 20)
        var changes: [StateChange] = []
        for index in 0..<count {
            let id = JobID(rawValue: String(format: "%016x", index))
            changes.append(.createJob(record(id.rawValue), roots: ["/tmp"]))
            changes.append(.putFiles(job: id, files: files([1 << 30, 5 << 20], chunkSize: 1 << 20)))
            changes.append(.markDone(job: id, file: 0, chunks: Array(0..<(index % 1024)), plan: plan, receipts: [:]))
        }
        try await store.commit(changes)
        let engine = try TransferEngine(stateDirectory: path, store: store)
        let clock = ContinuousClock()
        var jobs: [JobSummary] = []
        let elapsed = try clock.measure { jobs = try engine.jobs() }
        if bench {
            print("listing \(count) jobs took \(elapsed)")
            let raw = try clock.measure { _ = try store.listings() }
            print("  of which store reads + decode: \(raw)")
        }
        XCTAssertEqual(jobs.count, count)
        XCTAssertEqual(jobs.first(where: { $0.id.rawValue == String(format: "%016x", 999) })?.doneBytes, 999 << 20)
        XCTAssertEqual(jobs.first?.totalBytes, (1 << 30) + (5 << 20))
        XCTAssertEqual(jobs.first?.fileCount, 2)
    }
}

extension XferError {
    /// Bad usage or input (the CLI's exit 2).
    var isBadInput: Bool {
        switch kind {
        case .invalidInput, .fileChanged, .unknownJob: return true
        default: return false
        }
    }
}
