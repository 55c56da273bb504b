import Dispatch
import XferPrimitives
import Foundation
import Synchronization
import Xfer

/// The engine's state store in SQLite, for comparison with `StateStore`
/// (LMDB). Same semantics method for method, same layout of the data
/// (binary job headers and file records under their own keys, per-job
/// counters, 8192-chunk bitmap segments, a done counter and bytes per file,
/// the paths and failures indexes, a completion index), and the same write design: one
/// serial queue, changes queued by concurrent committers applied in one
/// transaction. So the numbers differ only by the storage engine.
///
/// Durability matches: WAL with synchronous=FULL fsyncs the log at every
/// commit, so `commit` returns only once its changes survive a power loss
/// (LMDB's NOMETASYNC is slightly weaker: it may lose the last commit).
///
/// Reads take a connection of their own from a pool and run in a read
/// transaction (a WAL snapshot), as LMDB reads run in a read transaction
/// beside the writer.
final class SQLiteStateStore: JobStateStore {
    static let layoutVersion = "sqlite-3"

    let directory: String
    private let path: String
    /// Touched only on `writer`.
    private let writeConnection: SQLiteConnection
    private let readers = Mutex<[SQLiteConnection]>([])
    private let writer = DispatchQueue(label: "xfer.sqlite-state.writer")
    private let pending = Mutex<[(StateChange, @Sendable (Result<Void, XferError>) -> Void)]>([])

