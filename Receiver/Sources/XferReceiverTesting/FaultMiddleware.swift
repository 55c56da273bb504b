import FoundationEssentials
import Hummingbird
import NIOCore
import Synchronization
import XferWire

/// The misbehaviours `xfer serve --faults` can inject: the ways real servers
/// and proxies fail a client, each one a different thing the client cannot
/// see coming.
public enum FaultKind: String, Sendable, CaseIterable, Hashable {
    /// 503 without reading or storing anything: an overloaded server.
    case unavailable = "503"
    /// 429 with `Retry-After: 1`, nothing stored: a rate limiter.
    case throttled = "429"
    /// The connection is cut after part of the request body was read; the
    /// request is never processed. The client sees a broken connection.
    case reset
    /// The request is never read nor answered: only the client's low-speed
    /// limit gets it out.
    case stall
    /// The request is processed, then its JSON answer is cut in half: the
    /// server acted and the client cannot tell.
    case truncate
    /// The request is processed, then its JSON answer is replaced by HTML of
    /// the same length (a proxy error page).
    case garble
    /// The request is processed; a `"sha256"` and a `"crc32c"` in its JSON
    /// answer are reported wrong, as by a server that stored different bytes.
    /// Answers without one pass unchanged.
    case digest
    /// A PATCH or PUT body (a chunk of patch or tus, a raw PUT) arrives
    /// with its first byte changed, as through a faulty link or proxy: a
    /// protocol that carries a digest of the body refuses it (the client
    /// sends it again); one without cannot tell. Other requests pass.
    case damage
}

/// Which faults to inject and how often, parsed from `KIND=P[,KIND=P...]`
/// (e.g. `503=0.1,reset=0.05`). Each request gets at most one fault; the
/// probabilities add up to at most 1.
public struct FaultPlan: Sendable, Hashable {
    public var probabilities: [FaultKind: Double]
    /// The same seed gives the same sequence of decisions, request after
    /// request, so a failing run can be repeated.
    public var seed: UInt64
    /// Also fault `GET /downloads/...` (a pull's ranges): 503 and 429 as
    /// elsewhere; `reset` and `truncate` cut the body halfway (after its
    /// head and part of its bytes went out); the other kinds pass them.
    public var faultsDownloads = false

    public init(probabilities: [FaultKind: Double], seed: UInt64 = 0) {
        self.probabilities = probabilities
        self.seed = seed
    }

    /// Parses `KIND=P[,KIND=P...]`; nil when malformed or the probabilities exceed 1.
    public init?(_ text: String, seed: UInt64 = 0) {
        var probabilities: [FaultKind: Double] = [:]
        for item in text.split(separator: ",") {
            let parts = item.split(separator: "=", maxSplits: 1).map { String($0).trimmingSpaces }
            guard parts.count == 2, let kind = FaultKind(rawValue: parts[0]), let p = Double(parts[1]),
                  p.isFinite, (0...1).contains(p), probabilities[kind] == nil
            else { return nil }
            probabilities[kind] = p
        }
        guard !probabilities.isEmpty, probabilities.values.reduce(0, +) <= 1 + 1e-9 else { return nil }
        self.init(probabilities: probabilities, seed: seed)
    }

    /// The fault for the `number`th eligible request (0-based), or nil.
    ///
    /// A pure function of seed and number: concurrent requests may arrive in
    /// a different order from run to run, but the sequence of decisions does not change.
    public func fault(forRequest number: UInt64) -> FaultKind? {
        let draw = Double(Self.mix(seed &+ number &* 0x9E37_79B9_7F4A_7C15) >> 11) / Double(1 << 53)
        var cumulative = 0.0
        // A fixed order so the same draw always maps to the same kind.
        for kind in FaultKind.allCases {
            guard let p = probabilities[kind], p > 0 else { continue }
            cumulative += p
            if draw < cumulative { return kind }
        }
        return nil
    }

