import Foundation

/// One unit of work the scheduler hands to a worker.
enum Work: Sendable, Hashable {
    case startJob
    case openFile(Int)
    case reconcileFile(Int)
    case chunk(file: Int, chunk: Int)
    case finishFile(Int)
    case finishJob
}

/// What a worker reports back. Chunk acknowledgements are already
/// committed when they arrive here (workers commit them, so concurrent acks
/// share one transaction); everything else is committed by the scheduler.
enum WorkResult: Sendable {
    case started(JobStart?)
    case opened(file: Int, FileOpening?)
    case reconciled(file: Int, Reconciliation?)
    case chunkStored(file: Int, chunk: Int, bytes: Int)
    /// The answer completed the file; not yet committed (the ack and the URL
    /// go in one transaction).
    case chunkStoredCompletingFile(file: Int, chunk: Int, bytes: Int, receipt: String?, url: String)
    case chunkResync(file: Int, chunk: Int, next: Int)
    case fileFinished(file: Int, FileFinish?)
    case jobFinished(JobFinish?)
    case uploadUnknown(file: Int, work: Work, message: String)
    case outOfSync(file: Int, work: Work, message: String)
    case failed(Work, XferError)
}

/// Drives one job: decides what runs next, runs up to `concurrency` steps at
/// once, and commits every outcome before acting on it.
///
/// All mutable scheduling state lives in `run`'s loop and is touched by that
/// loop alone; workers get immutable snapshots and return values.
final class JobRunner: Sendable {
    let jobID: JobID
    private let initialRecord: JobRecord
    private let files: [LocalFile]
    private let backend: any UploadBackend
    private let options: TransferOptions
    private let concurrency: Int
    private let store: any JobStateStore
    private let transport: HTTPTransport
    private let lock: JobLock
    private let resumed: Bool

    init(
        record: JobRecord, files: [LocalFile], backend: any UploadBackend, options: TransferOptions,
        concurrency: Int, store: any JobStateStore, transport: HTTPTransport, lock: JobLock, resumed: Bool
    ) {
        jobID = record.id
        initialRecord = record
        self.files = files
        self.backend = backend
        self.options = options
        self.concurrency = concurrency
        self.store = store
        self.transport = transport
        self.lock = lock
        self.resumed = resumed
    }

    func run(events: AsyncStream<TransferEvent>.Continuation) async -> Result<JobReport, XferError> {
        var scheduler: Scheduler
        do {
            scheduler = try Scheduler(
                record: initialRecord, files: files, backend: backend, options: options, concurrency: concurrency,
                store: store, transport: transport, events: events, resumed: resumed)
        } catch {
            return .failure(error)
        }
        let result = await scheduler.run()
        withExtendedLifetime(lock) {}
        return result
    }

    static func jobContext(record: JobRecord, traits: BackendTraits, credentials: Credentials) -> JobContext {
        JobContext(
            id: record.id, target: record.target, handles: record.handles,
            files: record.files.enumerated().map { index, file in
                fileContext(index: index, file: file, traits: traits)
            },
            credentials: credentials, concurrency: record.concurrency)
    }

    static func fileContext(
        index: Int, file: FileRecord, traits: BackendTraits,
        digests: [DigestAlgorithm: String] = [:], receipts: [Int: String] = [:]
    ) -> FileContext {
        FileContext(
            index: index, path: file.path, name: file.name, size: file.size,
            plan: ChunkPlan(fileSize: file.size, chunkSize: file.chunkSize, emptyFileHasOneChunk: traits.emptyFileHasOneChunk),
            handles: file.handles, digests: digests, receipts: receipts)
    }
}

/// The scheduling state of one run. A struct owned by `JobRunner.run`.
private struct Scheduler {
    enum FilePhase {
        case needsOpen, opening, needsReconcile, reconciling, sending, finishing, finished
        /// The server forgot the upload; waiting for in-flight work to drain.
        case resetting
        /// The server holds another part of the file than a request assumed;
        /// waiting for in-flight work to drain, then reconciling.
        case resyncing
    }

