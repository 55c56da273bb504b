import Hummingbird
import Metrics
import Synchronization

/// Receiver-wide counters, kept in memory since the receiver started.
final class ReceiverStatistics: Sendable {
    /// File bytes read from chunk, fragment and block bodies, partial bodies included: what
    /// clients really sent, so re-sends after a crash can be measured for every protocol.
    let payloadBytesReceived = Atomic<Int>(0)
    /// Requests sent to an object store (state records, parts, completions, reads): what each
    /// protocol's file costs the store. 0 on disk.
    let storeRequests = Atomic<Int>(0)

    /// The metric of the same bytes, made once with the storage (after the program bootstrapped
    /// its metrics backend): `received` runs for every piece of every body, where asking the
    /// factory for the counter each time would cost a lookup under its lock.
    private let receivedBytes = ReceiverMetrics.receivedBytes()

    /// `count` file bytes read from a body: the counter `/stats` reads, and the metric.
    func received(_ count: Int) {
        payloadBytesReceived.add(count, ordering: .relaxed)
        receivedBytes.increment(by: count)
    }
}

/// `GET /stats`: the counters as JSON (`payloadBytesReceived`, `syncRounds`), for tests, torture
/// runs and benchmarks.
struct StatisticsRoutes: ProtocolRoutes {
    let environment: RouteEnvironment

    init(_ environment: RouteEnvironment) {
        self.environment = environment
    }

    private struct Answer: Encodable {
        var payloadBytesReceived: Int
        /// Group-commit rounds (`Durability`) run so far: requests made durable per round is how
        /// well concurrent uploads share their flushes.
        var syncRounds: Int
        /// Requests to the object store so far (0 on disk).
        var storeRequests: Int
    }

    func register<Context: ReceiverRequestContext>(on router: some RouterMethods<Context>) {
        // Zeros from a storage that declared no statistics.
        let reporting = environment.storage.statistics
        router.get("stats") { _, _ in
            JSONResponse.make(
                .ok,
                Answer(
                    payloadBytesReceived: reporting?.statistics.payloadBytesReceived.load(ordering: .relaxed) ?? 0,
                    syncRounds: reporting?.syncRounds ?? 0,
                    storeRequests: reporting?.statistics.storeRequests.load(ordering: .relaxed) ?? 0))
        }
    }
}
