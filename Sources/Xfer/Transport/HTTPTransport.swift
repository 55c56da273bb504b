import Synchronization

/// Sends HTTP requests through one libcurl multi handle, driven by one
/// dedicated thread, for the transport's whole lifetime: connections are
/// reused across requests and many transfers share one event loop.
///
/// Bodies are referenced, not copied: the request (and so its segments'
/// buffers) is retained until its transfer ends, and curl reads from them
/// on the loop thread.
final class HTTPTransport: Sendable {
    let options: TransportOptions
    private let loop: CurlMultiLoop

    init(options: TransportOptions) throws(TransportError) {
        // A proxy curl cannot use would fail every request; better say so once.
        if case .url(let url) = options.proxy { _ = try ProxyAddress(parsing: url) }
        self.options = options
        loop = try CurlMultiLoop(options: options)
    }

    deinit {
        loop.shutdown()
    }

    /// The transport's loop thread as a task executor: tasks that mostly
    /// wait for requests run best on it (see `CurlMultiLoop.enqueue`).
    var executor: any TaskExecutor { loop }

    /// Bytes of request bodies handed to curl so far (resent bytes count
    /// again), for benchmarks and metrics.
    var bodyBytesSent: Int { loop.bodyBytesSent.value }

    /// Sends one request and returns the final response, whatever its
    /// status; redirects are not followed. `counting` hears of every body
    /// byte curl takes to send, so an attempt that never reached the wire
    /// (a refused connection) counts nothing.
    ///
    /// Cancelling the calling task removes the transfer and throws
    /// `.cancelled` promptly.
    ///
    /// With `rangeWriter`, a download's range: the answer's body is written
    /// to its file (the response then has an empty body). Redirects are
    /// followed (a few at most) for a range or with `followingRedirects`.
    func send(
        _ request: HTTPRequest, counting counter: TransferByteCounter? = nil, into rangeWriter: RangeWriter? = nil,
        followingRedirects: Bool = false
    ) async throws(TransportError) -> HTTPResponse {
        let target = try TransportURL(parsing: request.url)
        let loop = self.loop
        let slot = TransferCompletionSlot()
        let id = loop.makeRequestID()
        let submission = TransferSubmission(
            id: id, request: request, target: target, slot: slot, counter: counter, rangeWriter: rangeWriter,
            followsRedirects: followingRedirects || rangeWriter != nil)
        let outcome = await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                if slot.install(continuation) {
                    loop.submit(submission)
                }
            }
        } onCancel: {
            if slot.cancel() {
                loop.cancel(id)
            }
        }
        return try outcome.get()
    }

    /// Stops the loop thread: requests in flight and any sent later fail
    /// with `.cancelled`, and pooled connections close. Returns without
    /// waiting for the thread. Idempotent; also done on deinit.
    func shutdown() {
        loop.shutdown()
    }
}

/// Where a request's outcome meets the task waiting for it.
///
/// Completion, cancellation and shutdown can race from different threads;
/// every path goes through this one state machine, so the continuation is
/// resumed exactly once and never leaked.
final class TransferCompletionSlot: Sendable {
    typealias Outcome = Result<HTTPResponse, TransportError>

    private enum State {
        /// The continuation is not installed yet.
        case idle
        case waiting(CheckedContinuation<Outcome, Never>)
        /// The task was cancelled before the continuation was installed.
        case cancelledEarly
        case completed
    }

    private let state = Mutex(State.idle)

    var isCompleted: Bool {
        state.withLock { state in
            switch state {
            case .idle, .waiting: return false
            case .cancelledEarly, .completed: return true
            }
        }
    }

    /// Installs the continuation. Returns false, having resumed it with
    /// `.cancelled`, when the task was cancelled first; the request must
    /// then not be submitted.
    func install(_ continuation: CheckedContinuation<Outcome, Never>) -> Bool {
        let wasCancelled = state.withLock { state -> Bool in
            switch state {
            case .idle:
                state = .waiting(continuation)
                return false
            case .cancelledEarly, .completed:
                state = .completed
                return true
            case .waiting:
                preconditionFailure("a request's continuation was installed twice")
            }
        }
        if wasCancelled {
            continuation.resume(returning: .failure(.cancelled))
        }
        return !wasCancelled
    }

    /// Resumes the waiting task unless someone already did.
    func resume(with outcome: Outcome) {
        if let continuation = takeContinuation(markingEarlyCancellation: false) {
            continuation.resume(returning: outcome)
        }
    }

    /// Resumes the waiting task with `.cancelled`. Returns true when this
    /// call did so, i.e. a transfer may be running that must be dropped.
    func cancel() -> Bool {
        guard let continuation = takeContinuation(markingEarlyCancellation: true) else { return false }
        continuation.resume(returning: .failure(.cancelled))
        return true
    }

    private func takeContinuation(markingEarlyCancellation: Bool) -> CheckedContinuation<Outcome, Never>? {
        state.withLock { state in
            switch state {
            case .waiting(let continuation):
                state = .completed
                return continuation
            case .idle:
                if markingEarlyCancellation {
                    state = .cancelledEarly
                }
                return nil
            case .cancelledEarly, .completed:
                return nil
            }
        }
    }
}
