import Foundation

/// Layouts 1 and 2 of the state store, read once to migrate them to layout 3.
///
/// Both kept a job as one JSON record holding every file (layout 2 added a
/// CRC-32 to every value and a binary `summaries` copy for listings); every
/// change to one file rewrote them all, which made a push of n files cost
/// O(n²). Chunk bitmaps and receipts are keyed the same way in every layout
/// and stay as they are.
enum LegacyLayout {
    /// The JSON record of layouts 1 and 2, exactly as they encoded it.
    struct Job: Codable {
        struct File: Codable {
            var path: String
            var identity: FileIdentity
            var chunkSize: Int
            var isOpen: Bool
            var handles: ServerHandles
            var url: String?
        }

        var id: JobID
        var backend: String
        var target: String
        var createdAt: Date
        var updatedAt: Date
        var phase: JobPhase
        var lastError: String?
        var concurrency: Int
        var isStarted: Bool
        var handles: ServerHandles
        var files: [File]
    }

    struct Databases {
        var summaries: LMDBDatabase
        var chunks: LMDBDatabase
        var receipts: LMDBDatabase
        var progress: LMDBDatabase
        var finished: LMDBDatabase
    }

    static let decoder: JSONDecoder = {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .secondsSince1970
        return decoder
    }()

    /// For tests: the bytes layout 2 stored for `job`.
    static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .secondsSince1970
        encoder.outputFormatting = [.sortedKeys]
        return encoder
    }()

    /// Rewrites every job of layout `version` as layout 3, inside `txn`.
    static func migrate(
        from version: Int, in txn: LMDBTransaction, jobs: LMDBDatabase, files: LMDBDatabase, roots: LMDBDatabase,
        paths: LMDBDatabase, counters: LMDBDatabase, legacy: Databases
    ) throws {
        if version == 1 {
            // Layout 1 had no checksums: seal every value as it is first.
            for db in [jobs, legacy.chunks, legacy.receipts, legacy.progress, legacy.finished, legacy.summaries] {
                var entries: [([UInt8], [UInt8])] = []
                try txn.forEach(db.raw, prefix: []) { key, value in
                    entries.append((key, value))
                    return true
                }
                for (key, value) in entries { try txn.put(db.sealed, key, value) }
            }
        }
        var old: [([UInt8], [UInt8])] = []
        try txn.forEach(jobs, prefix: []) { key, value in
            old.append((key, value))
            return true
        }
        for (key, value) in old {
            let id = JobID(rawValue: String(decoding: key, as: UTF8.self))
            let job: Job
            do {
                job = try decoder.decode(Job.self, from: Data(value))
            } catch {
                throw XferError.stateUnavailable(
                    "the record of job \(id) is unreadable (\(error)); remove that state directory or use another --state")
            }
            let record = JobRecord(
                id: id, backend: job.backend, target: job.target, createdAt: job.createdAt, updatedAt: job.updatedAt,
                phase: job.phase, lastError: job.lastError, concurrency: job.concurrency, isStarted: job.isStarted,
                handles: job.handles, rootCount: job.files.count, firstRoot: job.files.first?.path ?? "")
            var totals = JobCounters()
            for (index, file) in job.files.enumerated() {
                // Each file was named on its own: it is its own root, and its name is its relative path.
                let name = (file.path as NSString).lastPathComponent
                let migrated = FileRecord(
                    path: file.path, relativePath: name, root: index, identity: file.identity, chunkSize: file.chunkSize,
                    isOpen: file.isOpen, handles: file.handles, url: file.url)
                let fileKey = StateStore.fileKey(id, index)
                try txn.put(roots, fileKey, Array(file.path.utf8))
                try txn.put(files, fileKey, migrated.encoded)
                try txn.put(paths, StateStore.pathKey(id, index, name), StateStore.u32Bytes(UInt32(index)))
                // Progress was a bare count: recount it, with its bytes, from the bitmap.
                let plan = ChunkPlan(fileSize: max(0, file.identity.size), chunkSize: max(1, file.chunkSize))
                var done = ChunkSet(capacity: max(1, plan.count))
                try txn.forEach(legacy.chunks, prefix: fileKey) { key, value in
                    done.loadSegment(Int(StateStore.u32(key, at: fileKey.count)), from: value)
                    return true
                }
                let bytes = plan.count == 0 ? 0 : plan.bytes(of: done)
                try txn.put(legacy.progress, fileKey, StateStore.progressBytes(FileProgress(chunksDone: done.count, bytesDone: bytes)))
                totals.fileCount += 1
                totals.totalBytes += file.identity.size
                totals.doneBytes += bytes
                if file.url != nil { totals.completedFiles += 1 }
            }
            try txn.put(jobs, key, record.encoded)
            try txn.put(counters, key, totals.encoded)
            try txn.delete(legacy.summaries, key)
        }
    }
}
