import FoundationEssentials

/// A sync's copies from one prefix of a store to another, made inside the
/// store (`ObjectCopying`): the bytes never pass through this machine.
///
/// A window of files at a time (the job's concurrency, at most 16). An
/// object up to the backend's `singleCopyLimit` is one request; a larger
/// one is a multipart upload whose handles are committed before its first
/// part, each part marked done with its receipt as it is copied, so a
/// killed sync goes on with the parts left. A conflict (the source or the
/// destination changed since listed) fails that file; the others go on.
struct StoreCopier {
    let run: SyncRun
    let backend: any ObjectCopying
    let events: AsyncStream<SyncEvent>.Continuation
    /// Bytes copied so far (parts and whole objects), for progress.
    private let copied = TransferByteCounter()
    private let total = TransferByteCounter()

    init(run: SyncRun, backend: any ObjectCopying, events: AsyncStream<SyncEvent>.Continuation) {
        self.run = run
        self.backend = backend
        self.events = events
    }

    /// What a file's copy came to.
    private enum Outcome: Sendable {
        case copied
        case failed(path: String, reason: String)
    }

    func run() async -> Result<JobReport, XferError> {
        do {
            let job = try run.jobContext
            guard let end = run.ends.destination, let location = run.ends.source.flatMap(\.listingLocation) else {
                throw XferError.transferFailed("a copy between stores needs a source listing and a destination backend (this is a bug)")
            }
            guard backend.canCopy(from: location, in: job) else {
                throw XferError.invalidInput(
                    "\(location) and \(job.target) are on different endpoints: a sync between stores copies inside one store")
            }
            let counters = try run.store.counters(run.id)
            copied.add(Int(counters.doneBytes))
            total.add(Int(counters.totalBytes))
            events.yield(
                .transfer(
                    .started(
                        job: run.id, totalBytes: counters.totalBytes, doneBytes: counters.doneBytes, files: counters.fileCount,
                        doneFiles: counters.completedFiles, resumed: run.resumed)))
            var failures: [(path: String, reason: String)] = []
            var start = 0
            let window = max(1, min(run.concurrency, 16))
            while true {
                if Task.isCancelled { throw XferError.interrupted }
                let page = try run.store.files(job: run.id, from: start, limit: window)
                guard let last = page.last else { break }
                start = last.index + 1
                let outcomes = await withTaskGroup(of: Result<Outcome, XferError>.self) { group in
                    for (index, record) in page where !record.isComplete {
                        group.addTask { await copy(index, record, end: end, job: job) }
                    }
                    var outcomes: [Result<Outcome, XferError>] = []
                    for await outcome in group { outcomes.append(outcome) }
                    return outcomes
                }
                for outcome in outcomes {
                    switch outcome {
                    case .success(.copied): break
                    case .success(.failed(let path, let reason)): failures.append((path, reason))
                    case .failure(let error): throw error
                    }
                }
            }
            if let first = failures.first {
                let total = try run.store.counters(run.id)
                throw XferError.transferFailed(
                    "\(total.completedFiles) object\(total.completedFiles == 1 ? "" : "s") copied, \(failures.count) failed: \(first.path): \(first.reason)")
            }
            return .success(JobReport(job: run.id, files: JobReport.Files([]), bytesSent: 0, bytesResumed: 0))
        } catch let error as XferError {
            return .failure(error)
        } catch {
            return .failure(.transferFailed("\(error)"))
        }
    }

