/// Something that happened in a job, for progress displays and scripts.
///
/// Progress counts bytes the server acknowledged, never bytes merely handed
/// to the network, so it cannot run ahead of the truth or pass 100%.
///
/// Every case carries one value with named fields, so a field added in a
/// later version breaks no program: read `case .chunkStored(let stored)`
/// as `stored.doneBytes`. Events may be added in a minor version: a switch
/// over them needs a `default:` (or `@unknown default:`).
public enum TransferEvent: Sendable, Hashable {
    /// The job is running (`Started`).
    case started(Started)
    /// A path found in a directory is not sent (`Skipped`). Reported before the first request.
    case fileSkipped(Skipped)
    /// The server told which chunks it holds (`Reconciled`).
    case reconciled(Reconciled)
    /// The server acknowledged a chunk (`ChunkStored`).
    case chunkStored(ChunkStored)
    /// One HTTP request ended, answered or not; only with
    /// `TransferOptions.reportsRequests`.
    case requestFinished(RequestSummary)
    /// A request failed and will be tried again (`Retry`).
    case retrying(Retry)
    /// The server asked for chunks or files again, a failed merge check (`Resend`).
    case resending(Resend)
    /// A file is complete on the server (`FileCompleted`).
    case fileCompleted(FileCompleted)
    /// A file could not be sent (`FileFailed`); the others go on, and a
    /// re-run takes it up again.
    case fileFailed(FileFailed)
    /// `TransferJob.pause()` took effect (`Paused`): nothing is in flight
    /// and every acknowledged chunk is committed. A `.started` follows on `resume()`.
    case paused(Paused)
    /// The job is done; always the last event of a successful job.
    case completed(JobReport)
    /// The job stopped; always the last event of a job that did not complete.
    case failed(XferError)

    /// The job is running.
    public struct Started: Sendable, Hashable {
        /// The job.
        public var job: JobID
        /// Every byte of the job; 0 for a stream whose length is not known
        /// (`StreamSource.expectedSize`).
        public var totalBytes: Int64
        /// Bytes earlier runs already sent.
        public var doneBytes: Int64
        /// Every file of the job.
        public var files: Int
        /// Files earlier runs already completed.
        public var doneFiles: Int
        /// Whether the job existed before this run.
        public var resumed: Bool

        public init(job: JobID, totalBytes: Int64, doneBytes: Int64, files: Int, doneFiles: Int, resumed: Bool) {
            self.job = job
            self.totalBytes = totalBytes
            self.doneBytes = doneBytes
            self.files = files
            self.doneFiles = doneFiles
            self.resumed = resumed
        }
    }

    /// A path of a directory that is not sent.
    public struct Skipped: Sendable, Hashable {
        /// The path as found.
        public var path: String
        /// Why: a special file, a symbolic link not followed, a loop.
        public var reason: SkipReason

        public init(path: String, reason: SkipReason) {
            self.path = path
            self.reason = reason
        }
    }

    /// What the server holds of a file, as it answered.
    public struct Reconciled: Sendable, Hashable {
        /// The file's index in the job.
        public var file: Int
        /// Chunks the server holds.
        public var chunksOnServer: Int
        /// The job's acknowledged bytes now.
        public var doneBytes: Int64

        public init(file: Int, chunksOnServer: Int, doneBytes: Int64) {
            self.file = file
            self.chunksOnServer = chunksOnServer
            self.doneBytes = doneBytes
        }
    }

    /// A chunk the server acknowledged.
    public struct ChunkStored: Sendable, Hashable {
        /// The file's index in the job.
        public var file: Int
        /// The chunk's index in the file (0-based).
        public var chunk: Int
        /// The chunk's size.
        public var bytes: Int
        /// The job's acknowledged bytes now.
        public var doneBytes: Int64
        /// Every byte of the job; 0 for a stream of unknown length.
        public var totalBytes: Int64

