import CCurl
import CCurlShim
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Owner of a `CURLM *` (a `void *` in this libcurl, hence a raw pointer),
/// driven by events: curl tells which sockets to watch and when its timer
/// is due (`xfer_events`, in CCurlShim), and each wake-up hands it only the
/// sockets that are ready (`curl_multi_socket_action`), where
/// `curl_multi_perform` would check every transfer in flight.
///
/// `@unchecked Sendable` because other threads hold it only to call
/// `wakeup()` (a write to an eventfd); `CurlMultiLoop` calls it only under
/// its lock and only before the loop thread has called `close()`. Every
/// other method runs on the loop thread.
final class CurlMultiHandle: @unchecked Sendable {
    private let raw: UnsafeMutableRawPointer
    private let events: OpaquePointer

    init(maximumConnectionsPerHost: Int) throws(TransportError) {
        guard let raw = curl_multi_init() else {
            throw .network("could not create a curl multi handle")
        }
        self.raw = raw
        var code = xfer_multi_setopt_long(raw, CURLMOPT_MAX_HOST_CONNECTIONS, max(0, maximumConnectionsPerHost))
        if code == CURLM_OK {
            code = xfer_multi_setopt_long(raw, CURLMOPT_MAXCONNECTS, Self.keptConnections(maximumConnectionsPerHost))
        }
        guard code == CURLM_OK else {
            curl_multi_cleanup(raw)
            throw .network("could not configure the curl multi handle: \(String(cString: curl_multi_strerror(code)))")
        }
        guard let events = xfer_events_open(raw) else {
            let reason = String(cString: strerror(errno))
            curl_multi_cleanup(raw)
            throw .network("could not watch the transport's sockets: \(reason)")
        }
        self.events = events
    }

    /// The connections curl's pool keeps (CURLMOPT_MAXCONNECTS). Unset, it
    /// is four per easy handle added at the moment a connection comes back,
    /// and a transfer's handle is added only while it runs: when a few
    /// requests were left in flight (between files, while answers were being
    /// committed) the pool shrank and closed the others' idle connections,
    /// so a push of 4,096 chunks at 8 in flight opened ~200 connections
    /// where `curl -Z` opened 10. As many as one host may have open instead.
    static func keptConnections(_ maximumConnectionsPerHost: Int) -> Int {
        maximumConnectionsPerHost > 0 ? maximumConnectionsPerHost : 64
    }

    func add(_ easy: CurlEasyHandle) -> Bool {
        curl_multi_add_handle(raw, easy.raw) == CURLM_OK
    }

    func remove(_ easy: CurlEasyHandle) {
        curl_multi_remove_handle(raw, easy.raw)
    }

    /// Lets curl act on the sockets found ready and on its timer if due
    /// (a transfer just added is due at once); callbacks run in here.
    /// With `looking`, first looks (without waiting) for sockets that became
    /// ready since the last wait.
    func perform(looking: Bool) {
        if looking { _ = xfer_events_wait(events, 0) }
        xfer_events_act(events)
    }

    /// The next finished transfer's handle and result, if any.
    func nextFinishedTransfer() -> (easy: UnsafeMutableRawPointer, code: CURLcode)? {
        var easy: UnsafeMutableRawPointer?
        var code = CURLE_OK
        guard xfer_multi_next_done(raw, &easy, &code) != 0, let easy else { return nil }
        return (easy, code)
    }

    /// Blocks until a watched socket is ready, curl's timer is due, a
    /// `wakeup()`, or `timeoutMilliseconds`, whichever comes first; what was
    /// ready is acted on by the next `perform(looking: false)`.
    func wait(timeoutMilliseconds: Int32) {
        _ = xfer_events_wait(events, timeoutMilliseconds)
    }

    func wakeup() {
        xfer_events_wake(events)
    }

    /// Closes cached connections and frees the handle. Call once, after
    /// every easy handle was removed.
    func close() {
        curl_multi_cleanup(raw)
        xfer_events_close(events)
    }
}

/// A request handed to the loop thread.
struct TransferSubmission: Sendable {
    var id: UInt64
    var request: HTTPRequest
    var target: TransportURL
    var slot: TransferCompletionSlot
    /// Where the caller counts the body bytes curl takes for this request.
    var counter: TransferByteCounter? = nil
    /// A download's range: where the answer's body is written.
    var rangeWriter: RangeWriter? = nil
    /// A download's requests follow redirects.
    var followsRedirects = false
}

