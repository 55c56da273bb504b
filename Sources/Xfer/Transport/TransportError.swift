/// Why a request produced no HTTP response.
///
/// An HTTP error status (404, 503...) is not a `TransportError`: it arrives
/// as an `HTTPResponse`. Messages never contain query strings, userinfo or
/// header values, which may hold credentials.
public enum TransportError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The URL is malformed or not http/https. Carries the URL reduced to
    /// scheme://host:port/path and the reason.
    case invalidURL(String)
    /// DNS found no address for `host`.
    case couldNotResolve(host: String)
    /// No TCP connection to `host:port` (refused, unreachable).
    case couldNotConnect(host: String, port: Int, reason: String)
    /// Connect timeout, low-speed abort or request timeout.
    case timedOut(String)
    /// The TLS handshake or certificate check failed.
    case tls(String)
    /// Connection reset, send/receive failure, empty or malformed reply...
    case network(String)
    /// The answer's body passed `TransportOptions.maximumResponseBodySize`.
    case responseTooLarge(limit: Int)
    /// The request's task was cancelled, or the transport shut down.
    case cancelled
    /// The body's file could not be read, or changed while it was (the
    /// request was abandoned before its body was complete).
    case localFile(XferError)

    /// True for errors worth retrying with backoff: the same request may
    /// succeed later. Invalid URLs, TLS failures, oversized responses and
    /// cancellation will not change by retrying.
    public var isRetryable: Bool {
        switch self {
        case .couldNotResolve, .couldNotConnect, .timedOut, .network:
            return true
        case .invalidURL, .tls, .responseTooLarge, .cancelled, .localFile:
            return false
        }
    }

    /// One line for users, without query strings, userinfo or header values.
    public var description: String {
        switch self {
        case .invalidURL(let message):
            return "invalid URL \(message)"
        case .couldNotResolve(let host):
            return "could not resolve host \(host)"
        case .couldNotConnect(let host, let port, let reason):
            return "could not connect to \(host):\(port) (\(reason))"
        case .timedOut(let message):
            return "timed out: \(message)"
        case .tls(let message):
            return "TLS failure: \(message)"
        case .network(let message):
            return "network failure: \(message)"
        case .responseTooLarge(let limit):
            return "response body larger than \(limit) bytes"
        case .cancelled:
            return "request cancelled"
        case .localFile(let error):
            return error.description
        }
    }
}
