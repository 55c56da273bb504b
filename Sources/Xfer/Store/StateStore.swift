import Dispatch
import Foundation

/// A change to the state store. Changes that arrive together are applied in
/// one write transaction (group commit), so per-chunk acknowledgements stay
/// cheap with small chunks without any chunk being marked done early.
///
/// `package` (not internal) only because `JobStateStore` takes it; see there.
package enum StateChange: Sendable {
    case putJob(JobRecord)
    case deleteJob(JobID)
    /// The server acknowledged these chunks; `receipts` holds what it
    /// answered for the ones that need it later (e.g. an S3 ETag).
    case markDone(job: JobID, file: Int, chunks: [Int], receipts: [Int: String])
    /// The server no longer has these chunks (a rollback or a 409).
    case markNotDone(job: JobID, file: Int, chunks: [Int])
    /// Replace a file's progress with what the server reports holding.
    case replaceDone(job: JobID, file: Int, done: ChunkSet, receipts: [Int: String])
}

/// Durable job and chunk state in LMDB.
///
/// Layout (one LMDB environment, seven named databases):
/// - `meta`: `layout` → layout version.
/// - `jobs`: job id → JSON `JobRecord` (small: files and server handles).
/// - `chunks`: job id ‖ 0 ‖ file (u32 BE) ‖ segment (u32 BE) → bitmap of done chunks.
/// - `receipts`: job id ‖ 0 ‖ file (u32 BE) ‖ chunk (u32 BE) → receipt text.
/// - `progress`: job id ‖ 0 ‖ file (u32 BE) → done-chunk count (u64 LE), kept
///   in step with the bitmaps so listing jobs never counts bits.
/// - `finished`: completion time (u64 BE seconds) ‖ job id → nothing; finds
///   completed jobs due for pruning without reading every job.
/// - `summaries`: job id → `JobListing` (binary), what listing needs of the
///   record, written with it.
///
/// Reads run on the caller's thread. Writes are queued and applied by one
/// serial queue, each batch in one transaction that begins and commits in one
/// block (LMDB write transactions belong to the thread that began them).
final class StateStore: JobStateStore {
    /// 2: every value carries a CRC-32 (see `LMDBDatabase`). 1 had none and is migrated on open.
    static let layoutVersion = "2"

    let directory: String
    private let env: LMDBEnvironment
    private let meta: LMDBDatabase
    private let jobsDB: LMDBDatabase
    private let chunksDB: LMDBDatabase
    private let receiptsDB: LMDBDatabase
    private let progressDB: LMDBDatabase
    private let finishedDB: LMDBDatabase
    private let summariesDB: LMDBDatabase
    private let writer = DispatchQueue(label: "xfer.state.writer")
    private let pending = LockedValue<[(StateChange, @Sendable (Result<Void, XferError>) -> Void)]>([])

