import XferPrimitives
import Crypto
import Dispatch
import FoundationEssentials

#if canImport(Glibc)
    import Glibc
#endif

/// Durable job and chunk state in LMDB.
///
/// Layout 3 (one LMDB environment; keys below start with the job's 8-byte
/// id (its 16 hex digits as bytes), so a job's keys sit together and
/// `deleteJob` is a range delete):
/// - `meta`: `layout` → layout version.
/// - `jobs`: job id → `JobRecord` (binary): the header, no file.
/// - `counters`: job id → `JobCounters`: files, bytes, done bytes, completed
///   and failed files, updated in the transaction of every change they count.
/// - `roots`: job ‖ root (u32 BE) → a path the user named.
/// - `files`, `handles`, `urls`: job ‖ file (u32 BE) → a `FileRecord` in
///   three parts, written at different times (see `StoredFile`).
/// - `paths`: job ‖ root (u32 BE) ‖ relative path → file (u32 BE): finds a
///   file again when a directory is walked anew.
/// - `failures`: job ‖ file (u32 BE) → nothing: the files whose last run failed.
/// - `chunks`: job ‖ file ‖ segment (u32 BE) → bitmap of done chunks.
/// - `receipts`: job ‖ file ‖ chunk (u32 BE) → receipt text.
/// - `progress`: job ‖ file → done chunks and their bytes (u64 LE each).
///
/// A completed file keeps no chunk bitmap, receipts or progress: its URL
/// says every chunk is done, and counts its size as done bytes.
/// - `finished`: completion time (u64 BE seconds) ‖ job id → nothing; finds
///   completed jobs due for pruning without reading every job.
///
/// Every value carries a CRC-32 of its key and value (see `LMDBDatabase`).
///
/// Reads run on the caller's thread. Writes are queued; the first caller to
/// find no transaction in progress writes the batch on its own thread, in
/// one transaction that begins and commits in one block (LMDB write
/// transactions belong to the thread that began them).
final class StateStore: JobStateStore {
    /// 3: per-file keys and per-job counters (1 and 2 kept a job's files in one
    /// JSON record; both are migrated on open).
    static let layoutVersion = "3"

    let directory: String
    let env: LMDBEnvironment
    private let meta: LMDBDatabase
    private let jobsDB: LMDBDatabase
    private let countersDB: LMDBDatabase
    private let rootsDB: LMDBDatabase
    private let filesDB: LMDBDatabase
    private let handlesDB: LMDBDatabase
    private let urlsDB: LMDBDatabase
    private let pathsDB: LMDBDatabase
    private let failuresDB: LMDBDatabase
    private let chunksDB: LMDBDatabase
    private let receiptsDB: LMDBDatabase
    private let progressDB: LMDBDatabase
    private let finishedDB: LMDBDatabase
    /// Layout 2's listing copies, emptied by the migration.
    private let legacySummariesDB: LMDBDatabase
    /// What `xfer sync` keeps beside its jobs (see `SyncDatabases`).
    let syncDBs: SyncDatabases
    private let writer = DispatchQueue(label: "xfer.state.writer")
    private struct Queue {
        var changes: [(StateChange, @Sendable (Result<Void, XferError>) -> Void)] = []
        /// A leader is writing (see `commit`).
        var isWriting = false
    }

    private let pending = LockedValue(Queue())
    /// What file records are stored relative to, which never changes once
    /// a job is created: the paths named and the target.
    private struct JobFrame {
        var roots: [String]
        var target: String
    }

    private let frames = LockedValue<[JobID: JobFrame]>([:])

