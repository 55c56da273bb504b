/// Something that happened in a job, for progress displays and scripts.
///
/// Progress counts bytes the server acknowledged, never bytes merely handed
/// to the network, so it cannot run ahead of the truth or pass 100%.
public enum TransferEvent: Sendable, Hashable {
    /// The job is running. `doneBytes` and `doneFiles` are what earlier runs
    /// already sent; `files` counts every file of the job. `totalBytes` is 0
    /// for a stream whose length is not known (`StreamSource.expectedSize`),
    /// here and in `chunkStored`.
    case started(job: JobID, totalBytes: Int64, doneBytes: Int64, files: Int, doneFiles: Int, resumed: Bool)
    /// A path found in a directory is not sent (a special file, a symbolic
    /// link not followed, a loop). Reported before the first request.
    case fileSkipped(path: String, reason: SkipReason)
    /// The server told which chunks it holds; `doneBytes` is the new total.
    case reconciled(file: Int, chunksOnServer: Int, doneBytes: Int64)
    /// The server acknowledged a chunk.
    case chunkStored(file: Int, chunk: Int, bytes: Int, doneBytes: Int64, totalBytes: Int64)
    /// One HTTP request ended, answered or not; only with
    /// `TransferOptions.reportsRequests`.
    case requestFinished(RequestSummary)
    /// A request failed and will be tried again after `delay`: `operation`
    /// says what was tried, `reason` why it failed (without repeating the
    /// operation), so "\(operation): \(reason)" reads as one sentence.
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

/// One HTTP request a job sent, for logs (`TransferEvent.requestFinished`).
///
/// Holds nothing secret: the URL loses its query, fragment and password
/// before it leaves the library (presigned signatures, tokens in a query),
/// header values are not carried at all, and transport failures are
/// described without them.
public struct RequestSummary: Sendable, Hashable {
    /// The HTTP method, e.g. `PATCH`.
    public var method: String
    /// The URL without query or fragment (a `?…` marks where a query was),
    /// its password masked.
    public var url: String
    /// The status of the final response; nil when none came.
    public var status: Int?
    /// Why no response came (timeout, reset...), when none did.
    public var failure: String?
    /// The size of the request's body.
    public var bodyBytes: Int64
    /// From handing the request to the transport to its end, waits for the
    /// send rate limit included.
    public var duration: Duration
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

    /// Every file of a job, read from the job's state as they are visited:
    /// a report of 100,000 files would otherwise hold tens of MiB.
    ///
    /// Visit them before the job's state is pruned (`TransferEngine`'s
    /// `finishedJobRetention`; with a retention of zero they are read into
    /// memory before the job leaves the store); a file no longer there
    /// reads as one with an empty path and URL.
    public struct Files: RandomAccessCollection, Sendable, Hashable {
        private enum Storage: Sendable {
            case array([File])
            case pages(count: Int, read: @Sendable (_ start: Int, _ limit: Int) -> [File])
        }

        private let storage: Storage
        /// Files read at a time by an iteration.
        static let pageSize = 1024

        /// These files.
        public init(_ files: [File]) { storage = .array(files) }

        /// `count` files; `read` gives those from `start` on, at most `limit`.
        init(count: Int, read: @escaping @Sendable (_ start: Int, _ limit: Int) -> [File]) {
            storage = .pages(count: count, read: read)
        }

        public var startIndex: Int { 0 }
        public var endIndex: Int {
            switch storage {
            case .array(let files): return files.count
            case .pages(let count, _): return count
            }
        }

        public subscript(position: Int) -> File {
            switch storage {
            case .array(let files): return files[position]
            case .pages(_, let read): return read(position, 1).first ?? File(path: "", url: "", size: 0)
            }
        }

        public func makeIterator() -> Iterator { Iterator(files: self) }

        /// Reads a page of files at a time.
        public struct Iterator: IteratorProtocol {
            private let files: Files
            private var page: [File] = []
            private var pageStart = 0
            private var position = 0

            init(files: Files) { self.files = files }

            public mutating func next() -> File? {
                guard position < files.endIndex else { return nil }
                defer { position += 1 }
                switch files.storage {
                case .array(let all):
                    return all[position]
                case .pages(let count, let read):
                    if position - pageStart >= page.count {
                        pageStart = position
                        page = read(position, Swift.min(Files.pageSize, count - position))
                    }
                    let offset = position - pageStart
                    return offset < page.count ? page[offset] : File(path: "", url: "", size: 0)
                }
            }
        }

        public static func == (a: Files, b: Files) -> Bool { a.elementsEqual(b) }

        public func hash(into hasher: inout Hasher) {
            hasher.combine(count)
            for file in self { hasher.combine(file) }
        }
    }

    /// The job that finished.
    public var job: JobID
    /// Every file of the job, in the order given to `push`.
    public var files: Files
    /// Chunk bytes this run sent: what curl took to put on the wire,
    /// retries and attempts cut short included; an attempt that never
    /// connected counts nothing.
    public var bytesSent: Int64
    /// Bytes already on the server when this run began (after reconciling).
    public var bytesResumed: Int64
}
