import Foundation

/// Runs one step: builds the backend's exchange, sends it with retries, and
/// turns the outcome into a `WorkResult`. Immutable and shared by all the
/// concurrent steps of a job.
struct Worker: Sendable {
    let jobID: JobID
    let backend: any UploadBackend
    let options: TransferOptions
    let store: any JobStateStore
    let transport: HTTPTransport
    let events: AsyncStream<TransferEvent>.Continuation
    /// Chunk bytes handed to the transport by this run, retries included.
    let bytesSent: LockedValue<Int64>

    /// How a step ended when it did not yield an outcome.
    private enum StepError: Error {
        case failed(XferError)
        case uploadUnknown(String)
        case outOfSync(String)
    }

    // MARK: Steps

    func startJob(_ job: JobContext) async -> WorkResult {
        do {
            let start = try await perform("start the upload", countBytes: false) { backend.startJob(job) }
            return .started(start)
        } catch {
            return failure(.startJob, file: nil, error)
        }
    }

    func openFile(
        _ index: Int, file: LocalFile, digestsNeeded: Set<DigestAlgorithm>, known: [DigestAlgorithm: String],
        job: JobContext
    ) async -> WorkResult {
        do {
            var digests = known
            let missing = digestsNeeded.subtracting(digests.keys)
            if !missing.isEmpty {
                let computed = try file.digests(missing)
                digests.merge(computed) { $1 }
            }
            let context = withFile(job, index) { base in
                FileContext(
                    index: base.index, path: base.path, name: base.name, size: base.size, plan: base.plan,
                    handles: base.handles, digests: digests)
            }
            let opening = try await perform("open \(file.path) on the server", countBytes: false) {
                backend.openFile(context.files[index], in: context)
            }
            return .opened(file: index, opening)
        } catch {
            return failure(.openFile(index), file: index, error)
        }
    }

    /// A listing of a million chunks is a thousand pages at most; more
    /// means a backend whose cursor never ends.
    static let maximumReconcilePages = 100_000

    func reconcileFile(_ index: Int, job: JobContext) async -> WorkResult {
        do {
            let receipts = try store.receipts(job: jobID, file: index)
            let context = withFile(job, index) { base in
                FileContext(
                    index: base.index, path: base.path, name: base.name, size: base.size, plan: base.plan,
                    handles: base.handles, digests: base.digests, receipts: receipts)
            }
            let file = context.files[index]
            var answer = try await perform("ask the server what it holds of \(file.path)", countBytes: false) {
                backend.reconcileFile(file, in: context)
            }
            // An answer in parts: unite them, so the store is replaced once, with all of it.
            var chunks = Set<Int>()
            var found = [Int: String]()
            var pages = 0
            while case .serverHasMore(let more, let moreReceipts, let cursor)? = answer {
                pages += 1
                guard pages < Self.maximumReconcilePages else {
                    throw StepError.failed(.transferFailed("the server's list of what it holds of \(file.path) never ends"))
                }
                chunks.formUnion(more)
                found.merge(moreReceipts) { $1 }
                answer = try await perform("ask the server what else it holds of \(file.path)", countBytes: false) {
                    backend.continueReconciling(file, in: context, from: cursor)
                }
                if answer == nil { answer = .serverHas(chunks: [], receipts: [:]) }
            }
            if pages > 0, case .serverHas(let last, let lastReceipts)? = answer {
                answer = .serverHas(chunks: chunks.union(last), receipts: found.merging(lastReceipts) { $1 })
            }
            return .reconciled(file: index, answer)
        } catch {
            return failure(.reconcileFile(index), file: index, error)
        }
    }

    /// Sends chunk `chunk`, from `start` when the server holds its beginning.
    func uploadChunk(
        _ chunk: Int, of index: Int, file: LocalFile, plan: ChunkPlan, from start: Int64? = nil, hash: StreamingFileHash?,
        job: JobContext
    ) async -> WorkResult {
        let work = Work.chunk(file: index, chunk: chunk)
        do {
            let chunkStart = plan.offset(of: chunk)
            let end = chunkStart + Int64(plan.length(of: chunk))
            let offset = min(max(start ?? chunkStart, chunkStart), end)
            let bytes = try file.read(offset: offset, length: Int(end - offset))
            try hash?.feed(offset: offset, bytes: bytes)
            let payload = ChunkPayload(index: chunk, offset: offset, bytes: bytes)
            let context = job.files[index]
            let exchanged = try await perform(
                "send chunk \(chunk + 1)/\(plan.count) of \(context.name)", countBytes: true
            ) {
                backend.uploadChunk(payload, of: context, in: job)
            }
            guard let outcome = exchanged else { return .failed(work, .transferFailed("no chunk request")) }
            switch outcome {
            case .stored(let receipt, nil):
                try await store.commit(
                    .markDone(job: jobID, file: index, chunks: [chunk], receipts: receipt.map { [chunk: $0] } ?? [:]))
                return .chunkStored(file: index, chunk: chunk, bytes: plan.length(of: chunk))
            case .stored(let receipt, let url?):
                return .chunkStoredCompletingFile(
                    file: index, chunk: chunk, bytes: plan.length(of: chunk), receipt: receipt, url: url)
            case .resync(let next):
                return .chunkResync(file: index, chunk: chunk, next: next)
            }
        } catch {
            return failure(work, file: index, error)
        }
    }

