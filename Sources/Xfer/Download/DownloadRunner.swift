import Foundation
import Glibc

/// Runs one pull: the same scheduler as a push (ranges are its chunks), the
/// same loop (`SchedulerDriver`), the same store and transport; only the
/// steps differ (`DownloadWorker`). A file's record is the destination: its
/// `path` is where the object lands, its handles name the object, its
/// identity is the object's size and the partial file's inode.
final class DownloadRunner: JobRun {
    let jobID: JobID
    private let initialRecord: JobRecord
    private let source: any DownloadSource
    private let options: TransferOptions
    private let concurrency: Int
    private let chunkSize: @Sendable (Int64) -> Int
    private let store: any JobStateStore
    private let transport: HTTPTransport
    private let lock: JobLock
    private let resumed: Bool
    private let replacesExisting: Bool

    init(
        record: JobRecord, source: any DownloadSource, options: TransferOptions, concurrency: Int,
        chunkSize: @escaping @Sendable (Int64) -> Int, store: any JobStateStore, transport: HTTPTransport, lock: JobLock,
        resumed: Bool, replacesExisting: Bool
    ) {
        jobID = record.id
        initialRecord = record
        self.source = source
        self.options = options
        self.concurrency = concurrency
        self.chunkSize = chunkSize
        self.store = store
        self.transport = transport
        self.lock = lock
        self.resumed = resumed
        self.replacesExisting = replacesExisting
    }

    /// The scheduler's view of a source: a download file has no empty chunk.
    static func traits(of source: any DownloadSource) -> BackendTraits {
        BackendTraits(
            defaultChunkSize: source.traits.defaultChunkSize, defaultConcurrency: source.traits.defaultConcurrency,
            authentication: source.traits.authentication)
    }

    func run(events: AsyncStream<TransferEvent>.Continuation) async -> Result<JobReport, XferError> {
        defer { withExtendedLifetime(lock) {} }
        let counters: JobCounters
        do { counters = try store.counters(jobID) } catch { return .failure(error) }
        let traits = Self.traits(of: source)
        var scheduler = Scheduler(
            record: initialRecord, counters: counters,
            configuration: Scheduler.Configuration(
                traits: traits, concurrency: concurrency, chunkSize: chunkSize, chunkOrder: { _ in .any },
                smallRequestConcurrency: options.concurrency == nil ? source.traits.smallRequestConcurrency : nil,
                isDownload: true))
        // The destination (a directory, or a file's parent) holds every partial file but
        // those under another mount, which sync on their own.
        var isDirectory: ObjCBool = false
        let root = initialRecord.target
        let directory = FileManager.default.fileExists(atPath: root, isDirectory: &isDirectory) && isDirectory.boolValue
            ? root : (root as NSString).deletingLastPathComponent
        let worker = DownloadWorker(
            jobID: jobID, source: source, options: options, store: store, transport: transport, events: events,
            bytesReceived: TransferByteCounter(), replacesExisting: replacesExisting,
            syncRounds: try? SyncRounds(filesystemOf: directory))
        events.yield(
            .started(
                job: jobID, totalBytes: counters.totalBytes, doneBytes: counters.doneBytes, files: counters.fileCount,
                doneFiles: counters.completedFiles, resumed: resumed))
        let failure = await SchedulerDriver.drive(
            &scheduler, steps: DownloadSteps(worker: worker, traits: traits), store: store, transport: transport, events: events)
        return await SchedulerDriver.conclude(
            &scheduler, failure: failure, store: store, owner: "the source '\(source.name)'", verb: "pulled",
            bytes: Int64(worker.bytesReceived.value))
    }
}

/// The download's side of the scheduler's loop.
struct DownloadSteps: ScheduledSteps {
    let worker: DownloadWorker
    let traits: BackendTraits

    func context(_ scheduler: Scheduler) -> JobContext {
        scheduler.record.context(files: JobFiles([]), credentials: worker.options.credentials)
    }

    /// A complete file whose destination is still there is settled without
    /// a request; one whose destination is gone is fetched again. A file in
    /// progress continues only in the partial file its record names: one that
    /// is gone or was replaced holds none of the recorded ranges, so the file
    /// starts over (the scheduler sees its identity changed).
    func load(_ index: Int) -> (WorkResult, PartialFile?) {
        let store = worker.store
        let job = worker.jobID
        do {
            guard let record = try store.file(job: job, index: index) else {
                return (.loadFailed(file: index, record: nil, reason: "it is missing from the job's state"), nil)
            }
            let plan = record.chunkPlan(traits)
            let partial = PartialFile(destination: record.path)
            let lost = FileIdentity(size: record.size, modificationTimeNanoseconds: 0, inode: 0, device: 0)
            if record.isComplete {
                var full = ChunkSet(capacity: plan.count)
                full.insertAll(below: plan.count)
                var info = stat()
                let present = stat(record.path, &info) == 0 && Int64(info.st_size) == record.size
                return (.loaded(file: index, LoadedFile(record: record, done: full, identity: present ? record.identity : lost)), partial)
            }
            let done = try store.doneChunks(job: job, file: index, capacity: plan.count)
            guard record.isOpen else {
                return (.loaded(file: index, LoadedFile(record: record, done: done, identity: record.identity)), partial)
            }
            let found = partial.reopen(expecting: record.identity) ?? lost
            return (.loaded(file: index, LoadedFile(record: record, done: done, identity: found)), partial)
        } catch {
            return (.failed(.loadFile(index), error), nil)
        }
    }

    func task(for work: Work, scheduler: Scheduler, held: [Int: PartialFile], context job: JobContext) -> @Sendable () async -> WorkResult {
        switch work {
        case .startJob:
            return { .started(nil) }
        case .finishJob:
            return { .jobFinished(nil) }
        case .loadFile:
            preconditionFailure("files are loaded by the runner itself")
        case .dropUpload(let index):
            return { .uploadDropped(file: index) }
        case .reconcileFile(let index):
            // The store's ranges were durable before they were marked done, and
            // every range asked for from here is conditional on the validator.
            return { .reconciled(file: index, nil) }
        case .openFile(let index), .finishFile(let index), .chunk(let index, _):
            guard let state = scheduler.file(index), let partial = held[index] else {
                return { .failed(work, .transferFailed("file \(index + 1) is not held (this is a bug)")) }
            }
            let record = state.record
            let plan = state.plan
            let worker = self.worker
            switch work {
            case .openFile:
                return { await worker.openFile(index, record: record, partial: partial, job: job) }
            case .finishFile:
                return { await worker.finishFile(index, record: record, plan: plan, partial: partial) }
            case .chunk(_, let chunk):
                return { await worker.fetchChunk(chunk, of: index, record: record, plan: plan, partial: partial, job: job) }
            default:
                preconditionFailure("unreachable")
            }
        }
    }

    /// Ranges and files under 256 KiB run on the transport's thread (see `ScheduledSteps.isLight`).
    func isLight(_ work: Work, _ scheduler: Scheduler) -> Bool {
        let limit = 256 * 1024
        switch work {
        case .chunk(let index, let chunk):
            guard let state = scheduler.file(index) else { return false }
            return state.plan.length(of: chunk) < limit
        case .openFile(let index), .finishFile(let index):
            guard let state = scheduler.file(index) else { return false }
            return state.record.size < Int64(limit)
        case .reconcileFile, .dropUpload, .startJob, .finishJob:
            return true
        case .loadFile:
            return false
        }
    }
}
