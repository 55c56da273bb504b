import Foundation
import XferPrimitives
import Xfer
import XferPatch

/// `check`: applies one sequence of changes to a fresh LMDB store and a fresh
/// SQLite store and compares every read, so the comparison is between two
/// stores that do the same thing. Job records come from real pushes (two
/// small files to `--url`), since only the engine makes them.
enum StoreCheck {
    static func run(url: String, directory: String) async throws {
        let records = try await makeRecords(url: url, directory: directory + "/source")
        let lmdb = try XferStoreBench.StoreKind.lmdb.open(directory + "/lmdb")
        let sqlite = try XferStoreBench.StoreKind.sqlite.open(directory + "/sqlite")
        let stores: [(String, any JobStateStore)] = [("lmdb", lmdb), ("sqlite", sqlite)]
        let (first, second) = (records[0], records[1])
        let firstID = first.record.id
        let secondID = second.record.id
        // A plan of 20,000 chunks with a short last one, so bytes and counts both matter.
        let plan = ChunkPlan(fileSize: 20_000 * 64 - 10, chunkSize: 64)
        var replaced = ChunkSet(capacity: 20_000)
        for chunk in stride(from: 0, to: 20_000, by: 7) { replaced.insert(chunk) }

        var steps = 0
        func compare(_ label: String) throws {
            steps += 1
            let a = try snapshot(lmdb, ids: [firstID, secondID])
            let b = try snapshot(sqlite, ids: [firstID, secondID])
            guard a == b else {
                throw BenchError.failed("stores differ after \(label):\n lmdb:   \(a)\n sqlite: \(b)")
            }
        }

        for (_, store) in stores {
            for job in [first, second] {
                try await store.commit([.createJob(job.record, roots: job.roots), .putFiles(job: job.record.id, files: job.files)])
            }
        }
        try compare("createJob/putFiles")
        for (_, store) in stores {
            // A changed file (size and url), a failure set then cleared, a new file.
            var changed = first.files[0].record
            changed.identity.size += 1000
            changed.url = nil
            changed.failure = "gone"
            var added = changed
            added.relativePath = "sub/added.bin"
            added.failure = nil
            try await store.commit(.putFiles(job: firstID, files: [(0, changed), (2, added)]))
            changed.failure = nil
            try await store.commit(.putFiles(job: firstID, files: [(0, changed)]))
        }
        try compare("putFiles changes")
        for (_, store) in stores {
            try await store.commit(.markDone(job: firstID, file: 0, chunks: [0, 1, 5, 8191, 8192, 9000], plan: plan, receipts: [1: "a", 5: "b"]))
            try await store.commit(.markNotDone(job: firstID, file: 0, chunks: [5, 6], plan: plan))
            try await store.commit(.replaceDone(job: secondID, file: 0, done: replaced, plan: plan, receipts: [3: "x", 14: "y"]))
            try await store.commit(.markDone(job: secondID, file: 0, chunks: [19_999], plan: plan, receipts: [:]))
        }
        try compare("markDone/markNotDone/replaceDone")
        for (_, store) in stores {
            // Concurrent committers, as workers are: group commits must lose nothing.
            try await withThrowingTaskGroup(of: Void.self) { group in
                for committer in 0..<8 {
                    group.addTask {
                        for chunk in stride(from: committer, to: 16, by: 8) {
                            try await store.commit(.markDone(job: firstID, file: 0, chunks: [chunk], plan: plan, receipts: [chunk: "r\(chunk)"]))
                        }
                    }
                }
                try await group.waitForAll()
            }
            try store.sync()
        }
        try compare("concurrent markDone")
        for (name, store) in stores {
            let none = try await store.pruneCompletedJobs(finishedBefore: Date(timeIntervalSince1970: 0))
            guard none.isEmpty else { throw BenchError.failed("\(name) pruned \(none) before 1970") }
        }
        try compare("prune (nothing due)")
        var pruned: [[JobID]] = []
        for (_, store) in stores {
            pruned.append(try await store.pruneCompletedJobs(finishedBefore: Date().addingTimeInterval(86_400)).sorted())
        }
        guard pruned[0] == pruned[1], pruned[0] == [firstID, secondID].sorted() else {
            throw BenchError.failed("prune differs: lmdb \(pruned[0]), sqlite \(pruned[1])")
        }
        try compare("prune (all due)")
        for (_, store) in stores {
            try await store.commit([.createJob(first.record, roots: first.roots), .putFiles(job: firstID, files: first.files)])
            try await store.commit(.markDone(job: firstID, file: 0, chunks: [2], plan: plan, receipts: [2: "z"]))
            try await store.commit(.deleteJob(firstID))
        }
        try compare("deleteJob")
        print("check: lmdb and sqlite stores agree on all \(steps) comparisons")
    }

    /// Every read the engine makes, for the given jobs.
    static func snapshot(_ store: any JobStateStore, ids: [JobID]) throws -> String {
        var out: [String] = []
        out.append("ids=\(try store.jobIDs(withPrefix: "")) \(try store.jobIDs(withPrefix: String(ids[0].rawValue.prefix(3))))")
        out.append("listings=\(try store.listings())")
        for id in ids {
            out.append("job=\(String(describing: try store.job(id)))")
            out.append("counters=\(try store.counters(id)) roots=\(try store.roots(id))")
            out.append("files=\(try store.files(job: id, from: 0, limit: 10).map { "\($0.index) \($0.record)" })")
            out.append("failed=\(try store.failedFiles(job: id, limit: 10).map(\.index))")
            for file in 0..<3 {
                out.append("index=\(String(describing: try store.fileIndex(job: id, root: file, relativePath: "file\(file).bin")))")
                out.append("done=\(try store.doneChunks(job: id, file: file, capacity: 20_000).members)")
                out.append("progress=\(try store.fileProgress(job: id, file: file))")
                out.append("receipts=\(try store.receipts(job: id, file: file).sorted { $0.key < $1.key })")
            }
        }
        return out.joined(separator: "\n")
    }

    struct SourceJob {
        var record: JobRecord
        var roots: [String]
        var files: [(index: Int, record: FileRecord)]
    }

    static func makeRecords(url: String, directory: String) async throws -> [SourceJob] {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var paths: [String] = []
        for index in 0..<2 {
            let path = "\(directory)/file\(index).bin"
            let bytes = Data((0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* (index + 3)) })
            guard FileManager.default.createFile(atPath: path, contents: bytes) else {
                throw BenchError.failed("cannot create \(path)")
            }
            paths.append(path)
        }
        let engine = try TransferEngine(stateDirectory: directory + "/state")
        for path in paths {
            let job = try await engine.push([path], to: url, using: PatchBackend(), options: TransferOptions(chunkSize: 64 << 10))
            _ = try await job.report
        }
        let store = try TransferEngine.defaultStateStore(directory: directory + "/state")
        let jobs = try store.listings().map { listing throws in
            SourceJob(
                record: listing.record, roots: try store.roots(listing.record.id),
                files: try store.files(job: listing.record.id, from: 0, limit: 10))
        }
        guard jobs.count == 2 else { throw BenchError.failed("expected 2 job records, found \(jobs.count)") }
        return jobs
    }
}