    struct FileState {
        var phase: FilePhase
        var plan: ChunkPlan
        var done: ChunkSet
        var inFlight: Set<Int> = []
        var cursor = 0
        var finishRounds = 0
        var reopened = false
        var digests: [DigestAlgorithm: String] = [:]
        /// Where the server's copy ends inside a chunk it holds the start of
        /// (`Reconciliation.serverHasPrefix`); that chunk is sent from there.
        var partial: (chunk: Int, offset: Int64)?
        var resyncs = 0
    }

    /// Reconciling again after `outOfSync` more often than this in one run fails the job.
    static let maximumResyncs = 8

    enum StepState { case needed, running, done }

    var record: JobRecord
    var state: [FileState]
    let files: [LocalFile]
    let hashes: [StreamingFileHash?]
    let backend: any UploadBackend
    let traits: BackendTraits
    /// The backend's order for this job (known once `startJob` has run).
    var chunkOrder: BackendTraits.ChunkOrder
    let options: TransferOptions
    let concurrency: Int
    let store: any JobStateStore
    let worker: Worker
    let events: AsyncStream<TransferEvent>.Continuation
    let resumed: Bool

    var jobStart: StepState
    var jobFinish: StepState = .needed
    /// Finish checks that failed in this run; a re-run gets fresh rounds.
    var jobFinishRounds = 0
    var roundRobin = 0
    var doneBytes: Int64 = 0
    var acknowledgedThisRun: Int64 = 0
    let totalBytes: Int64

    init(
        record: JobRecord, files: [LocalFile], backend: any UploadBackend, options: TransferOptions,
        concurrency: Int, store: any JobStateStore, transport: HTTPTransport,
        events: AsyncStream<TransferEvent>.Continuation, resumed: Bool
    ) throws(XferError) {
        self.record = record
        self.files = files
        self.backend = backend
        traits = backend.traits
        chunkOrder = backend.traits.chunkOrder
        self.options = options
        self.concurrency = concurrency
        self.store = store
        self.events = events
        self.resumed = resumed
        worker = Worker(
            jobID: record.id, backend: backend, options: options, store: store, transport: transport,
            events: events, bytesSent: LockedValue(0))
        hashes = files.map { backend.traits.reportsWholeFileSHA256 ? StreamingFileHash(file: $0) : nil }
        jobStart = record.isStarted ? .done : .needed
        totalBytes = record.files.reduce(0) { $0 + $1.size }
        var state: [FileState] = []
        for (index, file) in record.files.enumerated() {
            let plan = ChunkPlan(fileSize: file.size, chunkSize: file.chunkSize, emptyFileHasOneChunk: traits.emptyFileHasOneChunk)
            let done = try store.doneChunks(job: record.id, file: index, capacity: plan.count)
            let phase: FilePhase
            if file.url != nil, done.isComplete {
                phase = .finished
            } else if !file.isOpen {
                phase = .needsOpen
            } else {
                phase = .needsReconcile
            }
            state.append(FileState(phase: phase, plan: plan, done: done))
        }
        self.state = state
        doneBytes = state.reduce(0) { $0 + Self.bytes(of: $1.done, plan: $1.plan) }
        if record.isStarted {
            chunkOrder = backend.chunkOrder(for: JobRunner.jobContext(record: record, traits: traits, credentials: options.credentials))
        }
    }

    // MARK: The loop

    mutating func run() async -> Result<JobReport, XferError> {
        events.yield(.started(job: record.id, totalBytes: totalBytes, doneBytes: doneBytes, resumed: resumed))
        var failure: XferError?
        await withTaskGroup(of: WorkResult.self) { group in
            var inFlight = 0
            while true {
                while failure == nil, inFlight < concurrency, !Task.isCancelled, let work = nextWork() {
                    let task = makeTask(for: work)
                    group.addTask { await task() }
                    inFlight += 1
                }
                if inFlight == 0 { break }
                guard let result = await group.next() else { break }
                inFlight -= 1
                if failure != nil { continue }  // draining after a failure
                do throws(XferError) {
                    try await apply(result)
                } catch {
                    failure = error
                    group.cancelAll()
                }
            }
        }
        if failure == nil, Task.isCancelled { failure = .interrupted }
        if failure == nil, !isComplete {
            failure = .transferFailed("the job stopped with work left (this is a bug in the backend '\(backend.name)')")
        }
        if let failure {
            if failure != .interrupted {
                record.phase = .failed
                record.lastError = failure.description
            }
            record.updatedAt = Date()
            try? await store.commit(.putJob(record))
            return .failure(failure)
        }
        return await complete()
    }