        public init(file: Int, chunk: Int, bytes: Int, doneBytes: Int64, totalBytes: Int64) {
            self.file = file
            self.chunk = chunk
            self.bytes = bytes
            self.doneBytes = doneBytes
            self.totalBytes = totalBytes
        }
    }

    /// A request that failed and is tried again after `delay`.
    public struct Retry: Sendable, Hashable {
        /// What was tried ("send chunk 3/8 of a.bin").
        public var operation: String
        /// The attempt that comes next (2 for the first retry).
        public var attempt: Int
        /// The wait before it.
        public var delay: Duration
        /// Why it failed, without repeating the operation, so
        /// "\(operation): \(reason)" reads as one sentence.
        public var reason: String

        public init(operation: String, attempt: Int, delay: Duration, reason: String) {
            self.operation = operation
            self.attempt = attempt
            self.delay = delay
            self.reason = reason
        }
    }

    /// Chunks of a file the server asked for again.
    public struct Resend: Sendable, Hashable {
        /// The file's index in the job.
        public var file: Int
        /// How many chunks are sent again.
        public var chunks: Int
        /// The server's reason.
        public var reason: String

        public init(file: Int, chunks: Int, reason: String) {
            self.file = file
            self.chunks = chunks
            self.reason = reason
        }
    }

    /// A file complete on the server.
    public struct FileCompleted: Sendable, Hashable {
        /// The file's index in the job.
        public var file: Int
        /// Its local path.
        public var path: String
        /// Where the server keeps it.
        public var url: String

        public init(file: Int, path: String, url: String) {
            self.file = file
            self.path = path
            self.url = url
        }
    }

    /// A file that could not be sent: it vanished, changed or cannot be read.
    public struct FileFailed: Sendable, Hashable {
        /// The file's index in the job.
        public var file: Int
        /// Its local path.
        public var path: String
        /// Why.
        public var reason: String

        public init(file: Int, path: String, reason: String) {
            self.file = file
            self.path = path
            self.reason = reason
        }
    }

    /// A job paused by `TransferJob.pause()`.
    public struct Paused: Sendable, Hashable {
        /// The job.
        public var job: JobID

        public init(job: JobID) { self.job = job }
    }
}

// The engine's spelling of each event: the labels of the fields, without
// naming the payload's type at every call site.
extension TransferEvent {
    static func started(job: JobID, totalBytes: Int64, doneBytes: Int64, files: Int, doneFiles: Int, resumed: Bool) -> Self {
        .started(Started(job: job, totalBytes: totalBytes, doneBytes: doneBytes, files: files, doneFiles: doneFiles, resumed: resumed))
    }
    static func fileSkipped(path: String, reason: SkipReason) -> Self { .fileSkipped(Skipped(path: path, reason: reason)) }
    static func reconciled(file: Int, chunksOnServer: Int, doneBytes: Int64) -> Self {
        .reconciled(Reconciled(file: file, chunksOnServer: chunksOnServer, doneBytes: doneBytes))
    }
    static func chunkStored(file: Int, chunk: Int, bytes: Int, doneBytes: Int64, totalBytes: Int64) -> Self {
        .chunkStored(ChunkStored(file: file, chunk: chunk, bytes: bytes, doneBytes: doneBytes, totalBytes: totalBytes))
    }
    static func retrying(operation: String, attempt: Int, delay: Duration, reason: String) -> Self {
        .retrying(Retry(operation: operation, attempt: attempt, delay: delay, reason: reason))
    }
    static func resending(file: Int, chunks: Int, reason: String) -> Self { .resending(Resend(file: file, chunks: chunks, reason: reason)) }
    static func fileCompleted(file: Int, path: String, url: String) -> Self { .fileCompleted(FileCompleted(file: file, path: path, url: url)) }
    static func fileFailed(file: Int, path: String, reason: String) -> Self { .fileFailed(FileFailed(file: file, path: path, reason: reason)) }
    static func paused(job: JobID) -> Self { .paused(Paused(job: job)) }
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