    /// Opens the store in `directory`, creating it (mode 0700) if needed.
    init(directory: String, initialMapSize: Int = 64 << 20) throws(XferError) {
        self.directory = directory
        let dbDirectory = PathText.appending("db", to: directory)
        do {
            try FileManager.default.createDirectory(
                atPath: dbDirectory, withIntermediateDirectories: true,
                attributes: [.posixPermissions: 0o700])
            try FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: directory)
        } catch {
            throw .stateUnavailable("cannot create \(directory): \(Self.reason(error))")
        }
        guard access(dbDirectory, W_OK) == 0 else {
            throw .stateUnavailable("\(directory) is not writable", remedy: .useAnotherStateDirectory)
        }
        do {
            env = try LMDBEnvironment(directory: dbDirectory, mapSize: initialMapSize, maxDatabases: 32)
            meta = try env.database(named: "meta")
        } catch {
            throw .stateUnavailable("cannot open \(dbDirectory): \(error)")
        }
        // A layout this xfer cannot read is refused before anything else is
        // opened: opening a missing database creates it, which would change
        // a newer xfer's file before saying no.
        try Self.refuseUnknownLayout(env: env, meta: meta, directory: directory)
        do {
            jobsDB = try env.database(named: "jobs", checksummed: true)
            countersDB = try env.database(named: "counters", checksummed: true)
            rootsDB = try env.database(named: "roots", checksummed: true)
            filesDB = try env.database(named: "files", checksummed: true)
            handlesDB = try env.database(named: "handles", checksummed: true)
            urlsDB = try env.database(named: "urls", checksummed: true)
            pathsDB = try env.database(named: "paths", checksummed: true)
            failuresDB = try env.database(named: "failures", checksummed: true)
            chunksDB = try env.database(named: "chunks", checksummed: true)
            receiptsDB = try env.database(named: "receipts", checksummed: true)
            progressDB = try env.database(named: "progress", checksummed: true)
            finishedDB = try env.database(named: "finished", checksummed: true)
            legacySummariesDB = try env.database(named: "summaries", checksummed: true)
            syncDBs = try SyncDatabases(env)
        } catch {
            throw .stateUnavailable("cannot open \(dbDirectory): \(error)")
        }
        try checkLayout()
    }

    private static func refuseUnknownLayout(env: LMDBEnvironment, meta: LMDBDatabase, directory: String) throws(XferError) {
        let stored: String?
        do {
            stored = try env.read { try $0.get(meta, Array("layout".utf8)) }.map { String(decoding: $0, as: UTF8.self) }
        } catch {
            throw .stateUnavailable("cannot read \(directory): \(error)")
        }
        guard let version = stored, !["1", "2", layoutVersion].contains(version) else { return }
        let which = (Int(version) ?? Int.max) < (Int(layoutVersion) ?? 0) ? "an older" : "a newer"
        throw .stateUnavailable(
            "\(directory) holds state layout \(version) from \(which) xfer; this one reads layout \(layoutVersion) "
                + "(finish its jobs with that xfer)", remedy: .useAnotherStateDirectory)
    }

    /// Refuses a layout this xfer cannot read; migrates layouts 1 and 2 in one
    /// transaction (a crash mid-way leaves the old layout intact, and the next
    /// open migrates again).
    private func checkLayout() throws(XferError) {
        let key = Array("layout".utf8)
        let current = Array(Self.layoutVersion.utf8)
        do {
            let found = try env.read { try $0.get(meta, key) }
            if found == current { return }
            try env.write { txn in
                // Decided again under the writer lock: another process may have just done it.
                let stored = try txn.get(meta, key).map { String(decoding: $0, as: UTF8.self) }
                switch stored {
                case Self.layoutVersion:
                    return
                case nil:
                    break
                case "1", "2":
                    try LegacyLayout.migrate(
                        from: stored == "1" ? 1 : 2, in: txn, jobs: jobsDB, roots: rootsDB, paths: pathsDB,
                        counters: countersDB,
                        legacy: LegacyLayout.Databases(
                            summaries: legacySummariesDB, chunks: chunksDB, receipts: receiptsDB, progress: progressDB,
                            finished: finishedDB)
                    ) { id, index, record, frame in
                        try self.writeFile(record, job: id, index: index, frame: JobFrame(roots: frame.roots, target: frame.target), in: txn)
                    }
                case let version?:
                    let which = (Int(version) ?? Int.max) < (Int(Self.layoutVersion) ?? 0) ? "an older" : "a newer"
                    throw XferError.stateUnavailable(
                        "\(directory) holds state layout \(version) from \(which) xfer; this one reads layout \(Self.layoutVersion) "
                            + "(finish its jobs with that xfer)", remedy: .useAnotherStateDirectory)
                }
                try txn.put(meta, key, current)
            }
            // A migration rewrote values: make it durable before anything relies on it.
            try env.sync()
        } catch let error as XferError {
            throw error
        } catch {
            throw .stateUnavailable("cannot read \(directory): \(error)")
        }
    }

    // MARK: Reads

    func job(_ id: JobID) throws(XferError) -> JobRecord? {
        try reading { txn in try record(id, in: txn) }
    }

    func counters(_ id: JobID) throws(XferError) -> JobCounters {
        try reading { txn in try counters(id, in: txn) }
    }

    func roots(_ id: JobID) throws(XferError) -> [String] {
        try reading { txn in try roots(id, in: txn) }
    }

    private func roots(_ id: JobID, in txn: LMDBTransaction) throws -> [String] {
        try frame(id, in: txn).roots
    }

    private func frame(_ id: JobID, in txn: LMDBTransaction) throws -> JobFrame {
        if let cached = frames.withLock({ $0[id] }) { return cached }
        var roots: [String] = []
        try txn.forEach(rootsDB, prefix: Self.jobPrefix(id)) { _, value in
            roots.append(String(decoding: value, as: UTF8.self))
            return true
        }
        let frame = JobFrame(roots: roots, target: try record(id, in: txn)?.target ?? "")
        // A job without roots is being deleted or does not exist: not cached.
        if !roots.isEmpty { frames.withLock { $0[id] = frame } }
        return frame
    }

    func file(job: JobID, index: Int) throws(XferError) -> FileRecord? {
        try reading { txn in try file(job, index, in: txn) }
    }

    func files(job: JobID, from start: Int, limit: Int) throws(XferError) -> [(index: Int, record: FileRecord)] {
        let prefix = Self.jobPrefix(job)
        return try reading { txn in
            var result: [(index: Int, record: FileRecord)] = []
            guard limit > 0 else { return result }
            try txn.forEach(filesDB, prefix: prefix, from: Self.fileKey(job, max(0, start))) { key, value in
                let index = Int(Self.u32(key, at: prefix.count))
                result.append((index, try decodeFile(value, key: key, job: job, index: index, in: txn)))
                return result.count < limit
            }
            return result
        }
    }

    /// Walks the job's file keys and looks each up among the URLs, decoding nothing: the check
    /// at the end of every run read and decoded every record for it.
    func firstFileWithoutURL(job: JobID) throws(XferError) -> Int? {
        let prefix = Self.jobPrefix(job)
        return try reading { txn in
            var missing: Int?
            try txn.forEachKey(filesDB, prefix: prefix) { key in
                guard try !txn.contains(urlsDB, key) else { return true }
                missing = Int(Self.u32(key, at: prefix.count))
                return false
            }
            return missing
        }
    }

    func fileIndex(job: JobID, root: Int, relativePath: String) throws(XferError) -> Int? {
        try reading { txn in
            try txn.get(pathsDB, Self.pathKey(job, root, relativePath)).map { Int(Self.u32($0, at: 0)) }
        }
    }

    func failedFiles(job: JobID, limit: Int) throws(XferError) -> [(index: Int, record: FileRecord)] {
        let prefix = Self.jobPrefix(job)
        return try reading { txn in
            var result: [(index: Int, record: FileRecord)] = []
            guard limit > 0 else { return result }
            try txn.forEach(failuresDB, prefix: prefix) { key, _ in
                let index = Int(Self.u32(key, at: prefix.count))
                if let record = try file(job, index, in: txn) { result.append((index, record)) }
                return result.count < limit
            }
            return result
        }
    }

    func fileProgress(job: JobID, file: Int) throws(XferError) -> FileProgress {
        try reading { txn in try storedProgress(Self.fileKey(job, file), in: txn) }
    }

    func doneChunks(job: JobID, file: Int, capacity: Int) throws(XferError) -> ChunkSet {
        var set = ChunkSet(capacity: capacity)
        guard capacity > 0 else { return set }
        let prefix = Self.fileKey(job, file)
        try reading { txn in
            if try txn.get(urlsDB, prefix) != nil {
                set.insertAll(below: capacity)  // complete: its bitmap was dropped
                return
            }
            try txn.forEach(chunksDB, prefix: prefix) { key, value in
                set.loadSegment(Int(Self.u32(key, at: prefix.count)), from: value)
                return true
            }
        }
        return set
    }

    func receipts(job: JobID, file: Int) throws(XferError) -> [Int: String] {
        let prefix = Self.fileKey(job, file)
        return try reading { txn in
            var result: [Int: String] = [:]
            try txn.forEach(receiptsDB, prefix: prefix) { key, value in
                result[Int(Self.u32(key, at: prefix.count))] = String(decoding: value, as: UTF8.self)
                return true
            }
            return result
        }
    }

    func jobIDs(withPrefix prefix: String) throws(XferError) -> [JobID] {
        try reading { txn in
            var ids: [JobID] = []
            try txn.forEach(jobsDB, prefix: Array(prefix.utf8)) { key, _ in
                ids.append(JobID(rawValue: String(decoding: key, as: UTF8.self)))
                return true
            }
            return ids
        }
    }

    /// Every job's header and counters: two small reads per job, whatever its
    /// number of files or chunks.
    func listings() throws(XferError) -> [JobListing] {
        try reading { txn in
            var result: [JobListing] = []
            try txn.forEach(jobsDB, prefix: []) { key, value in
                let id = JobID(rawValue: String(decoding: key, as: UTF8.self))
                result.append(JobListing(record: try decodeJob(value, id: id), counters: try counters(id, in: txn)))
                return true
            }
            return result
        }
    }

    // MARK: Writes

    /// Deletes every completed job that finished before `cutoff` (everything
    /// under its id) and returns their ids.
    ///
    /// Each candidate is re-checked inside the write transaction, so a job
    /// that was re-pushed since it completed is left alone.
    func pruneCompletedJobs(finishedBefore cutoff: Date) async throws(XferError) -> [JobID] {
        // The index has whole seconds: take every entry of the cutoff's
        // second too, and let the record's exact time decide.
        let limit = UInt64(max(0, cutoff.timeIntervalSince1970.rounded(.up)))
        let result: Result<[JobID], XferError> = await withCheckedContinuation { continuation in
            writer.async {
                do {
                    let pruned = try self.env.write { txn in
                        var due: [[UInt8]] = []
                        try txn.forEach(self.finishedDB, prefix: []) { key, _ in
                            guard key.count > 8, Self.u64BE(key) < limit else { return false }
                            due.append(key)
                            return true
                        }
                        var pruned: [JobID] = []
                        for key in due {
                            let id = JobID(rawValue: String(decoding: key[8...], as: UTF8.self))
                            guard let record = try? self.record(id, in: txn), record.phase == .completed,
                                Self.finishedKey(record) == key
                            else {
                                try txn.delete(self.finishedDB, key)  // stale: deleted or pushed again since
                                continue
                            }
                            guard record.updatedAt < cutoff else { continue }
                            try txn.delete(self.finishedDB, key)
                            var cache: [JobID: JobCounters] = [:]
                            try self.apply(.deleteJob(id), in: txn, counters: &cache)
                            pruned.append(id)
                        }
                        return pruned
                    }
                    continuation.resume(returning: .success(pruned))
                } catch let error as XferError {
                    continuation.resume(returning: .failure(error))
                } catch {
                    continuation.resume(returning: .failure(.stateUnavailable("cannot prune finished jobs in \(self.directory): \(error)")))
                }
            }
        }
        return try result.get()
    }

    /// Applies `changes` durably (committed before this returns). Changes
    /// queued by concurrent callers share one transaction.
    ///
    /// Group commit with a leader: the caller that finds no transaction being
    /// written writes one itself, on its own thread, with everything queued
    /// by then, and again until the queue is empty; callers arriving
    /// meanwhile only queue and wait. No thread hop for the leader (a hop to
    /// a writer thread and back cost two wake-ups per commit, about a fifth
    /// of a small file's CPU), and the transaction still begins and commits
    /// on one thread, in one synchronous block, as LMDB requires.
    func commit(_ changes: [StateChange]) async throws(XferError) {
        if changes.isEmpty { return }
        // The transport's thread (a job's light steps run on it) must not wait
        // for a disk: it leaves the transaction to the writer queue and runs
        // other steps meanwhile, whose changes then join the same transaction.
        let onEventLoop = EventLoopThread.isCurrent
        let result: Result<Void, XferError> = await withCheckedContinuation { continuation in
            let remaining = LockedValue(changes.count)
            let failure = LockedValue<XferError?>(nil)
            let done: @Sendable (Result<Void, XferError>) -> Void = { result in
                if case .failure(let error) = result { failure.withLock { $0 = $0 ?? error } }
                let left = remaining.withLock { value -> Int in
                    value -= 1
                    return value
                }
                if left == 0 {
                    if let error = failure.withLock({ $0 }) {
                        continuation.resume(returning: .failure(error))
                    } else {
                        continuation.resume(returning: .success(()))
                    }
                }
            }
            let starts = pending.withLock { queue -> Bool in
                for change in changes { queue.changes.append((change, done)) }
                guard !queue.isWriting else { return false }
                queue.isWriting = true
                return true
            }
            guard starts else { return }
            if onEventLoop {
                writer.async { self.drain() }
            } else {
                drain(handingOff: true)
            }
        }
        try result.get()
    }

    /// Forces everything committed onto disk (LMDB's NOMETASYNC defers the
    /// meta page). Used after committing server handles.
    func sync() throws(XferError) {
        do { try env.sync() } catch { throw .stateUnavailable("cannot sync state: \(error)") }
    }

    /// The current size of the memory map (it grows when full).
    var mapSize: Int { env.mapSize }

    /// Writes transactions until the queue is empty; only the leader runs it.
    /// A leader on a task's thread writes one transaction (its own changes are
    /// in it) and hands what queued meanwhile to the writer queue, so a
    /// stream of commits never holds one of the few cooperative threads.
    private func drain(handingOff: Bool = false) {
        var rounds = 0
        while true {
            let batch = pending.withLock { queue -> [(StateChange, @Sendable (Result<Void, XferError>) -> Void)] in
                if queue.changes.isEmpty { queue.isWriting = false }
                defer { queue.changes.removeAll(keepingCapacity: true) }
                return queue.changes
            }
            guard !batch.isEmpty else { return }
            rounds += 1
            if handingOff, rounds > 1 {
                // Put them back for the writer queue (still marked as writing).
                pending.withLock { queue in queue.changes.insert(contentsOf: batch, at: 0) }
                writer.async { self.drain() }
                return
            }
            let result: Result<Void, XferError>
            do {
                try env.write { txn in
                    // Counters change with nearly every change of a batch: read once, written once.
                    var cache: [JobID: JobCounters] = [:]
                    for (change, _) in batch { try apply(change, in: txn, counters: &cache) }
                    for (id, counters) in cache { try txn.put(countersDB, Array(id.rawValue.utf8), counters.encoded) }
                }
                result = .success(())
            } catch let error as XferError {
                result = .failure(error)
            } catch {
                result = .failure(.stateUnavailable("cannot write state in \(directory): \(error)"))
            }
            for (_, done) in batch { done(result) }
        }
    }

    private func apply(_ change: StateChange, in txn: LMDBTransaction, counters cache: inout [JobID: JobCounters]) throws {
        func counters(_ id: JobID) throws -> JobCounters {
            if let cached = cache[id] { return cached }
            let stored = try self.counters(id, in: txn)
            cache[id] = stored
            return stored
        }
        switch change {
        case .createJob(let record, let roots):
            frames.withLock { $0[record.id] = nil }
            try putJob(record, in: txn)
            for (index, root) in roots.enumerated() {
                try txn.put(rootsDB, Self.fileKey(record.id, index), Array(root.utf8))
            }
            cache[record.id] = JobCounters()

        case .putJob(let record):
            try putJob(record, in: txn)

        case .deleteJob(let id):
            frames.withLock { $0[id] = nil }
            try txn.delete(jobsDB, Array(id.rawValue.utf8))
            try txn.delete(countersDB, Array(id.rawValue.utf8))
            cache[id] = nil
            let prefix = Self.jobPrefix(id)
            for db in [rootsDB, filesDB, handlesDB, urlsDB, pathsDB, failuresDB, chunksDB, receiptsDB, progressDB] {
                try txn.deleteAll(db, prefix: prefix)
            }
            // A sync job's listings, decisions and pending deletes go with it.
            for db in syncDBs.perJob { try txn.deleteAll(db, prefix: prefix) }

        case .putFiles(let job, let files):
            var totals = try counters(job)
            let frame = try self.frame(job, in: txn)
            for (index, record) in files {
                let old = try writeFile(record, job: job, index: index, frame: frame, in: txn)
                let key = Self.fileKey(job, index)
                if let old {
                    totals.totalBytes += record.size - old.size
                    if old.root != record.root || old.relativePath != record.relativePath {
                        try txn.delete(pathsDB, Self.pathKey(job, old.root, old.relativePath))
                        try txn.put(pathsDB, Self.pathKey(job, record.root, record.relativePath), Self.u32Bytes(UInt32(index)))
                    }
                } else {
                    totals.fileCount += 1
                    totals.totalBytes += record.size
                    try txn.put(pathsDB, Self.pathKey(job, record.root, record.relativePath), Self.u32Bytes(UInt32(index)))
                }
                let wasComplete = old?.isComplete == true
                totals.completedFiles += (record.isComplete ? 1 : 0) - (wasComplete ? 1 : 0)
                // A complete file counts its size as done and keeps no progress of its own.
                if record.isComplete, !wasComplete {
                    let progress = try storedProgress(key, in: txn)
                    try txn.delete(progressDB, key)
                    try txn.deleteAll(chunksDB, prefix: key)
                    try txn.deleteAll(receiptsDB, prefix: key)
                    totals = totals.adding(doneBytes: record.size - progress.bytesDone)
                } else if wasComplete, let old {
                    totals = totals.adding(doneBytes: record.isComplete ? record.size - old.size : -old.size)
                }
                let failed = record.failure != nil
                let wasFailed = old?.failure != nil
                if failed != wasFailed {
                    totals.failedFiles += failed ? 1 : -1
                    if failed { try txn.put(failuresDB, key, []) } else { try txn.delete(failuresDB, key) }
                }
            }
            cache[job] = totals

        case .markDone(let job, let file, let chunks, let plan, let receipts):
            let delta = try updateBits(job, file, chunks, plan: plan, to: true, in: txn)
            if delta != 0 { cache[job] = try counters(job).adding(doneBytes: delta) }
            for (chunk, receipt) in receipts {
                try txn.put(receiptsDB, Self.chunkKey(job, file, chunk), Array(receipt.utf8))
            }

        case .markNotDone(let job, let file, let chunks, let plan):
            let delta = try updateBits(job, file, chunks, plan: plan, to: false, in: txn)
            if delta != 0 { cache[job] = try counters(job).adding(doneBytes: delta) }
            for chunk in chunks { try txn.delete(receiptsDB, Self.chunkKey(job, file, chunk)) }

        case .replaceDone(let job, let file, let done, let plan, let receipts):
            let prefix = Self.fileKey(job, file)
            let old = try storedProgress(prefix, in: txn)
            try txn.deleteAll(chunksDB, prefix: prefix)
            try txn.deleteAll(receiptsDB, prefix: prefix)
            // Empty segments are not stored: a missing segment reads as no chunk done.
            for segment in 0..<done.segmentCount where !done.segmentIsEmpty(segment) {
                try txn.put(chunksDB, prefix + Self.u32Bytes(UInt32(segment)), done.segmentBytes(segment))
            }
            let bytes = plan.bytes(of: done)
            if done.count == 0 {
                try txn.delete(progressDB, prefix)  // missing reads as nothing done
            } else {
                try txn.put(progressDB, prefix, Self.progressBytes(FileProgress(chunksDone: done.count, bytesDone: bytes)))
            }
            if bytes != old.bytesDone { cache[job] = try counters(job).adding(doneBytes: bytes - old.bytesDone) }
            for (chunk, receipt) in receipts {
                try txn.put(receiptsDB, Self.chunkKey(job, file, chunk), Array(receipt.utf8))
            }
        }
    }

    /// Writes `record`'s parts that differ from what is stored; returns the
    /// record stored before.
    @discardableResult
    private func writeFile(
        _ record: FileRecord, job: JobID, index: Int, frame: JobFrame, in txn: LMDBTransaction
    ) throws -> FileRecord? {
        let key = Self.fileKey(job, index)
        let oldBody = try txn.get(filesDB, key)
        let oldServer = try txn.get(handlesDB, key)
        let oldURL = try txn.get(urlsDB, key)
        let old = try oldBody.map { body in
            guard let decoded = StoredFile.decode(body: body, server: oldServer, url: oldURL, roots: frame.roots, target: frame.target)
            else { throw unreadable("file \(index + 1) of job \(job)") }
            return decoded
        }
        let rootPath = frame.roots.indices.contains(record.root) ? frame.roots[record.root] : nil
        let body = StoredFile.body(of: record, rootPath: rootPath)
        if body != oldBody { try txn.put(filesDB, key, body) }
        let server = StoredFile.server(of: record)
        if server != oldServer {
            if let server { try txn.put(handlesDB, key, server) } else { try txn.delete(handlesDB, key) }
        }
        let url = record.url.map { StoredFile.url($0, of: record, target: frame.target) }
        if url != oldURL {
            if let url { try txn.put(urlsDB, key, url) } else { try txn.delete(urlsDB, key) }
        }
        return old
    }

    private func putJob(_ record: JobRecord, in txn: LMDBTransaction) throws {
        try txn.put(jobsDB, Array(record.id.rawValue.utf8), record.encoded)
        if record.phase == .completed {
            // Stale entries (a job re-pushed or deleted since) are
            // recognised and dropped by `pruneCompletedJobs`.
            try txn.put(finishedDB, Self.finishedKey(record), [1])
        }
    }

    /// Sets or clears `chunks`' bits; returns the change in done bytes.
    private func updateBits(
        _ job: JobID, _ file: Int, _ chunks: [Int], plan: ChunkPlan, to value: Bool, in txn: LMDBTransaction
    ) throws -> Int64 {
        let prefix = Self.fileKey(job, file)
        var progress = try storedProgress(prefix, in: txn)
        let before = progress.bytesDone
        var segmentKey: [UInt8] = []
        var bytes: [UInt8] = []
        // Chunks of one change are few and usually in one segment: no grouping needed.
        for chunk in chunks.sorted() where chunk >= 0 && chunk < plan.count {
            let key = prefix + Self.u32Bytes(UInt32(chunk / ChunkSet.segmentSize))
            if key != segmentKey {
                if !segmentKey.isEmpty { try txn.put(chunksDB, segmentKey, bytes) }
                segmentKey = key
                bytes = try txn.get(chunksDB, key) ?? []
                let needed = ChunkSet.segmentByteCount(chunk / ChunkSet.segmentSize, capacity: plan.count)
                if bytes.count < needed { bytes += [UInt8](repeating: 0, count: needed - bytes.count) }
            }
            let bit = chunk % ChunkSet.segmentSize
            let mask: UInt8 = 1 << UInt8(bit & 7)
            let wasSet = bytes[bit >> 3] & mask != 0
            if value, !wasSet {
                bytes[bit >> 3] |= mask
                progress.chunksDone += 1
                progress.bytesDone += Int64(plan.length(of: chunk))
            } else if !value, wasSet {
                bytes[bit >> 3] &= ~mask
                progress.chunksDone -= 1
                progress.bytesDone -= Int64(plan.length(of: chunk))
            }
        }
        if !segmentKey.isEmpty { try txn.put(chunksDB, segmentKey, bytes) }
        try txn.put(progressDB, prefix, Self.progressBytes(progress))
        return progress.bytesDone - before
    }

    // MARK: Helpers

    private func record(_ id: JobID, in txn: LMDBTransaction) throws -> JobRecord? {
        guard let bytes = try txn.get(jobsDB, Array(id.rawValue.utf8)) else { return nil }
        return try decodeJob(bytes, id: id)
    }

    private func counters(_ id: JobID, in txn: LMDBTransaction) throws -> JobCounters {
        guard let bytes = try txn.get(countersDB, Array(id.rawValue.utf8)) else { return JobCounters() }
        guard let counters = JobCounters(decoding: bytes) else { throw unreadable("counters of job \(id)") }
        return counters
    }

    private func file(_ job: JobID, _ index: Int, in txn: LMDBTransaction) throws -> FileRecord? {
        let key = Self.fileKey(job, index)
        return try txn.get(filesDB, key).map { try decodeFile($0, key: key, job: job, index: index, in: txn) }
    }

    private func storedProgress(_ prefix: [UInt8], in txn: LMDBTransaction) throws -> FileProgress {
        guard let stored = try txn.get(progressDB, prefix) else { return FileProgress(chunksDone: 0, bytesDone: 0) }
        var reader = RecordReader(stored)
        guard let chunks = reader.int64(), let bytes = reader.int64(), reader.isAtEnd else {
            throw unreadable("a progress counter")
        }
        return FileProgress(chunksDone: Int(chunks), bytesDone: bytes)
    }

    func reading<T>(_ body: (LMDBTransaction) throws -> T) throws(XferError) -> T {
        do {
            return try env.read(body)
        } catch let error as XferError {
            throw error
        } catch {
            throw .stateUnavailable("cannot read state in \(directory): \(error)")
        }
    }

    func decodeJob(_ bytes: [UInt8], id: JobID) throws -> JobRecord {
        guard let record = JobRecord(id: id, decoding: bytes) else { throw unreadable("the record of job \(id)") }
        return record
    }

    private func decodeFile(_ body: [UInt8], key: [UInt8], job: JobID, index: Int, in txn: LMDBTransaction) throws -> FileRecord {
        let frame = try frame(job, in: txn)
        guard
            let record = StoredFile.decode(
                body: body, server: try txn.get(handlesDB, key), url: try txn.get(urlsDB, key), roots: frame.roots,
                target: frame.target)
        else {
            throw unreadable("file \(index + 1) of job \(job)")
        }
        return record
    }

    func unreadable(_ what: String) -> XferError {
        .stateUnavailable("\(what) in \(directory) is unreadable", remedy: .useAnotherStateDirectory)
    }

    /// The job's 16 hex digits as 8 bytes (every id xfer makes is one; any
    /// other text is keyed by the first 8 bytes of its SHA-256).
    ///
    /// Read in one pass over the id's bytes, into an array with room for a chunk key: keys are
    /// made for every record of every file, and the generic checks and concatenations they were
    /// made with cost ~4 % of a small file's client CPU (`perf`, issue 46).
    static func jobPrefix(_ job: JobID) -> [UInt8] {
        var key: [UInt8] = []
        key.reserveCapacity(16)
        var text = job.rawValue
        let parsed = text.withUTF8 { digits in
            guard digits.count == 16 else { return false }
            var value: UInt64 = 0
            for digit in digits {
                switch digit {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): value = value << 4 | UInt64(digit - UInt8(ascii: "0"))
                case UInt8(ascii: "a")...UInt8(ascii: "f"): value = value << 4 | UInt64(digit - UInt8(ascii: "a") + 10)
                default: return false
                }
            }
            for shift in stride(from: 56, through: 0, by: -8) { key.append(UInt8(truncatingIfNeeded: value >> UInt64(shift))) }
            return true
        }
        if !parsed { key.append(contentsOf: SHA256Digest.of(Array(job.rawValue.utf8)).prefix(8)) }
        return key
    }

    static func fileKey(_ job: JobID, _ file: Int) -> [UInt8] {
        var key = jobPrefix(job)
        appendU32(UInt32(file), to: &key)
        return key
    }

    static func chunkKey(_ job: JobID, _ file: Int, _ chunk: Int) -> [UInt8] {
        var key = fileKey(job, file)
        appendU32(UInt32(chunk), to: &key)
        return key
    }

    /// `u32Bytes(value)` appended in place.
    static func appendU32(_ value: UInt32, to key: inout [UInt8]) {
        key.append(UInt8(value >> 24))
        key.append(UInt8((value >> 16) & 0xff))
        key.append(UInt8((value >> 8) & 0xff))
        key.append(UInt8(value & 0xff))
    }

    /// LMDB keys are at most 511 bytes: a longer relative path is keyed by
    /// its start and a SHA-256 of the whole (paths are at most 4 KiB).
    static func pathKey(_ job: JobID, _ root: Int, _ relativePath: String) -> [UInt8] {
        let prefix = fileKey(job, root)
        let path = Array(relativePath.utf8)
        if prefix.count + path.count <= 480 { return prefix + path }
        return prefix + path.prefix(400) + [0] + Array(SHA256Digest.of(path))
    }

    static func finishedKey(_ record: JobRecord) -> [UInt8] {
        let seconds = UInt64(max(0, record.updatedAt.timeIntervalSince1970.rounded(.down)))
        return (0..<8).map { UInt8((seconds >> UInt64(56 - 8 * $0)) & 0xff) } + Array(record.id.rawValue.utf8)
    }

    static func progressBytes(_ progress: FileProgress) -> [UInt8] {
        var writer = RecordWriter(capacity: 16)
        writer.int64(Int64(progress.chunksDone))
        writer.int64(progress.bytesDone)
        return writer.bytes
    }

    static func u64BE(_ bytes: [UInt8]) -> UInt64 {
        bytes.prefix(8).reduce(0) { $0 << 8 | UInt64($1) }
    }

    static func u32Bytes(_ value: UInt32) -> [UInt8] {
        [UInt8(value >> 24), UInt8((value >> 16) & 0xff), UInt8((value >> 8) & 0xff), UInt8(value & 0xff)]
    }

    static func u32(_ bytes: [UInt8], at offset: Int) -> UInt32 {
        guard bytes.count >= offset + 4 else { return 0 }
        return UInt32(bytes[offset]) << 24 | UInt32(bytes[offset + 1]) << 16
            | UInt32(bytes[offset + 2]) << 8 | UInt32(bytes[offset + 3])
    }

    static func reason(_ error: any Error) -> String {
        SystemErrorReason.of(error)
    }
}

extension JobCounters {
    /// These counters with `delta` more bytes done (never below zero).
    package func adding(doneBytes delta: Int64) -> JobCounters {
        var copy = self
        copy.doneBytes = max(0, copy.doneBytes + delta)
        return copy
    }
}

/// SHA-256 for keys, without importing Crypto into every file.
enum SHA256Digest {
    static func of(_ bytes: [UInt8]) -> [UInt8] {
        Array(Crypto.SHA256.hash(data: bytes))
    }
}

extension Data {
    var bytes: [UInt8] { [UInt8](self) }
}