    var isComplete: Bool {
        state.allSatisfy { $0.phase == .finished } && jobFinish == .done
    }

    private mutating func complete() async -> Result<JobReport, XferError> {
        var reportFiles: [JobReport.File] = []
        for (index, file) in record.files.enumerated() {
            guard let url = file.url else {
                return .failure(.transferFailed("the server gave no URL for \(file.path) (backend '\(backend.name)')"))
            }
            reportFiles.append(JobReport.File(path: files[index].path, url: url, size: file.size))
        }
        record.phase = .completed
        record.lastError = nil
        record.updatedAt = Date()
        do {
            try await store.commit(.putJob(record))
            try store.sync()
        } catch {
            return .failure(error)
        }
        let sent = worker.bytesSent.withLock { $0 }
        return .success(
            JobReport(
                job: record.id, files: reportFiles, bytesSent: sent,
                bytesResumed: max(0, totalBytes - acknowledgedThisRun)))
    }

    // MARK: Choosing work

    private mutating func nextWork() -> Work? {
        switch jobStart {
        case .needed:
            jobStart = .running
            return .startJob
        case .running:
            return nil
        case .done:
            break
        }
        let count = state.count
        for step in 0..<count {
            let index = (roundRobin + step) % count
            if let work = nextWork(forFile: index) {
                roundRobin = (index + 1) % count
                return work
            }
        }
        if jobFinish == .needed, state.allSatisfy({ $0.phase == .finished }) {
            jobFinish = .running
            return .finishJob
        }
        return nil
    }

    private mutating func nextWork(forFile index: Int) -> Work? {
        switch state[index].phase {
        case .needsOpen:
            state[index].phase = .opening
            return .openFile(index)
        case .needsReconcile:
            state[index].phase = .reconciling
            return .reconcileFile(index)
        case .sending:
            if let chunk = nextChunk(index) {
                state[index].inFlight.insert(chunk)
                state[index].cursor = chunk + 1
                return .chunk(file: index, chunk: chunk)
            }
            if state[index].inFlight.isEmpty, state[index].done.isComplete {
                state[index].phase = .finishing
                return .finishFile(index)
            }
            return nil
        case .opening, .reconciling, .finishing, .finished, .resetting, .resyncing:
            return nil
        }
    }

    private func nextChunk(_ index: Int) -> Int? {
        let file = state[index]
        switch chunkOrder {
        case .sequentialWithinFile:
            guard file.inFlight.isEmpty else { return nil }
            return file.done.firstMissing()
        case .any:
            var candidate = file.done.firstMissing(from: file.cursor)
            while let chunk = candidate, file.inFlight.contains(chunk) {
                candidate = file.done.firstMissing(from: chunk + 1)
            }
            return candidate
        }
    }

    // MARK: Running work

    private func makeTask(for work: Work) -> @Sendable () async -> WorkResult {
        let worker = self.worker
        let context = JobRunner.jobContext(record: record, traits: traits, credentials: options.credentials)
        switch work {
        case .startJob:
            return { await worker.startJob(context) }
        case .openFile(let index):
            let file = files[index]
            let algorithms = traits.digestsBeforeOpen
            let digests = state[index].digests
            return { await worker.openFile(index, file: file, digestsNeeded: algorithms, known: digests, job: context) }
        case .reconcileFile(let index):
            return { await worker.reconcileFile(index, job: context) }
        case .chunk(let index, let chunk):
            let file = files[index]
            let plan = state[index].plan
            let hash = hashes[index]
            let start = state[index].partial.flatMap { $0.chunk == chunk ? $0.offset : nil }
            return { await worker.uploadChunk(chunk, of: index, file: file, plan: plan, from: start, hash: hash, job: context) }
        case .finishFile(let index):
            let file = files[index]
            let hash = hashes[index]
            let recorded = record.files[index].identity
            return { await worker.finishFile(index, file: file, recorded: recorded, hash: hash, job: context) }
        case .finishJob:
            let recorded = record.files.map(\.identity)
            let files = self.files
            return { await worker.finishJob(files: files, recorded: recorded, job: context) }
        }
    }

