/// Adapts the engine to one server's upload API.
///
/// A backend performs no I/O. Each step describes a request and how to read
/// its answer (a `Step`); the engine sends it, retries it, persists what it
/// yields and decides what runs next. That keeps a backend small, testable
/// without a network (see the `XferBackendTesting` library), and unable to
/// break the engine's invariants:
///
/// - Handles a step returns (upload ids, tokens) are committed to the state
///   store before any request that could need them is sent.
/// - A chunk is marked done only after `uploadChunk`'s exchange yields
///   `.stored`, i.e. after the server acknowledged it.
///
/// This protocol is the whole of a minimal backend: a name, its traits and
/// how to send one chunk. Everything else a protocol may have is a
/// capability of its own, which a backend adopts by name (as tusd's
/// extension interfaces and rclone's optional features): the engine
/// discovers it, and a near-miss spelling of one of its methods does not
/// compile instead of being silently never called.
///
/// | capability | what the engine does with it | without it |
/// |---|---|---|
/// | `TargetNormalizing` | checks and normalizes `--to` | an http(s) URL |
/// | `JobHandleInventing` | handles made before the first request | none |
/// | `ChunkSizing` | the chunk size for each file | the size asked for |
/// | `ChunkOrdering` | whether a file's chunks may overlap | any order |
/// | `JobStarting` | `startJob` once per job | no such call |
/// | `FileOpening` | `openFile` once per file | no such call |
/// | `FileReconciling` | asks the server on resume | the state store is trusted |
/// | `FileFinishing` | `finishFile` after a file's chunks | the last chunk's answer completes it |
/// | `SHA256Reporting` | hashes files as they are sent, for the server's SHA-256 | no whole-file hash |
/// | `JobFinishing` | `finishJob` after every file | no such call |
/// | `UploadCancelling` | `xfer cancel` drops the upload | only local state is removed |
/// | `RequestSigning` | signs each request last | not signed |
///
/// The steps run in this order: `startJob`, then per file `openFile` (or,
/// on resume, `reconcileFile` for a file an earlier run opened), `uploadChunk`
/// for every chunk not yet done, `finishFile`; then `finishJob`. Every step
/// is built again for every attempt, so it must be a pure function of its
/// inputs; it may throw (e.g. `require` of a handle that is missing).
public protocol UploadBackend: Sendable {
    /// The stable name stored with each job and used by the CLI's `--backend`.
    var name: String { get }

    /// What this backend's protocol needs from the engine.
    var traits: BackendTraits { get }

    /// Sends one chunk. The chunk is marked done only once this exchange
    /// yields `.stored`.
    func uploadChunk(_ chunk: ChunkPayload, of file: FileContext, in job: JobContext) throws(BackendError) -> Exchange<ChunkOutcome>
}

// MARK: Capabilities

/// A protocol with its own form of `--to` (e.g. `s3://BUCKET/PREFIX`).
public protocol TargetNormalizing: UploadBackend {
    /// `target` checked and normalized; stored with the job and part of its id.
    func normalizedTarget(_ target: String) throws(BackendError) -> String
}

/// A protocol whose client invents handles before talking to the server
/// (e.g. a source id the server's answers are keyed by).
public protocol JobHandleInventing: UploadBackend {
    /// Called once when the job is created; committed with the job.
    func makeJobHandles(for job: JobContext) -> ServerHandles
}

/// A protocol with limits on the chunk size (e.g. S3's 10,000 parts).
public protocol ChunkSizing: UploadBackend {
    /// The chunk size to use for a file, given the size the user asked for.
    func chunkSize(forFileOfSize size: Int64, requested: Int) -> Int
}

/// A protocol whose chunks of one file must not be in flight together, at
/// least for some jobs (e.g. tus without concatenation).
public protocol ChunkOrdering: UploadBackend {
    /// The chunk order for this job, asked once `startJob` has run (so a
    /// server's declared features can decide it).
    func chunkOrder(for job: JobContext) -> ChunkOrder
}

/// A protocol with a call once per job, before any file is opened (e.g.
/// ask for ids for every file at once).
public protocol JobStarting: UploadBackend {
    /// Its handles are committed before any later step runs.
    func startJob(_ job: JobContext) throws(BackendError) -> Step<JobStart>
}