    /// Opens the store in `directory`, creating it (mode 0700) if needed.
    init(directory: String, initialMapSize: Int = 64 << 20) throws(XferError) {
        self.directory = directory
        let dbDirectory = (directory as NSString).appendingPathComponent("db")
        do {
            try FileManager.default.createDirectory(
                atPath: dbDirectory, withIntermediateDirectories: true,
                attributes: [.posixPermissions: 0o700])
            try FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: directory)
        } catch {
            throw .stateUnavailable("cannot create \(directory): \(Self.reason(error))")
        }
        guard access(dbDirectory, W_OK) == 0 else {
            throw .stateUnavailable("\(directory) is not writable; pass --state DIR with a writable directory")
        }
        do {
            env = try LMDBEnvironment(directory: dbDirectory, mapSize: initialMapSize, maxDatabases: 8)
            meta = try env.database(named: "meta")
            jobsDB = try env.database(named: "jobs", checksummed: true)
            chunksDB = try env.database(named: "chunks", checksummed: true)
            receiptsDB = try env.database(named: "receipts", checksummed: true)
            progressDB = try env.database(named: "progress", checksummed: true)
            finishedDB = try env.database(named: "finished", checksummed: true)
            summariesDB = try env.database(named: "summaries", checksummed: true)
        } catch {
            throw .stateUnavailable("cannot open \(dbDirectory): \(error)")
        }
        try checkLayout()
    }

    /// Refuses a layout this xfer cannot read; migrates layout 1 in one transaction (a crash
    /// mid-way leaves layout 1 intact, and the next open migrates again).
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
                case "1":
                    for db in [jobsDB, chunksDB, receiptsDB, progressDB, finishedDB, summariesDB] {
                        var entries: [([UInt8], [UInt8])] = []
                        try txn.forEach(db.raw, prefix: []) { key, value in
                            entries.append((key, value))
                            return true
                        }
                        for (key, value) in entries { try txn.put(db, key, value) }
                    }
                case let version?:
                    let which = (Int(version) ?? Int.max) < (Int(Self.layoutVersion) ?? 0) ? "an older" : "a newer"
                    throw XferError.stateUnavailable(
                        "\(directory) holds state layout \(version) from \(which) xfer; this one reads layout \(Self.layoutVersion). "
                            + "Finish its jobs with that xfer, or pass --state DIR to start a new state directory")
                }
                try txn.put(meta, key, current)
            }
            // The migration rewrote every value: make it durable before anything relies on it.
            try env.sync()
        } catch let error as XferError {
            throw error
        } catch {
            throw .stateUnavailable("cannot read \(directory): \(error)")
        }
    }

    // MARK: Reads

    func job(_ id: JobID) throws(XferError) -> JobRecord? {
        try reading { txn in
            guard let bytes = try txn.get(jobsDB, Array(id.rawValue.utf8)) else { return nil }
            return try decodeJob(bytes, id: id.rawValue)
        }
    }

    /// Every job in the store, ordered by id.
    func jobs() throws(XferError) -> [JobRecord] {
        try reading { txn in
            var result: [JobRecord] = []
            try txn.forEach(jobsDB, prefix: []) { key, value in
                result.append(try decodeJob(value, id: String(decoding: key, as: UTF8.self)))
                return true
            }
            return result
        }
    }

    /// The chunks of file `file` the server has acknowledged.
    func doneChunks(job: JobID, file: Int, capacity: Int) throws(XferError) -> ChunkSet {
        var set = ChunkSet(capacity: capacity)
        guard capacity > 0 else { return set }
        let prefix = Self.fileKey(job, file)
        try reading { txn in
            try txn.forEach(chunksDB, prefix: prefix) { key, value in
                let segment = Self.u32(key, at: prefix.count)
                set.loadSegment(Int(segment), from: value)
                return true
            }
        }
        return set
    }

    /// What the server answered for each acknowledged chunk that had a receipt.
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

    /// Ids of the jobs whose id starts with `prefix`, without decoding any record.
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

    /// Job `id`'s record with each file's progress, read in one transaction.
    func jobWithProgress(_ id: JobID) throws(XferError) -> (record: JobRecord, files: [FileProgress])? {
        try reading { txn in
            guard let bytes = try txn.get(jobsDB, Array(id.rawValue.utf8)) else { return nil }
            let record = try decodeJob(bytes, id: id.rawValue)
            return (record, try progress(of: JobListing(record), in: txn))
        }
    }

    /// Every job as listings show it, with each file's progress, read in one
    /// transaction. Costs a few string copies and two small reads per file,
    /// whatever the number of chunks: listings come from `summaries` (a job
    /// written before they existed has its JSON record decoded instead).
    func listings() throws(XferError) -> [(listing: JobListing, files: [FileProgress])] {
        try reading { txn in
            var result: [(listing: JobListing, files: [FileProgress])] = []
            try txn.forEach(jobsDB, prefix: []) { key, value in
                let id = JobID(rawValue: String(decoding: key, as: UTF8.self))
                let listing: JobListing
                if let bytes = try txn.get(summariesDB, key), let stored = JobListing(id: id, decoding: bytes) {
                    listing = stored
                } else {
                    listing = JobListing(try decodeJob(value, id: id.rawValue))
                }
                result.append((listing, try progress(of: listing, in: txn)))
                return true
            }
            return result
        }
    }

    /// Each file's progress from its counter and the one bitmap segment that
    /// holds its last chunk (usually shorter than the others, so bytes
    /// depend on it); never the whole bitmap.
    private func progress(of listing: JobListing, in txn: LMDBTransaction) throws -> [FileProgress] {
        var files: [FileProgress] = []
        files.reserveCapacity(listing.files.count)
        for (index, file) in listing.files.enumerated() {
            let prefix = Self.fileKey(listing.id, index)
            let capacity = ChunkPlan(fileSize: max(0, file.size), chunkSize: max(1, file.chunkSize)).count
            var lastDone = false
            if capacity > 0 {
                let last = capacity - 1
                let key = prefix + Self.u32Bytes(UInt32(last / ChunkSet.segmentSize))
                if let segment = try txn.get(chunksDB, key) {
                    let bit = last % ChunkSet.segmentSize
                    lastDone = segment.count > bit >> 3 && segment[bit >> 3] & (1 << UInt8(bit & 7)) != 0
                }
            }
            let count = try storedCount(prefix, in: txn)
            files.append(FileProgress(chunksDone: min(max(0, count), capacity), lastChunkDone: lastDone))
        }
        return files
    }

    // MARK: Writes

    /// Deletes every completed job that finished before `cutoff` (its record,
    /// bitmaps, receipts and counters) and returns their ids.
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
                            guard key.count > 8, Self.u64(key) < limit else { return false }
                            due.append(key)
                            return true
                        }
                        var pruned: [JobID] = []
                        for key in due {
                            let id = JobID(rawValue: String(decoding: key[8...], as: UTF8.self))
                            guard let bytes = try txn.get(self.jobsDB, Array(id.rawValue.utf8)),
                                let record = try? self.decodeJob(bytes, id: id.rawValue),
                                record.phase == .completed, Self.finishedKey(record) == key
                            else {
                                try txn.delete(self.finishedDB, key)  // stale: deleted or pushed again since
                                continue
                            }
                            guard record.updatedAt < cutoff else { continue }
                            try txn.delete(self.finishedDB, key)
                            try self.apply(.deleteJob(id), in: txn)
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
    func commit(_ changes: [StateChange]) async throws(XferError) {
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
            if changes.isEmpty {
                continuation.resume(returning: .success(()))
                return
            }
            pending.withLock { queue in
                for change in changes { queue.append((change, done)) }
            }
            writer.async { self.drain() }
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

    private func drain() {
        let batch = pending.withLock { queue -> [(StateChange, @Sendable (Result<Void, XferError>) -> Void)] in
            defer { queue.removeAll(keepingCapacity: true) }
            return queue
        }
        guard !batch.isEmpty else { return }
        let result: Result<Void, XferError>
        do {
            try env.write { txn in
                for (change, _) in batch { try apply(change, in: txn) }
            }
            result = .success(())
        } catch let error as XferError {
            result = .failure(error)
        } catch {
            result = .failure(.stateUnavailable("cannot write state in \(directory): \(error)"))
        }
        for (_, done) in batch { done(result) }
    }

    private func apply(_ change: StateChange, in txn: LMDBTransaction) throws {
        switch change {
        case .putJob(let record):
            try txn.put(jobsDB, Array(record.id.rawValue.utf8), try Self.encoder.encode(record).bytes)
            try txn.put(summariesDB, Array(record.id.rawValue.utf8), JobListing(record).encoded)
            if record.phase == .completed {
                // Stale entries (a job re-pushed or deleted since) are
                // recognised and dropped by `pruneCompletedJobs`.
                try txn.put(finishedDB, Self.finishedKey(record), [1])
            }
        case .deleteJob(let id):
            try txn.delete(jobsDB, Array(id.rawValue.utf8))
            try txn.delete(summariesDB, Array(id.rawValue.utf8))
            let prefix = Array(id.rawValue.utf8) + [0]
            try txn.deleteAll(chunksDB, prefix: prefix)
            try txn.deleteAll(receiptsDB, prefix: prefix)
            try txn.deleteAll(progressDB, prefix: prefix)
        case .markDone(let job, let file, let chunks, let receipts):
            try updateBits(job, file, chunks, to: true, in: txn)
            for (chunk, receipt) in receipts {
                try txn.put(receiptsDB, Self.chunkKey(job, file, chunk), Array(receipt.utf8))
            }
        case .markNotDone(let job, let file, let chunks):
            try updateBits(job, file, chunks, to: false, in: txn)
            for chunk in chunks { try txn.delete(receiptsDB, Self.chunkKey(job, file, chunk)) }
        case .replaceDone(let job, let file, let done, let receipts):
            let prefix = Self.fileKey(job, file)
            try txn.deleteAll(chunksDB, prefix: prefix)
            try txn.deleteAll(receiptsDB, prefix: prefix)
            for segment in 0..<done.segmentCount {
                try txn.put(chunksDB, prefix + Self.u32Bytes(UInt32(segment)), done.segmentBytes(segment))
            }
            try txn.put(progressDB, prefix, Self.countBytes(done.count))
            for (chunk, receipt) in receipts {
                try txn.put(receiptsDB, Self.chunkKey(job, file, chunk), Array(receipt.utf8))
            }
        }
    }

    private func updateBits(_ job: JobID, _ file: Int, _ chunks: [Int], to value: Bool, in txn: LMDBTransaction) throws {
        let prefix = Self.fileKey(job, file)
        var count = try storedCount(prefix, in: txn)
        let bySegment = Dictionary(grouping: chunks) { $0 / ChunkSet.segmentSize }
        for (segment, members) in bySegment {
            let key = prefix + Self.u32Bytes(UInt32(segment))
            var bytes = try txn.get(chunksDB, key) ?? []
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
            try txn.put(chunksDB, key, bytes)
        }
        try txn.put(progressDB, prefix, Self.countBytes(max(0, count)))
    }

    /// A file's done-chunk count. Stores written before the counter existed
    /// have none; it is then counted from the bitmap once and kept from then on.
    private func storedCount(_ prefix: [UInt8], in txn: LMDBTransaction) throws -> Int {
        if let stored = try txn.get(progressDB, prefix), stored.count == 8 {
            return Int(Self.count(stored))
        }
        var count = 0
        try txn.forEach(chunksDB, prefix: prefix) { _, value in
            count += value.reduce(0) { $0 + $1.nonzeroBitCount }
            return true
        }
        return count
    }

    // MARK: Helpers

    private func reading<T>(_ body: (LMDBTransaction) throws -> T) throws(XferError) -> T {
        do {
            return try env.read(body)
        } catch let error as XferError {
            throw error
        } catch {
            throw .stateUnavailable("cannot read state in \(directory): \(error)")
        }
    }

    private func decodeJob(_ bytes: [UInt8], id: String) throws -> JobRecord {
        do {
            return try Self.decoder.decode(JobRecord.self, from: Data(bytes))
        } catch {
            throw XferError.stateUnavailable(
                "the record of job \(id) in \(directory) is unreadable (\(Self.reason(error))); remove that directory or use another --state")
        }
    }

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

    static func fileKey(_ job: JobID, _ file: Int) -> [UInt8] {
        Array(job.rawValue.utf8) + [0] + u32Bytes(UInt32(file))
    }

    static func chunkKey(_ job: JobID, _ file: Int, _ chunk: Int) -> [UInt8] {
        fileKey(job, file) + u32Bytes(UInt32(chunk))
    }

    static func finishedKey(_ record: JobRecord) -> [UInt8] {
        let seconds = UInt64(max(0, record.updatedAt.timeIntervalSince1970.rounded(.down)))
        return (0..<8).map { UInt8((seconds >> UInt64(56 - 8 * $0)) & 0xff) } + Array(record.id.rawValue.utf8)
    }

    static func u64(_ bytes: [UInt8]) -> UInt64 {
        bytes.prefix(8).reduce(0) { $0 << 8 | UInt64($1) }
    }

    static func countBytes(_ count: Int) -> [UInt8] {
        withUnsafeBytes(of: UInt64(count).littleEndian) { Array($0) }
    }

    static func count(_ bytes: [UInt8]) -> UInt64 {
        bytes.prefix(8).reversed().reduce(0) { $0 << 8 | UInt64($1) }
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
        if let error = error as? CocoaError, let underlying = error.userInfo[NSUnderlyingErrorKey] as? NSError {
            return underlying.localizedDescription
        }
        return (error as NSError).localizedDescription
    }
}

/// How far one file of a job is, as the store counts it.
package struct FileProgress: Sendable, Hashable {
    /// Chunks the server acknowledged.
    package var chunksDone: Int
    /// Whether the last chunk (usually shorter than the others) is among them.
    package var lastChunkDone: Bool

    package init(chunksDone: Int, lastChunkDone: Bool) {
        self.chunksDone = chunksDone
        self.lastChunkDone = lastChunkDone
    }
}

extension Data {
    var bytes: [UInt8] { [UInt8](self) }
}