    /// SplitMix64's finaliser: consecutive inputs give independent-looking outputs.
    private static func mix(_ value: UInt64) -> UInt64 {
        var z = value &+ 0x9E37_79B9_7F4A_7C15
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// Injects the faults of a `FaultPlan` into requests that change state.
///
/// GET and HEAD pass untouched: they are how tests and users check what the
/// receiver holds, and faulting them would make those checks flaky instead of
/// the client under test.
struct FaultMiddleware<Context: RequestContext>: RouterMiddleware {
    let plan: FaultPlan
    private let counter = RequestNumbers()

    init(plan: FaultPlan) {
        self.plan = plan
    }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let isDownload = plan.faultsDownloads && request.method == .get && request.uri.path.hasPrefix("/downloads/")
        guard isDownload || (request.method != .get && request.method != .head) else { return try await next(request, context) }
        let number = counter.next()
        guard let fault = plan.fault(forRequest: number) else { return try await next(request, context) }
        if isDownload { return try await downloadFault(fault, request, context: context, next: next) }
        switch fault {
        case .unavailable:
            return injectedError(.serviceUnavailable, "injected fault: unavailable")
        case .damage:
            guard request.method == .patch || request.method == .put else { return try await next(request, context) }
            var damaged = request
            damaged.body = RequestBody(asyncSequence: FirstByteFlipped(base: request.body))
            return try await next(damaged, context)
        case .throttled:
            var response = injectedError(.tooManyRequests, "injected fault: slow down")
            response.headers[.retryAfter] = "1"
            return response
        case .reset:
            try await readPartOfBody(request)
            // A body that fails after the head went out makes the server close
            // the connection: the client sees it cut, as with a real reset.
            return Response(
                status: .ok, headers: [.contentType: "application/json"],
                body: ResponseBody(contentLength: 64) { _ in throw InjectedReset() })
        case .stall:
            // Until the client gives up (its low-speed limit) or the server stops.
            try? await Task.sleep(for: .seconds(3600))
            return Response(status: .serviceUnavailable)
        case .truncate, .garble:
            let response = try await next(request, context)
            guard response.headers[.contentType]?.contains("json") == true else { return response }
            let body = try await collect(response.body)
            let damaged: ByteBuffer
            if fault == .truncate {
                damaged = body.getSlice(at: body.readerIndex, length: body.readableBytes / 2) ?? ByteBuffer()
            } else {
                let page = "<html><body>502 Bad Gateway</body></html>"
                let length = max(body.readableBytes, 1)
                damaged = ByteBuffer(string: String(String(repeating: page, count: length / page.count + 1).prefix(length)))
            }
            var headers = response.headers
            headers[.contentLength] = nil
            return Response(status: response.status, headers: headers, body: ResponseBody(byteBuffer: damaged))
        case .digest:
            let response = try await next(request, context)
            guard response.headers[.contentType]?.contains("json") == true else { return response }
            var text = String(buffer: try await collect(response.body))
            // Flip the first hex digit of each value: still well-formed, no longer the file's.
            for name in ["sha256", "crc32c"] {
                if let key = text.firstRange(of: "\"\(name)\":\""), key.upperBound < text.endIndex {
                    let digit = text[key.upperBound]
                    text.replaceSubrange(key.upperBound...key.upperBound, with: digit == "0" ? "1" : "0")
                }
            }
            var headers = response.headers
            headers[.contentLength] = nil
            return Response(status: response.status, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(string: text)))
        }
    }

    /// A download's faults: the answers a client fetching ranges meets from a
    /// busy server or a broken connection.
    private func downloadFault(
        _ fault: FaultKind, _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        switch fault {
        case .unavailable:
            return injectedError(.serviceUnavailable, "injected fault: unavailable")
        case .throttled:
            var response = injectedError(.tooManyRequests, "injected fault: slow down")
            response.headers[.retryAfter] = "1"
            return response
        case .reset, .truncate:
            let response = try await next(request, context)
            guard let length = response.body.contentLength, length > 1 else { return response }
            let original = response.body
            // The head says the whole length; half the bytes go out, then the connection is cut.
            return Response(
                status: response.status, headers: response.headers,
                body: ResponseBody(contentLength: length) { writer in
                    try await original.write(CuttingWriter(base: writer, remaining: length / 2))
                })
        case .stall, .garble, .digest, .damage:
            return try await next(request, context)
        }
    }

