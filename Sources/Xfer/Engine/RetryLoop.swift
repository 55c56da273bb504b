/// The one place a request is tried again: a job's steps (`Worker`) and the
/// engine's requests outside any job (`TransferEngine.send`) both go
/// through it, so "what is worth retrying, and how long to wait" is written
/// once.
enum RetryLoop {
    /// Why a request gave up without an outcome.
    enum Failure: Error {
        /// For good: the job (or the caller) gets this error.
        case failed(XferError)
        /// The server no longer knows the upload (`BackendError.uploadUnknown`).
        case uploadUnknown(String)
        /// The server holds another part than assumed (`BackendError.outOfSync`).
        case outOfSync(String)
        /// A pulled object is no longer the version its file's record names
        /// (thrown by a pull's steps, which read the answers to ranges).
        case objectChanged(String)
        /// A conditional write found another version (`BackendError.conflict`).
        case conflict(String)
    }

    /// Runs `attempt` until it returns, retrying what may succeed later —
    /// `BackendError.transient` and retryable `TransportError`s — with
    /// `policy`'s backoff, and telling `onRetry` (attempt number, delay,
    /// reason — why, without the operation) before each wait. `attempt` runs afresh each time, so its
    /// request can be built (and signed) again.
    ///
    /// `attempt` may throw a `Failure` of its own (it is passed on as it is),
    /// a `BackendError`, a `TransportError`, or anything else (a failure).
    static func run<T>(
        _ operation: String, policy: RetryPolicy, onRetry: (_ attempt: Int, _ delay: Duration, _ reason: String) -> Void,
        _ attempt: () async throws -> T
    ) async throws(Failure) -> T {
        var number = 0
        while true {
            number += 1
            if Task.isCancelled { throw .failed(.interrupted) }
            let reason: String
            var retryAfter: Duration?
            do {
                return try await attempt()
            } catch let error as BackendError {
                switch error {
                case .transient(let message, let after):
                    reason = message
                    retryAfter = after
                case .rejected(let message, let remedy):
                    throw .failed(.transferFailed(message, remedy: remedy ?? .runAgain))
                case .mismatch(let message, let remedy):
                    throw .failed(.verificationFailed(message, remedy: remedy))
                case .uploadUnknown(let message):
                    throw .uploadUnknown(message)
                case .outOfSync(let message):
                    throw .outOfSync(message)
                case .conflict(let message):
                    throw .conflict(message)
                }
            } catch let error as Failure {
                throw error
            } catch let error as TransportError {
                if case .localFile(let failure) = error { throw .failed(failure) }
                if error == .cancelled || Task.isCancelled { throw .failed(.interrupted) }
                guard error.isRetryable else { throw .failed(.transferFailed("\(operation): \(error)")) }
                reason = "\(operation): \(error)"
            } catch {
                throw .failed(.transferFailed("\(operation): \(error)"))
            }
            guard policy.allowsRetry(after: number) else {
                throw .failed(.transferFailed("\(reason) (gave up after \(number) attempts)"))
            }
            let delay = policy.delay(after: number, retryAfter: retryAfter)
            // The event names the operation apart: its reason says only why
            // (a backend's message usually starts with the same operation).
            let why = reason.hasPrefix(operation + ": ") ? String(reason.dropFirst(operation.count + 2)) : reason
            onRetry(number, delay, why)
            do {
                try await Task.sleep(for: delay)
            } catch {
                throw .failed(.interrupted)
            }
        }
    }
}

extension RetryLoop {
    /// A few quick attempts for a cleanup request (an abort, a `DELETE`):
    /// one attempt lost to a dropped connection or a 5xx would leave an
    /// upload on the server (billed, for S3) that nothing will come back for.
    static let cleanupPolicy = RetryPolicy(maximumAttempts: 3, initialDelay: .milliseconds(200), maximumDelay: .seconds(1))

    /// Sends a cleanup `request`, retried as `cleanupPolicy` allows when
    /// the answer is 5xx, 408 or 429 or the failure is a retryable one;
    /// returns the last answer, or the error.
    static func sendCleanup(_ request: HTTPRequest, through transport: HTTPTransport) async -> Result<HTTPResponse, TransportError> {
        var attempt = 0
        while true {
            attempt += 1
            let outcome: Result<HTTPResponse, TransportError>
            do { outcome = .success(try await transport.send(request)) } catch { outcome = .failure(error) }
            let retryable: Bool
            switch outcome {
            case .success(let response): retryable = response.isTransientStatus
            case .failure(let error): retryable = error.isRetryable && error != .cancelled
            }
            guard retryable, cleanupPolicy.allowsRetry(after: attempt), !Task.isCancelled else { return outcome }
            try? await Task.sleep(for: cleanupPolicy.delay(after: attempt))
        }
    }
}

extension TransferEngine {
    /// Sends one request that belongs to no job — a question about what
    /// the server holds, or a cleanup of what it keeps — through the
    /// engine's transport, retried as a job's requests are: a transient
    /// failure (`BackendError.transient`, a dropped connection, a timeout)
    /// is tried again with `retry`'s backoff, and `onRetry` hears of each
    /// wait (attempt number, delay, reason).
    ///
    /// `make` builds the exchange afresh for every attempt, so a signed
    /// request is signed again each time. The request is sent as it is:
    /// no credentials or extra headers are added (put them in `make`).
    ///
    /// An exchange followed by others (`Exchange.then`) is followed, as a
    /// job's steps are.
    ///
    /// - Returns: What the exchange's `interpret` makes of the answer (the
    ///   last exchange's, when others followed).
    /// - Throws: `.transferFailed` (refused, or still failing after the
    ///   retries; also for `uploadUnknown` and `outOfSync`, which mean
    ///   nothing outside a job), `.verificationFailed`, `.invalidInput`
    ///   (a policy out of range), `.interrupted` (the task was cancelled).
    public func send<Outcome: Sendable>(
        _ operation: String, retry: RetryPolicy = RetryPolicy(),
        onRetry: (_ attempt: Int, _ delay: Duration, _ reason: String) -> Void = { _, _, _ in },
        _ make: () throws(BackendError) -> Exchange<Outcome>
    ) async throws(XferError) -> Outcome {
        try TransferOptions(retry: retry).validate()
        do {
            // The first exchange comes from `make`, each later one from the exchange before it
            // (`Exchange.then`), each retried on its own.
            var outcome = try await RetryLoop.run(operation, policy: retry, onRetry: onRetry) {
                let exchange = try make()
                return (try exchange.interpret(try await transport.send(exchange.request)), exchange.then)
            }
            while let then = outcome.1 {
                let previous = outcome.0
                outcome = try await RetryLoop.run(operation, policy: retry, onRetry: onRetry) {
                    switch try then(previous) {
                    case .skip: return (previous, nil)
                    case .answer(let answer): return (answer, nil)
                    case .send(let exchange): return (try exchange.interpret(try await transport.send(exchange.request)), exchange.then)
                    }
                }
            }
            return outcome.0
        } catch {
            switch error {
            case .failed(let failure): throw failure
            case .uploadUnknown(let message), .outOfSync(let message), .objectChanged(let message), .conflict(let message):
                throw .transferFailed(message)
            }
        }
    }
}
