import FoundationEssentials

/// A running sync: its events, its outcome, and a way to stop it.
///
/// The sync holds its job's lock until it ends. Stopped (`cancel()`, a
/// signal, a kill), it is resumable: the same sync started again goes on from
/// its stage — listing, deciding, copying or deleting — with nothing done
/// twice but what was in flight.
public final class SyncJob: Sendable {
    /// The sync's job id, as `TransferEngine.jobs()` and the CLI show it.
    public let id: JobID
    /// Listing progress, the plan, the copies' events, deletes. Finishes when the sync ends.
    public let events: AsyncStream<SyncEvent>
    private let task: Task<Result<SyncReport, XferError>, Never>

    init(id: JobID, lock: JobLock, body: @escaping @Sendable (AsyncStream<SyncEvent>.Continuation) async -> Result<SyncReport, XferError>) {
        self.id = id
        let (stream, continuation) = AsyncStream.makeStream(of: SyncEvent.self, bufferingPolicy: .bufferingNewest(4096))
        events = stream
        task = Task {
            let result = await body(continuation)
            lock.release()
            switch result {
            case .success(let report): continuation.yield(.completed(report))
            case .failure(let error): continuation.yield(.failed(error))
            }
            continuation.finish()
            return result
        }
    }

    /// Waits for the sync to end.
    public var report: SyncReport {
        get async throws(XferError) {
            try await task.value.get()
        }
    }

    /// Stops the sync: no new requests, in-flight ones abandoned, state
    /// committed. `report` then throws `XferError.interrupted`; the same
    /// sync started again goes on.
    public func cancel() {
        task.cancel()
    }
}