/// One curl multi handle driven by one dedicated thread, which is also a task
/// executor for the tasks that mostly wait for its transfers.
///
/// Its wait (`epoll_wait`) blocks, so the loop cannot live on Swift's
/// cooperative pool. Other threads talk to it only through `SharedState`
/// (under a mutex) followed by a wakeup; everything curl-related, including
/// every callback, happens on the loop thread. A round: the tasks enqueued
/// on it run, new requests are added, curl acts on the sockets that were
/// ready and on its timer, finished transfers complete; then it waits. Tasks
/// must not block long.
final class CurlMultiLoop: TaskExecutor {
    private struct SharedState: Sendable {
        var submissions: [TransferSubmission] = []
        var cancellations: [UInt64] = []
        /// Task jobs enqueued on the loop as a task executor, run in order.
        var jobs: [UnownedJob] = []
        var isShutdownRequested = false
        /// Set by the loop thread as it leaves; after that nobody may touch
        /// the multi handle, not even to wake it.
        var isStopped = false
        /// The loop thread is in (or about to enter) its wait, having
        /// found nothing queued: only then does news need a wakeup.
        var isWaiting = false
        /// A wakeup was sent during this wait: one is enough.
        var isWoken = false
        /// Wakeups being sent outside the lock; the handle is not closed
        /// before they are done.
        var wakersInFlight = 0

        /// Whether the caller must wake the loop (with `wake(if:)`, after the lock):
        /// only if it waits and nobody woke it yet. A wakeup is a write to
        /// an eventfd and a read back: sent for every request, it was
        /// a third of the client's sends. It is sent outside the lock, which
        /// the loop thread otherwise spun on for the length of a syscall.
        mutating func needsWake() -> Bool {
            guard isWaiting, !isWoken, !isStopped else { return false }
            isWoken = true
            wakersInFlight += 1
            return true
        }
    }

    private func wake(if needed: Bool) {
        guard needed else { return }
        multi.wakeup()
        state.withLock { $0.wakersInFlight -= 1 }
    }

    private enum Work {
        case run(jobs: [UnownedJob], submissions: [TransferSubmission], cancellations: [UInt64])
        case stop(unstarted: [TransferSubmission], jobs: [UnownedJob])
    }

    private let options: TransportOptions
    private let multi: CurlMultiHandle
    private let state = Mutex(SharedState())
    private let nextID = Atomic<UInt64>(1)
    let bodyBytesSent = TransferByteCounter()

    /// Wakeups and curl's own timers end each wait early; this only bounds
    /// how long a lost wakeup could go unnoticed.
    private static let pollTimeoutMilliseconds: Int32 = 5_000

    init(options: TransportOptions) throws(TransportError) {
        try CurlLibrary.initialize()
        self.options = options
        multi = try CurlMultiHandle(maximumConnectionsPerHost: options.maximumConnectionsPerHost)
        try startThread()
    }

    func makeRequestID() -> UInt64 {
        nextID.wrappingAdd(1, ordering: .relaxed).oldValue
    }

    /// Queues `submission`; after shutdown it fails at once with `.cancelled`.
    func submit(_ submission: TransferSubmission) {
        let (accepted, wakes) = state.withLock { state in
            guard !state.isShutdownRequested else { return (false, false) }
            state.submissions.append(submission)
            return (true, state.needsWake())
        }
        wake(if: wakes)
        if !accepted {
            submission.slot.resume(with: .failure(.cancelled))
        }
    }

