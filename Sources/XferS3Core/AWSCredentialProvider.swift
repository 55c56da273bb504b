import Dispatch
import FoundationEssentials
import Synchronization
import XferPrimitives

/// Hands out the credentials requests are signed with, and fetches
/// temporary ones again before they expire.
///
/// Long-term keys (no expiration) are handed out as they are. Temporary
/// ones are fetched again from their source with the timings of the AWS
/// SDK for Java: from five minutes before they expire, the next request
/// that signs starts a fetch and signs with the current ones meanwhile;
/// from one minute before (or once S3 said they expired), a request waits
/// for new ones. Credentials that live less than ten minutes are fetched
/// again after half their life, and waited for in the last tenth of it.
///
/// Why a fetch ahead, on a thread of its own: `S3Backend.sign(_:in:)` is
/// synchronous and runs where the engine builds requests, mostly the
/// transport's loop thread (where every transfer in flight stalls while it
/// blocks), else a thread of Swift's cooperative pool (which must not
/// block either), and a fetch (an STS call, a `credential_process`) takes
/// from milliseconds to seconds. Started five
/// minutes ahead, a fetch is done long before anyone needs it; only when it
/// failed, or the machine slept past it, does a request wait (for as long
/// as the source's timeouts allow).
public final class AWSCredentialProvider: Sendable {
    /// What the credentials come from, for messages.
    public let source: String
    private let fetch: (@Sendable () throws(AWSConfiguration.Failure) -> AWSCredentials)?
    private let now: @Sendable () -> Date
    private let startInBackground: @Sendable (@escaping @Sendable () -> Void) -> Void
    private let state: Mutex<State>

    /// Credentials that are never fetched again.
    public init(fixed credentials: AWSCredentials, source: String) {
        self.source = source
        fetch = nil
        now = { Date() }
        startInBackground = { _ in }
        state = Mutex(State(current: credentials, fetched: Date()))
    }

    /// Credentials from `fetch`, which runs now (the first credentials are
    /// needed at once) and again before the credentials it gave expire.
    /// `fetch` may block; it runs on a thread of its own, or on a signing one.
    ///
    /// - Throws: What the first fetch threw.
    public convenience init(
        source: String, now: @escaping @Sendable () -> Date = { Date() },
        fetch: @escaping @Sendable () throws(AWSConfiguration.Failure) -> AWSCredentials
    ) throws(AWSConfiguration.Failure) {
        try self.init(source: source, now: now, startInBackground: { work in DetachedThread.start(work) }, fetch: fetch)
    }

    /// `startInBackground` runs a fetch ahead of need (tests run it when they choose).
    init(
        source: String, now: @escaping @Sendable () -> Date,
        startInBackground: @escaping @Sendable (@escaping @Sendable () -> Void) -> Void,
        fetch: @escaping @Sendable () throws(AWSConfiguration.Failure) -> AWSCredentials
    ) throws(AWSConfiguration.Failure) {
        self.source = source
        self.fetch = fetch
        self.now = now
        self.startInBackground = startInBackground
        let fetched = now()
        state = Mutex(State(current: try Self.checked(try fetch(), source: source, at: fetched), fetched: fetched))
    }

    /// Whether the credentials can be fetched again (they are temporary).
    public var isRefreshable: Bool { fetch != nil }

    /// The credentials to sign with now: fetched again first when they are
    /// about to expire, else the current ones (a fetch may start
    /// meanwhile). When a fetch failed and they expired, the expired ones:
    /// the server's refusal then says so, and `refreshFailure` why.
    public func credentials() -> AWSCredentials {
        do {
            return try validCredentials()
        } catch {
            return state.withLock { $0.current }
        }
    }

    /// Credentials not about to expire, fetched again when due.
    ///
    /// - Throws: Why they could not be fetched, once they expired (or S3 said so).
    public func validCredentials() throws(AWSConfiguration.Failure) -> AWSCredentials {
        guard fetch != nil else { return state.withLock { $0.current } }
        var waited = false
        while true {
            let at = now()
            switch state.withLock({ $0.next(at: at, mayFetch: !waited) }) {
            case .use(let credentials):
                return credentials
            case .fail(let failure):
                throw failure
            case .startInBackground(let refresh, let current):
                startInBackground { self.refresh(refresh) }
                return current
            case .fetchNow(let refresh):
                self.refresh(refresh)
                waited = true
            case .wait(let refresh):
                refresh.wait()
                waited = true
            }
        }
    }

    /// Which credentials these are: it changes with every fetch. A request
    /// notes it when built, so that a refusal of its credentials
    /// (`markExpired(generation:)`) leaves newer ones be.
    public var generation: Int { state.withLock { $0.generation } }