    /// Reads about half of the declared body (at least one buffer), so the cut
    /// happens mid-upload rather than before it started.
    private func readPartOfBody(_ request: Request) async throws {
        let declared = request.headers[.contentLength].flatMap { Int($0) } ?? 0
        var read = 0
        for try await buffer in request.body {
            read += buffer.readableBytes
            if read >= declared / 2 { break }
        }
    }

    private func collect(_ body: ResponseBody) async throws -> ByteBuffer {
        let sink = CollectedBody()
        try await body.write(CollectingWriter(sink: sink))
        return sink.buffer
    }
}

private struct InjectedReset: Error {}

/// Passes `remaining` bytes to `base`, then fails: the server closes the connection mid-body.
private struct CuttingWriter: ResponseBodyWriter {
    var base: any ResponseBodyWriter
    var remaining: Int

    mutating func write(_ buffer: ByteBuffer) async throws {
        guard buffer.readableBytes < remaining else {
            if remaining > 0, let head = buffer.getSlice(at: buffer.readerIndex, length: remaining) { try await base.write(head) }
            remaining = 0
            throw InjectedReset()
        }
        remaining -= buffer.readableBytes
        try await base.write(buffer)
    }

    consuming func finish(_ trailingHeaders: HTTPFields?) async throws {
        throw InjectedReset()
    }
}

/// Numbers requests in arrival order; a class because middleware is copied.
private final class RequestNumbers: Sendable {
    private let count = Atomic<UInt64>(0)

    func next() -> UInt64 {
        count.add(1, ordering: .relaxed).oldValue
    }
}

/// Where `CollectingWriter` leaves the bytes: the writer itself is consumed by `ResponseBody.write`.
private final class CollectedBody {
    var buffer = ByteBuffer()
}

private struct CollectingWriter: ResponseBodyWriter {
    let sink: CollectedBody

    mutating func write(_ buffer: ByteBuffer) async throws {
        var buffer = buffer
        sink.buffer.writeBuffer(&buffer)
    }

    consuming func finish(_ trailingHeaders: HTTPFields?) async throws {}
}

extension String {
    fileprivate var trimmingSpaces: String {
        String(drop(while: { $0 == " " }).reversed().drop(while: { $0 == " " }).reversed())
    }
}

/// A body whose first byte is changed (its lowest bit flipped), the rest as sent.
private struct FirstByteFlipped: AsyncSequence, Sendable {
    typealias Element = ByteBuffer
    let base: RequestBody

    struct AsyncIterator: AsyncIteratorProtocol {
        var base: RequestBody.AsyncIterator
        var flipped = false

        mutating func next() async throws -> ByteBuffer? {
            guard var buffer = try await base.next() else { return nil }
            if !flipped, buffer.readableBytes > 0, let first = buffer.getInteger(at: buffer.readerIndex, as: UInt8.self) {
                buffer.setInteger(first ^ 1, at: buffer.readerIndex)
                flipped = true
            }
            return buffer
        }
    }

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(base: base.makeAsyncIterator()) }
}

/// An answer as the receiver's JSON refusals look (`{"error": ...}`), so that a client cannot tell
/// an injected one from a real one.
private func injectedError(_ status: HTTPResponse.Status, _ message: String) -> Response {
    let body = ErrorBody.error(message)
    return Response(
        status: status, headers: [.contentType: "application/json; charset=utf-8"], body: ResponseBody(byteBuffer: ByteBuffer(bytes: body)))
}