    /// Runs `job` on the loop thread; after the loop stopped, on the global
    /// executor.
    ///
    /// The tasks of a job prefer this executor: a request's completion then
    /// resumes its task on the thread that saw it finish, and the task's next
    /// request is submitted from the loop thread itself, so neither needs a
    /// wake-up of another thread.
    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let (accepted, wakes) = state.withLock { state in
            guard !state.isStopped else { return (false, false) }
            state.jobs.append(job)
            return (true, state.needsWake())
        }
        wake(if: wakes)
        if !accepted {
            globalConcurrentExecutor.enqueue(ExecutorJob(job))
        }
    }

    /// Asks the loop to drop the transfer of request `id`; its caller has
    /// already been resumed by whoever cancelled it.
    func cancel(_ id: UInt64) {
        let wakes = state.withLock { state -> Bool in
            guard !state.isStopped else { return false }
            state.cancellations.append(id)
            return state.needsWake()
        }
        wake(if: wakes)
    }

    /// Makes the loop fail everything in flight with `.cancelled`, close its
    /// connections and exit. Returns without waiting for that. Idempotent.
    func shutdown() {
        let wakes = state.withLock { state -> Bool in
            guard !state.isShutdownRequested else { return false }
            state.isShutdownRequested = true
            return state.needsWake()
        }
        wake(if: wakes)
    }

    // MARK: Loop thread

    private func startThread() throws(TransportError) {
        // The thread owns a reference until `run()` returns, so the loop
        // outlives its last transfer even if the transport is released.
        let context = Unmanaged.passRetained(self).toOpaque()
        var thread = pthread_t()
        let status = pthread_create(&thread, nil, { context in
            let loop = Unmanaged<CurlMultiLoop>.fromOpaque(context!).takeRetainedValue()
            loop.run()
            return nil
        }, context)
        guard status == 0 else {
            Unmanaged<CurlMultiLoop>.fromOpaque(context).release()
            multi.close()
            throw .network("could not start the transport thread: \(String(cString: strerror(status)))")
        }
        pthread_detach(thread)
    }

    private func run() {
        EventLoopThread.markCurrent()
        let transfers = TransferTable(multi: multi, options: options, bodyBytesSent: bodyBytesSent)
        // Whether the last round ended in a wait, whose ready sockets are still to be acted on.
        var waited = false
        while true {
            let work = state.withLock { state -> Work in
                if state.isShutdownRequested {
                    state.isStopped = true
                    defer {
                        state.submissions = []
                        state.jobs = []
                    }
                    return .stop(unstarted: state.submissions, jobs: state.jobs)
                }
                defer {
                    state.submissions = []
                    state.cancellations = []
                    state.jobs = []
                }
                return .run(jobs: state.jobs, submissions: state.submissions, cancellations: state.cancellations)
            }
            switch work {
            case .stop(let unstarted, let jobs):
                // A wakeup decided before the stop may still be on its way to the handle.
                while state.withLock({ $0.wakersInFlight }) > 0 { sched_yield() }
                for submission in unstarted {
                    submission.slot.resume(with: .failure(.cancelled))
                }
                for job in jobs {
                    globalConcurrentExecutor.enqueue(ExecutorJob(job))
                }
                transfers.abandonAll()
                multi.close()
                return
            case .run(let jobs, var submissions, var cancellations):
                if !jobs.isEmpty {
                    // Tasks run first: what they submit starts in this same round.
                    for job in jobs { job.runSynchronously(on: asUnownedTaskExecutor()) }
                    state.withLock { state in
                        submissions += state.submissions
                        cancellations += state.cancellations
                        state.submissions = []
                        state.cancellations = []
                    }
                }
                for submission in submissions {
                    transfers.start(submission)
                }
                for id in cancellations {
                    transfers.abandon(id)
                }
                multi.perform(looking: !waited)
                transfers.collectFinished()
                transfers.grantSendAllowances()
                // Decided under the lock: what was queued since the top of the
                // loop is taken now; what comes later sees `isWaiting` and wakes it.
                let waits = state.withLock { state -> Bool in
                    guard state.submissions.isEmpty, state.cancellations.isEmpty, state.jobs.isEmpty, !state.isShutdownRequested
                    else { return false }
                    state.isWaiting = true
                    return true
                }
                if waits {
                    multi.wait(timeoutMilliseconds: transfers.nextGrantMilliseconds.map { min($0, Self.pollTimeoutMilliseconds) }
                        ?? Self.pollTimeoutMilliseconds)
                    // No longer waiting before curl acts (next round): what its callbacks
                    // enqueue on this thread needs no wake-up.
                    state.withLock { state in
                        state.isWaiting = false
                        state.isWoken = false
                    }
                }
                waited = waits
            }
        }
    }
}

/// The loop thread's bookkeeping of transfers in the multi handle. Never
/// leaves that thread.
private final class TransferTable {
    private struct Transfer {
        var id: UInt64
        var slot: TransferCompletionSlot
        var easy: CurlEasyHandle
        var context: TransferContext
    }

    private let multi: CurlMultiHandle
    private let options: TransportOptions
    private let bodyBytesSent: TransferByteCounter
    /// The rate limit's budget, shared by every transfer; nil without a limit.
    private let throttle: SendThrottle?
    private var transfersByHandle: [UnsafeMutableRawPointer: Transfer] = [:]
    private var handlesByID: [UInt64: UnsafeMutableRawPointer] = [:]
    private var idleHandles: [CurlEasyHandle] = []
    /// Idle handles kept for reuse: as many as small requests go in flight
    /// (`BackendTraits.wideSmallRequests`), so a tree of small files makes no
    /// handle per request (each made and cleaned up cost ~1.5 % of a small
    /// file's client CPU, with 16 kept). Those that streamed a body hold
    /// curl's upload buffer (up to 512 KiB): at most `maximumIdleStreamers`
    /// of them, which bounds the memory idle handles hold.
    private let maximumIdleHandles = 64
    private let maximumIdleStreamers = 16
    private var idleStreamers = 0

