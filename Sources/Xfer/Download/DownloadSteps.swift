import FoundationEssentials
import Glibc
import XferPrimitives

/// A pull's side of the scheduler's loop (`JobRunner` runs it): ranges are
/// its chunks; opening a file describes its object and creates the partial
/// file, finishing it checks the whole and makes it the destination
/// (`DownloadWorker`). A file's record is the destination: its `path` is
/// where the object lands, its handles name the object, its identity is the
/// object's size and the partial file's inode.
///
/// A pull takes no other step: `configuration` tells the scheduler so, and
/// it hands out none (Tests/XferTests/SchedulerTests.swift).
struct DownloadSteps: ScheduledSteps {
    let worker: DownloadWorker
    let traits: BackendTraits

    /// The scheduler's terms for a pull from `steps`.
    static func configuration(
        _ steps: SourceSteps, options: TransferOptions, concurrency: Int, chunkSize: @escaping @Sendable (Int64) -> Int
    ) -> Scheduler.Configuration {
        Scheduler.Configuration(
            traits: steps.traits, concurrency: concurrency, chunkSize: chunkSize, chunkOrder: { _ in .any },
            smallRequestConcurrency: options.concurrency == nil ? steps.source.traits.smallRequestConcurrency : nil,
            isDownload: true, startsJob: false, finishesJob: false, reconcilesFiles: false)
    }

    /// The worker of a pull into `destination` (a directory, or a file's path).
    static func worker(
        job: JobID, steps: SourceSteps, options: TransferOptions, store: any JobStateStore, transport: HTTPTransport,
        events: AsyncStream<TransferEvent>.Continuation, destination root: String, replacesExisting: Bool
    ) -> DownloadWorker {
        // The destination (a directory, or a file's parent) holds every partial file but
        // those under another mount, which sync on their own.
        var isDirectory = false
        let directory = FileManager.default.fileExists(atPath: root, isDirectory: &isDirectory) && isDirectory
            ? root : PathText.deletingLastComponent(of: root)
        return DownloadWorker(
            jobID: job, steps: steps, options: options, store: store, transport: transport, events: events,
            bytesReceived: TransferByteCounter(), replacesExisting: replacesExisting,
            syncRounds: try? SyncRounds(filesystemOf: directory))
    }

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
                // The file this pull renamed into place (its inode), not another of the same size:
                // a run killed between committing the completion and the rename finds the old one.
                let present = stat(record.path, &info) == 0 && Int64(info.st_size) == record.size
                    && (record.identity.inode == 0 || UInt64(info.st_ino) == record.identity.inode)
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
        case .startJob, .finishJob, .loadFile, .dropUpload, .reconcileFile:
            // Never handed out for a pull (`configuration`); loading is the driver's.
            return { .failed(work, .transferFailed("a pull has no step \(work) (this is a bug)")) }
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
                return { await worker.finishFile(index, record: record, plan: plan, partial: partial, job: job) }
            case .chunk(_, let chunk):
                return { await worker.fetchChunk(chunk, of: index, record: record, plan: plan, partial: partial, job: job) }
            default:
                preconditionFailure("unreachable")
            }
        }
    }

}
