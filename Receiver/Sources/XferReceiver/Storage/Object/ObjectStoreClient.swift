import AsyncHTTPClient
import FoundationEssentials
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import XferS3Core
import Synchronization
import XferWire

/// Sends the S3 operations `S3ObjectRequests` describes (XferS3Core's signing, credentials, XML
/// and error reading, which the `s3` backend shares) through AsyncHTTPClient, on the receiver's
/// event loops. XferS3Core sends nothing itself, so the receiver carries no second HTTP client:
/// an app mounting its routes links neither the engine's LMDB nor its libcurl.
///
/// Small requests (state records, completions, listings) are retried on what `S3Failure` calls
/// retryable and on connection errors, described anew for each attempt so that each is signed at
/// its own time. A streamed body (a client's request passing through) is sent once: its bytes
/// are gone after the first attempt, and the client, which still has them, is the one to retry.
final class ObjectStoreClient: Sendable {
    let requests: S3ObjectRequests
    /// The receiver's counters: every request to the store is counted there.
    let statistics = ReceiverStatistics()
    private let http: HTTPClient
    private let logger: Logger
    /// Attempts of a small request, the first included.
    private let attempts = 4
    /// The most a small answer (a state record, a listing page) may hold.
    static let maximumAnswerSize = 16 << 20

    init(requests: S3ObjectRequests, logger: Logger) {
        self.requests = requests
        var configuration = HTTPClient.Configuration()
        // Every upload in flight may hold a request to the store, plus its state updates.
        configuration.connectionPool = .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: 256)
        configuration.decompression = .disabled
        configuration.timeout = .init(connect: .seconds(10), read: .seconds(120))
        http = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
        self.logger = logger
    }

    func shutdown() async throws {
        try await http.shutdown()
    }

    /// Performs a small operation, retrying what may succeed on another try. `describe` is called
    /// for every attempt; the operation's body is in memory (a state record, a completion's XML).
    func perform<Outcome>(_ describe: () -> S3Operation<Outcome>) async throws -> Outcome {
        var delay = Duration.milliseconds(50)
        var attempt = 1
        while true {
            let operation = describe()
            let body = operation.request.body
            do {
                let response = try await send(operation.request, body: .bytes(ByteBuffer(bytes: body)), length: body.count)
                return try operation.interpret(response)
            } catch let failure as S3Failure where failure.isRetryable && attempt < attempts {
                logger.debug("Retrying a store request", metadata: ["operation": "\(operation.operation)", "status": "\(failure.status)"])
                try await Task.sleep(for: failure.retryAfter ?? delay)
            } catch let error as HTTPClientError where attempt < attempts && Self.isTransient(error) {
                try await Task.sleep(for: delay)
            }
            attempt += 1
            delay *= 3
        }
    }

    /// Performs an operation whose body streams from elsewhere (a client's request): exactly
    /// `length` bytes, sent once. If `body` throws, the request is cut off before its end and the
    /// store keeps nothing of it.
    func perform<Outcome, Body: AsyncSequence & Sendable>(
        _ operation: S3Operation<Outcome>, streaming body: Body, length: Int
    ) async throws -> Outcome where Body.Element == ByteBuffer {
        let response = try await send(operation.request, body: .stream(body, length: .known(Int64(length))), length: length)
        return try operation.interpret(response)
    }

    /// Sends a GET and hands back the answer with its body unread, for a download to stream on.
    func open(_ operation: S3Operation<S3GetOutcome>) async throws -> HTTPClientResponse {
        statistics.storeRequests.add(1, ordering: .relaxed)
        return try await http.execute(Self.clientRequest(operation.request, body: nil), timeout: .hours(24), logger: logger)
    }

    private func send(_ request: AWSRequest, body: HTTPClientRequest.Body, length: Int) async throws -> AWSResponse {
        statistics.storeRequests.add(1, ordering: .relaxed)
        var outgoing = Self.clientRequest(request, body: body)
        if length == 0, request.method != "PUT", request.method != "POST" { outgoing.body = nil }
        let response = try await http.execute(outgoing, timeout: .hours(24), logger: logger)
        let collected = try await response.body.collect(upTo: Self.maximumAnswerSize)
        return AWSResponse(status: Int(response.status.code), headers: AWSHeaders(response.headers), body: Array(buffer: collected))
    }

    private static func clientRequest(_ request: AWSRequest, body: HTTPClientRequest.Body?) -> HTTPClientRequest {
        var outgoing = HTTPClientRequest(url: request.url)
        outgoing.method = NIOHTTP1.HTTPMethod(rawValue: request.method)
        for field in request.headers where field.name.lowercased() != "content-length" && field.name.lowercased() != "host" {
            outgoing.headers.add(name: field.name, value: field.value)
        }
        outgoing.body = body
        return outgoing
    }

    private static func isTransient(_ error: HTTPClientError) -> Bool {
        [.remoteConnectionClosed, .connectTimeout, .readTimeout, .writeTimeout, .deadlineExceeded].contains(error)
    }
}

