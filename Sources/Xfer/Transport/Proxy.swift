import CCurl

extension TransportOptions {
    /// Which proxy, if any, requests go through.
    ///
    /// A proxy URL may carry a user name and password, so a `Proxy` describes
    /// itself without them: printing one, or options holding one, is safe.
    public enum Proxy: Sendable, Hashable, CustomStringConvertible, CustomDebugStringConvertible {
        /// libcurl's rules, read from the environment for each request:
        /// `http_proxy` for http URLs (lowercase only: CGI servers put a
        /// request's `Proxy:` header in `HTTP_PROXY`), `https_proxy` or
        /// `HTTPS_PROXY` for https, else `all_proxy`/`ALL_PROXY`; hosts
        /// matching `no_proxy`/`NO_PROXY` are reached directly.
        case environment
        /// Every request goes directly to its server, whatever the
        /// environment says.
        case none
        /// Every request goes through this proxy (`http://`, `https://`,
        /// `socks4://`, `socks4a://`, `socks5://` or `socks5h://`, with an
        /// optional `user:password@`). As with `curl --proxy`, hosts matching
        /// `NO_PROXY` are still reached directly.
        case url(String)

        /// The proxy schemes libcurl speaks.
        public static let schemes = ["http", "https", "socks4", "socks4a", "socks5", "socks5h"]

        /// `.url(url)`, once `url` is known to be a proxy URL libcurl takes.
        /// The error names the URL without its user name and password.
        public static func checked(_ url: String) throws(TransportError) -> Proxy {
            _ = try ProxyAddress(parsing: url)
            return .url(url)
        }

        /// `environment`, `none`, or the proxy as scheme://host:port.
        public var description: String {
            switch self {
            case .environment: return "environment"
            case .none: return "none"
            case .url(let url): return (try? ProxyAddress(parsing: url))?.redacted ?? TransportURL.roughlyRedacted(url)
            }
        }

        /// The same as `description`: a debugger or `dump` must not show the password either.
        public var debugDescription: String { description }
    }
}

/// Where a proxy URL points, for checking it and for naming the proxy in
/// errors without its credentials. Parsed as libcurl parses a proxy string.
struct ProxyAddress: Sendable, Hashable {
    var host: String
    /// The URL's port, else curl's default for proxies (443 for https, else 1080).
    var port: Int
    /// The user name and password (and any query) the URL carries.
    var secrets: [String]
    /// scheme://host:port
    var redacted: String

    init(parsing url: String) throws(TransportError) {
        let schemes = TransportOptions.Proxy.schemes.map { "\($0)://" }
        let hint = "a proxy URL starts with \(schemes.dropLast().joined(separator: ", ")) or \(schemes.last ?? "")"
        // curl would take "host:port" as an http proxy; a scheme is asked for
        // so that what is meant is written down.
        guard url.contains("://") else {
            throw .invalidURL("\(TransportURL.roughlyRedacted(url)) (\(hint))")
        }
        let parts = try CurlURLParser.parts(of: url, flags: UInt32(CURLU_NON_SUPPORT_SCHEME))
        let scheme = parts.scheme.lowercased()
        host = parts.host.lowercased()
        port = parts.explicitPort ?? (scheme == "https" ? 443 : 1080)
        secrets = parts.secrets
        redacted = "\(scheme)://\(host):\(port)"
        guard TransportOptions.Proxy.schemes.contains(scheme) else {
            throw .invalidURL("\(redacted) (\(hint))")
        }
    }
}