    // MARK: Applying results

    private mutating func apply(_ result: WorkResult) async throws(XferError) {
        switch result {
        case .failed(_, let error):
            throw error

        case .started(let start):
            if let start {
                record.handles.merge(start.handles)
                for (index, handles) in start.fileHandles where record.files.indices.contains(index) {
                    record.files[index].handles.merge(handles)
                }
            }
            record.isStarted = true
            try await saveRecord(sync: start != nil)
            jobStart = .done
            chunkOrder = backend.chunkOrder(for: JobRunner.jobContext(record: record, traits: traits, credentials: options.credentials))

        case .opened(let index, let opening):
            if let opening {
                record.files[index].handles.merge(opening.handles)
                if let size = opening.chunkSize, size != record.files[index].chunkSize {
                    guard (1...TransferOptions.maximumChunkSize).contains(size) else {
                        throw .transferFailed("the server chose a chunk size of \(size) bytes for \(files[index].path), which xfer cannot use")
                    }
                    record.files[index].chunkSize = size
                    state[index].plan = ChunkPlan(
                        fileSize: record.files[index].size, chunkSize: size,
                        emptyFileHasOneChunk: traits.emptyFileHasOneChunk)
                }
            }
            record.files[index].isOpen = true
            record.files[index].url = nil
            doneBytes -= Self.bytes(of: state[index].done, plan: state[index].plan)
            state[index].done = ChunkSet(capacity: state[index].plan.count)
            // Handles first, durably: no chunk may be sent before the server's
            // ids for it are on disk.
            try await store.commit([
                .putJob(stamped(record)),
                .replaceDone(job: record.id, file: index, done: state[index].done, receipts: [:]),
            ])
            try store.sync()
            state[index].phase = .sending
            state[index].cursor = 0

        case .reconciled(let index, let reconciliation):
            state[index].partial = nil
            switch reconciliation {
            case nil:
                state[index].phase = .sending
            case .serverHas(let chunks, let receipts)?, .serverHasMore(let chunks, let receipts, _)?:
                // (The worker unites the parts of an answer; a part cannot arrive here alone.)
                var done = ChunkSet(capacity: state[index].plan.count)
                for chunk in chunks where chunk >= 0 && chunk < done.capacity { done.insert(chunk) }
                try await store.commit(.replaceDone(job: record.id, file: index, done: done, receipts: receipts))
                setDone(index, done)
                events.yield(.reconciled(file: index, chunksOnServer: done.count, doneBytes: doneBytes))
                state[index].phase = .sending
            case .complete(let url)?:
                var done = ChunkSet(capacity: state[index].plan.count)
                for chunk in 0..<done.capacity { done.insert(chunk) }
                record.files[index].url = url
                try await store.commit([
                    .replaceDone(job: record.id, file: index, done: done, receipts: [:]),
                    .putJob(stamped(record)),
                ])
                setDone(index, done)
                state[index].phase = .finished
                events.yield(.fileCompleted(file: index, path: files[index].path, url: url))
            case .serverHasPrefix(let bytes)?:
                let plan = state[index].plan
                guard bytes >= 0, bytes <= record.files[index].size else {
                    throw .transferFailed(
                        "the server reports \(bytes) bytes of \(files[index].path), which has \(record.files[index].size)")
                }
                var done = ChunkSet(capacity: plan.count)
                var chunk = 0
                while chunk < plan.count, plan.offset(of: chunk) + Int64(plan.length(of: chunk)) <= bytes {
                    done.insert(chunk)
                    chunk += 1
                }
                if chunk < plan.count, bytes > plan.offset(of: chunk) { state[index].partial = (chunk, bytes) }
                try await store.commit(.replaceDone(job: record.id, file: index, done: done, receipts: [:]))
                setDone(index, done)
                events.yield(.reconciled(file: index, chunksOnServer: done.count, doneBytes: doneBytes))
                state[index].phase = .sending
            case .unknownUpload?:
                try await reopen(index, message: "the server no longer knows the upload of \(files[index].path)")
            }
            state[index].cursor = 0

        case .chunkStored(let index, let chunk, let bytes):
            acknowledge(index, chunk, bytes)
            if state[index].phase == .resyncing { resyncIfDrained(index) }
            // Acks of a forgotten upload were committed before the reset
            // that wipes them, so the order on disk stays right.
            if state[index].phase == .resetting { try await finishReset(index) }

        case .chunkStoredCompletingFile(let index, let chunk, let bytes, let receipt, let url):
            record.files[index].url = url
            try await store.commit([
                .markDone(job: record.id, file: index, chunks: [chunk], receipts: receipt.map { [chunk: $0] } ?? [:]),
                .putJob(stamped(record)),
            ])
            acknowledge(index, chunk, bytes)

        case .chunkResync(let index, let chunk, let next):
            state[index].inFlight.remove(chunk)
            let count = state[index].plan.count
            guard next >= 0, next <= count else {
                throw .transferFailed("the server asked for chunk \(next + 1) of \(files[index].path), which has \(count)")
            }
            var done = ChunkSet(capacity: count)
            for c in 0..<next { done.insert(c) }
            try await store.commit(.replaceDone(job: record.id, file: index, done: done, receipts: [:]))
            setDone(index, done)
            state[index].cursor = next
            if state[index].phase == .resetting { try await finishReset(index) }

        case .fileFinished(let index, let finish):
            switch finish {
            case nil:
                state[index].phase = .finished
                if let url = record.files[index].url {
                    events.yield(.fileCompleted(file: index, path: files[index].path, url: url))
                }
            case .completed(let url, _)?:
                record.files[index].url = url
                try await saveRecord(sync: false)
                state[index].phase = .finished
                events.yield(.fileCompleted(file: index, path: files[index].path, url: url))
            case .missing(let chunks)?:
                state[index].finishRounds += 1
                guard state[index].finishRounds < traits.maximumFinishRounds else {
                    throw .transferFailed(
                        "the server still lacks chunks of \(files[index].path) after \(traits.maximumFinishRounds) rounds of re-sending")
                }
                let valid = chunks.filter { $0 >= 0 && $0 < state[index].plan.count }
                guard !valid.isEmpty else {
                    throw .transferFailed("the server reports \(files[index].path) incomplete but names no chunk it lacks")
                }
                try await store.commit(.markNotDone(job: record.id, file: index, chunks: valid))
                var done = state[index].done
                for chunk in valid { done.remove(chunk) }
                setDone(index, done)
                events.yield(.resending(file: index, chunks: valid.count, reason: "the server lacks them"))
                state[index].phase = .sending
                state[index].cursor = 0
            }

        case .jobFinished(let finish):
            switch finish {
            case nil:
                jobFinish = .done
            case .completed(let urls)?:
                for (index, url) in urls where record.files.indices.contains(index) {
                    record.files[index].url = url
                }
                try await saveRecord(sync: false)
                jobFinish = .done
                for (index, file) in record.files.enumerated() {
                    if let url = file.url { events.yield(.fileCompleted(file: index, path: file.path, url: url)) }
                }
            case .rollback(let failed)?:
                jobFinishRounds += 1
                guard jobFinishRounds < traits.maximumFinishRounds else {
                    let names = failed.compactMap { record.files.indices.contains($0) ? files[$0].path : nil }
                    throw .transferFailed(
                        "the server failed to assemble \(names.joined(separator: ", ")) in \(traits.maximumFinishRounds) rounds")
                }
                var changes: [StateChange] = []
                for index in failed where record.files.indices.contains(index) {
                    record.files[index].url = nil
                    changes.append(.replaceDone(job: record.id, file: index, done: ChunkSet(capacity: state[index].plan.count), receipts: [:]))
                }
                changes.append(.putJob(stamped(record)))
                try await store.commit(changes)
                for index in failed where record.files.indices.contains(index) {
                    setDone(index, ChunkSet(capacity: state[index].plan.count))
                    state[index].phase = .sending
                    state[index].cursor = 0
                    events.yield(.resending(file: index, chunks: state[index].plan.count, reason: "the server failed to assemble it"))
                }
                jobFinish = .needed
            }

        case .uploadUnknown(let index, let work, let message):
            if case .chunk(_, let chunk) = work { state[index].inFlight.remove(chunk) }
            try await reopen(index, message: message)

        case .outOfSync(let index, let work, let message):
            if case .chunk(_, let chunk) = work { state[index].inFlight.remove(chunk) }
            state[index].resyncs += 1
            guard state[index].resyncs <= Self.maximumResyncs else {
                throw .transferFailed("\(message) (still after asking the server \(Self.maximumResyncs) times)")
            }
            if state[index].phase != .resetting {
                state[index].phase = .resyncing
                resyncIfDrained(index)
            }
        }
    }

