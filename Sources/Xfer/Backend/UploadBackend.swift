/// Adapts the engine to one server's upload API.
///
/// A backend performs no I/O. Each step describes a request and how to read
/// its answer (an `Exchange`); the engine sends it, retries it, persists what
/// it yields and decides what runs next. That keeps a backend small, testable
/// without a network, and unable to break the engine's invariants:
///
/// - Handles a step returns (upload ids, tokens) are committed to the state
///   store before any request that could need them is sent.
/// - A chunk is marked done only after `uploadChunk`'s exchange yields
///   `.stored`, i.e. after the server acknowledged it.
///
/// The engine calls the steps in this order; every step but `uploadChunk` is
/// optional (return nil when the protocol has no such call):
///
/// 1. `startJob` once per job (e.g. ask for ids for every file at once).
/// 2. `openFile` once per file (e.g. create an upload, get a token).
/// 3. `reconcileFile` on resume, for files opened by an earlier run (ask the
///    server which chunks it holds).
/// 4. `uploadChunk` for every chunk not yet done, `traits.concurrency` at a
///    time, in order within a file when `traits.chunkOrder` says so.
/// 5. `finishFile` once all of a file's chunks are done.
/// 6. `finishJob` once every file is finished.
///
/// Every step is called again for every attempt, so a backend can sign each
/// request afresh; steps must therefore be pure functions of their inputs.
public protocol UploadBackend: Sendable {
    /// The stable name stored with each job and used by the CLI's `--backend`.
    var name: String { get }

    /// What this backend's protocol needs from the engine.
    var traits: BackendTraits { get }

    /// The chunk order for this job, once `startJob` has run: lets a
    /// protocol whose server declares its features (e.g. tus's
    /// concatenation) send in parallel only where the server allows it.
    func chunkOrder(for job: JobContext) -> BackendTraits.ChunkOrder

    /// The form of `--to` this backend's protocol addresses, normalized. The
    /// default takes an http(s) URL of the server's root; a protocol with
    /// its own addressing (e.g. `s3://BUCKET/PREFIX`) checks its own form.
    /// The result is stored with the job and is part of its id.
    func normalizedTarget(_ target: String) throws(BackendError) -> String

    /// Handles the client invents before talking to the server (e.g. a
    /// source id the server's answers are keyed by). Called once when the
    /// job is created; committed with the job.
    func makeJobHandles(for job: JobContext) -> ServerHandles

    /// The chunk size to use for a file, given the size the user asked for.
    /// Lets a protocol enforce its limits (e.g. S3's 10,000 parts).
    func chunkSize(forFileOfSize size: Int64, requested: Int) -> Int

    /// Once per job, before any file is opened (e.g. ask for ids for every file at
    /// once). Its handles are committed before any later step runs.
    func startJob(_ job: JobContext) -> Exchange<JobStart>?
    /// Once per file, before its first chunk (e.g. create an upload). Its
    /// handles, and the chunk size the server chose, are committed before any chunk.
    func openFile(_ file: FileContext, in job: JobContext) -> Exchange<FileOpening>?
    /// On resume, for a file an earlier run opened: which chunks the server holds.
    /// Its answer replaces the local record of done chunks. `file.receipts`
    /// holds what earlier runs recorded for the chunks they stored.
    func reconcileFile(_ file: FileContext, in job: JobContext) -> Exchange<Reconciliation>?
    /// Asks for the next part of an answer `reconcileFile` gave in parts
    /// (`.serverHasMore`, e.g. a paginated listing): `cursor` is what that
    /// part named. The engine unites the parts before replacing anything.
    func continueReconciling(_ file: FileContext, in job: JobContext, from cursor: String) -> Exchange<Reconciliation>?
    /// Sends one chunk. The chunk is marked done only once this exchange yields `.stored`.
    func uploadChunk(_ chunk: ChunkPayload, of file: FileContext, in job: JobContext) -> Exchange<ChunkOutcome>
    /// Once every chunk of a file is done (e.g. complete the upload, get its URL).
    func finishFile(_ file: FileContext, in job: JobContext) -> Exchange<FileFinish>?
    /// Once every file is finished (e.g. a merge check over all files).
    func finishJob(_ job: JobContext) -> Exchange<JobFinish>?

