import FoundationEssentials

/// What a run of the scheduler needs from the direction it moves bytes in
/// (a push's `UploadSteps`, a pull's `DownloadSteps`; `JobRunner` runs either): how a file is
/// taken up and how a piece of work becomes a task.
/// The loop around them (`SchedulerDriver.drive`) is written once.
protocol ScheduledSteps {
    /// What the runner holds open for a file in progress (the local file, the partial file).
    associatedtype Held: Sendable
    /// The view of the job the steps of files get, rebuilt after `startJob`.
    associatedtype Context: Sendable

    func context(_ scheduler: Scheduler) -> Context
    /// Reads file `index`'s record and progress and opens what it needs (at once, on the runner).
    func load(_ index: Int) -> (WorkResult, Held?)
    func task(for work: Work, scheduler: Scheduler, held: [Int: Held], context: Context) -> @Sendable () async -> WorkResult
}

extension Scheduler {
    /// Whether `work` holds a thread briefly, so it runs on the transport's
    /// thread, in turn with the transfers: a chunk, or a step of a file, under
    /// 256 KiB, and a drop (one small request). Heavier ones (reading and
    /// hashing a large chunk, a file's digests, a whole-job step) run on the
    /// global executor, so they hash in parallel with the transport instead
    /// of holding up every transfer. The same for both directions.
    func isLight(_ work: Work) -> Bool {
        let limit = 256 * 1024
        switch work {
        case .chunk(let index, let chunk):
            guard let state = file(index) else { return false }
            return state.plan.length(of: chunk) < limit
        case .openFile(let index), .reconcileFile(let index), .finishFile(let index):
            guard let state = file(index) else { return false }
            return state.record.size < Int64(limit)
        case .startJob, .finishJob, .loadFile:
            return false
        case .dropUpload:
            return true
        }
    }
}

enum SchedulerDriver {
    /// What a task of the run hands back: a piece of work's result, or the
    /// commit of answered chunks' records (their results, now to be taken in).
    private enum Finished: Sendable {
        case work(WorkResult)
        case committed([WorkResult])
        case commitFailed(XferError)
        /// Answers have waited `Scheduler.answerWait`: ask again.
        case answerWaitOver
    }

    /// Feeds `scheduler` the results of work, starts what it hands out (up
    /// to its limits), and commits what it says to commit before asking it
    /// for more. Returns the error that stopped the run, if one did.
    ///
    /// The loop and its light steps run on the transport's thread (see
    /// `Scheduler.isLight`): a small file's requests and their commits
    /// then cost no wake-up of another thread, which was most of the kernel's
    /// share of the client's CPU (per file: 11 futex calls before, 4.7 after).
    static func drive<Steps: ScheduledSteps>(
        _ scheduler: inout Scheduler, steps: Steps, store: any JobStateStore, transport: HTTPTransport,
        events: AsyncStream<TransferEvent>.Continuation
    ) async -> XferError? {
        var failure: XferError?
        var held: [Int: Steps.Held] = [:]
        var context = steps.context(scheduler)
        await withTaskExecutorPreference(transport.executor) {
            await withTaskGroup(of: Finished.self) { group in
                var inFlight = 0
                // Answered chunks whose records wait for a transaction; one is written
                // at a time, and the next takes every answer that came meanwhile, once
                // the scheduler says there are enough (`Scheduler.commitsAnswers`).
                var answers: [AnsweredChunk] = []
                var someAnswerAwaited = false
                var firstAnswerCame = ContinuousClock.now
                var isCommitting = false
                var isAnswerTimerSet = false
                func commitAnswers() {
                    guard failure == nil, !isCommitting, !answers.isEmpty else { return }
                    let waited = ContinuousClock.now - firstAnswerCame
                    guard scheduler.commitsAnswers(waiting: answers.count, someAwaited: someAnswerAwaited, waited: waited) else {
                        // No result may come for a while (every request slowed by a rate
                        // limit once its burst is spent, or stalled): a timer asks again.
                        if !isAnswerTimerSet {
                            isAnswerTimerSet = true
                            inFlight += 1
                            let left = Scheduler.answerWait - waited
                            group.addTask(executorPreference: transport.executor) {
                                try? await Task.sleep(for: left)
                                return .answerWaitOver
                            }
                        }
                        return
                    }
                    let batch = answers
                    answers.removeAll(keepingCapacity: true)
                    someAnswerAwaited = false
                    isCommitting = true
                    inFlight += 1
                    // Also once the run is cancelled: the server has these chunks.
                    group.addTask(executorPreference: transport.executor) {
                        do throws(XferError) {
                            try await store.commit(batch.flatMap(\.changes))
                            return .committed(batch.map(\.stored))
                        } catch {
                            return .commitFailed(error)
                        }
                    }
                }
                func take(_ result: WorkResult) async {
                    if failure != nil {
                        _ = try? scheduler.apply(result)  // draining after a failure: only the counts matter
                        return
                    }
                    do throws(XferError) {
                        let effects = try scheduler.apply(result)
                        if case .started = result { context = steps.context(scheduler) }
                        if !effects.changes.isEmpty { try await store.commit(effects.changes) }
                        if effects.sync { try store.sync() }
                        for event in effects.events { events.yield(event) }
                        for index in effects.released { held[index] = nil }
                        for answer in effects.answers {
                            if answers.isEmpty { firstAnswerCame = .now }
                            answers.append(answer)
                            if !answer.mayWait { someAnswerAwaited = true }
                        }
                    } catch {
                        failure = error
                        group.cancelAll()
                    }
                }
                while true {
                    while failure == nil, !Task.isCancelled, let work = scheduler.next() {
                        if case .loadFile(let index) = work {
                            let (result, file) = steps.load(index)
                            if let file { held[index] = file }
                            await take(result)
                            continue
                        }
                        let task = steps.task(for: work, scheduler: scheduler, held: held, context: context)
                        let executor = scheduler.isLight(work) ? transport.executor : globalConcurrentExecutor
                        group.addTask(executorPreference: executor) { .work(await task()) }
                        inFlight += 1
                    }
                    commitAnswers()
                    if inFlight == 0 { break }
                    guard let finished = await group.next() else { break }
                    inFlight -= 1
                    switch finished {
                    case .work(let result):
                        await take(result)
                    case .committed(let results):
                        isCommitting = false
                        for result in results { await take(result) }
                    case .answerWaitOver:
                        isAnswerTimerSet = false
                    case .commitFailed(let error):
                        isCommitting = false
                        if failure == nil {
                            failure = error
                            group.cancelAll()
                        }
                    }
                }
            }
        }
        held.removeAll()
        if failure == nil, Task.isCancelled { failure = .interrupted }
        return failure
    }
}

