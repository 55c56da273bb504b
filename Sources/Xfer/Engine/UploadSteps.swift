import FoundationEssentials
import XferPrimitives

#if canImport(Glibc)
    import Glibc
#endif

/// A push's side of the scheduler's loop (`JobRunner` runs it): loading a
/// file opens it on disk; its steps are the backend's, resolved once
/// (`BackendSteps`), and run by `Worker`.
struct UploadSteps: ScheduledSteps {
    let jobID: JobID
    let steps: BackendSteps
    let options: TransferOptions
    let store: any JobStateStore
    let worker: Worker

    var backend: any UploadBackend { steps.backend }

    /// The scheduler's terms for a push through `steps`.
    static func configuration(
        _ steps: BackendSteps, options: TransferOptions, concurrency: Int, chunkSize: @escaping @Sendable (Int64) -> Int
    ) -> Scheduler.Configuration {
        let backend = steps.backend
        return Scheduler.Configuration(
            traits: backend.traits, concurrency: concurrency, chunkSize: chunkSize,
            chunkOrder: { record in
                backend.chunkOrder(in: UploadSteps.jobContext(record, fileCount: 0, store: nil, traits: backend.traits, options: options))
            },
            dropsUploads: steps.fileUploadCancelling != nil,
            // A number the user named bounds every request; the backend's
            // default may let small ones go wider.
            smallRequestConcurrency: options.concurrency == nil ? backend.traits.smallRequestConcurrency : nil,
            completesFilesAndReconciles: steps.completesFilesAndReconciles,
            // Asking a backend that cannot be asked would answer nothing: the store's progress stands.
            reconcilesFiles: steps.fileReconciling != nil)
    }

    func context(_ scheduler: Scheduler) -> JobContext { jobContext(scheduler.record, fileCount: scheduler.fileCount) }

    /// Reads file `index`'s record and progress and opens it.
    func load(_ index: Int) -> (WorkResult, FileOnDisk?) {
        let record: FileRecord
        let done: ChunkSet
        let plan: ChunkPlan
        do {
            guard let stored = try store.file(job: jobID, index: index) else {
                return (.loadFailed(file: index, record: nil, reason: "it is missing from the job's state"), nil)
            }
            record = stored
            plan = record.chunkPlan(backend.traits)
            if record.isComplete {
                // A complete file keeps no bitmap. Unchanged since (one stat, no
                // descriptor), it is settled without being opened: a re-run
                // passes the files an earlier run sent at a few µs each (opening each was ~12).
                var full = ChunkSet(capacity: plan.count)
                full.insertAll(below: plan.count)
                var info = stat()
                if stat(record.path, &info) == 0, info.st_mode & S_IFMT == S_IFREG, LocalFile.identity(of: info) == record.identity {
                    return (.loaded(file: index, LoadedFile(record: record, done: full, identity: record.identity)), nil)
                }
                done = full
            } else {
                done = try store.doneChunks(job: jobID, file: index, capacity: plan.count)
            }
        } catch {
            return (.failed(.loadFile(index), error), nil)
        }
        do {
            let local = try LocalFile(path: record.path)
            let hash = steps.sha256Reporting != nil ? StreamingFileHash(file: local) : nil
            let opened = FileOnDisk(local: local, hash: hash, readsAhead: plan.count > 1)
            return (.loaded(file: index, LoadedFile(record: record, done: done, identity: local.identity)), opened)
        } catch {
            guard error.kind == .fileUnreadable, let why = error.reason else { return (.failed(.loadFile(index), error), nil) }
            return (.loadFailed(file: index, record: record, reason: "cannot be read (\(why))"), nil)
        }
    }

    // MARK: Building work