/// A protocol with a call once per file, before its first chunk (e.g.
/// create an upload).
public protocol FileOpening: UploadBackend {
    /// Its handles, and the chunk size the server chose, are committed
    /// before any chunk. `.skip` for a file that needs no opening.
    func openFile(_ file: FileContext, in job: JobContext) throws(BackendError) -> Step<OpenedFile>
}

/// A protocol that can say which parts of a file the server holds.
///
/// Asked on resume for a file an earlier run opened, and again when a step
/// threw `.outOfSync`. Its answer replaces the local record of done chunks;
/// `file.receipts` holds what earlier runs recorded for the chunks they stored.
/// A server that no longer knows the upload is `BackendError.uploadUnknown`,
/// as in every other step.
public protocol FileReconciling: UploadBackend {
    /// What the next question of an answer in parts needs (e.g. a listing's
    /// next page marker); `Never` when answers never come in parts.
    associatedtype ReconcileCursor: Sendable = Never

    /// The first question. `.skip` trusts the state store for this file.
    func reconcileFile(_ file: FileContext, in job: JobContext) throws(BackendError) -> Step<Reconciliation<ReconcileCursor>>

    /// The next question, after an answer `.serverHasMore(…, next: cursor)`.
    /// The engine unites the parts before replacing anything.
    func continueReconciling(
        _ file: FileContext, in job: JobContext, from cursor: ReconcileCursor
    ) throws(BackendError) -> Step<Reconciliation<ReconcileCursor>>
}

extension FileReconciling where ReconcileCursor == Never {
    /// Answers never come in parts, so there is never a next question.
    public func continueReconciling(
        _ file: FileContext, in job: JobContext, from cursor: Never
    ) throws(BackendError) -> Step<Reconciliation<Never>> {}
}

/// A protocol with a call once all of a file's chunks are done (e.g.
/// complete the upload, get its URL).
public protocol FileFinishing: UploadBackend {
    /// `.skip` when this file needs none (its last chunk's answer carried the URL).
    func finishFile(_ file: FileContext, in job: JobContext) throws(BackendError) -> Step<FileFinish>
}

/// A protocol whose completion reports the server's SHA-256 of the file
/// (`FileFinish.completed(url:sha256:)`) for the engine to check against
/// the local file.
public protocol SHA256Reporting: FileFinishing {
    /// Whether `finishFile` will report it for `file` (asked before each
    /// chunk is sent). The engine then hashes the file as its chunks are
    /// read, so the check costs no second pass over the file; for a file
    /// where it says no (say, a server that checks CRCs instead), nothing is
    /// hashed, and a SHA-256 reported all the same is checked by reading
    /// the file once.
    func reportsSHA256(of file: FileContext, in job: JobContext) -> Bool
}

/// A protocol with a call once every file is finished (e.g. a merge check
/// over all files).
public protocol JobFinishing: UploadBackend {
    func finishJob(_ job: JobContext) throws(BackendError) -> Step<JobFinish>
}

/// A protocol with a call to drop what the server holds of an upload.
public protocol UploadCancelling: UploadBackend {
    /// The requests `xfer cancel` sends, best-effort (e.g. one per file
    /// the job opened).
    func cancelRequests(for job: JobContext) -> [HTTPRequest]
}

/// A protocol that can drop one file's upload alone. A file that changed
/// since its upload began is sent again as a new upload; with this, the
/// earlier one (other bytes, e.g. an S3 multipart upload, billed until
/// aborted) is dropped first instead of being left on the server. Without
/// it, the earlier upload is left as it is (a protocol whose cancel drops
/// more than one file's upload must not adopt this).
public protocol FileUploadCancelling: UploadCancelling {
    /// The requests that drop what the server holds of `file`'s upload,
    /// sent once each, best-effort.
    func cancelRequests(forFile file: FileContext, in job: JobContext) -> [HTTPRequest]
}

