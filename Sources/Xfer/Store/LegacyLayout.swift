import FoundationEssentials
import XferPrimitives

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

    /// Layouts 1 and 2 keyed a file's chunks, receipts and progress by the
    /// job id's text, a 0 byte and the file (u32 BE).
    static func fileKey(_ job: JobID, _ file: Int) -> [UInt8] {
        Array(job.rawValue.utf8) + [0] + StateStore.u32Bytes(UInt32(file))
    }

    /// Rewrites every job of layout `version` as layout 3, inside `txn`;
    /// `putFile` writes a file's record (given the job's roots and target).
    static func migrate(
        from version: Int, in txn: LMDBTransaction, jobs: LMDBDatabase, roots: LMDBDatabase,
        paths: LMDBDatabase, counters: LMDBDatabase, legacy: Databases,
        putFile: (JobID, Int, FileRecord, (roots: [String], target: String)) throws -> Void
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
                    "the record of job \(id) is unreadable (\(error))", remedy: .useAnotherStateDirectory)
            }
            let record = JobRecord(
                id: id, backend: job.backend, target: job.target, createdAt: job.createdAt, updatedAt: job.updatedAt,
                phase: job.phase, lastError: job.lastError, concurrency: job.concurrency, isStarted: job.isStarted,
                handles: job.handles, rootCount: job.files.count, firstRoot: job.files.first?.path ?? "")
            var totals = JobCounters()
            let rootPaths = job.files.map(\.path)
            for (index, file) in job.files.enumerated() {
                // Each file was named on its own: it is its own root, and its name is its relative path.
                let name = PathText.lastComponent(of: file.path)
                let migrated = FileRecord(
                    path: file.path, relativePath: name, root: index, identity: file.identity, chunkSize: file.chunkSize,
                    isOpen: file.isOpen, handles: file.handles, url: file.url)
                let oldKey = fileKey(id, index)
                let newKey = StateStore.fileKey(id, index)
                try txn.put(roots, newKey, Array(file.path.utf8))
                try putFile(id, index, migrated, (rootPaths, job.target))
                try txn.put(paths, StateStore.pathKey(id, index, name), StateStore.u32Bytes(UInt32(index)))
                // Chunks and receipts move to the new keys; progress was a bare
                // count: recount it, with its bytes, from the bitmap. A complete
                // file keeps none of them (its URL says it is done).
                let plan = ChunkPlan(fileSize: max(0, file.identity.size), chunkSize: max(1, file.chunkSize))
                var done = ChunkSet(capacity: max(1, plan.count))
                var segments: [(key: [UInt8], value: [UInt8])] = []
                try txn.forEach(legacy.chunks, prefix: oldKey) { key, value in
                    done.loadSegment(Int(StateStore.u32(key, at: oldKey.count)), from: value)
                    segments.append((key, value))
                    return true
                }
                var receipts: [(key: [UInt8], value: [UInt8])] = []
                try txn.forEach(legacy.receipts, prefix: oldKey) { key, value in
                    receipts.append((key, value))
                    return true
                }
                try txn.delete(legacy.progress, oldKey)
                for (key, value) in segments {
                    try txn.delete(legacy.chunks, key)
                    if file.url == nil { try txn.put(legacy.chunks, newKey + key[oldKey.count...], value) }
                }
                for (key, value) in receipts {
                    try txn.delete(legacy.receipts, key)
                    if file.url == nil { try txn.put(legacy.receipts, newKey + key[oldKey.count...], value) }
                }
                let bytes = file.url != nil ? file.identity.size : plan.count == 0 ? 0 : plan.bytes(of: done)
                if file.url == nil, done.count > 0 {
                    try txn.put(legacy.progress, newKey, StateStore.progressBytes(FileProgress(chunksDone: done.count, bytesDone: bytes)))
                }
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
