import FoundationEssentials
import Synchronization

/// One run of a job to its end (or its interruption): a push of files
/// (`JobRunner`) or of a stream (`StreamRunner`).
protocol JobRun: Sendable {
    var jobID: JobID { get }
    func run(events: AsyncStream<TransferEvent>.Continuation) async -> Result<JobReport, XferError>
}

/// What a `TransferJob` needs beyond its first run: a way to start another
/// run after a pause, and the clean-up once the job completed.
struct JobSession: Sendable {
    let id: JobID
    let store: any JobStateStore
    /// Held until the job ends; captured by `rerun` as well.
    let lock: JobLock
    let stateDirectory: String
    let retention: Duration
    /// A fresh runner over the job's committed state.
    let rerun: @Sendable () throws(XferError) -> any JobRun

    /// Prunes completed jobs past their retention, this one included when
    /// the retention is zero. Best-effort: the job is already complete, and
    /// the next completion tries again.
    func pruneAfterCompletion() async {
        let cutoff = Date().addingTimeInterval(-retention.timeInterval)
        guard let pruned = try? await store.pruneCompletedJobs(finishedBefore: cutoff) else { return }
        for other in pruned {
            if other == id {
                lock.removeFile()
            } else {
                JobCatalog.removeLockFile(stateDirectory: stateDirectory, job: other, store: store)
            }
        }
    }
}

/// Pause, resume and cancel for one job, and the loop that runs it.
///
/// A pause cancels the current run (the same path as SIGINT: nothing new is
/// scheduled, in-flight requests are dropped, acknowledged chunks are
/// already committed); a resume starts a new run over the committed state.
/// Every transition happens under one mutex, so a pause, resume or cancel
/// arriving at any instant (before the first run, between runs, as a run
/// ends) lands in exactly one place.
final class JobControl: Sendable {
    private struct State {
        var run: Task<Result<JobReport, XferError>, Never>?
        /// `pause()` was called and `resume()` not since.
        var wantsPause = false
        /// The current run was cancelled by `pause()`, not by `cancel()`.
        var runCancelledByPause = false
        var isPaused = false
        var isCancelled = false
        var isFinished = false
        var resumeWaiter: CheckedContinuation<Void, Never>?
        var pauseWaiters: [CheckedContinuation<Void, Never>] = []
    }

    private let job: JobID
    private let state = Mutex(State())

    init(job: JobID) {
        self.job = job
    }

    /// Runs the job to its end, through any number of pauses.
    func drive(
        first: any JobRun, session: JobSession, events: AsyncStream<TransferEvent>.Continuation
    ) async -> Result<JobReport, XferError> {
        var pending: (any JobRun)? = first
        while true {
            guard await waitWhilePaused(events) else { return finish(.failure(.interrupted), session) }
            let runner: any JobRun
            if let next = pending {
                runner = next
                pending = nil
            } else {
                do throws(XferError) {
                    runner = try session.rerun()
                } catch {
                    return finish(.failure(error), session)
                }
            }
            let run = Task { await runner.run(events: events) }
            let cancelAtOnce = state.withLock { state -> Bool in
                state.run = run
                if state.wantsPause { state.runCancelledByPause = true }
                return state.wantsPause || state.isCancelled
            }
            if cancelAtOnce { run.cancel() }
            let result = await withTaskCancellationHandler {
                await run.value
            } onCancel: {
                run.cancel()
            }
            let pausedThisRun = state.withLock { state -> Bool in
                state.run = nil
                defer { state.runCancelledByPause = false }
                return state.runCancelledByPause && !state.isCancelled
            }
            if case .failure(.interrupted) = result, pausedThisRun {
                continue
            }
            if case .success(var report) = result {
                if session.retention <= .zero {
                    // The job leaves the store now: its files are read while they are there.
                    report.files = JobReport.Files(Array(report.files))
                    await session.pruneAfterCompletion()
                    return finish(.success(report), session)
                }
                await session.pruneAfterCompletion()
            }
            return finish(result, session)
        }
    }

    /// Suspends while a pause is wanted. False when the job was cancelled.
    private func waitWhilePaused(_ events: AsyncStream<TransferEvent>.Continuation) async -> Bool {
        let (pausing, waiters) = state.withLock { state -> (Bool, [CheckedContinuation<Void, Never>]) in
            guard !state.isCancelled, state.wantsPause else { return (false, []) }
            state.isPaused = true
            defer { state.pauseWaiters = [] }
            return (true, state.pauseWaiters)
        }
        if pausing {
            events.yield(.paused(job: job))
            for waiter in waiters { waiter.resume() }
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let wakeNow = state.withLock { state -> Bool in
                    if state.isCancelled || !state.wantsPause { return true }
                    state.resumeWaiter = continuation
                    return false
                }
                if wakeNow { continuation.resume() }
            }
        }
        return state.withLock { state -> Bool in
            state.isPaused = false
            return !state.isCancelled
        }
    }

    /// Ends the job: the lock goes at once (not whenever the last reference
    /// to it does), so the job can be resumed or cancelled right away.
    private func finish(_ result: Result<JobReport, XferError>, _ session: JobSession) -> Result<JobReport, XferError> {
        session.lock.release()
        let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.isFinished = true
            defer { state.pauseWaiters = [] }
            return state.pauseWaiters
        }
        for waiter in waiters { waiter.resume() }
        return result
    }

    func pause() async {
        let (run, settled) = state.withLock { state -> (Task<Result<JobReport, XferError>, Never>?, Bool) in
            if state.isFinished || state.isCancelled || state.isPaused { return (nil, true) }
            state.wantsPause = true
            if let run = state.run {
                state.runCancelledByPause = true
                return (run, false)
            }
            return (nil, false)
        }
        run?.cancel()
        if settled { return }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let wakeNow = state.withLock { state -> Bool in
                if state.isPaused || state.isFinished || state.isCancelled || !state.wantsPause { return true }
                state.pauseWaiters.append(continuation)
                return false
            }
            if wakeNow { continuation.resume() }
        }
    }

    func resume() {
        let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            guard !state.isFinished, !state.isCancelled, state.wantsPause else { return [] }
            state.wantsPause = false
            var waiters = state.pauseWaiters
            state.pauseWaiters = []
            if let waiter = state.resumeWaiter { waiters.append(waiter) }
            state.resumeWaiter = nil
            return waiters
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Cancels the job if a pause was asked for and not called off.
    func abandonIfPaused() {
        if state.withLock({ $0.wantsPause && !$0.isFinished }) { cancel() }
    }

    func cancel() {
        let (run, waiters) = state.withLock { state -> (Task<Result<JobReport, XferError>, Never>?, [CheckedContinuation<Void, Never>]) in
            state.isCancelled = true
            var waiters = state.pauseWaiters
            state.pauseWaiters = []
            if let waiter = state.resumeWaiter { waiters.append(waiter) }
            state.resumeWaiter = nil
            return (state.run, waiters)
        }
        run?.cancel()
        for waiter in waiters { waiter.resume() }
    }
}

extension Duration {
    /// The duration in seconds, for `Date` arithmetic.
    var timeInterval: TimeInterval {
        let (seconds, attoseconds) = components
        return TimeInterval(seconds) + TimeInterval(attoseconds) / 1e18
    }
}
