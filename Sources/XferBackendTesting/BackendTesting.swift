import Xfer

/// Builds what a backend's steps take, for tests that run them with no
/// network: a job, its files, their chunks (Docs/backend-guide.md, section 6).
///
/// ```swift
/// let file = BackendTesting.file(for: backend, name: "a.bin", size: 10, chunkSize: 4)
/// let job = BackendTesting.job(files: [file], token: "t0k")
/// let step = try backend.openFile(file, in: job)
/// let request = try XCTUnwrap(step.request)
/// let opened = try step.outcome(for: HTTPResponse(status: 201, body: …))
/// let stored = try backend.uploadChunk(BackendTesting.chunk(0, of: file), of: file, in: job).outcome(for: .json(200, "{}"))
/// ```
public enum BackendTesting {
    /// A job id for tests.
    public static let jobID = JobID(rawValue: "0123456789abcdef")

    /// A view of a job pushing `files` to `target`; `namedFile` as when the
    /// job is created by a push naming that one file.
    public static func job(
        target: String = "http://127.0.0.1:9", handles: ServerHandles = ServerHandles(), files: [FileContext] = [],
        token: String? = nil, concurrency: Int = 1, namedFile: String? = nil
    ) -> JobContext {
        JobContext(
            id: jobID, target: target, handles: handles, files: files, credentials: Credentials(token: token),
            concurrency: concurrency, namedFile: namedFile)
    }

    /// A view of a file of `size` bytes cut into `chunkSize` chunks, as
    /// the engine cuts it for `backend`: an empty file is one empty chunk
    /// when its traits say so (`emptyFileHasOneChunk`), and `chunkSize`
    /// defaults to their `defaultChunkSize`.
    public static func file(
        for backend: some UploadBackend, index: Int = 0, name: String = "a.bin", relativePath: String? = nil, size: Int64,
        chunkSize: Int? = nil, handles: ServerHandles = ServerHandles(), digests: [DigestAlgorithm: String] = [:],
        receipts: [Int: String] = [:]
    ) -> FileContext {
        file(
            index: index, name: name, relativePath: relativePath, size: size, chunkSize: chunkSize ?? backend.traits.defaultChunkSize,
            emptyFileHasOneChunk: backend.traits.emptyFileHasOneChunk, handles: handles, digests: digests, receipts: receipts)
    }

    /// A view of a file of `size` bytes cut into `chunkSize` chunks, with
    /// no backend to follow: `emptyFileHasOneChunk` should match the
    /// backend's traits (`file(for:...)` reads them).
    public static func file(
        index: Int = 0, name: String = "a.bin", relativePath: String? = nil, size: Int64, chunkSize: Int,
        emptyFileHasOneChunk: Bool = false, handles: ServerHandles = ServerHandles(),
        digests: [DigestAlgorithm: String] = [:], receipts: [Int: String] = [:]
    ) -> FileContext {
        FileContext(
            index: index, path: "/tmp/" + (relativePath ?? name), relativePath: relativePath, name: name, size: size,
            plan: ChunkPlan(fileSize: size, chunkSize: chunkSize, emptyFileHasOneChunk: emptyFileHasOneChunk),
            handles: handles, digests: digests, receipts: receipts)
    }

    /// Chunk `index` of `file` holding `bytes` (by default as many bytes
    /// as the chunk has, all `0x61`), from `offset` (by default the chunk's start).
    public static func chunk(_ index: Int, of file: FileContext, bytes: [UInt8]? = nil, offset: Int64? = nil) -> ChunkPayload {
        let start = offset ?? file.plan.offset(of: index)
        let length = Int(file.plan.offset(of: index) + Int64(file.plan.length(of: index)) - start)
        return ChunkPayload(index: index, offset: start, bytes: bytes ?? [UInt8](repeating: 0x61, count: length))
    }
}

// MARK: Reading steps

extension Step {
    /// The request the step sends, as the backend described it (see
    /// `UploadBackend.requestAsSent` for what the engine adds); nil when
    /// the step skips or answers without a request.
    public var request: HTTPRequest? {
        guard case .send(let exchange) = self else { return nil }
        return exchange.request
    }

    /// Whether the step is skipped for this file or job.
    public var isSkipped: Bool {
        if case .skip = self { return true }
        return false
    }

    /// The outcome the backend knows without a request, or nil.
    public var immediateAnswer: Outcome? {
        guard case .answer(let outcome) = self else { return nil }
        return outcome
    }

    /// The step's outcome when the server answers `response`: the
    /// backend's reading of it, or the answer it gave without a request.
    /// - Throws: the backend's error, or `StepError.skipped` for a skipped step.
    public func outcome(for response: HTTPResponse) throws -> Outcome {
        switch self {
        case .send(let exchange): return try exchange.interpret(response)
        case .answer(let outcome): return outcome
        case .skip: throw BackendTestingError.skipped
        }
    }
}