/// A protocol that can take bytes whose length is not known until they end
/// (`TransferEngine.pushStream`: a pipe, standard input).
///
/// A stream no longer than its first part is sent as a file of that length,
/// through the usual steps (`FileOpening`, `uploadChunk`, `FileFinishing`).
/// A longer one is opened with `openStream` (its handles committed before
/// any part), sent a part at a time in order with `uploadStreamPart`, and
/// completed with `finishStream`. A stream cannot be read twice, so it is
/// never resumed: a failed one is dropped on the server with
/// `cancelRequests`, which is why this capability requires `UploadCancelling`.
public protocol StreamUploading: UploadCancelling {
    /// The size of part `number` (from 1) of a stream, the chunk size asked
    /// for being `requested`: a protocol with a limit on the number of parts
    /// grows them so a long stream fits. The engine holds two parts in memory.
    func streamPartSize(ofPart number: Int, requested: Int) -> Int

    /// Starts the upload of a stream longer than one part. Throw
    /// `.rejected` when the server cannot take one (say why).
    func openStream(_ file: FileContext, in job: JobContext) throws(BackendError) -> Step<OpenedFile>

    /// Sends one part: `part.offset` is where it starts in the stream and
    /// `part.number` counts from 1. `file.size` is the bytes read so far,
    /// this part included; whether more follow is told by `finishStream`
    /// (the engine sends a part while it reads the next). Two parts may be
    /// in flight at once unless the backend's `ChunkOrdering` says
    /// `.sequentialWithinFile`. A receipt in the answer reaches `finishStream`.
    func uploadStreamPart(_ part: ChunkPayload, of file: FileContext, in job: JobContext)
        throws(BackendError) -> Exchange<ChunkOutcome>

    /// Completes the upload once every part was acknowledged; `receipts[i]`
    /// is the receipt of part `i + 1` (nil when its answer gave none), and
    /// `file.size` the stream's length. Answer `.completed(url:)`;
    /// `.missing` is a failure here (the parts are gone from memory).
    func finishStream(_ file: FileContext, receipts: [String?], in job: JobContext) throws(BackendError) -> Step<FileFinish>
}

/// A backend whose requests carry a signature over their headers (e.g. AWS
/// Signature V4).
///
/// The engine builds every request in this order: the backend's step
/// describes it unsigned, the engine adds the credentials' header (when
/// `traits.authentication` says so) and the user's extra headers
/// (`TransferOptions.extraHeaders`, the CLI's `--header`), then calls
/// `sign(_:in:)` just before sending. The signature therefore covers every
/// header that is sent (a server such as S3 rejects unsigned `x-amz-*`
/// headers). Called again for every attempt, so each is signed afresh.
public protocol RequestSigning: UploadBackend {
    /// Adds the signature (and what it needs, such as a date header) to `request`.
    func sign(_ request: inout HTTPRequest, in job: JobContext)
}

extension HTTPRequest {
    /// `request` as the engine sends it: the credentials' `Authorization`
    /// header (when the backend leaves it to the engine) and the extra
    /// headers added (a header the backend set itself wins), then signed
    /// when the backend signs.
    package func prepared(adding extraHeaders: HTTPHeaders, for backend: any UploadBackend, in job: JobContext) -> HTTPRequest {
        prepared(adding: extraHeaders, authentication: backend.traits.authentication, signing: backend as? any RequestSigning, in: job)
    }

    /// The same, with the backend's signer already resolved (the engine's steps: `BackendSteps`).
    package func prepared(
        adding extraHeaders: HTTPHeaders, authentication: BackendTraits.Authentication, signing: (any RequestSigning)?, in job: JobContext
    ) -> HTTPRequest {
        var request = self
        if authentication == .authorizationHeader, let value = job.credentials.authorization, !request.headers.contains("Authorization") {
            request.headers.set("Authorization", value)
        }
        for field in extraHeaders where !request.headers.contains(field.name) {
            request.headers.add(field.name, field.value)
        }
        signing?.sign(&request, in: job)
        return request
    }
}

// MARK: Steps

/// What a step asks of the engine: send a request, skip the step for this
/// file or job, or take an answer the backend knows without asking.
public enum Step<Outcome: Sendable>: Sendable {
    /// Send this request and read its answer.
    case send(Exchange<Outcome>)
    /// This file (or job) has no such step, e.g. a file small enough for one
    /// request needs no opening.
    case skip
    /// The outcome, known without a request (e.g. "send these chunks again"
    /// when the state already says the server cannot have them).
    case answer(Outcome)

