import Foundation

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
package protocol JobStateStore: Sendable {
    func job(_ id: JobID) throws(XferError) -> JobRecord?
    /// Every job in the store, ordered by id.
    func jobs() throws(XferError) -> [JobRecord]
    /// The chunks of file `file` the server has acknowledged.
    func doneChunks(job: JobID, file: Int, capacity: Int) throws(XferError) -> ChunkSet
    /// What the server answered for each acknowledged chunk that had a receipt.
    func receipts(job: JobID, file: Int) throws(XferError) -> [Int: String]
    /// Ids of the jobs whose id starts with `prefix`, ordered.
    func jobIDs(withPrefix prefix: String) throws(XferError) -> [JobID]
    /// Job `id`'s record with each file's progress, read consistently.
    func jobWithProgress(_ id: JobID) throws(XferError) -> (record: JobRecord, files: [FileProgress])?
    /// Every job as listings show it, ordered by id, read consistently.
    func listings() throws(XferError) -> [(listing: JobListing, files: [FileProgress])]
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
}

extension TransferEngine {
    /// The store `init(stateDirectory:)` opens, for a benchmark to measure
    /// on its own.
    package static func defaultStateStore(directory: String) throws(XferError) -> any JobStateStore {
        try StateStore(directory: directory)
    }
}
