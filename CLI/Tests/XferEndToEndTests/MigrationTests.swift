import Foundation
import XCTest
import XferTestSupport

@testable import Xfer
@testable import XferPrimitives

/// A state directory of the previous layout (2: one JSON record per job,
/// written by the previous release) holding an interrupted push: the next
/// xfer migrates it on first use and resumes the push where it stopped.
final class MigrationTests: XCTestCase {
    var work: TemporaryDirectory!

    override func setUp() {
        work = TemporaryDirectory("xfer-migrate")
    }

    override func tearDown() {
        work = nil
    }

    /// Rewrites the layout-3 store in `from` as layout 2 into `to`, as the
    /// previous release would have written the same job: its JSON record,
    /// a binary summary, bitmaps and receipts as they are, a bare count per file.
    private func writeLayout2(from: String, to: String) throws {
        let store = try StateStore(directory: from)
        let listings = try store.listings()
        XCTAssertEqual(listings.count, 1)
        let directory = to + "/db"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let env = try LMDBEnvironment(directory: directory, mapSize: 64 << 20, maxDatabases: 16)
        let meta = try env.database(named: "meta")
        let jobs = try env.database(named: "jobs", checksummed: true)
        let chunks = try env.database(named: "chunks", checksummed: true)
        let receipts = try env.database(named: "receipts", checksummed: true)
        let progress = try env.database(named: "progress", checksummed: true)
        let summaries = try env.database(named: "summaries", checksummed: true)
        try env.write { txn in
            try txn.put(meta, Array("layout".utf8), Array("2".utf8))
            for listing in listings {
                let record = listing.record
                let files = try store.files(job: record.id, from: 0, limit: 100)
                let legacy = LegacyLayout.Job(
                    id: record.id, backend: record.backend, target: record.target, createdAt: record.createdAt,
                    updatedAt: record.updatedAt, phase: record.phase, lastError: record.lastError,
                    concurrency: record.concurrency, isStarted: record.isStarted, handles: record.handles,
                    files: files.map {
                        LegacyLayout.Job.File(
                            path: $0.record.path, identity: $0.record.identity, chunkSize: $0.record.chunkSize,
                            isOpen: $0.record.isOpen, handles: $0.record.handles, url: $0.record.url)
                    })
                let key = Array(record.id.rawValue.utf8)
                try txn.put(jobs, key, Array(try LegacyLayout.encoder.encode(legacy)))
                try txn.put(summaries, key, [1, 2, 3])
                for (index, file) in files {
                    let plan = ChunkPlan(fileSize: file.size, chunkSize: file.chunkSize)
                    let done = try store.doneChunks(job: record.id, file: index, capacity: plan.count)
                    let prefix = LegacyLayout.fileKey(record.id, index)
                    for segment in 0..<done.segmentCount {
                        try txn.put(chunks, prefix + StateStore.u32Bytes(UInt32(segment)), done.segmentBytes(segment))
                    }
                    for (chunk, receipt) in try store.receipts(job: record.id, file: index) {
                        try txn.put(receipts, prefix + StateStore.u32Bytes(UInt32(chunk)), Array(receipt.utf8))
                    }
                    // Layout 2's counter: the done-chunk count alone (u64 LE).
                    try txn.put(progress, prefix, withUnsafeBytes(of: UInt64(done.count).littleEndian) { Array($0) })
                }
            }
        }
    }

    func testAnInterruptedPushOfTheLastLayoutResumesAfterMigrating() throws {
        let server = try ServeProcess(root: work.file("served"))
        let files = [work.file("a.bin"), work.file("b.bin")]
        try makeTestFile(at: files[0], size: 3 << 20, seed: 7)
        try makeTestFile(at: files[1], size: 100_000, seed: 8)
        let scratch = work.file("scratch-state")
        let state = work.file("state")
        let arguments = ["push"] + files + ["--backend", "patch", "--to", server.url, "--chunk-size", "256KiB", "--json"]

        // A real push, killed once some chunks are acknowledged.
        let child = try ChildProcess(executable: xferExecutable, arguments: arguments + ["--state", scratch, "--concurrency", "2"])
        var acknowledged = 0
        while acknowledged < 4, let line = child.readLine() {
            if line.contains("\"event\":\"chunk\"") { acknowledged += 1 }
        }
        child.kill(SIGKILL)
        XCTAssertEqual(child.wait(), 128 + SIGKILL, child.standardError)
        try writeLayout2(from: scratch, to: state)

        // `list` migrates on first use and shows the job as the old xfer did.
        let list = try runXfer(["list", "--json", "--state", state])
        XCTAssertEqual(list.status, 0, list.stderr)
        let jobs = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(list.stdout.joined().utf8)) as? [[String: Any]])
        XCTAssertEqual(jobs.count, 1)
        XCTAssertEqual(jobs.first?["files"] as? [String], files)
        XCTAssertEqual(int(jobs.first?["fileCount"]), 2)
        XCTAssertEqual(int(jobs.first?["totalBytes"]), (3 << 20) + 100_000)
        XCTAssertGreaterThanOrEqual(int(jobs.first?["doneBytes"]), 4 * (256 << 10) - 256 << 10)

        // The same push resumes the migrated job and sends only what is missing.
        let resumed = try runXfer(arguments + ["--state", state])
        XCTAssertEqual(resumed.status, 0, resumed.stderr)
        XCTAssertEqual(resumed.events.first?["resumed"] as? Bool, true)
        XCTAssertEqual(resumed.events.first?["job"] as? String, jobs.first?["id"] as? String)
        let completed = try XCTUnwrap(resumed.lastEvent)
        XCTAssertLessThan(int(completed["bytesSent"]), (3 << 20) + 100_000, "acknowledged chunks were sent again")
        for file in try XCTUnwrap(completed["files"] as? [[String: Any]]) {
            let path = try XCTUnwrap(file["path"] as? String)
            XCTAssertEqual(try downloadSHA256(try XCTUnwrap(file["url"] as? String), into: work), try sha256sum(path), path)
        }
    }
}