    /// Asks the server what it holds once nothing of the file is in flight.
    private mutating func resyncIfDrained(_ index: Int) {
        guard state[index].inFlight.isEmpty else { return }
        state[index].phase = .needsReconcile
    }

    /// The server forgot a file's upload: once nothing of the file is in
    /// flight, clear its handles and progress and open it again (once per run).
    private mutating func reopen(_ index: Int, message: String) async throws(XferError) {
        guard !state[index].reopened else {
            throw .transferFailed("\(message) (again after opening it anew); re-run with --restart")
        }
        state[index].reopened = true
        state[index].phase = .resetting
        if state[index].inFlight.isEmpty { try await finishReset(index) }
    }

    private mutating func finishReset(_ index: Int) async throws(XferError) {
        guard state[index].inFlight.isEmpty else { return }
        record.files[index].isOpen = false
        record.files[index].url = nil
        record.files[index].handles = ServerHandles()
        try await store.commit([
            .replaceDone(job: record.id, file: index, done: ChunkSet(capacity: state[index].plan.count), receipts: [:]),
            .putJob(stamped(record)),
        ])
        setDone(index, ChunkSet(capacity: state[index].plan.count))
        events.yield(.resending(file: index, chunks: state[index].plan.count, reason: "the server forgot the upload"))
        state[index].phase = .needsOpen
    }

