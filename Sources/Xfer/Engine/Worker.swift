import FoundationEssentials

/// Runs one step: builds the backend's exchange, sends it with retries, and
/// turns the outcome into a `WorkResult`. Immutable and shared by all the
/// concurrent steps of a job.
struct Worker: Sendable {
    let jobID: JobID
    /// The backend's steps, resolved once for the job.
    let steps: BackendSteps
    let options: TransferOptions
    let store: any JobStateStore
    let transport: HTTPTransport
    let events: AsyncStream<TransferEvent>.Continuation
    /// Chunk bytes curl took to send in this run, retries and cut attempts included.
    let bytesSent: TransferByteCounter

    var backend: any UploadBackend { steps.backend }

    /// How a step ended when it did not yield an outcome.
    private typealias StepError = RetryLoop.Failure

    // MARK: Steps

    /// `startJob`; the handles it gives for files are committed into their
    /// records here, before the result is reported.
    func startJob(_ job: JobContext) async -> WorkResult {
        do {
            guard let starting = steps.jobStarting else { return .started(nil) }
            let start = try await perform("start the upload", in: job, countBytes: false) { () throws(BackendError) in
                try starting.startJob(job)
            }
            if let start, !start.fileHandles.isEmpty {
                // In pages: a job-wide answer must not become one job-sized transaction.
                var page: [(index: Int, record: FileRecord, handles: ServerHandles)] = []
                for (index, handles) in start.fileHandles.sorted(by: { $0.key < $1.key }) {
                    guard let record = try store.file(job: jobID, index: index) else { continue }
                    page.append((index, record, handles))
                    if page.count == 1024 {
                        try await store.commit(StepRecords.started(job: jobID, fileHandles: page))
                        page.removeAll(keepingCapacity: true)
                    }
                }
                try await store.commit(StepRecords.started(job: jobID, fileHandles: page))
            }
            return .started(start)
        } catch {
            return failure(.startJob, file: nil, error)
        }
    }

    /// `openFile`; the record with the server's handles (and chunk size) is
    /// committed before the result is reported, so before any chunk.
    func openFile(_ file: FileContext, record: FileRecord, content: some StepContent, job: JobContext) async -> WorkResult {
        let index = file.index
        do {
            var file = file
            let algorithms = backend.traits.digestsBeforeOpen
            if !algorithms.isEmpty { file = file.with(digests: try content.digests(algorithms)) }
            var opening: OpenedFile?
            if let opener = steps.fileOpening {
                opening = try await perform("open \(record.path) on the server", in: job, countBytes: false) { () throws(BackendError) in
                    try opener.openFile(file, in: job)
                }
            }
            let (opened, changes) = try StepRecords.opened(job: jobID, file: index, record: record, opening: opening)
            if !changes.isEmpty { try await store.commit(changes) }
            return .opened(file: index, opened)
        } catch {
            return failure(.openFile(index), file: index, error)
        }
    }

    /// A listing of a million chunks is a thousand pages at most; more
    /// means a backend whose cursor never ends.
    static let maximumReconcilePages = 100_000

    func reconcileFile(_ base: FileContext, job: JobContext) async -> WorkResult {
        let index = base.index
        guard let reconciling = steps.fileReconciling else { return .reconciled(file: index, nil) }
        do {
            let file = base.with(receipts: try store.receipts(job: jobID, file: index))
            return .reconciled(file: index, try await reconcile(file, with: reconciling, job: job))
        } catch {
            return failure(.reconcileFile(index), file: index, error)
        }
    }