    private func copy(_ index: Int, _ record: FileRecord, end: RemoteEnd, job: JobContext) async -> Result<Outcome, XferError> {
        let key = record.relativePath
        let source = record.handles[SyncHandles.sourceLocation] ?? ""
        let version = record.handles[SyncHandles.sourceVersion]
        let condition = record.handles[SyncHandles.condition].map { $0 == "*" ? WriteCondition.absent : .version($0) }
        let time = record.handles[SyncHandles.modificationTime].flatMap { Int64($0) }
        do throws(RetryLoop.Failure) {
            var current = record
            let newVersion: String?
            if record.size <= backend.singleCopyLimit {
                newVersion = try await run.sendKeepingConflicts("copy \(key)", via: end, in: job) { () throws(BackendError) in
                    try backend.copyObject(from: source, version: version, to: key, condition: condition, in: job)
                }
            } else {
                if current.handles[SyncHandles.copyStarted] == nil {
                    let handles = try await run.sendKeepingConflicts("start copying \(key)", via: end, in: job) { () throws(BackendError) in
                        try backend.startCopy(to: key, modificationTimeNanoseconds: time, in: job)
                    }
                    current.handles.merge(handles)
                    current.handles.set(SyncHandles.copyStarted, "1")
                    current.isOpen = true
                    // The upload's handles before its first part: a kill leaves it known, never orphaned.
                    try await commit([.putFiles(job: run.id, files: [(index, current)])])
                }
                let plan = ChunkPlan(fileSize: record.size, chunkSize: max(1, run.chunkSize(record.size)))
                let done = try stored { () throws(XferError) in try run.store.doneChunks(job: run.id, file: index, capacity: plan.count) }
                let handles = current.handles
                for chunk in 0..<plan.count where !done.contains(chunk) {
                    if Task.isCancelled { throw .failed(.interrupted) }
                    let range = plan.range(of: chunk)
                    let receipt = try await run.sendKeepingConflicts("copy part \(chunk + 1) of \(key)", via: end, in: job) {
                        () throws(BackendError) in
                        try backend.copyPart(
                            chunk + 1, range: range.lowerBound...(range.upperBound - 1), from: source, version: version, handles: handles,
                            to: key, in: job)
                    }
                    try await commit([.markDone(job: run.id, file: index, chunks: [chunk], plan: plan, receipts: [chunk: receipt])])
                    progress(file: index, chunk: chunk, bytes: plan.length(of: chunk))
                }
                let receipts = try stored { () throws(XferError) in try run.store.receipts(job: run.id, file: index) }
                let ordered = (0..<plan.count).compactMap { receipts[$0] }
                guard ordered.count == plan.count else {
                    throw .failed(.transferFailed("\(key): \(plan.count - ordered.count) copied parts have no receipt; run the sync again"))
                }
                newVersion = try await run.sendKeepingConflicts("complete the copy of \(key)", via: end, in: job) { () throws(BackendError) in
                    try backend.finishCopy(handles: handles, receipts: ordered, to: key, condition: condition, in: job)
                }
            }
            if record.size <= backend.singleCopyLimit { progress(file: index, chunk: 0, bytes: Int(record.size)) }
            current.url = SyncRun.url(of: key, in: job.target)
            current.failure = nil
            if let newVersion { current.handles.set(SyncHandles.version, newVersion) }
            try await commit([.putFiles(job: run.id, files: [(index, current)])])
            events.yield(.transfer(.fileCompleted(file: index, path: record.path, url: current.url ?? "")))
            return .success(.copied)
        } catch {
            switch error {
            case .conflict(let message):
                return await fail(index, record, reason: message)
            case .uploadUnknown(let message):
                // The store dropped the multipart copy (expired, aborted): the next run starts it over.
                var reset = record
                reset.handles = record.handles.filteringPlanned
                reset.isOpen = false
                let plan = ChunkPlan(fileSize: record.size, chunkSize: max(1, run.chunkSize(record.size)))
                do throws(XferError) {
                    try await run.store.commit([.replaceDone(job: run.id, file: index, done: ChunkSet(capacity: plan.count), plan: plan, receipts: [:])])
                } catch {
                    return .failure(error)
                }
                return await fail(index, reset, reason: "\(message); it is copied again from the start by the next run")
            case .failed(let failure):
                return .failure(failure)
            case .outOfSync(let message), .objectChanged(let message):
                return .failure(.transferFailed(message))
            }
        }
    }

    private func progress(file: Int, chunk: Int, bytes: Int) {
        copied.add(bytes)
        events.yield(
            .transfer(.chunkStored(file: file, chunk: chunk, bytes: bytes, doneBytes: Int64(copied.value), totalBytes: Int64(total.value))))
    }

    private func fail(_ index: Int, _ record: FileRecord, reason: String) async -> Result<Outcome, XferError> {
        var failed = record
        failed.failure = reason
        do throws(XferError) {
            try await run.store.commit([.putFiles(job: run.id, files: [(index, failed)])])
        } catch {
            return .failure(error)
        }
        events.yield(.transfer(.fileFailed(file: index, path: record.path, reason: reason)))
        return .success(.failed(path: record.path, reason: reason))
    }

    private func commit(_ changes: [StateChange]) async throws(RetryLoop.Failure) {
        do throws(XferError) { try await run.store.commit(changes) } catch { throw .failed(error) }
    }

    private func stored<T>(_ read: () throws(XferError) -> T) throws(RetryLoop.Failure) -> T {
        do throws(XferError) { return try read() } catch { throw .failed(error) }
    }
}

extension RemoteEnd {
    /// A listing's prefix.
    var listingLocation: String? {
        if case .listing(_, _, let location) = self { return location }
        return nil
    }
}

extension ServerHandles {
    /// Only what a sync planned (a reset file keeps its plan, not its upload).
    var filteringPlanned: ServerHandles {
        ServerHandles(values.filter { SyncHandles.isPlanned($0.key) })
    }
}