    private mutating func acknowledge(_ index: Int, _ chunk: Int, _ bytes: Int) {
        state[index].inFlight.remove(chunk)
        if state[index].partial?.chunk == chunk { state[index].partial = nil }
        guard !state[index].done.contains(chunk) else { return }
        state[index].done.insert(chunk)
        doneBytes += Int64(bytes)
        acknowledgedThisRun += Int64(bytes)
        events.yield(.chunkStored(file: index, chunk: chunk, bytes: bytes, doneBytes: doneBytes, totalBytes: totalBytes))
    }

    private mutating func setDone(_ index: Int, _ done: ChunkSet) {
        doneBytes -= Self.bytes(of: state[index].done, plan: state[index].plan)
        state[index].done = done
        doneBytes += Self.bytes(of: done, plan: state[index].plan)
    }

    private mutating func saveRecord(sync: Bool) async throws(XferError) {
        try await store.commit(.putJob(stamped(record)))
        if sync { try store.sync() }
    }

    private mutating func stamped(_ record: JobRecord) -> JobRecord {
        self.record.updatedAt = Date()
        var copy = record
        copy.updatedAt = self.record.updatedAt
        return copy
    }

    static func bytes(of done: ChunkSet, plan: ChunkPlan) -> Int64 {
        guard plan.count > 0 else { return 0 }
        var total = Int64(done.count) * Int64(plan.chunkSize)
        if done.contains(plan.count - 1) {
            total -= Int64(plan.chunkSize - plan.length(of: plan.count - 1))
        }
        return total
    }
}
