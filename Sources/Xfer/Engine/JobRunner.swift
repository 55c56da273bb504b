import FoundationEssentials

/// Runs one job, whichever way its bytes go: feeds the `Scheduler` the
/// results of work, starts what it hands out (up to the job's concurrency at
/// once), and commits what it says to commit before asking it for more.
///
/// The scheduler decides; the loop around it is `SchedulerDriver`'s; what
/// differs by direction is only the steps — a push's (`UploadSteps`: the
/// backend's, over files on disk) or a pull's (`DownloadSteps`: ranges into
/// partial files) — and the terms the scheduler gets with them.
final class JobRunner: JobRun {
    /// Which way a job's bytes go, with what that direction brings.
    enum Direction: Sendable {
        /// A push through a backend; `notes` are what the walk skipped,
        /// reported before the first request.
        case push(BackendSteps, notes: [TransferEvent])
        /// A pull from a source; `replacesExisting` (`--force`): a
        /// destination that is not this pull's is replaced.
        case pull(SourceSteps, replacesExisting: Bool)
    }

    let jobID: JobID
    private let initialRecord: JobRecord
    private let direction: Direction
    private let options: TransferOptions
    private let concurrency: Int
    private let chunkSize: @Sendable (Int64) -> Int
    private let store: any JobStateStore
    private let transport: HTTPTransport
    private let lock: JobLock
    private let resumed: Bool
    /// False for a sync's copies: the job goes on (to its deletes) after its files are done.
    private let completesJob: Bool

    init(
        record: JobRecord, direction: Direction, options: TransferOptions, concurrency: Int,
        chunkSize: @escaping @Sendable (Int64) -> Int, store: any JobStateStore, transport: HTTPTransport, lock: JobLock,
        resumed: Bool, completesJob: Bool = true
    ) {
        jobID = record.id
        initialRecord = record
        self.direction = direction
        self.options = options
        self.concurrency = concurrency
        self.chunkSize = chunkSize
        self.store = store
        self.transport = transport
        self.lock = lock
        self.resumed = resumed
        self.completesJob = completesJob
    }

    func run(events: AsyncStream<TransferEvent>.Continuation) async -> Result<JobReport, XferError> {
        defer { withExtendedLifetime(lock) {} }
        let counters: JobCounters
        do { counters = try store.counters(jobID) } catch { return .failure(error) }
        switch direction {
        case .push(let steps, let notes):
            let worker = Worker(
                jobID: jobID, steps: steps, options: options, store: store, transport: transport, events: events,
                bytesSent: TransferByteCounter())
            return await run(
                UploadSteps(jobID: jobID, steps: steps, options: options, store: store, worker: worker),
                configuration: UploadSteps.configuration(steps, options: options, concurrency: concurrency, chunkSize: chunkSize),
                counters: counters, notes: notes, owner: "the backend '\(steps.backend.name)'", verb: "sent",
                moved: worker.bytesSent, events: events)
        case .pull(let steps, let replacesExisting):
            let worker = DownloadSteps.worker(
                job: jobID, steps: steps, options: options, store: store, transport: transport, events: events,
                destination: initialRecord.target, replacesExisting: replacesExisting)
            return await run(
                DownloadSteps(worker: worker, traits: steps.traits),
                configuration: DownloadSteps.configuration(steps, options: options, concurrency: concurrency, chunkSize: chunkSize),
                counters: counters, notes: [], owner: "the source '\(steps.source.name)'", verb: "pulled",
                moved: worker.bytesReceived, events: events)
        }
    }

    /// The run itself, the same for both directions.
    private func run<Steps: ScheduledSteps>(
        _ steps: Steps, configuration: Scheduler.Configuration, counters: JobCounters, notes: [TransferEvent], owner: String,
        verb: String, moved: TransferByteCounter, events: AsyncStream<TransferEvent>.Continuation
    ) async -> Result<JobReport, XferError> {
        var scheduler = Scheduler(record: initialRecord, counters: counters, configuration: configuration)
        events.yield(
            .started(
                job: jobID, totalBytes: counters.totalBytes, doneBytes: counters.doneBytes, files: counters.fileCount,
                doneFiles: counters.completedFiles, resumed: resumed))
        for note in notes { events.yield(note) }
        let failure = await SchedulerDriver.drive(&scheduler, steps: steps, store: store, transport: transport, events: events)
        return await SchedulerDriver.conclude(
            &scheduler, failure: failure, store: store, owner: owner, verb: verb, bytes: Int64(moved.value), completesJob: completesJob)
    }
}
