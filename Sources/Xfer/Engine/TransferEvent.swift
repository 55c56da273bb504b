/// Something that happened in a job, for progress displays and scripts.
///
/// Progress counts bytes the server acknowledged, never bytes merely handed
/// to the network, so it cannot run ahead of the truth or pass 100%.
public enum TransferEvent: Sendable, Hashable {
    /// The job is running. `doneBytes` is what earlier runs already sent.
    case started(job: JobID, totalBytes: Int64, doneBytes: Int64, resumed: Bool)
    /// The server told which chunks it holds; `doneBytes` is the new total.
    case reconciled(file: Int, chunksOnServer: Int, doneBytes: Int64)
    /// The server acknowledged a chunk.
    case chunkStored(file: Int, chunk: Int, bytes: Int, doneBytes: Int64, totalBytes: Int64)
    /// A request failed and will be tried again after `delay`.
    case retrying(operation: String, attempt: Int, delay: Duration, reason: String)
    /// The server asked for chunks or files again (a failed merge check).
    case resending(file: Int, chunks: Int, reason: String)
    case fileCompleted(file: Int, path: String, url: String)
    case completed(JobReport)
    case failed(XferError)
}

/// The result of a finished job.
public struct JobReport: Sendable, Hashable {
    public struct File: Sendable, Hashable {
        public var path: String
        public var url: String
        public var size: Int64
    }

    public var job: JobID
    public var files: [File]
    /// Chunk bytes sent by this run, retries included.
    public var bytesSent: Int64
    /// Bytes already on the server when this run began (after reconciling).
    public var bytesResumed: Int64
}