    /// The server said the credentials of `generation` expired (S3's
    /// `ExpiredToken`; a clock running behind can make them look valid):
    /// the next request waits for new ones.
    public func markExpired(generation: Int) {
        guard fetch != nil else { return }
        state.withLock { state in
            guard state.generation == generation else { return }
            state.reportedExpired = true
        }
    }

    /// Why the last fetch failed, when it did and no fetch succeeded since.
    public var refreshFailure: String? { state.withLock { $0.failure?.error.description } }

    // MARK: Fetching

    private func refresh(_ refresh: Refresh) {
        let result: Result<AWSCredentials, AWSConfiguration.Failure>
        let at = now()
        do {
            result = .success(try Self.checked(try fetch!(), source: source, at: at))
        } catch {
            result = .failure(error)
        }
        state.withLock { $0.finish(refresh, with: result, at: at) }
        refresh.finish()
    }

    /// Credentials that expired as they arrived would be fetched again and
    /// again: they are a failure of their source.
    private static func checked(
        _ credentials: AWSCredentials, source: String, at date: Date
    ) throws(AWSConfiguration.Failure) -> AWSCredentials {
        if let expiration = credentials.expiration, expiration <= date {
            throw AWSConfiguration.Failure(
                "\(source) gave credentials that expired at \(AWSTime.format(expiration)); is this machine's clock right?")
        }
        return credentials
    }

    /// A fetch in progress, which others may wait for.
    final class Refresh: @unchecked Sendable {
        // @unchecked: DispatchGroup is thread-safe; it is left exactly once.
        private let group = DispatchGroup()
        init() { group.enter() }
        func wait() { group.wait() }
        func finish() { group.leave() }
    }

    /// The cache, and what to do next: pure but for `Refresh`, so the
    /// timings are tested with a scripted clock.
    struct State {
        var current: AWSCredentials
        var fetched: Date
        var generation = 0
        /// A fetch in progress.
        var refresh: Refresh?
        /// S3 said the current credentials expired.
        var reportedExpired = false
        var failure: (error: AWSConfiguration.Failure, at: Date)?

        /// A fetch that failed is not tried again before this (unless S3
        /// said the credentials expired).
        static let pauseAfterFailure: TimeInterval = 5

        enum Next {
            case use(AWSCredentials)
            case fail(AWSConfiguration.Failure)
            case startInBackground(Refresh, current: AWSCredentials)
            case fetchNow(Refresh)
            case wait(Refresh)
        }

        /// What a request about to sign at `now` does. `mayFetch` is false
        /// once it fetched or waited: it then takes what there is.
        mutating func next(at now: Date, mayFetch: Bool) -> Next {
            guard let expiration = current.expiration else { return .use(current) }
            let times = RefreshTimes(fetched: fetched, expiration: expiration)
            let pausing = failure.map { now < $0.at.addingTimeInterval(Self.pauseAfterFailure) } ?? false
            if reportedExpired || now >= times.mandatory {
                if let refresh { return .wait(refresh) }
                if mayFetch, reportedExpired || !pausing {
                    let refresh = Refresh()
                    self.refresh = refresh
                    return .fetchNow(refresh)
                }
                if let failure, reportedExpired || now >= expiration { return .fail(failure.error) }
                return .use(current)
            }
            if now >= times.advisory, refresh == nil, !pausing {
                let refresh = Refresh()
                self.refresh = refresh
                return .startInBackground(refresh, current: current)
            }
            return .use(current)
        }

        mutating func finish(_ finished: Refresh, with result: Result<AWSCredentials, AWSConfiguration.Failure>, at now: Date) {
            switch result {
            case .success(let credentials):
                current = credentials
                fetched = now
                generation += 1
                failure = nil
            case .failure(let error):
                failure = (error, now)
            }
            reportedExpired = false
            if refresh === finished { refresh = nil }
        }
    }
}

/// When credentials fetched at `fetched` that expire at `expiration` are
/// fetched again: ahead of need from `advisory`, waited for from `mandatory`.
struct RefreshTimes: Hashable {
    /// Five minutes, the AWS SDK for Java's prefetch time.
    static let advisoryLead: TimeInterval = 5 * 60
    /// One minute, its stale time.
    static let mandatoryLead: TimeInterval = 60

    let advisory: Date
    let mandatory: Date

    init(fetched: Date, expiration: Date) {
        let lifetime = max(0, expiration.timeIntervalSince(fetched))
        advisory = expiration.addingTimeInterval(-min(Self.advisoryLead, lifetime / 2))
        mandatory = expiration.addingTimeInterval(-min(Self.mandatoryLead, lifetime / 10))
    }
}