extension SchedulerDriver {
    /// Ends a run the driver returned from: the job's record marked as it
    /// ended (unfinished when interrupted, failed on an error or with files
    /// that failed, completed when every file has its URL — checked page by
    /// page, not held), and the report. `owner` is who a job that stopped
    /// with work left blames; `verb` says what happened to a file ("sent").
    static func conclude(
        _ scheduler: inout Scheduler, failure: XferError?, store: any JobStateStore, owner: String, verb: String, bytes: Int64,
        completesJob: Bool = true
    ) async -> Result<JobReport, XferError> {
        let id = scheduler.record.id
        var failure = failure
        if failure == nil, scheduler.failedFiles > 0, let first = scheduler.firstFailure {
            let total = (try? store.counters(id)) ?? JobCounters()
            failure = .transferFailed(
                "\(total.completedFiles) file\(total.completedFiles == 1 ? "" : "s") \(verb), \(scheduler.failedFiles) failed: "
                    + "\(first.path): \(first.reason)")
        }
        if failure == nil, !scheduler.isFinished {
            failure = .transferFailed("the job stopped with work left (this is a bug in \(owner))")
        }
        if let failure {
            let ended = failure == .interrupted
                ? scheduler.endRecord(phase: .unfinished, error: nil, at: Date())
                : scheduler.endRecord(phase: .failed, error: failure.description, at: Date())
            try? await store.commit(.putJob(ended))
            return .failure(failure)
        }
        let count: Int
        do {
            if let index = try store.firstFileWithoutURL(job: id) {
                let path = try store.file(job: id, index: index)?.path ?? "file \(index + 1)"
                return .failure(.transferFailed("no URL for \(path) (\(owner))"))
            }
            count = try store.counters(id).fileCount
            let ended = scheduler.endRecord(phase: completesJob ? .completed : .unfinished, error: nil, at: Date())
            try await store.commit(.putJob(ended))
            try store.sync()
        } catch {
            return .failure(error)
        }
        let files = JobReport.Files(count: count) { start, limit in
            let page = (try? store.files(job: id, from: start, limit: limit)) ?? []
            return page.map { JobReport.File(path: $0.record.path, url: $0.record.url ?? "", size: $0.record.size) }
        }
        return .success(
            JobReport(
                job: id, files: files, bytesSent: bytes, bytesResumed: max(0, scheduler.totalBytes - scheduler.acknowledgedThisRun)))
    }
}
