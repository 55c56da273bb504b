/// Something that happened in a job, for progress displays and scripts.
///
/// Progress counts bytes the server acknowledged, never bytes merely handed
/// to the network, so it cannot run ahead of the truth or pass 100%.
public enum TransferEvent: Sendable, Hashable {
    /// The job is running. `doneBytes` and `doneFiles` are what earlier runs
    /// already sent; `files` counts every file of the job.
    case started(job: JobID, totalBytes: Int64, doneBytes: Int64, files: Int, doneFiles: Int, resumed: Bool)
    /// A path found in a directory is not sent (a special file, a symbolic
    /// link not followed, a loop). Reported before the first request.
    case fileSkipped(path: String, reason: String)
    /// The server told which chunks it holds; `doneBytes` is the new total.
    case reconciled(file: Int, chunksOnServer: Int, doneBytes: Int64)
    /// The server acknowledged a chunk.
    case chunkStored(file: Int, chunk: Int, bytes: Int, doneBytes: Int64, totalBytes: Int64)
    /// A request failed and will be tried again after `delay`.
    case retrying(operation: String, attempt: Int, delay: Duration, reason: String)
    /// The server asked for chunks or files again (a failed merge check).
    case resending(file: Int, chunks: Int, reason: String)
    /// A file is complete on the server at `url`.
    case fileCompleted(file: Int, path: String, url: String)
    /// A file could not be sent (it vanished, changed or cannot be read);
    /// the others go on, and a re-run takes it up again.
    case fileFailed(file: Int, path: String, reason: String)
    /// `TransferJob.pause()` took effect: nothing is in flight and every
    /// acknowledged chunk is committed. A `.started` follows on `resume()`.
    case paused(job: JobID)
    /// The job is done; always the last event of a successful job.
    case completed(JobReport)
    /// The job stopped; always the last event of a job that did not complete.
    case failed(XferError)
}

/// The result of a finished job.
public struct JobReport: Sendable, Hashable {
    /// One uploaded file.
    public struct File: Sendable, Hashable {
        /// The local path (absolute).
        public var path: String
        /// Where the server keeps the file.
        public var url: String
        /// Its size in bytes.
        public var size: Int64
    }

    /// The job that finished.
    public var job: JobID
    /// Every file of the job, in the order given to `push`.
    public var files: [File]
    /// Chunk bytes sent by this run, retries included.
    public var bytesSent: Int64
    /// Bytes already on the server when this run began (after reconciling).
    public var bytesResumed: Int64
}
