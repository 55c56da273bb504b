import FoundationEssentials
import XferPrimitives

/// Durable job and chunk state, as the engine uses it. `StateStore` (LMDB)
/// is the only implementation the product ships.
///
/// `package` rather than internal so the state-store benchmark (another
/// target of this package, Benchmarks/StateStores) can run a real push over
/// another implementation (SQLite) and show what the LMDB choice buys,
/// without that store entering the product. Not `@_spi` public: SPI
/// declarations are hidden from `@testable import`, and the unit tests use
/// `StateChange` and the records this protocol passes around.
///
/// Contract every implementation keeps:
/// - `commit` returns only once its changes are on disk (all but what
///   `sync` forces, which the engine calls after commits it cannot lose to
///   a system crash); changes of concurrent callers may share one
///   transaction, are never split, and are applied in the order queued.
/// - Reads see every change whose `commit` returned.
/// - Every change costs O(1) in the size of its job: a file's change writes
///   its own keys and the job's counters, never the job's other files.
package protocol JobStateStore: Sendable {
    /// Job `id`'s header.
    func job(_ id: JobID) throws(XferError) -> JobRecord?
    /// Job `id`'s totals, kept in step with its files and chunks.
    func counters(_ id: JobID) throws(XferError) -> JobCounters
    /// The paths the user named for job `id`, in order.
    func roots(_ id: JobID) throws(XferError) -> [String]
    /// File `index` of job `id`.
    func file(job: JobID, index: Int) throws(XferError) -> FileRecord?
    /// Up to `limit` files of job `id` from index `start` on, in index order.
    func files(job: JobID, from start: Int, limit: Int) throws(XferError) -> [(index: Int, record: FileRecord)]
    /// The first file of job `id` that has no URL, if any (the check that ends a run).
    func firstFileWithoutURL(job: JobID) throws(XferError) -> Int?
    /// The index of the file found at `relativePath` under root `root`.
    func fileIndex(job: JobID, root: Int, relativePath: String) throws(XferError) -> Int?
    /// Up to `limit` files of job `id` whose last run failed, in index order.
    func failedFiles(job: JobID, limit: Int) throws(XferError) -> [(index: Int, record: FileRecord)]
    /// How much of file `file` the server acknowledged.
    func fileProgress(job: JobID, file: Int) throws(XferError) -> FileProgress
    /// The chunks of file `file` the server has acknowledged.
    func doneChunks(job: JobID, file: Int, capacity: Int) throws(XferError) -> ChunkSet
    /// What the server answered for each acknowledged chunk that had a receipt.
    func receipts(job: JobID, file: Int) throws(XferError) -> [Int: String]
    /// Ids of the jobs whose id starts with `prefix`, ordered.
    func jobIDs(withPrefix prefix: String) throws(XferError) -> [JobID]
    /// Every job's header and counters, ordered by id, read consistently.
    func listings() throws(XferError) -> [JobListing]
    /// Deletes every completed job that finished before `cutoff` and returns their ids.
    func pruneCompletedJobs(finishedBefore cutoff: Date) async throws(XferError) -> [JobID]
    /// Applies `changes` durably (see the contract above).
    func commit(_ changes: [StateChange]) async throws(XferError)
    /// Forces everything committed onto disk, for stores that defer part of it.
    func sync() throws(XferError)
}

extension JobStateStore {
    package func commit(_ change: StateChange) async throws(XferError) {
        try await commit([change])
    }

    /// Reads the records a page at a time: stores that can tell without decoding them do better.
    package func firstFileWithoutURL(job: JobID) throws(XferError) -> Int? {
        var start = 0
        while true {
            let page = try files(job: job, from: start, limit: 1024)
            if let missing = page.first(where: { $0.record.url == nil }) { return missing.index }
            guard let last = page.last else { return nil }
            start = last.index + 1
        }
    }
}

/// A change to the state store. Changes that arrive together are applied in
/// one write transaction (group commit), so per-chunk acknowledgements stay
/// cheap with small chunks without any chunk being marked done early.
///
/// `package` (not internal) only because `JobStateStore` takes it; see there.
package enum StateChange: Sendable {
    /// A new job: its header and the paths the user named. Counters start at zero.
    case createJob(JobRecord, roots: [String])
    /// Replaces a job's header.
    case putJob(JobRecord)
    case deleteJob(JobID)
    /// Adds or replaces files by index; the job's counters follow.
    case putFiles(job: JobID, files: [(index: Int, record: FileRecord)])
    /// The server acknowledged these chunks; `receipts` holds what it
    /// answered for the ones that need it later (e.g. an S3 ETag).
    case markDone(job: JobID, file: Int, chunks: [Int], plan: ChunkPlan, receipts: [Int: String])
    /// The server no longer has these chunks (a rollback or a 409).
    case markNotDone(job: JobID, file: Int, chunks: [Int], plan: ChunkPlan)
    /// Replace a file's progress with what the server reports holding.
    case replaceDone(job: JobID, file: Int, done: ChunkSet, plan: ChunkPlan, receipts: [Int: String])
}

/// A job as listings show it: its header and totals, no file.
package struct JobListing: Sendable, Hashable {
    package var record: JobRecord
    package var counters: JobCounters

    package init(record: JobRecord, counters: JobCounters) {
        self.record = record
        self.counters = counters
    }
}

/// How far one file of a job is, as the store counts it.
package struct FileProgress: Sendable, Hashable {
    /// Chunks the server acknowledged.
    package var chunksDone: Int
    /// Their bytes.
    package var bytesDone: Int64

    package init(chunksDone: Int, bytesDone: Int64) {
        self.chunksDone = chunksDone
        self.bytesDone = bytesDone
    }
}

extension ChunkPlan {
    /// The bytes of the chunks in `done`: every chunk is full but the last.
    package func bytes(of done: ChunkSet) -> Int64 {
        guard count > 0 else { return 0 }
        var total = Int64(done.count) * Int64(chunkSize)
        if done.contains(count - 1) { total -= Int64(chunkSize - length(of: count - 1)) }
        return total
    }
}

extension TransferEngine {
    /// The store `init(stateDirectory:)` opens, for a benchmark to measure
    /// on its own.
    package static func defaultStateStore(directory: String) throws(XferError) -> any JobStateStore {
        try StateStore(directory: directory)
    }
}
