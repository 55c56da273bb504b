/// A token bucket: `rate` tokens (bytes) a second, at most `capacity` kept.
///
/// A value with no clock of its own: the caller says what time it is, so
/// the arithmetic is tested with scripted instants and no sleeping.
struct TokenBucket: Hashable, Sendable {
    /// Tokens earned per second.
    let rate: Int64
    /// The most tokens kept: the largest burst.
    let capacity: Int64
    /// Tokens there now (as of the last `refill`).
    private(set) var tokens: Int64
    private var updated: ContinuousClock.Instant
    /// Byte-nanoseconds earned towards the next whole token: without them,
    /// frequent refills would each round a fraction away and the rate sag.
    private var fraction: Int64 = 0

    private static let nanosecondsPerSecond: Int64 = 1_000_000_000

    /// A full bucket at `now`.
    init(rate: Int64, capacity: Int64, now: ContinuousClock.Instant) {
        precondition(rate > 0 && capacity > 0, "a token bucket needs a positive rate and capacity")
        self.rate = rate
        self.capacity = capacity
        tokens = capacity
        updated = now
    }

    /// Adds what was earned since the last refill. Time never runs backwards
    /// for the bucket: an earlier `now` changes nothing.
    mutating func refill(at now: ContinuousClock.Instant) {
        guard now > updated else { return }
        let elapsed = now - updated
        updated = now
        guard tokens < capacity else {
            fraction = 0
            return
        }
        // An hour is far longer than any bucket takes to fill, and keeps the
        // quotient below (2^40 bytes/s × 3.6e12 ns) / 1e9, well within 64 bits.
        let (seconds, attoseconds) = elapsed.components
        let nanoseconds = min(seconds, 3600) * Self.nanosecondsPerSecond + attoseconds / 1_000_000_000
        var (earned, remainder) = Self.nanosecondsPerSecond.dividingFullWidth(rate.multipliedFullWidth(by: nanoseconds))
        fraction += remainder
        if fraction >= Self.nanosecondsPerSecond {
            earned += 1
            fraction -= Self.nanosecondsPerSecond
        }
        tokens = min(capacity, tokens + earned)
        if tokens == capacity { fraction = 0 }
    }

    /// Takes up to `count` tokens; returns how many it took.
    mutating func take(upTo count: Int64) -> Int64 {
        let taken = min(max(0, count), tokens)
        tokens -= taken
        return taken
    }

    /// Returns tokens taken but not used.
    mutating func giveBack(_ count: Int64) {
        tokens = min(capacity, tokens + max(0, count))
    }

    /// How long after the last refill `count` tokens (at most `capacity`)
    /// will be there; zero when they are.
    func delay(until count: Int64) -> Duration {
        let missing = min(count, capacity) - tokens
        guard missing > 0 else { return .zero }
        // Only a wait: a Double's precision is plenty.
        let nanoseconds = (Double(missing) * Double(Self.nanosecondsPerSecond) - Double(fraction)) / Double(rate)
        return .nanoseconds(Int64(max(1, nanoseconds.rounded(.up))))
    }
}

/// One transport's budget for sending request bodies, shared by every
/// request in flight: a token bucket, and the requests waiting for it,
/// served in turn.
///
/// A request whose allowance runs out waits at the back of the queue;
/// once enough tokens are there, each waiting request gets an equal share
/// (never more than it still has to send), oldest first. So no request
/// starves while others send, and (up to `grantThreshold` requests, 512 at
/// the lowest rate) every waiting one is served at least every
/// `grantThreshold / rate`, at most half a second — which also keeps curl
/// from taking a throttled request for a stalled one (see
/// `CurlEasyHandle.resumeSending()`). A value, like the bucket: the caller
/// passes the time.
struct SendBudget: Sendable {
    /// Bytes a request may send, granted to it.
    struct Grant: Hashable, Sendable {
        var request: UInt64
        var bytes: Int64
    }

    private(set) var bucket: TokenBucket
    /// Requests paused for want of an allowance, oldest first, with the
    /// bytes each still has to send.
    private var waiting: [(request: UInt64, need: Int64)] = []

    /// The smallest burst: below it, requests would be handed crumbs many
    /// times a second for no smoother a rate.
    static let minimumBurst: Int64 = 16 << 10

    /// A tenth of a second's worth, at least `minimumBurst` but never more
    /// than a second's worth: small enough for a smooth rate, large enough
    /// for few pauses.
    static func burst(for rate: Int64) -> Int64 {
        max(rate / 10, min(rate, minimumBurst))
    }

    /// A full budget of `rate` bytes a second at `now`.
    init(rate: Int64, now: ContinuousClock.Instant) {
        bucket = TokenBucket(rate: rate, capacity: Self.burst(for: rate), now: now)
    }

    /// Tokens are handed out in rounds of at least this many (or what the
    /// waiting requests still need, when that is less): half a burst.
    var grantThreshold: Int64 { max(1, bucket.capacity / 2) }

    var isAnyoneWaiting: Bool { !waiting.isEmpty }

    /// `request` paused with `need` bytes left to send. Waiting already, it
    /// keeps its place.
    mutating func wait(_ request: UInt64, need: Int64) {
        let need = max(1, need)
        if let index = waiting.firstIndex(where: { $0.request == request }) {
            waiting[index].need = need
        } else {
            waiting.append((request, need))
        }
    }

    /// `request` ended: it waits no longer, and what it was granted but did
    /// not send goes back to the others.
    mutating func finish(_ request: UInt64, unused: Int64) {
        waiting.removeAll { $0.request == request }
        bucket.giveBack(unused)
    }

    /// The grants due at `now`, in the order the requests began to wait;
    /// those served leave the queue.
    mutating func grants(at now: ContinuousClock.Instant) -> [Grant] {
        bucket.refill(at: now)
        guard !waiting.isEmpty, bucket.tokens >= roundSize else { return [] }
        let share = max(1, bucket.tokens / Int64(waiting.count))
        var grants: [Grant] = []
        for entry in waiting {
            let bytes = bucket.take(upTo: min(share, entry.need))
            guard bytes > 0 else { break }
            grants.append(Grant(request: entry.request, bytes: bytes))
        }
        waiting.removeFirst(grants.count)
        return grants
    }

    /// How long from `now` until the next round is due; nil when nobody waits.
    func delayUntilNextGrant(at now: ContinuousClock.Instant) -> Duration? {
        guard !waiting.isEmpty else { return nil }
        var bucket = bucket
        bucket.refill(at: now)
        return bucket.delay(until: roundSize)
    }

    private var roundSize: Int64 {
        min(grantThreshold, waiting.reduce(0) { $0 + max(1, $1.need) })
    }
}

/// The loop thread's one `SendBudget`, by reference: the read callbacks of
/// every transfer join its queue, and the loop hands out its grants.
/// Never leaves the loop thread, so it needs no lock.
final class SendThrottle {
    var budget: SendBudget

    init(rate: Int64) {
        budget = SendBudget(rate: rate, now: .now)
    }
}
