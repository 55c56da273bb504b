/// How the engine asks a backend for what its capabilities give, and what
/// it does for a backend without one: the one place that says what "not
/// adopted" means (see the table on `UploadBackend`).
extension UploadBackend {
    /// `--to` normalized: the backend's own form, or an http(s) URL.
    func target(normalizing target: String) throws(BackendError) -> String {
        if let normalizing = self as? any TargetNormalizing { return try normalizing.normalizedTarget(target) }
        return try HTTPTarget.normalized(target)
    }

    /// The handles the backend invents for a new job (none without the capability).
    func inventedHandles(for job: JobContext) -> ServerHandles {
        (self as? any JobHandleInventing)?.makeJobHandles(for: job) ?? ServerHandles()
    }

    /// Each file's chunk size in a job: the size `named` (`--chunk-size`), else the backend's
    /// default, or its large-file size for a file of at least 8 of those; then what the backend
    /// makes of it where it adopts `ChunkSizing` (resolved once: a job asks it of every file).
    func chunkSizes(named: Int?) -> @Sendable (_ size: Int64) -> Int {
        let traits = self.traits
        let requested = named ?? traits.defaultChunkSize
        let sizing = self as? any ChunkSizing
        return { size in
            var asked = requested
            if named == nil, let large = traits.largeFileChunkSize, size >= 8 * Int64(large) { asked = large }
            return max(1, sizing?.chunkSize(forFileOfSize: size, requested: asked) ?? asked)
        }
    }

    /// The job's chunk order (any without the capability).
    func chunkOrder(in job: JobContext) -> ChunkOrder {
        (self as? any ChunkOrdering)?.chunkOrder(for: job) ?? .any
    }

    /// The requests `cancel` sends (none without the capability).
    func requestsToCancel(_ job: JobContext) -> [HTTPRequest] {
        (self as? any UploadCancelling)?.cancelRequests(for: job) ?? []
    }

    /// The requests that drop `file`'s upload alone (none without the capability).
    func requestsToCancel(_ file: FileContext, in job: JobContext) -> [HTTPRequest] {
        (self as? any FileUploadCancelling)?.cancelRequests(forFile: file, in: job) ?? []
    }
}

/// The steps a backend adopts, each resolved once when a job starts (as rclone fills its
/// `Features` and tusd composes a `StoreComposer`): the engine's steps read these fields, and
/// nothing on the path of a chunk or a request asks the backend's type again.
struct BackendSteps: Sendable {
    let backend: any UploadBackend
    let jobStarting: (any JobStarting)?
    let fileOpening: (any FileOpening)?
    let fileReconciling: (any FileReconciling)?
    let fileFinishing: (any FileFinishing)?
    let jobFinishing: (any JobFinishing)?
    let fileUploadCancelling: (any FileUploadCancelling)?
    let sha256Reporting: (any SHA256Reporting)?
    let requestSigning: (any RequestSigning)?

    init(_ backend: any UploadBackend) {
        self.backend = backend
        jobStarting = backend as? any JobStarting
        fileOpening = backend as? any FileOpening
        fileReconciling = backend as? any FileReconciling
        fileFinishing = backend as? any FileFinishing
        jobFinishing = backend as? any JobFinishing
        fileUploadCancelling = backend as? any FileUploadCancelling
        sha256Reporting = backend as? any SHA256Reporting
        requestSigning = backend as? any RequestSigning
    }

    /// Whether the backend completes a file in a step of its own and can
    /// be asked what it holds of it (what `Scheduler.ChunkTerms` reads).
    var completesFilesAndReconciles: Bool { fileFinishing != nil && fileReconciling != nil }

    /// `request` as the engine sends it (`HTTPRequest.prepared(adding:for:in:)`), with the signer
    /// resolved here.
    func prepared(_ request: HTTPRequest, adding extraHeaders: HTTPHeaders, in job: JobContext) -> HTTPRequest {
        request.prepared(adding: extraHeaders, authentication: backend.traits.authentication, signing: requestSigning, in: job)
    }
}