    /// Asks `backend` what the server holds of `file`, following an answer
    /// in parts to its end and uniting the parts, so the store is replaced
    /// once, with all of it. Nil when the backend skips the question.
    private func reconcile<Backend: FileReconciling>(
        _ file: FileContext, with backend: Backend, job: JobContext
    ) async throws(StepError) -> Reconciliation<Never>? {
        var answer = try await perform("ask the server what it holds of \(file.path)", in: job, countBytes: false) {
            () throws(BackendError) in try backend.reconcileFile(file, in: job)
        }
        var parts = ReconciliationParts<Backend.ReconcileCursor>()
        while true {
            guard let current = answer else { return nil }
            switch parts.take(current) {
            case .done(let united):
                return united
            case .ask(let next):
                guard parts.pages < Self.maximumReconcilePages else {
                    throw .failed(.transferFailed("the server's list of what it holds of \(file.path) never ends"))
                }
                answer = try await perform("ask the server what else it holds of \(file.path)", in: job, countBytes: false) {
                    () throws(BackendError) in try backend.continueReconciling(file, in: job, from: next)
                }
                guard answer != nil else {
                    // Skipping the rest of an answer in parts would cut the listing short.
                    throw .failed(
                        .transferFailed(
                            "the backend '\(backend.name)' skipped the rest of the server's answer about \(file.path) (a bug in the backend)"))
                }
            }
        }
    }

    /// Sends chunk `chunk`, from `start` when the server holds its beginning.
    /// The acknowledgement (and a URL or receipt the answer carries) is
    /// committed before the result is reported, as `StepRecords.chunkStored`
    /// says; without `commitsAcknowledgement` a bare acknowledgement is left
    /// to the file's completion (see `Scheduler.ChunkTerms`). With
    /// `defersCommit` the records are handed back uncommitted
    /// (`.chunkAnswered`), for the run to commit with other chunks' records.
    func uploadChunk(
        _ chunk: Int, of file: FileContext, record: FileRecord, content: some StepContent, from start: Int64? = nil,
        feedingHash: Bool = false, job: JobContext, commitsAcknowledgement: Bool = true, defersCommit: Bool = false,
        readsAhead: Bool = false
    ) async -> WorkResult {
        let index = file.index
        let plan = file.plan
        let work = Work.chunk(file: index, chunk: chunk)
        do {
            let chunkStart = plan.offset(of: chunk)
            let end = chunkStart + Int64(plan.length(of: chunk))
            let offset = min(max(start ?? chunkStart, chunkStart), end)
            // The bytes stay in the file: a digest the backend asks for is
            // one read of the range (which also feeds the whole-file hash),
            // and the transport streams the range into the request (from
            // that read, for a chunk of one read block: `ChunkBytes`).
            let source = content.chunk(offset: offset, length: Int(end - offset), feedingHash: feedingHash)
            if readsAhead, chunk + 1 < plan.count {
                // Once this request has sent half its bytes, the next chunk's digests are
                // computed while the rest goes and the answer comes (`ChunkBytes.whenSent`).
                // A pass reads several times faster than one stream sends here, so it ends
                // before the answer; begun at the last byte it was still running when a 64 MiB
                // chunk's answer came, and begun with the request it competed with the whole
                // send for the two cores (Docs/benchmarks.md).
                let next = (offset: plan.offset(of: chunk + 1), length: plan.length(of: chunk + 1))
                source.whenSent(upTo: Int(end - offset) / 2) { [weak source] in
                    guard let source else { return }
                    content.readAhead(offset: next.offset, length: next.length, digests: source.computedDigests)
                }
            }
            let payload = ChunkPayload(index: chunk, source: source)
            let exchanged = try await perform(
                "send chunk \(chunk + 1)/\(plan.count) of \(file.name)", in: job, countBytes: true, chunk: source
            ) { () throws(BackendError) in
                .send(try backend.uploadChunk(payload, of: file, in: job))
            }
            guard let outcome = exchanged else { return .failed(work, .transferFailed("no chunk request")) }
            switch outcome {
            case .stored(let stored):
                let (receipt, url) = (stored.receipt, stored.fileURL)
                let changes = StepRecords.chunkStored(
                    job: jobID, file: index, chunk: chunk, plan: plan, record: record, receipt: receipt, url: url,
                    version: stored.version, commitsAcknowledgement: commitsAcknowledgement)
                let result: WorkResult =
                    if let url {
                        .chunkStoredCompletingFile(file: index, chunk: chunk, bytes: plan.length(of: chunk), url: url)
                    } else {
                        .chunkStored(file: index, chunk: chunk, bytes: plan.length(of: chunk))
                    }
                if changes.isEmpty { return result }
                if defersCommit { return .chunkAnswered(file: index, chunk: chunk, changes: changes, stored: result) }
                try await store.commit(changes)
                return result
            case .resync(let next):
                return .chunkResync(file: index, chunk: chunk, next: next)
            }
        } catch {
            return failure(work, file: index, error)
        }
    }

