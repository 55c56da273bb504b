import Crypto
import FoundationEssentials
import Xfer
import XferPrimitives
// Everything that was XferS3's before SigV4, the S3 requests and answers and the credentials
// moved to XferS3Core stays reachable with `import XferS3`: apps and the CLI keep their imports.
@_exported import XferS3Core

// The engine's side of XferS3Core: its types describe requests and read answers in their own
// `AWSRequest`/`AWSResponse`; here they meet the engine's `HTTPRequest`/`HTTPResponse`, its
// `BackendError`, its `Exchange` and its curl client. The public members below are those XferS3
// had before the move, kept so that code written against them still compiles.

extension HTTPRequest {
    /// XferS3Core's request as the engine sends it: its body, in memory, as the request's body.
    /// (For sending an `S3Operation`'s request with the engine's `BlockingHTTPClient`.)
    public init(_ request: AWSRequest) {
        self.init(
            method: HTTPMethod(rawValue: request.method), url: request.url, headers: request.headers,
            body: request.body.isEmpty ? .empty : RequestBody(request.body))
    }
}

extension AWSResponse {
    /// The engine's answer, for XferS3Core's readings.
    public init(_ response: HTTPResponse) {
        self.init(status: response.status, headers: response.headers, body: response.body)
    }
}

extension S3Operation {
    /// The same operation as the engine sends it (`TransferEngine.send`):
    /// a retryable failure is transient, the rest refusals.
    public var exchange: Exchange<Outcome> {
        let operation = self
        return Exchange(HTTPRequest(request)) { response throws(BackendError) in
            do throws(S3Failure) {
                return try operation.interpret(AWSResponse(response))
            } catch {
                throw error.backendError
            }
        }
    }

    /// Reads S3's answer as the engine received it (see `interpret(_:)`).
    public func interpret(_ response: HTTPResponse) throws(S3Failure) -> Outcome {
        try interpret(AWSResponse(response))
    }
}

extension S3Failure {
    /// Classifies the engine's `response` (see `init(_:operation:isErrorInSuccess:)` of `AWSResponse`).
    public init(_ response: HTTPResponse, operation: String, isErrorInSuccess: Bool = false) {
        self.init(AWSResponse(response), operation: operation, isErrorInSuccess: isErrorInSuccess)
    }

    /// The engine's reading of this failure, for `TransferEngine.send`:
    /// retryable ones are transient, the rest refusals.
    public var backendError: BackendError {
        isRetryable ? .transient(description, retryAfter: retryAfter) : .rejected(description)
    }
}

extension S3ObjectMetadata {
    /// The metadata of the headers of a 200 or 206 answer the engine received.
    public init?(_ response: HTTPResponse) {
        self.init(AWSResponse(response))
    }
}

extension SignatureV4 {
    /// The hex SHA-256 of the engine's `body`, for `x-amz-content-sha256`. (A chunk that cannot
    /// be read gets the hash of nothing: the engine fails that request before its body is complete.)
    public static func payloadHash(_ body: RequestBody) -> String {
        Hex.lowercase((try? body.sha256) ?? Array(SHA256.hash(data: [UInt8]())))
    }

    /// Signs the engine's `request` as of `date` (see `sign(_:payloadHash:at:)` of `AWSRequest`).
    public func sign(_ request: inout HTTPRequest, payloadHash: String, at date: Date) {
        sign(method: request.method.rawValue, url: request.url, headers: &request.headers, payloadHash: payloadHash, at: date)
    }
}

extension S3RequestSigner {
    /// Signs the engine's `request`, its body hashed unless TLS carries it (`signsPayload`).
    func sign(_ request: inout HTTPRequest) {
        let hash = signsPayload || request.body.isEmpty ? SignatureV4.payloadHash(request.body) : SignatureV4.unsignedPayload
        sign(&request, payloadHash: hash)
    }

    /// Signs the engine's `request` with `payloadHash` as given.
    func sign(_ request: inout HTTPRequest, payloadHash: String) {
        sign(method: request.method.rawValue, url: request.url, headers: &request.headers, payloadHash: payloadHash)
    }
}

extension AWSConfiguration {
    /// Resolves credentials and region as `resolve(profile:environment:home:fetcher:)` does, its
    /// HTTP calls sent by the engine's curl client with `transport`: STS as the user reaches
    /// the rest of AWS (proxy, TLS trust, timeouts); the container and instance metadata
    /// endpoints directly, with timeouts of a second or two.
    public static func resolve(
        profile: String? = nil,
        environment: [String: String] = ProcessInfo.processInfo.environment,
        home: String? = nil,
        transport: TransportOptions = TransportOptions()
    ) throws(Failure) -> AWSConfiguration {
        try resolve(profile: profile, environment: environment, home: home, fetcher: CurlCredentialFetcher(transport: transport))
    }
}

/// The credentials chain's requests sent by the engine's blocking curl client.
struct CurlCredentialFetcher: AWSHTTPFetcher {
    let transport: TransportOptions

    func fetch(_ request: AWSRequest, to destination: AWSHTTPDestination) throws -> AWSResponse {
        var options = transport
        options.maximumSendRate = nil
        switch destination {
        case .securityTokenService:
            // Bounded in all: a request being signed may wait for it.
            options.requestTimeout = min(options.requestTimeout ?? .seconds(30), .seconds(30))
        case .metadataEndpoint:
            options.proxy = .none
            options.connectTimeout = .seconds(1)
            options.requestTimeout = .seconds(5)
            options.maximumResponseBodySize = 64 << 10
        }
        return AWSResponse(try BlockingHTTPClient(options: options).send(HTTPRequest(request)))
    }
}

extension S3MultipartUpload {
    /// Whether a local file with these handles opened this upload: its
    /// upload id, and its key where the file keeps one.
    public func isOpened(byFileWith handles: ServerHandles) -> Bool {
        guard handles[S3Backend.uploadID] == uploadID else { return false }
        return handles[S3Backend.objectKey].map { $0 == key } ?? true
    }
}
