import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import Xfer
import XferS3

/// Sends the S3 operations `S3ObjectRequests` describes (the `s3` backend's signing, credentials,
/// XML and error reading, shared) through AsyncHTTPClient, on the receiver's event loops.
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
            let body = operation.request.body.bytesInMemory ?? []
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

    private func send(_ request: HTTPRequest, body: HTTPClientRequest.Body, length: Int) async throws -> HTTPResponse {
        statistics.storeRequests.add(1, ordering: .relaxed)
        var outgoing = Self.clientRequest(request, body: body)
        if length == 0, request.method != .put, request.method != .post { outgoing.body = nil }
        let response = try await http.execute(outgoing, timeout: .hours(24), logger: logger)
        var headers = HTTPHeaders()
        for field in response.headers { headers.add(field.name, field.value) }
        let collected = try await response.body.collect(upTo: Self.maximumAnswerSize)
        return HTTPResponse(status: Int(response.status.code), headers: headers, body: Array(buffer: collected))
    }

    private static func clientRequest(_ request: HTTPRequest, body: HTTPClientRequest.Body?) -> HTTPClientRequest {
        var outgoing = HTTPClientRequest(url: request.url)
        outgoing.method = NIOHTTP1.HTTPMethod(rawValue: request.method.rawValue)
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