extension Exchange {
    /// The outcome the request's answer `response` means to the backend:
    /// `interpret(response)`, as for a `Step` (`uploadChunk` returns an
    /// `Exchange` directly, since it always sends).
    public func outcome(for response: HTTPResponse) throws -> Outcome {
        try interpret(response)
    }
}

/// What a test of a step did wrong.
public enum BackendTestingError: Error, Equatable {
    /// An outcome was asked of a step the backend skips.
    case skipped
    /// The script ran out of responses.
    case noResponseLeft(HTTPRequest)
}

extension UploadBackend {
    /// `request` as the engine sends it: the credentials' header (when the
    /// engine places them), the extra headers, then the backend's signature.
    public func requestAsSent(_ request: HTTPRequest, in job: JobContext, extraHeaders: HTTPHeaders = [:]) -> HTTPRequest {
        request.prepared(adding: extraHeaders, for: self, in: job)
    }
}

extension DownloadSource {
    /// `request` as a pull sends it: the credentials' header (when the
    /// engine places them), the extra headers, then the source's signature.
    public func requestAsSent(_ request: HTTPRequest, in job: JobContext, extraHeaders: HTTPHeaders = [:]) -> HTTPRequest {
        request.prepared(adding: extraHeaders, for: self, in: job)
    }
}

extension BackendTesting {
    /// The view of a pull a download source's steps get: no files (a source
    /// addresses objects by their locations), the destination as its target.
    public static func pullJob(destination: String = "/tmp/xfer-pull", token: String? = nil) -> JobContext {
        JobContext(
            id: jobID, target: destination, handles: ServerHandles(), files: [FileContext](), credentials: Credentials(token: token))
    }
}

extension HTTPRequest {
    /// The body's bytes, in the order they are sent.
    public var bodyBytes: [UInt8] { ((try? body.materializedSegments()) ?? []).flatMap { $0 } }
    /// The body as UTF-8 text (lossy).
    public var bodyText: String { String(decoding: bodyBytes, as: UTF8.self) }
}

extension HTTPResponse {
    /// A JSON answer.
    public static func json(_ status: Int = 200, _ text: String, headers: HTTPHeaders = [:]) -> HTTPResponse {
        var all = headers
        if !all.contains("Content-Type") { all.set("Content-Type", "application/json") }
        return HTTPResponse(status: status, headers: all, body: Array(text.utf8))
    }
}

// MARK: Conversations

/// A server that answers from a script: each request a conversation sends
/// is recorded (as the engine would send it) and answered with the next
/// scripted response.
public struct ScriptedServer {
    private var responses: [HTTPResponse]
    /// The requests sent so far, as sent.
    public private(set) var requests: [HTTPRequest] = []

    /// A server that answers with `responses`, in order.
    public init(_ responses: [HTTPResponse]) { self.responses = responses }

    /// Whether every scripted response was used.
    public var isExhausted: Bool { responses.isEmpty }

    /// The outcome of `step`: its answer, or its reading of the next
    /// scripted response to its request. Nil when the step is skipped. An
    /// exchange followed by others (`Exchange.then`) is followed as the
    /// engine follows it, each taking the next response.
    public mutating func take<Outcome>(
        _ step: Step<Outcome>, of backend: some UploadBackend, in job: JobContext
    ) throws -> Outcome? {
        switch step {
        case .skip: return nil
        case .answer(let outcome): return outcome
        case .send(let exchange):
            let request = backend.requestAsSent(exchange.request, in: job)
            requests.append(request)
            guard !responses.isEmpty else { throw BackendTestingError.noResponseLeft(request) }
            let outcome = try exchange.interpret(responses.removeFirst())
            guard let then = exchange.then else { return outcome }
            return try take(try then(outcome), of: backend, in: job) ?? outcome
        }
    }

    /// The outcome of `exchange` (an `uploadChunk`'s): its reading of the
    /// next scripted response to its request, which is recorded as sent.
    public mutating func take<Outcome>(
        _ exchange: Exchange<Outcome>, of backend: some UploadBackend, in job: JobContext
    ) throws -> Outcome {
        try take(Step.send(exchange), of: backend, in: job)!
    }

    /// Asks `backend` what the server holds of `file` the way the engine
    /// does: follows an answer in parts to its end and unites the parts.
    /// Nil when the backend skips the question.
    public mutating func reconcile<Backend: FileReconciling>(
        _ file: FileContext, with backend: Backend, in job: JobContext
    ) throws -> Reconciliation<Never>? {
        var answer = try take(try backend.reconcileFile(file, in: job), of: backend, in: job)
        var parts = ReconciliationParts<Backend.ReconcileCursor>()
        while let current = answer {
            switch parts.take(current) {
            case .done(let united): return united
            case .ask(let next): answer = try take(try backend.continueReconciling(file, in: job, from: next), of: backend, in: job)
            }
        }
        return nil
    }
}