    /// Requests that ask the server to drop what it holds for this job
    /// (sent best-effort by cancel). Empty when the protocol has no such call.
    func cancelRequests(for job: JobContext) -> [HTTPRequest]
}

extension UploadBackend {
    /// `traits.chunkOrder`, whatever the job.
    public func chunkOrder(for job: JobContext) -> BackendTraits.ChunkOrder { traits.chunkOrder }
    /// An http(s) URL with a host, without a trailing slash.
    public func normalizedTarget(_ target: String) throws(BackendError) -> String {
        try HTTPTarget.normalized(target)
    }
    /// No handles: most protocols let the server hand them out.
    public func makeJobHandles(for job: JobContext) -> ServerHandles { ServerHandles() }
    /// The size the user asked for.
    public func chunkSize(forFileOfSize size: Int64, requested: Int) -> Int { requested }
    /// No job-level start call.
    public func startJob(_ job: JobContext) -> Exchange<JobStart>? { nil }
    /// No per-file open call.
    public func openFile(_ file: FileContext, in job: JobContext) -> Exchange<FileOpening>? { nil }
    /// No way to ask the server what it holds: a resume trusts the state store.
    public func reconcileFile(_ file: FileContext, in job: JobContext) -> Exchange<Reconciliation>? { nil }
    /// Answers never come in parts.
    public func continueReconciling(_ file: FileContext, in job: JobContext, from cursor: String) -> Exchange<Reconciliation>? {
        nil
    }
    /// No per-file finish call (the URL then comes with a chunk's answer or `finishJob`).
    public func finishFile(_ file: FileContext, in job: JobContext) -> Exchange<FileFinish>? { nil }
    /// No job-level finish call.
    public func finishJob(_ job: JobContext) -> Exchange<JobFinish>? { nil }
    /// No call to drop an upload: cancelling only forgets the job locally.
    public func cancelRequests(for job: JobContext) -> [HTTPRequest] { [] }
}

/// A backend whose requests carry a signature over their headers (e.g. AWS
/// Signature V4).
///
/// The engine builds every request in this order: the backend's step
/// describes it unsigned, the engine adds the user's extra headers
/// (`TransferOptions.extraHeaders`, the CLI's `--header`), then calls
/// `sign(_:in:)` just before sending. The signature therefore covers every
/// header that is sent (a server such as S3 rejects unsigned `x-amz-*`
/// headers). Called again for every attempt, so each is signed afresh.
public protocol RequestSigning: UploadBackend {
    /// Adds the signature (and what it needs, such as a date header) to `request`.
    func sign(_ request: inout HTTPRequest, in job: JobContext)
}

extension HTTPRequest {
    /// `request` as the engine sends it: the extra headers added (a header
    /// the backend set itself wins), then signed when the backend signs.
    package func prepared(adding extraHeaders: HTTPHeaders, for backend: any UploadBackend, in job: JobContext) -> HTTPRequest {
        var request = self
        for field in extraHeaders where !request.headers.contains(field.name) {
            request.headers.add(field.name, field.value)
        }
        if let signing = backend as? any RequestSigning {
            signing.sign(&request, in: job)
        }
        return request
    }
}

/// What a backend's protocol needs from the engine, declared up front.
public struct BackendTraits: Sendable, Hashable {
    /// Whether chunks of one file may be in flight together.
    public enum ChunkOrder: Sendable, Hashable {
        /// Any order, many at once (files still share the job's concurrency).
        case any
        /// Strictly one after another within a file; files run in parallel.
        case sequentialWithinFile
    }