    func task(
        for work: Work, scheduler: Scheduler, held open: [Int: FileOnDisk], context job: JobContext
    ) -> @Sendable () async -> WorkResult {
        switch work {
        case .startJob:
            let record = scheduler.record
            return { [self] in
                do throws(XferError) {
                    return await worker.startJob(try self.wholeJobContext(record))
                } catch {
                    return .failed(.startJob, error)
                }
            }
        case .finishJob:
            let record = scheduler.record
            let traits = backend.traits
            return { [self] in
                do throws(XferError) {
                    return await worker.finishJob(try self.wholeJobContext(record), traits: traits)
                } catch {
                    return .failed(.finishJob, error)
                }
            }
        case .loadFile:
            preconditionFailure("files are loaded by the driver itself (SchedulerDriver.drive)")
        case .dropUpload(let index):
            guard let state = scheduler.file(index) else {
                return { .failed(work, .transferFailed("file \(index + 1) is not held (this is a bug)")) }
            }
            // With its receipts: they name a file's partial uploads (tus).
            let file = Self.fileContext(index, state).with(receipts: (try? store.receipts(job: jobID, file: index)) ?? [:])
            return { await worker.dropUpload(file, job: job) }
        case .openFile(let index), .reconcileFile(let index), .finishFile(let index), .chunk(let index, _):
            guard let state = scheduler.file(index), let opened = open[index] else {
                return { .failed(work, .transferFailed("file \(index + 1) is not open (this is a bug)")) }
            }
            let file = Self.fileContext(index, state)
            let record = state.record
            switch work {
            case .openFile:
                return { await worker.openFile(file, record: record, content: opened, job: job) }
            case .reconcileFile:
                return { await worker.reconcileFile(file, job: job) }
            case .finishFile:
                return { await worker.finishFile(file, record: record, content: opened, job: job) }
            case .chunk(_, let chunk):
                let terms = scheduler.terms(ofChunk: chunk, file: index)
                let feedsHash = steps.sha256Reporting?.reportsSHA256(of: file, in: job) == true
                // One request at a time per file: the next one's digest pass can run while
                // this one waits for its answer. Not for a pass that feeds the whole-file
                // hash, which must see the file in order.
                let readsAhead = scheduler.chunkOrder == .sequentialWithinFile && !feedsHash
                return {
                    await worker.uploadChunk(
                        chunk, of: file, record: record, content: opened, from: terms.start, feedingHash: feedsHash, job: job,
                        commitsAcknowledgement: terms.commitsAcknowledgement, defersCommit: true, readsAhead: readsAhead)
                }
            default:
                preconditionFailure("unreachable")
            }
        }
    }

    static func fileContext(_ index: Int, _ state: Scheduler.FileState) -> FileContext {
        state.record.context(index: index, plan: state.plan)
    }

    /// The view of the job the steps of one file get: its files are read
    /// from the store when a backend asks for one, so building it costs O(1).
    func jobContext(_ record: JobRecord, fileCount: Int) -> JobContext {
        Self.jobContext(record, fileCount: fileCount, store: store, traits: backend.traits, options: options)
    }

    static func jobContext(
        _ record: JobRecord, fileCount: Int, store: (any JobStateStore)?, traits: BackendTraits, options: TransferOptions,
        withReceipts: Bool = false
    ) -> JobContext {
        let id = record.id
        let files = JobFiles(count: store == nil ? 0 : fileCount) { index in
            let stored = try? store?.file(job: id, index: index)
            let file = fileContext(index, stored ?? nil, traits: traits)
            guard withReceipts, let receipts = try? store?.receipts(job: id, file: index) else { return file }
            return file.with(receipts: receipts)
        }
        return record.context(files: files, credentials: options.credentials)
    }

    /// The view of the job `startJob`, `finishJob` and `cancelRequests` get:
    /// every file, each read from the store when the backend reaches it, so
    /// even these steps hold no job-sized array (100,000 files would be tens
    /// of MiB kept by the allocator long after the step).
    private func wholeJobContext(_ record: JobRecord) throws(XferError) -> JobContext {
        try Self.wholeJobContext(record, store: store, traits: backend.traits, options: options)
    }

    /// `withReceipts`: each file's chunk receipts too, read when the backend
    /// reaches the file (a cancel's view: tus names partial uploads by them).
    static func wholeJobContext(
        _ record: JobRecord, store: any JobStateStore, traits: BackendTraits, options: TransferOptions, withReceipts: Bool = false
    ) throws(XferError) -> JobContext {
        jobContext(
            record, fileCount: try store.counters(record.id).fileCount, store: store, traits: traits, options: options,
            withReceipts: withReceipts)
    }

    static func fileContext(_ index: Int, _ record: FileRecord?, traits: BackendTraits) -> FileContext {
        guard let record else {
            return FileContext(index: index, path: "", name: "", size: 0, plan: ChunkPlan(fileSize: 0, chunkSize: 1), handles: ServerHandles())
        }
        return record.context(index: index, plan: record.chunkPlan(traits))
    }
}