    /// The backend's `cancelRequests(forFile:in:)` (its earlier upload), sent as
    /// every cleanup is (`RetryLoop.sendCleanup`); a failure is not the job's
    /// (the server may have expired the upload already), so the result is
    /// always `.uploadDropped`.
    func dropUpload(_ file: FileContext, job: JobContext) async -> WorkResult {
        for unprepared in backend.requestsToCancel(file, in: job) {
            _ = await RetryLoop.sendCleanup(steps.prepared(unprepared, adding: options.extraHeaders, in: job), through: transport)
        }
        return .uploadDropped(file: file.index)
    }

    /// `finishFile`; the digests a completion reports are checked against
    /// the bytes sent, and its URL committed, before the result is reported.
    func finishFile(_ base: FileContext, record: FileRecord, content: some StepContent, job: JobContext) async -> WorkResult {
        let index = base.index
        do {
            try content.checkUnchanged(recorded: record.identity)
            let file = base.with(receipts: try store.receipts(job: jobID, file: index))
            var finish: FileFinish?
            if let finishing = steps.fileFinishing {
                finish = try await perform("complete \(file.name) on the server", in: job, countBytes: false) { () throws(BackendError) in
                    try finishing.finishFile(file, in: job)
                }
            }
            if case .completed(let completion) = finish {
                try await Self.verify(finish, of: record.path, against: content)
                try await store.commit(StepRecords.fileCompleted(job: jobID, file: index, record: record, url: completion.url, version: completion.version))
            }
            return .fileFinished(file: index, finish)
        } catch {
            return failure(.finishFile(index), file: index, error)
        }
    }

    /// `finishJob`, with every file of the job; URLs of a completion, and the
    /// resets of a rollback, are committed before the result is reported.
    func finishJob(_ job: JobContext, traits: BackendTraits) async -> WorkResult {
        do {
            var finish: JobFinish?
            if let finishing = steps.jobFinishing {
                finish = try await perform("complete the upload", in: job, countBytes: false) { () throws(BackendError) in
                    try finishing.finishJob(job)
                }
            }
            var changes: [StateChange] = []
            var rolledBack: [RolledBackFile] = []
            switch finish {
            case .completed(let urls)?:
                var completed: [(index: Int, record: FileRecord, url: String)] = []
                for (index, url) in urls.sorted(by: { $0.key < $1.key }) {
                    guard let record = try store.file(job: jobID, index: index) else { continue }
                    completed.append((index, record, url))
                    events.yield(.fileCompleted(file: index, path: record.path, url: url))
                }
                changes = StepRecords.jobCompleted(job: jobID, files: completed)
            case .rollback(let failed)?:
                var files: [(index: Int, record: FileRecord)] = []
                for index in Set(failed).sorted() {
                    guard let record = try store.file(job: jobID, index: index) else { continue }
                    files.append((index, record))
                }
                (changes, rolledBack) = StepRecords.jobRolledBack(job: jobID, files: files, traits: traits)
            case nil:
                break
            }
            try await store.commit(changes)
            return .jobFinished(finish, rolledBack: rolledBack)
        } catch {
            return failure(.finishJob, file: nil, error)
        }
    }

    /// Sends the step `make` builds, with the job's retries, for steps the
    /// scheduler does not drive (a stream's): an outcome, nil when the
    /// backend skipped the step, or the error that ends the job.
    func send<T: Sendable>(
        _ operation: String, in job: JobContext, chunk: ChunkBytes? = nil, _ make: () throws(BackendError) -> Step<T>
    ) async throws(XferError) -> T? {
        do {
            return try await perform(operation, in: job, countBytes: chunk != nil, chunk: chunk, make)
        } catch {
            switch error {
            case .failed(let failure): throw failure
            case .uploadUnknown(let message), .outOfSync(let message), .objectChanged(let message), .conflict(let message):
                throw .transferFailed(message)
            }
        }
    }

