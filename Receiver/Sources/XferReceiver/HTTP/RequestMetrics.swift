import Dispatch
import HTTPTypes
import Hummingbird
import Metrics
import Synchronization

/// Hummingbird's request metrics, under its labels and dimensions (`hb_requests`,
/// `http_server_request_duration`, `hb_request_errors` by route, method and status;
/// `http_server_active_requests` by method), recorded without making a small answer cost a second
/// write.
///
/// Hummingbird's own `MetricsMiddleware` records a request once its body is written, by wrapping
/// every body in a closure. Hummingbird writes a body it holds whole (`ResponseBody(byteBuffer:)`)
/// in the same write as the head, but a closure's only after the head: two `write`s, two TCP
/// segments and two wake-ups of the client for every JSON answer (a small patch file's 201, every
/// multipart and sequence answer). An answer of at most `recordedWhenReturned` bytes is recorded
/// here when its handler returns, its body then written at once with its head; a larger or
/// streamed one (a download) is still recorded once its body is written.
struct RequestMetricsMiddleware<Context: RequestContext>: RouterMiddleware {
    /// The largest answer recorded when its handler returns, not once it is written.
    static var recordedWhenReturned: Int { 64 << 10 }

    private let cache = RequestMetricsCache()

    /// The methods the receiver serves, each a series of its own; any other that NIO's parser
    /// lets through (some thirty, WebDAV's among them) is counted as `_OTHER`, OpenTelemetry's
    /// convention, so that probes with them add no series of their own.
    /// (A switch, not a `Set`: the middleware is generic, so a set could not be a stored
    /// constant and would be built on every request.)
    static func label(_ method: HTTPRequest.Method) -> String {
        switch method {
        case .get, .head, .post, .put, .patch, .delete, .options: method.rawValue
        default: "_OTHER"
        }
    }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let start = DispatchTime.now().uptimeNanoseconds
        let method = Self.label(request.method)
        let active = cache.active(method)
        active.increment()
        do {
            var response = try await next(request, context)
            let endpoint = cache.endpoint(.init(route: context.endpointPath ?? "Unknown", method: method, status: response.status))
            let record: @Sendable () -> Void = {
                endpoint.requests.increment()
                endpoint.duration.recordNanoseconds(DispatchTime.now().uptimeNanoseconds - start)
                active.decrement()
            }
            if let length = response.body.contentLength, length <= Self.recordedWhenReturned {
                record()
            } else {
                let body = response.body
                response.body = ResponseBody(contentLength: body.contentLength) { writer in
                    defer { record() }
                    try await body.write(writer)
                }
            }
            return response
        } catch {
            let status = (error as? any HTTPResponseError)?.status ?? .internalServerError
            let endpoint = cache.endpoint(.init(route: context.endpointPath ?? "NotFound", method: method, status: status))
            endpoint.requests.increment()
            endpoint.errors.increment()
            active.decrement()
            throw error
        }
    }
}

/// The metrics of each method and of each route, method and status, made once (a lookup in the
/// metrics backend's registry per request costs more).
private final class RequestMetricsCache: Sendable {
    struct Endpoint: Hashable {
        var route: String
        var method: String
        var status: HTTPResponse.Status
    }

    struct EndpointMetrics: Sendable {
        let requests: Counter
        let duration: Metrics.Timer
        let errors: Counter

        init(_ id: Endpoint) {
            let dimensions = [
                ("http.route", id.route), ("http.request.method", id.method), ("http.response.status_code", String(id.status.code)),
            ]
            requests = Counter(label: "hb.requests", dimensions: dimensions)
            duration = Metrics.Timer(label: "http.server.request.duration", dimensions: dimensions, preferredDisplayUnit: .seconds)
            errors = Counter(
                label: "hb.request.errors",
                dimensions: [("http.route", id.route), ("http.request.method", id.method), ("error.type", String(id.status.code))])
        }
    }

    private let methods = Mutex<[String: Meter]>([:])
    private let endpoints = Mutex<[Endpoint: EndpointMetrics]>([:])

    func active(_ method: String) -> Meter {
        methods.withLock { methods in
            if let meter = methods[method] { return meter }
            let meter = Meter(label: "http.server.active_requests", dimensions: [("http.request.method", method)])
            methods[method] = meter
            return meter
        }
    }

    func endpoint(_ id: Endpoint) -> EndpointMetrics {
        endpoints.withLock { endpoints in
            if let metrics = endpoints[id] { return metrics }
            let metrics = EndpointMetrics(id)
            endpoints[id] = metrics
            return metrics
        }
    }
}
