import Logging
import FoundationEssentials
import HTTPTypes
import Hummingbird
import NIOConcurrencyHelpers

/// Builds the absolute URLs the protocols hand out (Location, download links).
///
/// Never from the request: a `Host` header is whatever the client wrote, and links built from it
/// (answered to that client, but also written into hooks' events and a download link someone
/// shares) would point wherever an attacker chose. The configured public URL
/// (`ReceiverConfiguration.publicURL`, `xfer serve --public-url`: what clients reach the
/// receiver by, through a proxy or a name) when there is one; else the address the receiver is
/// bound to.
final class BaseURL: Sendable {
    private let bound = NIOLockedValueBox<String?>(nil)
    private let configuredHost: String
    private let configuredPort: Int
    /// `http`, or `https` when the receiver speaks TLS itself.
    private let scheme: String
    private let publicURL: String?

    init(publicURL: String? = nil, configuredHost: String, configuredPort: Int = 0, scheme: String = "http") {
        self.publicURL = publicURL.map { $0.hasSuffix("/") ? String($0.dropLast()) : $0 }
        self.configuredHost = configuredHost
        self.configuredPort = configuredPort
        self.scheme = scheme
    }

    /// Records the port the listener got; returns the bound address as a URL (what `xfer serve`
    /// prints on its first line).
    func setBoundPort(_ port: Int) -> String {
        let url = "\(scheme)://\(Self.hostForURL(configuredHost)):\(port)"
        bound.withLockedValue { $0 = url }
        return url
    }

    /// Where links start: the public URL, else the bound address (for routes an application
    /// mounts, which bind nothing of their own, the configured host and port).
    var links: String {
        if let publicURL { return publicURL }
        if let bound = bound.withLockedValue({ $0 }) { return bound }
        return "\(scheme)://\(Self.hostForURL(configuredHost))" + (configuredPort > 0 ? ":\(configuredPort)" : "")
    }

    static func hostForURL(_ host: String) -> String {
        host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host
    }

    /// Nil when `text` can be a public URL (`http(s)://host[:port][/path]`, no query or fragment);
    /// else why not, in a user's words.
    static func problem(ofPublicURL text: String) -> String? {
        guard let url = URL(string: text), let scheme = url.scheme?.lowercased(), ["http", "https"].contains(scheme),
            let host = url.host, !host.isEmpty, url.query == nil, url.fragment == nil, url.user == nil, url.password == nil
        else {
            return "must be an http(s) URL such as https://uploads.example.com or https://example.com/xfer, with no query, fragment or credentials"
        }
        return nil
    }
}

/// The one way a failure of the receiver's own storage is answered (`RefusalMiddleware`): the
/// details (paths, errno) go to the operator's log, never to the client, who
/// gets `answer`, its protocol's 500 (clients retry it).
func storageFailure(_ error: any Error, logger: Logger, answer: Response) -> Response {
    logger.warning("Storage failure", metadata: ["error": "\(error)"])
    return answer
}
