import Dispatch
import Foundation
import Synchronization
import Xfer

/// The engine's state store in SQLite, for comparison with `StateStore`
/// (LMDB). Same semantics method for method, same layout of the data
/// (JSON records, binary listings, 8192-chunk bitmap segments, a done
/// counter per file, a completion index), and the same write design: one
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
    static let layoutVersion = "sqlite-1"

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
                CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, record BLOB NOT NULL, summary BLOB NOT NULL) WITHOUT ROWID;
                CREATE TABLE IF NOT EXISTS chunks (job TEXT, file INTEGER, segment INTEGER, bits BLOB NOT NULL,
                    PRIMARY KEY (job, file, segment)) WITHOUT ROWID;
                CREATE TABLE IF NOT EXISTS receipts (job TEXT, file INTEGER, chunk INTEGER, receipt TEXT NOT NULL,
                    PRIMARY KEY (job, file, chunk)) WITHOUT ROWID;
                CREATE TABLE IF NOT EXISTS progress (job TEXT, file INTEGER, done INTEGER NOT NULL,
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

    func jobs() throws(XferError) -> [JobRecord] {
        try reading { db in
            var result: [JobRecord] = []
            try db.query("SELECT id, record FROM jobs ORDER BY id") { row in
                result.append(try self.decodeJob(row.blob(1), id: row.text(0)))
                return true
            }
            return result
        }
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

    func jobWithProgress(_ id: JobID) throws(XferError) -> (record: JobRecord, files: [FileProgress])? {
        try reading { db in
            guard let record = try self.record(id, in: db) else { return nil }
            return (record, try self.progress(of: JobListing(record), in: db))
        }
    }

    func listings() throws(XferError) -> [(listing: JobListing, files: [FileProgress])] {
        try reading { db in
            var listings: [JobListing] = []
            try db.query("SELECT id, summary, record FROM jobs ORDER BY id") { row in
                let id = JobID(rawValue: row.text(0))
                if let listing = JobListing(id: id, decoding: row.blob(1)) {
                    listings.append(listing)
                } else {
                    // A summary that does not decode: the record has it all.
                    listings.append(JobListing(try self.decodeJob(row.blob(2), id: id.rawValue)))
                }
                return true
            }
            // Progress is read after the scan: its statements would otherwise
            // run while the scanning one is mid-step (both in one snapshot).
            return try listings.map { listing in (listing, try self.progress(of: listing, in: db)) }
        }
    }

    /// As `StateStore`: the counter and the one segment holding the last chunk.
    private func progress(of listing: JobListing, in db: SQLiteConnection) throws -> [FileProgress] {
        var files: [FileProgress] = []
        files.reserveCapacity(listing.files.count)
        for (index, file) in listing.files.enumerated() {
            let capacity = ChunkPlan(fileSize: max(0, file.size), chunkSize: max(1, file.chunkSize)).count
            var lastDone = false
            if capacity > 0 {
                let last = capacity - 1
                try db.query(
                    "SELECT bits FROM chunks WHERE job = ? AND file = ? AND segment = ?",
                    [.text(listing.id.rawValue), .int(Int64(index)), .int(Int64(last / ChunkSet.segmentSize))]
                ) { row in
                    let segment = row.blob(0)
                    let bit = last % ChunkSet.segmentSize
                    lastDone = segment.count > bit >> 3 && segment[bit >> 3] & (1 << UInt8(bit & 7)) != 0
                    return false
                }
            }
            let count = try storedCount(listing.id, index, in: db)
            files.append(FileProgress(chunksDone: min(max(0, count), capacity), lastChunkDone: lastDone))
        }
        return files
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
                        guard let record = try? self.record(id, in: db) else {
                            try db.run("DELETE FROM finished WHERE at = ? AND job = ?", entry)
                            continue
                        }
                        let listing = JobListing(record)
                        guard listing.phase == .completed, Self.finishedSecond(listing.updatedAt) == at else {
                            try db.run("DELETE FROM finished WHERE at = ? AND job = ?", entry)  // stale
                            continue
                        }
                        guard listing.updatedAt < cutoff else { continue }
                        try db.run("DELETE FROM finished WHERE at = ? AND job = ?", entry)
                        try self.apply(.deleteJob(id), in: db)
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
            for (change, _) in batch { try self.apply(change, in: db) }
        }
        for (_, done) in batch { done(result) }
    }

    private func apply(_ change: StateChange, in db: SQLiteConnection) throws {
        switch change {
        case .putJob(let record):
            let listing = JobListing(record)
            try db.run(
                "INSERT OR REPLACE INTO jobs (id, record, summary) VALUES (?, ?, ?)",
                [.text(listing.id.rawValue), .blob([UInt8](try Self.encoder.encode(record))), .blob(listing.encoded)])
            if listing.phase == .completed {
                // Stale entries are recognised and dropped by pruning.
                try db.run(
                    "INSERT OR REPLACE INTO finished (at, job) VALUES (?, ?)",
                    [.int(Self.finishedSecond(listing.updatedAt)), .text(listing.id.rawValue)])
            }
        case .deleteJob(let id):
            let key: [SQLiteValue] = [.text(id.rawValue)]
            try db.run("DELETE FROM jobs WHERE id = ?", key)
            try db.run("DELETE FROM chunks WHERE job = ?", key)
            try db.run("DELETE FROM receipts WHERE job = ?", key)
            try db.run("DELETE FROM progress WHERE job = ?", key)
        case .markDone(let job, let file, let chunks, let receipts):
            try updateBits(job, file, chunks, to: true, in: db)
            for (chunk, receipt) in receipts {
                try db.run(
                    "INSERT OR REPLACE INTO receipts (job, file, chunk, receipt) VALUES (?, ?, ?, ?)",
                    [.text(job.rawValue), .int(Int64(file)), .int(Int64(chunk)), .text(receipt)])
            }
        case .markNotDone(let job, let file, let chunks):
            try updateBits(job, file, chunks, to: false, in: db)
            for chunk in chunks {
                try db.run(
                    "DELETE FROM receipts WHERE job = ? AND file = ? AND chunk = ?",
                    [.text(job.rawValue), .int(Int64(file)), .int(Int64(chunk))])
            }
        case .replaceDone(let job, let file, let done, let receipts):
            let key: [SQLiteValue] = [.text(job.rawValue), .int(Int64(file))]
            try db.run("DELETE FROM chunks WHERE job = ? AND file = ?", key)
            try db.run("DELETE FROM receipts WHERE job = ? AND file = ?", key)
            for segment in 0..<done.segmentCount {
                try db.run(
                    "INSERT INTO chunks (job, file, segment, bits) VALUES (?, ?, ?, ?)",
                    key + [.int(Int64(segment)), .blob(done.segmentBytes(segment))])
            }
            try db.run("INSERT OR REPLACE INTO progress (job, file, done) VALUES (?, ?, ?)", key + [.int(Int64(done.count))])
            for (chunk, receipt) in receipts {
                try db.run(
                    "INSERT OR REPLACE INTO receipts (job, file, chunk, receipt) VALUES (?, ?, ?, ?)",
                    key + [.int(Int64(chunk)), .text(receipt)])
            }
        }
    }

    /// Read-modify-write of the touched bitmap segments and the counter, as
    /// `StateStore.updateBits`.
    private func updateBits(_ job: JobID, _ file: Int, _ chunks: [Int], to value: Bool, in db: SQLiteConnection) throws {
        let key: [SQLiteValue] = [.text(job.rawValue), .int(Int64(file))]
        var count = try storedCount(job, file, in: db)
        let bySegment = Dictionary(grouping: chunks) { $0 / ChunkSet.segmentSize }
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
                if value {
                    bytes[bit >> 3] |= mask
                    if !wasSet { count += 1 }
                } else {
                    bytes[bit >> 3] &= ~mask
                    if wasSet { count -= 1 }
                }
            }
            try db.run(
                "INSERT OR REPLACE INTO chunks (job, file, segment, bits) VALUES (?, ?, ?, ?)",
                key + [.int(Int64(segment)), .blob(bytes)])
        }
        try db.run("INSERT OR REPLACE INTO progress (job, file, done) VALUES (?, ?, ?)", key + [.int(Int64(max(0, count)))])
    }

    /// The stored counter, or (none stored) the bits counted, as `StateStore`.
    private func storedCount(_ job: JobID, _ file: Int, in db: SQLiteConnection) throws -> Int {
        let key: [SQLiteValue] = [.text(job.rawValue), .int(Int64(file))]
        var stored: Int?
        try db.query("SELECT done FROM progress WHERE job = ? AND file = ?", key) { row in
            stored = Int(row.int(0))
            return false
        }
        if let stored { return stored }
        var count = 0
        try db.query("SELECT bits FROM chunks WHERE job = ? AND file = ?", key) { row in
            count += row.blob(0).reduce(0) { $0 + $1.nonzeroBitCount }
            return true
        }
        return count
    }

    // MARK: Helpers

    private func record(_ id: JobID, in db: SQLiteConnection) throws -> JobRecord? {
        var bytes: [UInt8]?
        try db.query("SELECT record FROM jobs WHERE id = ?", [.text(id.rawValue)]) { row in
            bytes = row.blob(0)
            return false
        }
        guard let bytes else { return nil }
        return try decodeJob(bytes, id: id.rawValue)
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

    private func decodeJob(_ bytes: [UInt8], id: String) throws -> JobRecord {
        do {
            return try Self.decoder.decode(JobRecord.self, from: Data(bytes))
        } catch {
            throw XferError.stateUnavailable("the record of job \(id) in \(path) is unreadable (\(error))")
        }
    }

    static func finishedSecond(_ date: Date) -> Int64 {
        Int64(max(0, date.timeIntervalSince1970.rounded(.down)))
    }

    // The same settings as `StateStore`, so records cost the same to write.
    private static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .secondsSince1970
        encoder.outputFormatting = [.sortedKeys]
        return encoder
    }()

    private static let decoder: JSONDecoder = {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .secondsSince1970
        return decoder
    }()
}