    /// The chunk size when the user names none.
    public var defaultChunkSize: Int
    /// Requests in flight at once when the user names no number.
    public var defaultConcurrency: Int
    /// Whether chunks of one file may be in flight together.
    public var chunkOrder: ChunkOrder
    /// Whether a zero-byte file is sent as one empty chunk.
    public var emptyFileHasOneChunk: Bool
    /// Whole-file digests the backend needs in `FileContext.digests` before
    /// `openFile` (costs one extra read of each file).
    public var digestsBeforeOpen: Set<DigestAlgorithm>
    /// Whether `finishFile` reports the file's SHA-256 for the engine to
    /// check. The engine then hashes each file as its chunks are read, so the
    /// check costs no second pass over the file.
    public var reportsWholeFileSHA256: Bool
    /// How many rounds of `finishFile` (or `finishJob`) a run makes at
    /// most: after this many `.missing` (or `.rollback`) answers in a row the
    /// job fails, its state kept. A re-run gets fresh rounds.
    public var maximumFinishRounds: Int
    /// Whether `startJob` fixes the job's set of files on the server (e.g. it
    /// hands out an id for every file): a re-run that finds new files in a
    /// directory then refuses them instead of sending files the server has
    /// no place for.
    public var filesFixedAtStart: Bool

    /// Declares a backend's needs; only the defaults are required.
    public init(
        defaultChunkSize: Int,
        defaultConcurrency: Int,
        chunkOrder: ChunkOrder = .any,
        emptyFileHasOneChunk: Bool = false,
        digestsBeforeOpen: Set<DigestAlgorithm> = [],
        reportsWholeFileSHA256: Bool = false,
        maximumFinishRounds: Int = 3,
        filesFixedAtStart: Bool = false
    ) {
        self.filesFixedAtStart = filesFixedAtStart
        self.reportsWholeFileSHA256 = reportsWholeFileSHA256
        self.defaultChunkSize = defaultChunkSize
        self.defaultConcurrency = defaultConcurrency
        self.chunkOrder = chunkOrder
        self.emptyFileHasOneChunk = emptyFileHasOneChunk
        self.digestsBeforeOpen = digestsBeforeOpen
        self.maximumFinishRounds = maximumFinishRounds
    }
}

/// A whole-file digest a backend can ask for (`BackendTraits.digestsBeforeOpen`).
public enum DigestAlgorithm: String, Sendable, Hashable, Codable {
    /// MD5 and SHA-256, as lowercase hex in `FileContext.digests`.
    case md5, sha256
}

/// One request and how to read its answer.
public struct Exchange<Outcome: Sendable>: Sendable {
    /// The request to send (built again for every attempt).
    public var request: HTTPRequest
    /// Reads the server's answer: an outcome, or the error the engine acts on.
    public var interpret: @Sendable (HTTPResponse) throws(BackendError) -> Outcome

    /// Pairs `request` with the reading of its answer.
    public init(
        _ request: HTTPRequest,
        interpret: @escaping @Sendable (HTTPResponse) throws(BackendError) -> Outcome
    ) {
        self.request = request
        self.interpret = interpret
    }
}

/// A backend's reading of an answer it cannot accept.
public enum BackendError: Error, Sendable, Hashable, CustomStringConvertible {
    /// Worth retrying (5xx, 408, 429, an answer cut short); `retryAfter`
    /// carries the server's `Retry-After` when it gave one.
    case transient(String, retryAfter: Duration? = nil)
    /// The server refused the request; retrying will not help. The job
    /// fails with this message and keeps its state; `remedy` says what
    /// would help (nil: running it again resumes it).
    case rejected(String, remedy: XferError.Remedy? = nil)
    /// The server no longer knows the upload this request belongs to. On
    /// resume the engine opens the file afresh.
    case uploadUnknown(String)
    /// The server holds another part of the file than this request assumed
    /// (e.g. tus's 409 on an `Upload-Offset` it does not have: an earlier
    /// attempt landed although its answer was lost). The engine asks
    /// `reconcileFile` again once the file's other requests are done.
    case outOfSync(String)
    /// The server's answer contradicts what the client sent (e.g. a
    /// different checksum). The job fails loudly.
    case mismatch(String, remedy: XferError.Remedy? = nil)