    // MARK: Sending with retries

    /// Takes the step `make` builds: sends its request, retrying transient
    /// failures with backoff, or returns its answer (nil when the backend
    /// skips the step). `make` runs again for every attempt so each request
    /// can be built (and signed) afresh; the credentials and extra headers
    /// go in before a signing backend signs it.
    ///
    /// An exchange followed by another (`Exchange.then`) is sent, then the
    /// next is made from its outcome and sent with retries of its own.
    private func perform<T: Sendable>(
        _ operation: String, in job: JobContext, countBytes: Bool, chunk: ChunkBytes? = nil,
        _ make: () throws(BackendError) -> Step<T>
    ) async throws(StepError) -> T? {
        let events = self.events
        // The step's first exchange comes from `make`, each later one from the exchange before it.
        var previous: (outcome: T, then: @Sendable (T) throws(BackendError) -> Step<T>)?
        var outcome: T?
        repeat {
            let link = previous
            var then: (@Sendable (T) throws(BackendError) -> Step<T>)?
            outcome = try await RetryLoop.run(operation, policy: options.retry) { attempt, delay, reason in
                events.yield(.retrying(operation: operation, attempt: attempt, delay: delay, reason: reason))
            } _: { () async throws -> T? in
                let step: Step<T>
                if let link { step = try link.then(link.outcome) } else { step = try make() }
                let exchange: Exchange<T>
                switch step {
                case .skip: return link?.outcome
                case .answer(let outcome): return outcome
                case .send(let made): exchange = made
                }
                if link == nil, let chunk {
                    // A digest of a chunk that could not be read is not sent.
                    if let failure = chunk.failure { throw StepError.failed(failure) }
                    do throws(XferError) { try chunk.feedObserverIfNeeded() } catch { throw StepError.failed(error) }
                }
                let request = steps.prepared(exchange.request, adding: options.extraHeaders, in: job)
                let response = try await send(request, counting: countBytes && link == nil ? bytesSent : nil)
                then = exchange.then
                return try exchange.interpret(response)
            }
            if let outcome, let then { previous = (outcome, then) } else { previous = nil }
        } while previous != nil
        return outcome
    }

    /// Sends `request`, reporting it when the options ask for every request.
    private func send(_ request: HTTPRequest, counting counter: TransferByteCounter?) async throws(TransportError) -> HTTPResponse {
        try await transport.send(request, counting: counter, reportingTo: options.reportsRequests ? events : nil)
    }

    // MARK: Helpers

    private func failure(_ work: Work, file: Int?, _ error: any Error) -> WorkResult {
        switch error {
        case StepError.uploadUnknown(let message):
            if let file { return .uploadUnknown(file: file, work: work, message: message) }
            return .failed(work, .transferFailed(message))
        case StepError.outOfSync(let message):
            if let file { return .outOfSync(file: file, work: work, message: message) }
            return .failed(work, .transferFailed(message))
        case StepError.conflict(let message):
            // Someone else's version is at the key: this file fails, the others go on.
            if let file { return .fileFailed(file: file, work: work, reason: message) }
            return .failed(work, .transferFailed(message))
        case StepError.failed(let error):
            return classify(work, file: file, error)
        case let error as XferError:
            return classify(work, file: file, error)
        default:
            return .failed(work, .transferFailed("\(error)"))
        }
    }

    /// Problems of the local file (changed, vanished, unreadable) fail that
    /// file only; everything else stops the job.
    private func classify(_ work: Work, file: Int?, _ error: XferError) -> WorkResult {
        guard let file else { return .failed(work, error) }
        switch error.kind {
        case .fileChanged:
            return .fileFailed(file: file, work: work, reason: "it changed during the push (\(error.reason ?? error.message))")
        case .fileUnreadable:
            return .fileFailed(file: file, work: work, reason: "cannot be read (\(error.reason ?? error.message))")
        default:
            return .failed(work, error)
        }
    }
}
