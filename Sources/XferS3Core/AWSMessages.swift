import FoundationEssentials
import XferPrimitives
import XferWire

// The HTTP values this module deals in, its own: it describes requests and reads answers but
// sends nothing, so any HTTP client can carry them — the engine's curl transport (the `s3`
// backend, through XferS3's adapters), AsyncHTTPClient (the receiver's object storage). Named
// `AWS…` so that they never collide with the engine's `HTTPRequest` and `HTTPResponse` in a file
// that imports both.

/// Header fields in the order they are sent; names compare case-insensitively: the one header
/// type of the project (XferWire's, the engine's `HTTPHeaders`), so nothing converts between them.
public typealias AWSHeaders = HTTPHeaders

/// A request to S3, STS or a credentials endpoint, as this module describes it: signed when it
/// is an S3 or STS one, with its body in memory. A body the caller streams (`UploadPart`'s) is
/// not in it; the request names its `Content-Length`.
public struct AWSRequest: Sendable, Hashable {
    /// `GET`, `PUT`, `POST`, `HEAD`, `DELETE`.
    public var method: String
    /// The absolute URL, encoded as signed.
    public var url: String
    public var headers: AWSHeaders
    /// The bytes to send; empty for none (or for a body the caller streams).
    public var body: [UInt8]

    public init(method: String, url: String, headers: AWSHeaders = [:], body: [UInt8] = []) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
    }
}

/// An answer, as whoever sent the request received it: the status, the headers and the body
/// (small: a state record, an XML document, a page of a listing).
public struct AWSResponse: Sendable, Hashable {
    public var status: Int
    public var headers: AWSHeaders
    public var body: [UInt8]

    public init(status: Int, headers: AWSHeaders = [:], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// Whether the status is 2xx.
    public var isSuccess: Bool { (200..<300).contains(status) }

    /// Whether the status says "try again later" (the engine's rule: `HTTPAnswerRules`).
    public var isTransientStatus: Bool { HTTPAnswerRules.isTransient(status) }

    /// How long the server asked to wait (`Retry-After`), when it said.
    public var retryAfter: Duration? { headers["Retry-After"].flatMap { HTTPAnswerRules.retryAfter($0) } }
}

/// Where a request of the credentials chain goes, which decides how it is sent.
public enum AWSHTTPDestination: Sendable, Hashable {
    /// AWS STS (`AssumeRole`, `AssumeRoleWithWebIdentity`): as the user reaches the rest of AWS
    /// (their proxy, their TLS trust), within about 30 seconds in all, since a request being
    /// signed may wait for it.
    case securityTokenService
    /// The container credentials endpoint or the EC2 instance metadata service: on the machine's
    /// own link (169.254.x.x, loopback), so directly, never through a proxy (which could not
    /// reach them and should not see their credentials); given up quickly when nothing answers
    /// (about a second to connect, five in all), as the SDKs do, so a machine without them fails
    /// fast; answers of at most 64 KiB.
    case metadataEndpoint
}

/// Sends the few HTTP requests the credentials chain makes (STS, the container endpoint, the
/// instance metadata service), for whoever resolves credentials: the engine's `s3` backend
/// passes its curl client (XferS3), the receiver its AsyncHTTPClient. Injected because this
/// module sends nothing itself: it links no HTTP client, so neither side is made to carry the
/// other's.
///
/// Called synchronously from `AWSCredentialProvider`'s fetches, which run on a thread of their
/// own or on a signing one: it may block (an implementation over an asynchronous client waits
/// on a thread that is not one of the client's own event loops).
public protocol AWSHTTPFetcher: Sendable {
    /// Sends `request` as `destination` says and returns the answer whatever its status;
    /// redirects are not followed. Throws when no answer came (its error's description goes
    /// into the credentials failure's message: it must hold no secret).
    func fetch(_ request: AWSRequest, to destination: AWSHTTPDestination) throws -> AWSResponse
}

/// A fetcher bound to one destination, as each source of credentials uses it.
struct CredentialHTTP: Sendable {
    let fetcher: any AWSHTTPFetcher
    let destination: AWSHTTPDestination

    func send(_ request: AWSRequest) throws -> AWSResponse { try fetcher.fetch(request, to: destination) }
}