    /// Send `request` and read its answer with `interpret`.
    public static func send(
        _ request: HTTPRequest, interpret: @escaping @Sendable (HTTPResponse) throws(BackendError) -> Outcome
    ) -> Step {
        .send(Exchange(request, interpret: interpret))
    }

    /// Send `request`, read its answer with `interpret`, then go on with the
    /// step `then` makes of that outcome (`Exchange.then`).
    public static func send(
        _ request: HTTPRequest, interpret: @escaping @Sendable (HTTPResponse) throws(BackendError) -> Outcome,
        then: @escaping @Sendable (Outcome) throws(BackendError) -> Step
    ) -> Step {
        var exchange = Exchange(request, interpret: interpret)
        exchange.then = then
        return .send(exchange)
    }
}

/// The order chunks of one file may be sent in.
public enum ChunkOrder: Sendable, Hashable {
    /// Any order, many at once (files still share the job's concurrency).
    case any
    /// Strictly one after another within a file; files run in parallel.
    case sequentialWithinFile
}

/// What a backend's protocol needs from the engine, declared up front.
public struct BackendTraits: Sendable, Hashable {
    /// Where the credentials (`JobContext.credentials`) go.
    public enum Authentication: Sendable, Hashable {
        /// The engine adds `Authorization: Bearer TOKEN` to every request
        /// (cancellation included) when the user gave a token.
        case authorizationHeader
        /// The backend places them itself (a form field, a signature).
        case byBackend
        /// The server takes no credentials: the engine adds none.
        case none
    }

    /// The chunk size when the user names none.
    public var defaultChunkSize: Int
    /// The chunk size for a large file when the user names none: a file of at least eight such
    /// chunks is cut in chunks of this size instead of `defaultChunkSize` (as S3 clients grow
    /// their parts), so a user who types no flag gets fewer, larger requests where they pay; nil:
    /// `defaultChunkSize` for every file. A kill re-sends at most the chunks in flight either way.
    public var largeFileChunkSize: Int?
    /// Requests in flight at once when the user names no number.
    public var defaultConcurrency: Int
    /// Requests in flight at once when they are small (a chunk of at most
    /// 1 MiB, or a step of a file) and the user names no number; nil: the
    /// same as `defaultConcurrency`. A tree of small files is bounded by each
    /// request's latency, not the link; large chunks stay at
    /// `defaultConcurrency`, which bounds what a kill sends again.
    public var smallRequestConcurrency: Int?
    /// What the built-in protocols take for `smallRequestConcurrency`: a
    /// tree of small files is bound by round trips, not by the link. At 4 or
    /// 5 requests at once `xfer push DIR` made a fifth of
    /// `curl --parallel --parallel-max 8`'s files/s on loopback; 32 still
    /// left a 50 ms link at a third of the round-trip floor, since the
    /// receiver's per-file work (a sync) adds to every turn of the window
    /// (Docs/benchmarks.md, "Far from the server"). A kill sends again at
    /// most this many small requests, each at most 1 MiB, streamed from
    /// the file.
    public static let wideSmallRequests = 64
    /// Where the credentials go.
    public var authentication: Authentication
    /// Whether a zero-byte file is sent as one empty chunk.
    public var emptyFileHasOneChunk: Bool
    /// Whole-file digests the backend needs in `FileContext.digests` before
    /// `openFile` (costs one extra read of each file).
    public var digestsBeforeOpen: Set<DigestAlgorithm>
    /// How many rounds of `finishFile` (or `finishJob`) a run makes at
    /// most: after this many `.missing` (or `.rollback`) answers in a row the
    /// job fails, its state kept. A re-run gets fresh rounds.
    public var maximumFinishRounds: Int
    /// Whether `startJob` fixes the job's set of files on the server (e.g. it
    /// hands out an id for every file): a re-run that finds new files in a
    /// directory then refuses them instead of sending files the server has
    /// no place for.
    public var filesFixedAtStart: Bool

