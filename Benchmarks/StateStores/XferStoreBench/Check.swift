import Foundation
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
        let firstID = JobListing(first).id
        let secondID = JobListing(second).id
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
            try await store.commit([.putJob(first), .putJob(second)])
        }
        try compare("putJob")
        for (_, store) in stores {
            try await store.commit(.markDone(job: firstID, file: 0, chunks: [0, 1, 5, 8191, 8192, 9000], receipts: [1: "a", 5: "b"]))
            try await store.commit(.markNotDone(job: firstID, file: 0, chunks: [5, 6]))
            try await store.commit(.replaceDone(job: secondID, file: 0, done: replaced, receipts: [3: "x", 14: "y"]))
            try await store.commit(.markDone(job: secondID, file: 0, chunks: [19_999], receipts: [:]))
        }
        try compare("markDone/markNotDone/replaceDone")
        for (_, store) in stores {
            // Concurrent committers, as workers are: group commits must lose nothing.
            try await withThrowingTaskGroup(of: Void.self) { group in
                for committer in 0..<8 {
                    group.addTask {
                        for chunk in stride(from: committer, to: 16, by: 8) {
                            try await store.commit(.markDone(job: firstID, file: 0, chunks: [chunk], receipts: [chunk: "r\(chunk)"]))
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
            try await store.commit(.putJob(first))
            try await store.commit(.markDone(job: firstID, file: 0, chunks: [2], receipts: [2: "z"]))
            try await store.commit(.deleteJob(firstID))
        }
        try compare("deleteJob")
        print("check: lmdb and sqlite stores agree on all \(steps) comparisons")
    }

    /// Every read the engine makes, for the given jobs.
    static func snapshot(_ store: any JobStateStore, ids: [JobID]) throws -> String {
        var out: [String] = []
        out.append("jobs=\(try store.jobs())")
        out.append("ids=\(try store.jobIDs(withPrefix: "")) \(try store.jobIDs(withPrefix: String(ids[0].rawValue.prefix(3))))")
        out.append("listings=\(try store.listings().map { "\($0.listing) \($0.files)" })")
        for id in ids {
            out.append("job=\(String(describing: try store.job(id)))")
            if let entry = try store.jobWithProgress(id) {
                out.append("withProgress=\(entry.record) \(entry.files)")
            } else {
                out.append("withProgress=nil")
            }
            for file in 0..<2 {
                out.append("done=\(try store.doneChunks(job: id, file: file, capacity: 20_000).members)")
                out.append("receipts=\(try store.receipts(job: id, file: file).sorted { $0.key < $1.key })")
            }
        }
        return out.joined(separator: "\n")
    }

    static func makeRecords(url: String, directory: String) async throws -> [JobRecord] {
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
        let records = try TransferEngine.defaultStateStore(directory: directory + "/state").jobs()
        guard records.count == 2 else { throw BenchError.failed("expected 2 job records, found \(records.count)") }
        return records
    }
}