extension AWSHeaders {
    /// An AsyncHTTPClient answer's header fields, in order.
    init(_ headers: NIOHTTP1.HTTPHeaders) { self.init(headers.map { Field(name: $0.name, value: $0.value) }) }
}

extension ObjectStoreLocation {
    /// Credentials and region for the store, found where the AWS SDKs and CLI look
    /// (`AWSConfiguration.resolve`), their HTTP calls (STS, the container and instance metadata
    /// endpoints) sent by AsyncHTTPClient: what `xfer serve --storage s3://…` uses, and what an
    /// app mounting the routes may use, without the engine's curl client.
    ///
    /// - Parameters:
    ///   - profile: The profile asked for by name (`--profile`); the environment's keys are then
    ///     passed over.
    ///   - environment: The `AWS_*` variables.
    public static func resolveConfiguration(
        profile: String? = nil, environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws(AWSConfiguration.Failure) -> AWSConfiguration {
        try AWSConfiguration.resolve(profile: profile, environment: environment, fetcher: StoreCredentialFetcher())
    }
}

/// The credentials chain's requests sent by AsyncHTTPClient, blocking the caller (the chain's
/// fetches are synchronous: `AWSHTTPFetcher`). Its clients run on an event loop of their own, so
/// the thread that waits is never the one that must answer, whichever thread signs a request.
struct StoreCredentialFetcher: AWSHTTPFetcher {
    /// One thread for all: a handful of small requests an hour.
    private static let loop = MultiThreadedEventLoopGroup(numberOfThreads: 1)

    /// STS as the rest of AWS is reached, bounded in all (a request being signed may wait).
    private static let sts = HTTPClient(
        eventLoopGroupProvider: .shared(loop),
        configuration: HTTPClient.Configuration(
            redirectConfiguration: .disallow, timeout: .init(connect: .seconds(10), read: .seconds(30)), decompression: .disabled))

    /// The metadata endpoints: on the machine's own link, given up quickly when nothing answers.
    private static let metadata = HTTPClient(
        eventLoopGroupProvider: .shared(loop),
        configuration: HTTPClient.Configuration(
            redirectConfiguration: .disallow, timeout: .init(connect: .seconds(1), read: .seconds(5)), decompression: .disabled))

    func fetch(_ request: AWSRequest, to destination: AWSHTTPDestination) throws -> AWSResponse {
        let (client, limit, deadline): (HTTPClient, Int, TimeAmount) =
            switch destination {
            case .securityTokenService: (Self.sts, 1 << 20, .seconds(30))
            case .metadataEndpoint: (Self.metadata, 64 << 10, .seconds(5))
            }
        var outgoing = try HTTPClient.Request(url: request.url, method: NIOHTTP1.HTTPMethod(rawValue: request.method))
        for field in request.headers where field.name.lowercased() != "host" {
            outgoing.headers.add(name: field.name, value: field.value)
        }
        if !request.body.isEmpty { outgoing.body = .bytes(request.body) }
        let answer = BoundedAnswer(limit: limit, url: request.url)
        return try client.execute(request: outgoing, delegate: answer, deadline: .now() + deadline).futureResult.wait()
    }
}

/// An answer read into memory up to `limit` bytes: a longer one fails the request as soon as it
/// passes the limit, so what an endpoint sends cannot make the receiver hold more.
// Unchecked: its state is touched only on the request's event loop, one callback at a time
// (AsyncHTTPClient's promise for a delegate), and read once the request is done.
private final class BoundedAnswer: HTTPClientResponseDelegate, @unchecked Sendable {
    typealias Response = AWSResponse

    private let limit: Int
    private let url: String
    private var head: HTTPResponseHead?
    private var body: [UInt8] = []

    init(limit: Int, url: String) {
        self.limit = limit
        self.url = url
    }

    func didReceiveHead(task: HTTPClient.Task<AWSResponse>, _ head: HTTPResponseHead) -> EventLoopFuture<Void> {
        self.head = head
        return task.eventLoop.makeSucceededVoidFuture()
    }

    func didReceiveBodyPart(task: HTTPClient.Task<AWSResponse>, _ buffer: ByteBuffer) -> EventLoopFuture<Void> {
        guard body.count + buffer.readableBytes <= limit else {
            return task.eventLoop.makeFailedFuture(
                AWSConfiguration.Failure("the answer from \(CredentialsURL.shown(url)) is larger than \(limit) bytes"))
        }
        body += buffer.readableBytesView
        return task.eventLoop.makeSucceededVoidFuture()
    }

    func didFinishRequest(task: HTTPClient.Task<AWSResponse>) throws -> AWSResponse {
        guard let head else { throw AWSConfiguration.Failure("no answer from \(CredentialsURL.shown(url))") }
        return AWSResponse(status: Int(head.status.code), headers: AWSHeaders(head.headers), body: body)
    }
}

/// A credentials endpoint's URL in messages: without its query (which could carry a token).
private enum CredentialsURL {
    static func shown(_ url: String) -> String { String(url.prefix { $0 != "?" }.prefix(120)) }
}

