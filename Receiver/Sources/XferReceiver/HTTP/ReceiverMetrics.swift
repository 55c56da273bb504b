import Hummingbird
import Metrics

/// What the receiver counts for operators, through the swift-metrics facade (the program that
/// runs the receiver chooses the backend: `xfer serve` bootstraps Prometheus and answers
/// `GET /metrics`). With no backend bootstrapped every call is a no-op.
///
/// - `xfer_receiver_uploads_total{protocol, event}`: requests that created (`created`),
///   completed (`completed`) or terminated (`terminated`) an upload, or whose completion the
///   application's `pre-finish` hook refused, discarding the upload (`refused`). A completion
///   repeated by a client whose answer was lost counts again.
/// - `xfer_receiver_open_uploads{protocol}`: uploads this process saw created and not yet
///   completed or terminated (an instance's view: a restart starts it at 0, and an upload
///   created on one instance and completed on another moves two instances' figures); a
///   refused one leaves them too.
/// - `xfer_receiver_received_bytes_total`: file bytes read from request bodies, cut bodies included.
/// - Hummingbird's request metrics (`http_server_request_duration`, seconds, by method, route
///   and status, `hb_requests`, `hb_request_errors`, `http_server_active_requests`).
enum ReceiverMetrics {
    enum Event: String {
        case created, completed, terminated, refused
    }

    static func upload(_ protocolName: String, _ event: Event) {
        Counter(label: "xfer_receiver_uploads_total", dimensions: [("protocol", protocolName), ("event", event.rawValue)]).increment()
        let open = Meter(label: "xfer_receiver_open_uploads", dimensions: [("protocol", protocolName)])
        if event == .created { open.increment() } else { open.decrement() }
    }

    static func receivedBytes() -> Counter {
        Counter(label: "xfer_receiver_received_bytes_total")
    }
}

/// `GET /metrics`: the receiver's metrics in the text format the program chose
/// (`ReceiverConfiguration.metrics`); absent when it chose none. Behind `--auth-token` like every
/// route but the health probe: Prometheus sends a bearer token.
struct MetricsRoutes: ProtocolRoutes {
    let environment: RouteEnvironment
    let exposition: MetricsExposition

    init?(_ environment: RouteEnvironment) {
        guard let exposition = environment.configuration.metrics else { return nil }
        self.environment = environment
        self.exposition = exposition
    }

    func register<Context: ReceiverRequestContext>(on router: some RouterMethods<Context>) {
        router.get("metrics") { _, _ in
            var response = Response(status: .ok, body: ResponseBody(byteBuffer: ByteBuffer(bytes: self.exposition.render())))
            response.headers[.contentType] = self.exposition.contentType
            return response
        }
    }
}

/// How `GET /metrics` answers: the text a metrics backend renders, and its media type.
public struct MetricsExposition: Sendable {
    public var contentType: String
    public var render: @Sendable () -> [UInt8]

    public init(contentType: String, render: @escaping @Sendable () -> [UInt8]) {
        self.contentType = contentType
        self.render = render
    }
}