    init(directory: String) throws(XferError) {
        self.directory = directory
        let dbDirectory = (directory as NSString).appendingPathComponent("sqlite")
        do {
            try FileManager.default.createDirectory(
                atPath: dbDirectory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw .stateUnavailable("cannot create \(dbDirectory): \(error)")
        }
        path = (dbDirectory as NSString).appendingPathComponent("state.sqlite")
        do {
            writeConnection = try Self.open(path)
            // WITHOUT ROWID: each table is one B-tree keyed like the LMDB
            // database it mirrors, instead of a rowid tree plus an index.
            try writeConnection.execute(
                """
                CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
                CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, record BLOB NOT NULL) WITHOUT ROWID;
                CREATE TABLE IF NOT EXISTS counters (id TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID;
                CREATE TABLE IF NOT EXISTS roots (job TEXT, root INTEGER, path TEXT NOT NULL, PRIMARY KEY (job, root)) WITHOUT ROWID;
                CREATE TABLE IF NOT EXISTS files (job TEXT, file INTEGER, record BLOB NOT NULL, PRIMARY KEY (job, file)) WITHOUT ROWID;
                CREATE TABLE IF NOT EXISTS paths (job TEXT, root INTEGER, path TEXT, file INTEGER NOT NULL,
                    PRIMARY KEY (job, root, path)) WITHOUT ROWID;
                CREATE TABLE IF NOT EXISTS failures (job TEXT, file INTEGER, PRIMARY KEY (job, file)) WITHOUT ROWID;
                CREATE TABLE IF NOT EXISTS chunks (job TEXT, file INTEGER, segment INTEGER, bits BLOB NOT NULL,
                    PRIMARY KEY (job, file, segment)) WITHOUT ROWID;
                CREATE TABLE IF NOT EXISTS receipts (job TEXT, file INTEGER, chunk INTEGER, receipt TEXT NOT NULL,
                    PRIMARY KEY (job, file, chunk)) WITHOUT ROWID;
                CREATE TABLE IF NOT EXISTS progress (job TEXT, file INTEGER, done INTEGER NOT NULL, bytes INTEGER NOT NULL,
                    PRIMARY KEY (job, file)) WITHOUT ROWID;
                CREATE TABLE IF NOT EXISTS finished (at INTEGER, job TEXT, PRIMARY KEY (at, job)) WITHOUT ROWID;
                """)
            var found: String?
            try writeConnection.query("SELECT value FROM meta WHERE key = 'layout'") { row in
                found = row.text(0)
                return false
            }
            if let found, found != Self.layoutVersion {
                throw SQLiteError(code: 0, message: "\(path) holds state layout \(found), expected \(Self.layoutVersion)")
            }
            if found == nil {
                try writeConnection.run("INSERT INTO meta (key, value) VALUES ('layout', ?)", [.text(Self.layoutVersion)])
            }
        } catch {
            throw .stateUnavailable("cannot open \(path): \(error)")
        }
    }

    private static func open(_ path: String) throws(SQLiteError) -> SQLiteConnection {
        let connection = try SQLiteConnection(path: path)
        try connection.execute("PRAGMA journal_mode = WAL")
        try connection.execute("PRAGMA synchronous = FULL")
        return connection
    }

    // MARK: Reads

    func job(_ id: JobID) throws(XferError) -> JobRecord? {
        try reading { db in try self.record(id, in: db) }
    }

    func counters(_ id: JobID) throws(XferError) -> JobCounters {
        try reading { db in try self.counters(id, in: db) }
    }

    func roots(_ id: JobID) throws(XferError) -> [String] {
        try reading { db in
            var roots: [String] = []
            try db.query("SELECT path FROM roots WHERE job = ? ORDER BY root", [.text(id.rawValue)]) { row in
                roots.append(row.text(0))
                return true
            }
            return roots
        }
    }

    func file(job: JobID, index: Int) throws(XferError) -> FileRecord? {
        try reading { db in try self.file(job, index, in: db) }
    }

    func files(job: JobID, from start: Int, limit: Int) throws(XferError) -> [(index: Int, record: FileRecord)] {
        try reading { db in
            var result: [(index: Int, record: FileRecord)] = []
            guard limit > 0 else { return result }
            try db.query(
                "SELECT file, record FROM files WHERE job = ? AND file >= ? ORDER BY file LIMIT ?",
                [.text(job.rawValue), .int(Int64(max(0, start))), .int(Int64(limit))]
            ) { row in
                result.append((Int(row.int(0)), try self.decodeFile(row.blob(1))))
                return true
            }
            return result
        }
    }

    func fileIndex(job: JobID, root: Int, relativePath: String) throws(XferError) -> Int? {
        try reading { db in
            var found: Int?
            try db.query(
                "SELECT file FROM paths WHERE job = ? AND root = ? AND path = ?",
                [.text(job.rawValue), .int(Int64(root)), .text(relativePath)]
            ) { row in
                found = Int(row.int(0))
                return false
            }
            return found
        }
    }

    func failedFiles(job: JobID, limit: Int) throws(XferError) -> [(index: Int, record: FileRecord)] {
        try reading { db in
            var indexes: [Int] = []
            try db.query(
                "SELECT file FROM failures WHERE job = ? ORDER BY file LIMIT ?", [.text(job.rawValue), .int(Int64(max(0, limit)))]
            ) { row in
                indexes.append(Int(row.int(0)))
                return true
            }
            return try indexes.compactMap { index in try self.file(job, index, in: db).map { (index, $0) } }
        }
    }

    func fileProgress(job: JobID, file: Int) throws(XferError) -> FileProgress {
        try reading { db in try self.storedProgress(job, file, in: db) }
    }

    func doneChunks(job: JobID, file: Int, capacity: Int) throws(XferError) -> ChunkSet {
        var set = ChunkSet(capacity: capacity)
        guard capacity > 0 else { return set }
        try reading { db in
            try db.query(
                "SELECT segment, bits FROM chunks WHERE job = ? AND file = ? ORDER BY segment",
                [.text(job.rawValue), .int(Int64(file))]
            ) { row in
                set.loadSegment(Int(row.int(0)), from: row.blob(1))
                return true
            }
        }
        return set
    }

    func receipts(job: JobID, file: Int) throws(XferError) -> [Int: String] {
        try reading { db in
            var result: [Int: String] = [:]
            try db.query(
                "SELECT chunk, receipt FROM receipts WHERE job = ? AND file = ?", [.text(job.rawValue), .int(Int64(file))]
            ) { row in
                result[Int(row.int(0))] = row.text(1)
                return true
            }
            return result
        }
    }

    func jobIDs(withPrefix prefix: String) throws(XferError) -> [JobID] {
        try reading { db in
            var ids: [JobID] = []
            let needle = Array(prefix.utf8)
            // Ids sort bytewise (BINARY collation), as LMDB keys do: the
            // matches are one run starting at the prefix.
            try db.query("SELECT id FROM jobs WHERE id >= ? ORDER BY id", [.text(prefix)]) { row in
                let id = row.text(0)
                guard id.utf8.starts(with: needle) else { return false }
                ids.append(JobID(rawValue: id))
                return true
            }
            return ids
        }
    }

    func listings() throws(XferError) -> [JobListing] {
        try reading { db in
            var records: [JobRecord] = []
            try db.query("SELECT id, record FROM jobs ORDER BY id") { row in
                records.append(try self.decodeJob(row.blob(1), id: JobID(rawValue: row.text(0))))
                return true
            }
            // Counters are read after the scan: their statements would otherwise
            // run while the scanning one is mid-step (both in one snapshot).
            return try records.map { JobListing(record: $0, counters: try self.counters($0.id, in: db)) }
        }
    }

    // MARK: Writes

    func pruneCompletedJobs(finishedBefore cutoff: Date) async throws(XferError) -> [JobID] {
        let limit = Int64(max(0, cutoff.timeIntervalSince1970.rounded(.up)))
        let result: Result<[JobID], XferError> = await withCheckedContinuation { continuation in
            writer.async {
                continuation.resume(returning: self.writing { db in
                    var due: [(Int64, String)] = []
                    try db.query("SELECT at, job FROM finished WHERE at < ? ORDER BY at, job", [.int(limit)]) { row in
                        due.append((row.int(0), row.text(1)))
                        return true
                    }
                    var pruned: [JobID] = []
                    for (at, job) in due {
                        let id = JobID(rawValue: job)
                        let entry: [SQLiteValue] = [.int(at), .text(job)]
                        guard let record = try? self.record(id, in: db), record.phase == .completed,
                            Self.finishedSecond(record.updatedAt) == at
                        else {
                            try db.run("DELETE FROM finished WHERE at = ? AND job = ?", entry)  // stale
                            continue
                        }
                        guard record.updatedAt < cutoff else { continue }
                        try db.run("DELETE FROM finished WHERE at = ? AND job = ?", entry)
                        var cache: [JobID: JobCounters] = [:]
                        try self.apply(.deleteJob(id), in: db, counters: &cache)
                        pruned.append(id)
                    }
                    return pruned
                })
            }
        }
        return try result.get()
    }

    func commit(_ changes: [StateChange]) async throws(XferError) {
        guard !changes.isEmpty else { return }
        let result: Result<Void, XferError> = await withCheckedContinuation { continuation in
            // All of one call's changes are queued under one lock hold, so a
            // batch never splits them.
            let remaining = Mutex(changes.count)
            let failure = Mutex<XferError?>(nil)
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
            pending.withLock { queue in
                for change in changes { queue.append((change, done)) }
            }
            writer.async { self.drain() }
        }
        try result.get()
    }

    /// Nothing to do: with synchronous=FULL every commit is already on disk.
    func sync() throws(XferError) {}

    private func drain() {
        let batch = pending.withLock { queue in
            defer { queue.removeAll(keepingCapacity: true) }
            return queue
        }
        guard !batch.isEmpty else { return }
        let result = writing { db in
            var cache: [JobID: JobCounters] = [:]
            for (change, _) in batch { try self.apply(change, in: db, counters: &cache) }
            for (id, counters) in cache {
                try db.run("INSERT OR REPLACE INTO counters (id, value) VALUES (?, ?)", [.text(id.rawValue), .blob(counters.encoded)])
            }
        }
        for (_, done) in batch { done(result) }
    }

    /// As `StateStore.apply`: every change O(1) in the job's size, counters in the same transaction.
    private func apply(_ change: StateChange, in db: SQLiteConnection, counters cache: inout [JobID: JobCounters]) throws {
        func counters(_ id: JobID) throws -> JobCounters {
            if let cached = cache[id] { return cached }
            let stored = try self.counters(id, in: db)
            cache[id] = stored
            return stored
        }
        switch change {
        case .createJob(let record, let roots):
            try putJob(record, in: db)
            for (index, root) in roots.enumerated() {
                try db.run(
                    "INSERT OR REPLACE INTO roots (job, root, path) VALUES (?, ?, ?)",
                    [.text(record.id.rawValue), .int(Int64(index)), .text(root)])
            }
            cache[record.id] = JobCounters()
        case .putJob(let record):
            try putJob(record, in: db)
        case .deleteJob(let id):
            let key: [SQLiteValue] = [.text(id.rawValue)]
            try db.run("DELETE FROM jobs WHERE id = ?", key)
            try db.run("DELETE FROM counters WHERE id = ?", key)
            cache[id] = nil
            for table in ["roots", "files", "paths", "failures", "chunks", "receipts", "progress"] {
                try db.run("DELETE FROM \(table) WHERE job = ?", key)
            }
        case .putFiles(let job, let files):
            var totals = try counters(job)
            for (index, record) in files {
                let key: [SQLiteValue] = [.text(job.rawValue), .int(Int64(index))]
                let old = try file(job, index, in: db)
                if let old {
                    totals.totalBytes += record.size - old.size
                    if old.root != record.root || old.relativePath != record.relativePath {
                        try db.run(
                            "DELETE FROM paths WHERE job = ? AND root = ? AND path = ?",
                            [.text(job.rawValue), .int(Int64(old.root)), .text(old.relativePath)])
                        try putPath(job, record, index, in: db)
                    }
                } else {
                    totals.fileCount += 1
                    totals.totalBytes += record.size
                    try putPath(job, record, index, in: db)
                }
                totals.completedFiles += (record.isComplete ? 1 : 0) - (old?.isComplete == true ? 1 : 0)
                let failed = record.failure != nil
                if failed != (old?.failure != nil) {
                    totals.failedFiles += failed ? 1 : -1
                    if failed {
                        try db.run("INSERT OR REPLACE INTO failures (job, file) VALUES (?, ?)", key)
                    } else {
                        try db.run("DELETE FROM failures WHERE job = ? AND file = ?", key)
                    }
                }
                try db.run("INSERT OR REPLACE INTO files (job, file, record) VALUES (?, ?, ?)", key + [.blob(StoredFile.whole(record))])
            }
            cache[job] = totals
        case .markDone(let job, let file, let chunks, let plan, let receipts):
            let delta = try updateBits(job, file, chunks, plan: plan, to: true, in: db)
            if delta != 0 { cache[job] = try counters(job).adding(doneBytes: delta) }
            for (chunk, receipt) in receipts {
                try db.run(
                    "INSERT OR REPLACE INTO receipts (job, file, chunk, receipt) VALUES (?, ?, ?, ?)",
                    [.text(job.rawValue), .int(Int64(file)), .int(Int64(chunk)), .text(receipt)])
            }
        case .markNotDone(let job, let file, let chunks, let plan):
            let delta = try updateBits(job, file, chunks, plan: plan, to: false, in: db)
            if delta != 0 { cache[job] = try counters(job).adding(doneBytes: delta) }
            for chunk in chunks {
                try db.run(
                    "DELETE FROM receipts WHERE job = ? AND file = ? AND chunk = ?",
                    [.text(job.rawValue), .int(Int64(file)), .int(Int64(chunk))])
            }
        case .replaceDone(let job, let file, let done, let plan, let receipts):
            let key: [SQLiteValue] = [.text(job.rawValue), .int(Int64(file))]
            let old = try storedProgress(job, file, in: db)
            try db.run("DELETE FROM chunks WHERE job = ? AND file = ?", key)
            try db.run("DELETE FROM receipts WHERE job = ? AND file = ?", key)
            for segment in 0..<done.segmentCount {
                try db.run(
                    "INSERT INTO chunks (job, file, segment, bits) VALUES (?, ?, ?, ?)",
                    key + [.int(Int64(segment)), .blob(done.segmentBytes(segment))])
            }
            let bytes = plan.bytes(of: done)
            try db.run(
                "INSERT OR REPLACE INTO progress (job, file, done, bytes) VALUES (?, ?, ?, ?)",
                key + [.int(Int64(done.count)), .int(bytes)])
            if bytes != old.bytesDone { cache[job] = try counters(job).adding(doneBytes: bytes - old.bytesDone) }
            for (chunk, receipt) in receipts {
                try db.run(
                    "INSERT OR REPLACE INTO receipts (job, file, chunk, receipt) VALUES (?, ?, ?, ?)",
                    key + [.int(Int64(chunk)), .text(receipt)])
            }
        }
    }

    private func putJob(_ record: JobRecord, in db: SQLiteConnection) throws {
        try db.run("INSERT OR REPLACE INTO jobs (id, record) VALUES (?, ?)", [.text(record.id.rawValue), .blob(record.encoded)])
        if record.phase == .completed {
            // Stale entries are recognised and dropped by pruning.
            try db.run(
                "INSERT OR REPLACE INTO finished (at, job) VALUES (?, ?)",
                [.int(Self.finishedSecond(record.updatedAt)), .text(record.id.rawValue)])
        }
    }

    private func putPath(_ job: JobID, _ record: FileRecord, _ index: Int, in db: SQLiteConnection) throws {
        try db.run(
            "INSERT OR REPLACE INTO paths (job, root, path, file) VALUES (?, ?, ?, ?)",
            [.text(job.rawValue), .int(Int64(record.root)), .text(record.relativePath), .int(Int64(index))])
    }

    /// Read-modify-write of the touched bitmap segments and the counter, as
    /// `StateStore.updateBits`; returns the change in done bytes.
    private func updateBits(
        _ job: JobID, _ file: Int, _ chunks: [Int], plan: ChunkPlan, to value: Bool, in db: SQLiteConnection
    ) throws -> Int64 {
        let key: [SQLiteValue] = [.text(job.rawValue), .int(Int64(file))]
        var progress = try storedProgress(job, file, in: db)
        let before = progress.bytesDone
        let bySegment = Dictionary(grouping: chunks.filter { $0 >= 0 && $0 < plan.count }) { $0 / ChunkSet.segmentSize }
        for (segment, members) in bySegment {
            var bytes: [UInt8] = []
            try db.query("SELECT bits FROM chunks WHERE job = ? AND file = ? AND segment = ?", key + [.int(Int64(segment))]) { row in
                bytes = row.blob(0)
                return false
            }
            let needed = ChunkSet.segmentSize / 8
            if bytes.count < needed { bytes += [UInt8](repeating: 0, count: needed - bytes.count) }
            for chunk in members {
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
            try db.run(
                "INSERT OR REPLACE INTO chunks (job, file, segment, bits) VALUES (?, ?, ?, ?)",
                key + [.int(Int64(segment)), .blob(bytes)])
        }
        try db.run(
            "INSERT OR REPLACE INTO progress (job, file, done, bytes) VALUES (?, ?, ?, ?)",
            key + [.int(Int64(progress.chunksDone)), .int(progress.bytesDone)])
        return progress.bytesDone - before
    }

    private func storedProgress(_ job: JobID, _ file: Int, in db: SQLiteConnection) throws -> FileProgress {
        var progress = FileProgress(chunksDone: 0, bytesDone: 0)
        try db.query("SELECT done, bytes FROM progress WHERE job = ? AND file = ?", [.text(job.rawValue), .int(Int64(file))]) { row in
            progress = FileProgress(chunksDone: Int(row.int(0)), bytesDone: row.int(1))
            return false
        }
        return progress
    }

    // MARK: Helpers

    private func record(_ id: JobID, in db: SQLiteConnection) throws -> JobRecord? {
        var bytes: [UInt8]?
        try db.query("SELECT record FROM jobs WHERE id = ?", [.text(id.rawValue)]) { row in
            bytes = row.blob(0)
            return false
        }
        guard let bytes else { return nil }
        return try decodeJob(bytes, id: id)
    }

    private func counters(_ id: JobID, in db: SQLiteConnection) throws -> JobCounters {
        var bytes: [UInt8]?
        try db.query("SELECT value FROM counters WHERE id = ?", [.text(id.rawValue)]) { row in
            bytes = row.blob(0)
            return false
        }
        guard let bytes else { return JobCounters() }
        guard let counters = JobCounters(decoding: bytes) else {
            throw XferError.stateUnavailable("the counters of job \(id) in \(path) are unreadable")
        }
        return counters
    }

    private func file(_ job: JobID, _ index: Int, in db: SQLiteConnection) throws -> FileRecord? {
        var bytes: [UInt8]?
        try db.query("SELECT record FROM files WHERE job = ? AND file = ?", [.text(job.rawValue), .int(Int64(index))]) { row in
            bytes = row.blob(0)
            return false
        }
        return try bytes.map { try decodeFile($0) }
    }

    /// Runs `body` in a read transaction on a pooled connection.
    private func reading<T>(_ body: (SQLiteConnection) throws -> T) throws(XferError) -> T {
        let connection: SQLiteConnection
        do {
            connection = try readers.withLock { $0.popLast() } ?? Self.open(path)
        } catch {
            throw .stateUnavailable("cannot open \(path): \(error)")
        }
        defer { readers.withLock { $0.append(connection) } }
        do {
            try connection.execute("BEGIN")
            defer { try? connection.execute("COMMIT") }
            return try body(connection)
        } catch let error as XferError {
            throw error
        } catch {
            throw .stateUnavailable("cannot read state in \(path): \(error)")
        }
    }

    /// Runs `body` in one write transaction; call on `writer` only.
    private func writing<T>(_ body: (SQLiteConnection) throws -> T) -> Result<T, XferError> {
        let db = writeConnection
        do {
            try db.execute("BEGIN IMMEDIATE")
            let value: T
            do {
                value = try body(db)
            } catch {
                try? db.execute("ROLLBACK")
                throw error
            }
            try db.execute("COMMIT")
            return .success(value)
        } catch let error as XferError {
            return .failure(error)
        } catch {
            try? db.execute("ROLLBACK")
            return .failure(.stateUnavailable("cannot write state in \(path): \(error)"))
        }
    }

    private func decodeJob(_ bytes: [UInt8], id: JobID) throws -> JobRecord {
        guard let record = JobRecord(id: id, decoding: bytes) else {
            throw XferError.stateUnavailable("the record of job \(id) in \(path) is unreadable")
        }
        return record
    }

    private func decodeFile(_ bytes: [UInt8]) throws -> FileRecord {
        guard let record = StoredFile.decode(whole: bytes) else {
            throw XferError.stateUnavailable("a file record in \(path) is unreadable")
        }
        return record
    }

    static func finishedSecond(_ date: Date) -> Int64 {
        Int64(max(0, date.timeIntervalSince1970.rounded(.down)))
    }
}