    /// The message, for users.
    public var description: String {
        switch self {
        case .transient(let message, _), .rejected(let message, _), .uploadUnknown(let message),
            .mismatch(let message, _), .outOfSync(let message):
            return message
        }
    }
}

// MARK: Step outcomes

/// The answer to `startJob`.
public struct JobStart: Sendable, Hashable {
    /// Job-level handles to keep (committed before any file is opened).
    public var handles: ServerHandles
    /// Handles for individual files, by file index.
    public var fileHandles: [Int: ServerHandles]

    /// An answer with job-level and per-file handles.
    public init(handles: ServerHandles = ServerHandles(), fileHandles: [Int: ServerHandles] = [:]) {
        self.handles = handles
        self.fileHandles = fileHandles
    }
}

/// The answer to `openFile`.
public struct FileOpening: Sendable, Hashable {
    /// The file's handles (e.g. an upload id), committed before its first chunk.
    public var handles: ServerHandles
    /// The chunk size the server chose, when it differs from the one asked.
    public var chunkSize: Int?

    /// An answer with the file's handles and, if the server chose one, its chunk size.
    public init(handles: ServerHandles, chunkSize: Int? = nil) {
        self.handles = handles
        self.chunkSize = chunkSize
    }
}

/// The answer to `reconcileFile`: which chunks the server holds.
public enum Reconciliation: Sendable, Hashable {
    /// The server holds exactly these chunks (0-based); `receipts` carries
    /// what it reports for them where the backend needs it later.
    case serverHas(chunks: Set<Int>, receipts: [Int: String] = [:])
    /// The server holds at least these chunks; ask `continueReconciling`
    /// with `cursor` for the rest (one page of a listing). `cursor` may also
    /// name a different question, e.g. "list the parts" after "is the whole
    /// object there already?".
    case serverHasMore(chunks: Set<Int>, receipts: [Int: String] = [:], cursor: String)
    /// The server holds exactly the file's first `bytes` bytes (protocols
    /// that track an offset, e.g. tus). Chunks wholly below it are done; a
    /// chunk it falls inside is sent from there on (its `ChunkPayload`
    /// starts at `bytes`).
    case serverHasPrefix(bytes: Int64)
    /// The file is already complete on the server at this URL.
    case complete(url: String)
    /// The server does not know this upload any more; open the file again.
    case unknownUpload
}

/// The answer to `uploadChunk`.
public enum ChunkOutcome: Sendable, Hashable {
    /// The server stored the chunk. `receipt` is kept for `finishFile`
    /// (e.g. an ETag); `fileURL` is set when this answer also completes the
    /// file (the protocol has no separate finish call).
    case stored(receipt: String? = nil, fileURL: String? = nil)
    /// The server expects chunk `next` (0-based) instead: every chunk
    /// before it is on the server, none from it on.
    case resync(next: Int)
}

/// The answer to `finishFile`.
public enum FileFinish: Sendable, Hashable {
    /// The file is complete. When the server reports its SHA-256, the
    /// engine checks it against the local file.
    case completed(url: String, sha256: String? = nil)
    /// The server lacks these chunks (0-based); they are sent again.
    case missing([Int])
}

/// The answer to `finishJob`.
public enum JobFinish: Sendable, Hashable {
    /// Every file is complete; URLs by file index.
    case completed(urls: [Int: String])
    /// These files (by index) failed on the server: every chunk of them is
    /// sent again, then the job asks again.
    case rollback(files: [Int])
}