    /// Declares a backend's needs: the defaults and where the credentials
    /// go are required, the rest is what most protocols want.
    public init(
        defaultChunkSize: Int,
        defaultConcurrency: Int,
        authentication: Authentication,
        emptyFileHasOneChunk: Bool = false,
        digestsBeforeOpen: Set<DigestAlgorithm> = [],
        maximumFinishRounds: Int = 3,
        filesFixedAtStart: Bool = false,
        smallRequestConcurrency: Int? = nil,
        largeFileChunkSize: Int? = nil
    ) {
        self.largeFileChunkSize = largeFileChunkSize
        self.filesFixedAtStart = filesFixedAtStart
        self.smallRequestConcurrency = smallRequestConcurrency
        self.defaultChunkSize = defaultChunkSize
        self.defaultConcurrency = defaultConcurrency
        self.authentication = authentication
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
    /// What follows in the same step, for a step one request cannot do (a
    /// job started in several requests: multipart's sources of at most
    /// `MultipartBackend.filesPerSource` files each): made from this
    /// exchange's outcome, and the step's outcome is then the last one's.
    /// Each exchange is retried on its own, so a failure of the third
    /// request sends the first two no more. Nil (the default): the step is
    /// this one request.
    public var then: (@Sendable (Outcome) throws(BackendError) -> Step<Outcome>)?

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
    /// The server no longer knows the upload this request belongs to
    /// (expired, aborted, or a handle it needs is not recorded). The engine
    /// opens the file afresh, once per run.
    case uploadUnknown(String)
    /// The server holds another part of the file than this request assumed
    /// (e.g. tus's 409 on an `Upload-Offset` it does not have: an earlier
    /// attempt landed although its answer was lost). The engine asks
    /// `reconcileFile` again once the file's other requests are done.
    case outOfSync(String)
    /// The server's answer contradicts what the client sent (e.g. a
    /// different checksum). The job fails loudly.
    case mismatch(String, remedy: XferError.Remedy? = nil)
    /// The write was conditional and the server holds another version than
    /// the condition named (a failed `If-Match`/`If-None-Match`: someone
    /// else wrote the key). That file fails and is not overwritten; the
    /// job's other files go on.
    case conflict(String)

    /// The message, for users.
    public var description: String {
        switch self {
        case .transient(let message, _), .rejected(let message, _), .uploadUnknown(let message),
            .mismatch(let message, _), .outOfSync(let message), .conflict(let message):
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
public struct OpenedFile: Sendable, Hashable {
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

/// The answer to `reconcileFile`: which parts of the file the server holds.
/// Chunks are 0-based indexes (`ChunkPayload.index`); a wire that counts
/// from 1 converts with `FileContext.chunkIndexes(fromNumbers:)`.
public enum Reconciliation<Cursor: Sendable>: Sendable {
    /// The server holds exactly these chunks; `receipts` carries what it
    /// reports for them where the backend needs it later.
    case serverHas(chunks: Set<Int>, receipts: [Int: String] = [:])
    /// The server holds at least these chunks; the engine asks
    /// `continueReconciling(…, from: next)` for the rest (the next page of a
    /// listing, or another question such as "list the parts" after "is the
    /// whole object there already?").
    case serverHasMore(chunks: Set<Int>, receipts: [Int: String] = [:], next: Cursor)
    /// The server holds exactly the file's first `bytes` bytes (protocols
    /// that track an offset, e.g. tus). Chunks wholly below it are done; a
    /// chunk it falls inside is sent from there on (its `ChunkPayload`
    /// starts at `bytes`).
    case serverHasPrefix(bytes: Int64)
    /// The file is already complete on the server at this URL.
    case complete(url: String)
}

/// The parts of an answer given in parts, united: the engine's reconciling
/// and `XferBackendTesting`'s follow one answer the same way.
package struct ReconciliationParts<Cursor: Sendable> {
    /// What to do after an answer.
    package enum Next {
        /// The final answer, the parts before it united into it.
        case done(Reconciliation<Never>)
        /// Ask again from this cursor.
        case ask(Cursor)
    }

    private var chunks = Set<Int>()
    private var receipts: [Int: String] = [:]
    /// How many parts came before the final answer.
    package private(set) var pages = 0

    package init() {}

    package mutating func take(_ answer: Reconciliation<Cursor>) -> Next {
        switch answer {
        case .serverHas(let last, let lastReceipts):
            // An answer in one part is taken as it is: a union would copy a million-chunk set.
            if pages == 0 { return .done(.serverHas(chunks: last, receipts: lastReceipts)) }
            return .done(.serverHas(chunks: chunks.union(last), receipts: receipts.merging(lastReceipts) { $1 }))
        case .serverHasPrefix(let bytes):
            return .done(.serverHasPrefix(bytes: bytes))
        case .complete(let url):
            return .done(.complete(url: url))
        case .serverHasMore(let more, let moreReceipts, let next):
            pages += 1
            chunks.formUnion(more)
            receipts.merge(moreReceipts) { $1 }
            return .ask(next)
        }
    }
}

extension Reconciliation: Equatable where Cursor: Equatable {}
extension Reconciliation: Hashable where Cursor: Hashable {}

/// The answer to `uploadChunk`.
///
/// A case's value has named fields, so one can be added without breaking a
/// backend's tests that read it: build answers with `.stored(receipt:fileURL:)`,
/// read them with `case .stored(let stored)` and `stored.receipt`.
public enum ChunkOutcome: Sendable, Hashable {
    /// The server stored the chunk.
    case stored(Stored)
    /// The server expects chunk `next` (0-based) instead: every chunk
    /// before it is on the server, none from it on.
    case resync(next: Int)

    /// What the server said of a chunk it stored.
    public struct Stored: Sendable, Hashable {
        /// Kept for `finishFile` (e.g. an ETag).
        public var receipt: String?
        /// Set when this answer also completes the file (the protocol has
        /// no separate finish call).
        public var fileURL: String?
        /// With `fileURL`: what identifies the version the server now holds
        /// (an S3 ETag), kept with the file so a later sync knows the object
        /// is the one this file made.
        public var version: String?

        public init(receipt: String? = nil, fileURL: String? = nil) {
            self.receipt = receipt
            self.fileURL = fileURL
        }
    }

    /// The server stored the chunk; `receipt` is kept for `finishFile`,
    /// `fileURL` completes the file.
    public static func stored(receipt: String? = nil, fileURL: String? = nil) -> ChunkOutcome {
        .stored(Stored(receipt: receipt, fileURL: fileURL))
    }
}

/// The answer to `finishFile`.
///
/// A case's value has named fields (see `ChunkOutcome`): build answers with
/// `.completed(url:sha256:crc32c:)`, read them with `case .completed(let completion)`.
public enum FileFinish: Sendable, Hashable {
    /// The file is complete.
    case completed(Completion)
    /// The server lacks these chunks (0-based indexes); they are sent again.
    case missing([Int])

    /// A file the server calls complete. When it reports the file's SHA-256
    /// (hex) or CRC-32C, the engine checks it against the local file (the
    /// SHA-256 fed as the chunks were read, see `SHA256Reporting`; the
    /// CRC-32C by one read of the file, at ISA-L's speed).
    public struct Completion: Sendable, Hashable {
        /// Where the server keeps the file.
        public var url: String
        /// The server's SHA-256 of it, lowercase hex.
        public var sha256: String?
        /// The server's CRC-32C of it.
        public var crc32c: UInt32?
        /// What identifies the version the server now holds (an S3 ETag),
        /// kept with the file so a later sync knows the object is the one
        /// this file made.
        public var version: String?

        public init(url: String, sha256: String? = nil, crc32c: UInt32? = nil) {
            self.url = url
            self.sha256 = sha256
            self.crc32c = crc32c
        }
    }

    /// The file is complete at `url`, with the digests the server reported.
    public static func completed(url: String, sha256: String? = nil, crc32c: UInt32? = nil) -> FileFinish {
        .completed(Completion(url: url, sha256: sha256, crc32c: crc32c))
    }
}

/// The answer to `finishJob`.
public enum JobFinish: Sendable, Hashable {
    /// Every file is complete; URLs by file index.
    case completed(urls: [Int: String])
    /// These files (by index) failed on the server: every chunk of them is
    /// sent again, then the job asks again.
    case rollback(files: [Int])
}