    init(multi: CurlMultiHandle, options: TransportOptions, bodyBytesSent: TransferByteCounter) {
        self.multi = multi
        self.options = options
        self.bodyBytesSent = bodyBytesSent
        throttle = options.maximumSendRate.map { SendThrottle(rate: $0) }
    }

    func start(_ submission: TransferSubmission) {
        // Cancelled while queued: its caller is already resumed.
        guard !submission.slot.isCompleted else { return }
        guard let easy = takeIdleHandle() ?? CurlEasyHandle() else {
            submission.slot.resume(with: .failure(.network("could not create a curl easy handle")))
            return
        }
        let context = TransferContext(
            request: submission.request,
            id: submission.id,
            responseLimit: options.maximumResponseBodySize,
            bodyBytesSent: bodyBytesSent,
            throttle: throttle,
            requestBytesSent: submission.counter,
            rangeWriter: submission.rangeWriter
        )
        do {
            try easy.prepare(
                submission.request, target: submission.target, options: options, context: context,
                followsRedirects: submission.followsRedirects)
        } catch {
            recycle(easy)
            submission.slot.resume(with: .failure(error))
            return
        }
        guard multi.add(easy) else {
            recycle(easy)
            submission.slot.resume(with: .failure(.network("could not add the transfer to the curl multi handle")))
            return
        }
        transfersByHandle[easy.raw] = Transfer(id: submission.id, slot: submission.slot, easy: easy, context: context)
        handlesByID[submission.id] = easy.raw
    }

    /// Drops a cancelled transfer; removing the handle closes its connection.
    func abandon(_ id: UInt64) {
        guard let raw = handlesByID.removeValue(forKey: id),
              let transfer = transfersByHandle.removeValue(forKey: raw)
        else { return }
        release(transfer)
        multi.remove(transfer.easy)
        recycle(transfer.easy)
        transfer.slot.resume(with: .failure(.cancelled))
    }

    func collectFinished() {
        while let (raw, code) = multi.nextFinishedTransfer() {
            guard let transfer = transfersByHandle.removeValue(forKey: raw) else { continue }
            handlesByID[transfer.id] = nil
            release(transfer)
            multi.remove(transfer.easy)
            let outcome = transfer.easy.outcome(for: code)
            recycle(transfer.easy)
            transfer.slot.resume(with: outcome)
        }
    }

    func abandonAll() {
        for transfer in transfersByHandle.values {
            multi.remove(transfer.easy)
            transfer.slot.resume(with: .failure(.cancelled))
        }
        transfersByHandle = [:]
        handlesByID = [:]
        idleHandles = []
        idleStreamers = 0
    }

    /// Hands out the send budget's grants that are due and unpauses the
    /// transfers that got them.
    func grantSendAllowances() {
        guard let throttle, throttle.budget.isAnyoneWaiting else { return }
        for grant in throttle.budget.grants(at: .now) {
            guard let raw = handlesByID[grant.request], let transfer = transfersByHandle[raw] else {
                throttle.budget.finish(grant.request, unused: grant.bytes)
                continue
            }
            transfer.context.allowance += Int(grant.bytes)
            transfer.easy.resumeSending()
        }
    }

    /// How long the loop may wait before the next grant is due; nil when no
    /// transfer waits for one.
    var nextGrantMilliseconds: Int32? {
        guard let delay = throttle?.budget.delayUntilNextGrant(at: .now) else { return nil }
        return Int32(clamping: max(1, delay.roundedUpMilliseconds))
    }

    /// A transfer left: it waits no longer, and its unsent allowance goes back.
    private func release(_ transfer: Transfer) {
        // (A download's allowance may be in debt: it took a piece whole.)
        throttle?.budget.finish(transfer.id, unused: Int64(max(0, transfer.context.allowance)))
        transfer.context.allowance = 0
    }

    private func recycle(_ easy: CurlEasyHandle) {
        // Resetting drops the context, releasing the request body and the
        // response buffer now rather than when the handle is next used.
        easy.reset()
        guard idleHandles.count < maximumIdleHandles else { return }
        if easy.hasStreamedBody {
            guard idleStreamers < maximumIdleStreamers else { return }
            idleStreamers += 1
        }
        idleHandles.append(easy)
    }

    private func takeIdleHandle() -> CurlEasyHandle? {
        guard let easy = idleHandles.popLast() else { return nil }
        if easy.hasStreamedBody { idleStreamers -= 1 }
        return easy
    }
}