    func finishFile(
        _ index: Int, file: LocalFile, recorded: FileIdentity, hash: StreamingFileHash?, job: JobContext
    ) async -> WorkResult {
        do {
            try checkUnchanged(file, recorded: recorded)
            let base = job.files[index]
            let receipts = try store.receipts(job: jobID, file: index)
            let context = withFile(job, index) { base in
                FileContext(
                    index: base.index, path: base.path, name: base.name, size: base.size, plan: base.plan,
                    handles: base.handles, digests: base.digests, receipts: receipts)
            }
            let finish = try await perform("complete \(base.name) on the server", countBytes: false) {
                backend.finishFile(context.files[index], in: context)
            }
            if case .completed(_, let reported?) = finish {
                let local: String
                if let hash { local = try await hash.finish() } else { local = try file.digests([.sha256])[.sha256] ?? "" }
                guard reported.lowercased() == local else {
                    throw StepError.failed(
                        .verificationFailed(
                            "the server's SHA-256 of \(file.path) is \(reported), the local file's is \(local); the server holds different bytes"))
                }
            }
            return .fileFinished(file: index, finish)
        } catch {
            return failure(.finishFile(index), file: index, error)
        }
    }

    func finishJob(files: [LocalFile], recorded: [FileIdentity], job: JobContext) async -> WorkResult {
        do {
            for (file, identity) in zip(files, recorded) { try checkUnchanged(file, recorded: identity) }
            let finish = try await perform("complete the upload", countBytes: false) { backend.finishJob(job) }
            return .jobFinished(finish)
        } catch {
            return failure(.finishJob, file: nil, error)
        }
    }

    // MARK: Sending with retries

    /// Sends the exchange `make` builds (nil: the protocol has no such step),
    /// retrying transient failures with backoff. `make` runs again for every
    /// attempt so each request can be built (and signed) afresh.
    private func perform<T: Sendable>(
        _ operation: String, countBytes: Bool, _ make: () -> Exchange<T>?
    ) async throws(StepError) -> T? {
        var attempt = 0
        while true {
            attempt += 1
            if Task.isCancelled { throw .failed(.interrupted) }
            guard var exchange = make() else { return nil }
            for field in options.extraHeaders where !exchange.request.headers.contains(field.name) {
                exchange.request.headers.add(field.name, field.value)
            }
            if countBytes {
                let size = Int64(exchange.request.body.count)
                bytesSent.withLock { $0 += size }
            }
            let reason: String
            var retryAfter: Duration?
            do {
                let response = try await transport.send(exchange.request)
                do {
                    return try exchange.interpret(response)
                } catch {
                    switch error {
                    case .transient(let message, let after):
                        reason = message
                        retryAfter = after
                    case .rejected(let message):
                        throw StepError.failed(.transferFailed(message))
                    case .mismatch(let message):
                        throw StepError.failed(.verificationFailed(message))
                    case .uploadUnknown(let message):
                        throw StepError.uploadUnknown(message)
                    case .outOfSync(let message):
                        throw StepError.outOfSync(message)
                    }
                }
            } catch let error as StepError {
                throw error
            } catch let error as TransportError {
                if error == .cancelled || Task.isCancelled { throw .failed(.interrupted) }
                guard error.isRetryable else { throw .failed(.transferFailed("\(operation): \(error)")) }
                reason = "\(operation): \(error)"
            } catch {
                throw .failed(.transferFailed("\(operation): \(error)"))
            }
            guard options.retry.allowsRetry(after: attempt) else {
                throw .failed(.transferFailed("\(reason) (gave up after \(attempt) attempts)"))
            }
            let delay = options.retry.delay(after: attempt, retryAfter: retryAfter)
            events.yield(.retrying(operation: operation, attempt: attempt, delay: delay, reason: reason))
            do {
                try await Task.sleep(for: delay)
            } catch {
                throw .failed(.interrupted)
            }
        }
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
        case StepError.failed(let error):
            return .failed(work, error)
        case let error as XferError:
            return .failed(work, error)
        default:
            return .failed(work, .transferFailed("\(error)"))
        }
    }

    private func checkUnchanged(_ file: LocalFile, recorded: FileIdentity) throws(XferError) {
        let now = try file.currentIdentity()
        if now != recorded {
            throw .fileChanged(path: file.path, detail: TransferEngine.describeChange(from: recorded, to: now))
        }
    }

    private func withFile(_ job: JobContext, _ index: Int, _ change: (FileContext) -> FileContext) -> JobContext {
        var files = job.files
        files[index] = change(files[index])
        return JobContext(id: job.id, target: job.target, handles: job.handles, files: files, credentials: job.credentials)
    }
}
