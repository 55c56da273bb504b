import CCurl

/// The parts of a request URL the transport needs: to reject what it will
/// not send, and to name the server in errors without leaking a query
/// string or credentials.
///
/// Parsed with libcurl's own URL parser so validation agrees with what the
/// easy handle would accept.
struct TransportURL: Sendable, Hashable {
    var scheme: String
    /// Lowercased; IPv6 literals keep their brackets.
    var host: String
    var port: Int
    var path: String
    /// Substrings of the URL that must not appear in messages (query,
    /// fragment, user name, password).
    var secrets: [String]

    /// scheme://host:port/path
    var redacted: String { "\(scheme)://\(host):\(port)\(path)" }

    init(parsing url: String) throws(TransportError) {
        let parts = try CurlURLParser.parts(of: url)
        guard let partsPort = parts.port else {
            throw .invalidURL("\(Self.roughlyRedacted(url)) (missing port)")
        }
        scheme = parts.scheme.lowercased()
        host = parts.host.lowercased()
        port = partsPort
        path = parts.path
        secrets = parts.secrets
        guard scheme == "http" || scheme == "https" else {
            throw .invalidURL("\(redacted) (only http and https are supported)")
        }
    }

    /// Best-effort redaction for strings curl could not even parse: keep
    /// what precedes the query or fragment and drop any userinfo.
    static func roughlyRedacted(_ url: String) -> String {
        var text = Substring(url)
        if let end = text.firstIndex(where: { $0 == "?" || $0 == "#" }) {
            text = text[..<end]
        }
        let authorityStart = text.firstRange(of: "://")?.upperBound ?? text.startIndex
        let authorityEnd = text[authorityStart...].firstIndex(of: "/") ?? text.endIndex
        if let at = text[authorityStart..<authorityEnd].lastIndex(of: "@") {
            text = text[..<authorityStart] + text[text.index(after: at)...]
        }
        let printable = String(text.unicodeScalars.map { $0.properties.generalCategory == .control ? " " : Character($0) })
        return printable.count > 200 ? String(printable.prefix(200)) + "…" : printable
    }
}

/// Scoped owner of a `CURLU` handle.
final class CurlURLParser {
    struct Parts {
        var scheme: String
        var host: String
        /// The port named, else the scheme's default when curl knows the scheme.
        var port: Int?
        /// The port the URL names, nil when it names none.
        var explicitPort: Int?
        var path: String
        var secrets: [String]
    }

    enum Outcome {
        case parsed(Parts)
        case rejected(reason: String)
    }

    private let handle: OpaquePointer
    private let url: String

    init?(_ url: String) {
        guard let handle = curl_url() else { return nil }
        self.handle = handle
        self.url = url
    }

    deinit { curl_url_cleanup(handle) }

    /// The parts of `url`, or `.invalidURL` naming it without its secrets.
    /// `flags` are curl's (`CURLU_NON_SUPPORT_SCHEME` for schemes curl's URL
    /// API does not know, such as a proxy's socks5).
    static func parts(of url: String, flags: UInt32 = 0) throws(TransportError) -> Parts {
        guard let parser = CurlURLParser(url) else {
            throw .invalidURL("\(TransportURL.roughlyRedacted(url)) (not a valid absolute URL)")
        }
        switch parser.parse(flags: flags) {
        case .rejected(let reason):
            throw .invalidURL("\(TransportURL.roughlyRedacted(url)) (\(reason))")
        case .parsed(let parts):
            return parts
        }
    }

    func parse(flags: UInt32 = 0) -> Outcome {
        let code = curl_url_set(handle, CURLUPART_URL, url, flags)
        guard code == CURLUE_OK else {
            return .rejected(reason: String(cString: curl_url_strerror(code)))
        }
        guard let scheme = part(CURLUPART_SCHEME), let host = part(CURLUPART_HOST), !host.isEmpty else {
            return .rejected(reason: "missing scheme or host")
        }
        let port = part(CURLUPART_PORT, flags: UInt32(CURLU_DEFAULT_PORT)).flatMap { Int($0) }
        let explicitPort = part(CURLUPART_PORT).flatMap { Int($0) }
        let secrets = [CURLUPART_QUERY, CURLUPART_FRAGMENT, CURLUPART_USER, CURLUPART_PASSWORD]
            .compactMap { part($0) }
            .filter { !$0.isEmpty }
        return .parsed(Parts(
            scheme: scheme, host: host, port: port, explicitPort: explicitPort, path: part(CURLUPART_PATH) ?? "/",
            secrets: secrets))
    }

    private func part(_ which: CURLUPart, flags: UInt32 = 0) -> String? {
        var value: UnsafeMutablePointer<CChar>?
        guard curl_url_get(handle, which, &value, flags) == CURLUE_OK, let value else { return nil }
        defer { curl_free(value) }
        return String(cString: value)
    }
}
