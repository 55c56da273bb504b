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

    /// The chunk size for a file (the size asked for without the capability).
    func chunkSize(for size: Int64, requested: Int) -> Int {
        (self as? any ChunkSizing)?.chunkSize(forFileOfSize: size, requested: requested) ?? requested
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

    /// Whether the completion of `file` will report the server's SHA-256
    /// (never without the capability).
    func reportsSHA256(of file: FileContext, in job: JobContext) -> Bool {
        (self as? any SHA256Reporting)?.reportsSHA256(of: file, in: job) ?? false
    }

    /// Whether the backend completes a file in a step of its own and can
    /// be asked what it holds of it. A bare acknowledgement of a file's last
    /// chunk is then not committed alone: the completion's commit, moments
    /// later, says every chunk is done, and a run killed in between asks the
    /// server (which answers that it holds the chunk) instead of sending it
    /// again; for a file where the backend skips the question, it re-sends
    /// that one chunk, which was in flight. One transaction (and one
    /// fdatasync) fewer per small file.
    var completesFilesAndReconciles: Bool {
        self is any FileFinishing && self is any FileReconciling
    }
}
