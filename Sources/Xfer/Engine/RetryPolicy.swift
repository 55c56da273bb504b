/// When and how often a failed request is tried again.
///
/// Delays grow exponentially from `initialDelay` up to `maximumDelay`, with
/// "full jitter" (a uniformly random delay up to the exponential bound) so
/// many clients retrying together do not hammer a recovering server in
/// lockstep. A server's `Retry-After` wins over the computed delay, capped at
/// `maximumRetryAfter` so a hostile answer cannot park a job for a day.
public struct RetryPolicy: Sendable, Hashable {
    /// Attempts per request, the first included. 1 disables retrying.
    public var maximumAttempts: Int
    /// The bound on the first retry's delay; it doubles with each attempt.
    public var initialDelay: Duration
    /// The largest delay computed by backoff.
    public var maximumDelay: Duration
    /// The longest `Retry-After` honoured.
    public var maximumRetryAfter: Duration

    /// A policy; the defaults are what the CLI uses (8 attempts, 250 ms doubling to 30 s).
    public init(
        maximumAttempts: Int = 8,
        initialDelay: Duration = .milliseconds(250),
        maximumDelay: Duration = .seconds(30),
        maximumRetryAfter: Duration = .seconds(120)
    ) {
        // Kept as given: a push refuses a value out of range
        // (`TransferOptions.validate()`) rather than silently changing it.
        self.maximumAttempts = maximumAttempts
        self.initialDelay = initialDelay
        self.maximumDelay = maximumDelay
        self.maximumRetryAfter = maximumRetryAfter
    }

    /// Whether another attempt may follow attempt number `attempt` (1-based).
    public func allowsRetry(after attempt: Int) -> Bool {
        attempt < maximumAttempts
    }

    /// The delay before the attempt that follows attempt number `attempt`
    /// (1-based). `unit` is a random number in 0..<1 (injected for tests).
    public func delay(after attempt: Int, retryAfter: Duration? = nil, unit: Double) -> Duration {
        if let retryAfter {
            return min(max(retryAfter, .zero), maximumRetryAfter)
        }
        let exponent = min(max(attempt - 1, 0), 30)
        let bound = min(initialDelay * (1 << exponent), maximumDelay)
        let fraction = min(max(unit, 0), 1)
        return bound * fraction
    }

    /// The delay before the next attempt, with random jitter.
    public func delay(after attempt: Int, retryAfter: Duration? = nil) -> Duration {
        delay(after: attempt, retryAfter: retryAfter, unit: Double.random(in: 0..<1))
    }
}
