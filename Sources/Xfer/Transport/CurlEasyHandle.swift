import CCurl
import CCurlShim
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Initializes libcurl once per process. `curl_global_init` is not safe to
/// race with itself; a static `let` is initialized exactly once, atomically.
enum CurlLibrary {
    private static let initialization: CURLcode = curl_global_init(Int(CURL_GLOBAL_ALL))

    static func initialize() throws(TransportError) {
        guard initialization == CURLE_OK else {
            throw .network("libcurl failed to initialize: \(String(cString: curl_easy_strerror(initialization)))")
        }
    }
}

/// One curl easy handle plus the memory curl keeps pointers into while a
/// transfer runs: the error buffer, the header list and the callback context.
///
/// Used only on the loop thread. A handle is prepared for one request,
/// added to the multi handle, and after completion (or removal) `reset()`
/// makes it reusable; curl keeps connections and caches in the multi handle,
/// so reuse is cheap, not essential.
final class CurlEasyHandle {
    /// curl's `CURL *`.
    let raw: UnsafeMutableRawPointer
    private let errorBuffer: UnsafeMutablePointer<CChar>
    private var headerList: UnsafeMutablePointer<curl_slist>?
    private var context: TransferContext?
    private var target: TransportURL?
    /// The proxy of the current transfer, to name it when it cannot be reached.
    private var proxy: TransportOptions.Proxy = .environment
    /// Whether a body was streamed through curl's upload buffer (up to
    /// `uploadBufferSize`), which curl keeps until the handle is cleaned up
    /// or its size is set again: a handle kept idle holds it.
    private(set) var hasStreamedBody = false

    /// Bigger than curl's 64 KiB default so loopback and LAN uploads are not
    /// limited by read-callback round trips. curl's maximum is 2 MiB.
    private static let uploadBufferSize = 512 * 1024
    /// curl's smallest.
    private static let minimumUploadBufferSize = 16 * 1024

    /// Bodies up to this are handed to curl whole; curl sends a body of under
    /// 64 KiB in the same write as the headers.
    static let inlineBodyLimit = 64 * 1024 - 1

    init?() {
        guard let raw = curl_easy_init() else { return nil }
        self.raw = raw
        errorBuffer = .allocate(capacity: Int(CURL_ERROR_SIZE))
        errorBuffer.initialize(repeating: 0, count: Int(CURL_ERROR_SIZE))
    }

    deinit {
        curl_easy_cleanup(raw)
        curl_slist_free_all(headerList)
        errorBuffer.deallocate()
    }

    /// Forgets the previous transfer: options, header list and context.
    /// Must not be called while the handle is in a multi handle.
    func reset() {
        curl_easy_reset(raw)
        curl_slist_free_all(headerList)
        headerList = nil
        context = nil
        target = nil
        proxy = .environment
        errorBuffer[0] = 0
    }

    /// Configures every option for `request`. Options are set from scratch
    /// each time because `reset()` returns the handle to curl's defaults.
    func prepare(
        _ request: HTTPRequest, target: TransportURL, options: TransportOptions, context: TransferContext,
        followsRedirects: Bool = false
    ) throws(TransportError) {
        self.context = context
        self.target = target
        proxy = options.proxy
        errorBuffer[0] = 0
        let userdata = Unmanaged.passUnretained(context).toOpaque()

        // Signals would be process-wide and this is one thread among many.
        try set(CURLOPT_NOSIGNAL, 1)
        try set(CURLOPT_URL, request.url)
        try set(CURLOPT_PROTOCOLS_STR, "http,https")
        try set(CURLOPT_REDIR_PROTOCOLS_STR, "http,https")
        try set(CURLOPT_FOLLOWLOCATION, 0)
        try check(xfer_easy_setopt_pointer(raw, CURLOPT_ERRORBUFFER, errorBuffer))

        try set(CURLOPT_CONNECTTIMEOUT_MS, options.connectTimeout.roundedUpMilliseconds)
        let lowSpeedSeconds = options.lowSpeedTime.roundedUpSeconds
        if options.lowSpeedLimit > 0 && lowSpeedSeconds > 0 {
            try set(CURLOPT_LOW_SPEED_LIMIT, options.lowSpeedLimit)
            try set(CURLOPT_LOW_SPEED_TIME, lowSpeedSeconds)
        }
        if let requestTimeout = options.requestTimeout {
            // curl reads 0 as "no timeout"; a zero budget means fail fast.
            try set(CURLOPT_TIMEOUT_MS, max(1, requestTimeout.roundedUpMilliseconds))
        }

        try set(CURLOPT_SSL_VERIFYPEER, options.verifyTLS ? 1 : 0)
        try set(CURLOPT_SSL_VERIFYHOST, options.verifyTLS ? 2 : 0)
        if let caCertificatePath = options.caCertificatePath {
            try set(CURLOPT_CAINFO, caCertificatePath)
        }
        try set(CURLOPT_USERAGENT, options.userAgent)
        // libcurl's own default would take HTTP/2 over TLS wherever a server offers it.
        try set(CURLOPT_HTTP_VERSION, Int(options.allowsHTTP2 ? CURL_HTTP_VERSION_2TLS : CURL_HTTP_VERSION_1_1))
        switch options.proxy {
        case .environment: break  // curl reads the environment itself
        case .none: try set(CURLOPT_PROXY, "")  // "" is curl's "no proxy, whatever the environment says"
        case .url(let url): try set(CURLOPT_PROXY, url)
        }

        // Without a write callback curl prints bodies to stdout.
        try check(xfer_easy_setopt_write_callback(raw, transferWriteCallback))
        try check(xfer_easy_setopt_pointer(raw, CURLOPT_WRITEDATA, userdata))
        try check(xfer_easy_setopt_header_callback(raw, transferHeaderCallback))
        try check(xfer_easy_setopt_pointer(raw, CURLOPT_HEADERDATA, userdata))

        if context.rangeWriter != nil {
            // A download's range: bigger pieces from curl, fewer writes (memory:
            // this much per transfer in flight, whatever the range's size).
            try set(CURLOPT_BUFFERSIZE, Self.downloadBufferSize)
        }
        if followsRedirects {
            // Downloads follow a server's redirects (a CDN, a signed URL), a few at most.
            // A custom Authorization header is not sent to another host (curl >= 7.58).
            try set(CURLOPT_FOLLOWLOCATION, 1)
            try set(CURLOPT_MAXREDIRS, Self.maximumRedirects)
        }

        try configureMethodAndBody(request, userdata: userdata)
        try configureHeaders(request)
    }

    /// curl's receive buffer for a download's range (its default is 16 KiB).
    static let downloadBufferSize = 256 << 10
    /// Redirects a download follows before failing.
    static let maximumRedirects = 8

    private func configureMethodAndBody(_ request: HTTPRequest, userdata: UnsafeMutableRawPointer) throws(TransportError) {
        let method = request.method
        if method == .head {
            try set(CURLOPT_NOBODY, 1)
            return
        }
        let carriesBody = !request.body.isEmpty || method == .post || method == .put || method == .patch
        guard carriesBody else {
            try set(CURLOPT_HTTPGET, 1)
            if method != .get {
                try set(CURLOPT_CUSTOMREQUEST, method.rawValue)
            }
            return
        }
        // The size is always known, so curl sends Content-Length and never
        // chunked encoding, which some upload servers reject.
        let size = request.body.count
        // Under a rate limit every byte goes through the read callback, where
        // the budget is kept; only an empty body has nothing to count.
        if size <= Self.inlineBodyLimit, let context, context.throttle == nil || size == 0 {
            // Small bodies go from memory, with the headers in one send: through
            // the read callback they were a second send, and curl mapped and
            // unmapped its 512 KiB upload buffer for every request.
            guard let bytes = context.makeInlineBody() else { throw TransportError.localFile(context.bodyFailure ?? .interrupted) }
            try check(xfer_easy_setopt_off_t(raw, CURLOPT_POSTFIELDSIZE_LARGE, size))
            try check(xfer_easy_setopt_pointer(raw, CURLOPT_POSTFIELDS, UnsafeMutableRawPointer(mutating: bytes.baseAddress)))
            if method != .post { try set(CURLOPT_CUSTOMREQUEST, method.rawValue) }
            return
        }
        if method == .post {
            try set(CURLOPT_POST, 1)
            try check(xfer_easy_setopt_off_t(raw, CURLOPT_POSTFIELDSIZE_LARGE, size))
        } else {
            // UPLOAD streams from the read callback for any verb; only the
            // request line changes.
            try set(CURLOPT_UPLOAD, 1)
            try check(xfer_easy_setopt_off_t(raw, CURLOPT_INFILESIZE_LARGE, size))
            if method != .put {
                try set(CURLOPT_CUSTOMREQUEST, method.rawValue)
            }
        }
        // No bigger than the body: curl allocates the buffer for every
        // transfer, and 512 KiB is a mapping of its own (mapped, faulted in
        // and unmapped per request) where a 64 KiB chunk's buffer is reused heap.
        try set(CURLOPT_UPLOAD_BUFFERSIZE, min(Self.uploadBufferSize, max(Self.minimumUploadBufferSize, size)))
        hasStreamedBody = true
        try check(xfer_easy_setopt_read_callback(raw, transferReadCallback))
        try check(xfer_easy_setopt_pointer(raw, CURLOPT_READDATA, userdata))
        try check(xfer_easy_setopt_seek_callback(raw, transferSeekCallback))
        try check(xfer_easy_setopt_pointer(raw, CURLOPT_SEEKDATA, userdata))
    }

    private func configureHeaders(_ request: HTTPRequest) throws(TransportError) {
        var line: [UInt8] = []
        for field in request.headers {
            // Fields of ASCII (all of xfer's own, nearly every user's) are checked and joined
            // byte by byte into one reused buffer: the same rules through `String`'s characters
            // cost ~29,000 instructions a small file's request, now ~10,000 (`callgrind`, issue 46).
            switch HeaderLine.make(name: field.name, value: field.value, into: &line) {
            case .line:
                try appendHeaderLine(bytes: line)
                continue
            case .skipped:
                continue
            case .notASCII:
                break
            }
            let name = field.name.trimmingHTTPWhitespace()
            // Framing belongs to the transport: it always sends the exact
            // Content-Length itself, and a stray value would corrupt the
            // request. Names that are not tokens could smuggle extra lines.
            guard name.isHTTPToken,
                  !name.caseInsensitiveEquals("Content-Length"),
                  !name.caseInsensitiveEquals("Transfer-Encoding")
            else { continue }
            let value = field.value.withoutLineBreaks().trimmingHTTPWhitespace()
            // "Name;" is curl's syntax for a header sent with an empty value;
            // "Name:" would remove it instead.
            try appendHeaderLine(value.isEmpty ? "\(name);" : "\(name): \(value)")
        }
        // An empty Expect: stops curl from waiting for "100 Continue" before
        // large bodies; many servers never send it and every upload stalls.
        if !request.headers.contains("Expect") {
            try appendHeaderLine("Expect:")
        }
        // Keep curl from labelling a body from memory (any verb) as a form unless the caller did.
        if request.method != .get && request.method != .head && !request.headers.contains("Content-Type") {
            try appendHeaderLine("Content-Type:")
        }
        try check(xfer_easy_setopt_slist(raw, CURLOPT_HTTPHEADER, headerList))
    }

    /// `line`: NUL-terminated.
    private func appendHeaderLine(bytes line: [UInt8]) throws(TransportError) {
        let list = line.withUnsafeBufferPointer { buffer in
            buffer.withMemoryRebound(to: CChar.self) { curl_slist_append(headerList, $0.baseAddress) }
        }
        guard let list else { throw .network("out of memory building request headers") }
        headerList = list
    }

    private func appendHeaderLine(_ line: String) throws(TransportError) {
        // `withCString` hands curl the string's own bytes (curl copies them); passing the String
        // itself made a C copy of it first, one allocation a header of every request.
        guard let list = line.withCString({ curl_slist_append(headerList, $0) }) else {
            throw .network("out of memory building request headers")
        }
        headerList = list
    }

    /// Lets curl call the read callback again after it paused for want of
    /// an allowance. Loop thread only, outside curl's callbacks: libcurl
    /// allows unpausing only from the thread that drives the transfer. It
    /// also restarts curl's low-speed clock, so the time a request waited
    /// for its turn never counts as a stall.
    func resumeSending() {
        _ = curl_easy_pause(raw, CURLPAUSE_CONT)
    }

    // MARK: Completion

    /// The outcome of the transfer curl just finished with `code`.
    func outcome(for code: CURLcode) -> Result<HTTPResponse, TransportError> {
        guard let context, let target else {
            return .failure(.network("transfer finished without a context"))
        }
        if let writer = context.rangeWriter {
            // A download's range: what stopped the writing says more than curl's code.
            if let failure = writer.localFailure { return .failure(.localFile(failure)) }
            if let fault = writer.serverFault { return .failure(.network(fault)) }
            if code == CURLE_WRITE_ERROR, let refused = writer.refusedStatus {
                return .success(HTTPResponse(status: refused, headers: HTTPHeaders(context.headerFields), body: []))
            }
        }
        guard code == CURLE_OK else {
            var uploaded: curl_off_t = 0
            _ = xfer_easy_getinfo_off_t(raw, CURLINFO_SIZE_UPLOAD_T, &uploaded)
            context.noteInlineBodySent(uploaded: Int(uploaded))
            if let failure = context.bodyFailure { return .failure(.localFile(failure)) }
            return .failure(error(for: code, context: context, target: target))
        }
        context.noteInlineBodySent()
        var status = 0
        _ = xfer_easy_getinfo_long(raw, CURLINFO_RESPONSE_CODE, &status)
        return .success(HTTPResponse(
            status: status,
            headers: HTTPHeaders(context.headerFields),
            body: context.takeResponseBody()
        ))
    }

    private func error(for code: CURLcode, context: TransferContext, target: TransportURL) -> TransportError {
        var osErrno = 0
        _ = xfer_easy_getinfo_long(raw, CURLINFO_OS_ERRNO, &osErrno)
        let reason = scrubbed(curlMessage(for: code), context: context, target: target)

        switch code {
        case CURLE_UNSUPPORTED_PROTOCOL, CURLE_URL_MALFORMAT:
            return .invalidURL("\(target.redacted) (\(reason))")
        case CURLE_COULDNT_RESOLVE_HOST:
            return .couldNotResolve(host: target.host)
        case CURLE_COULDNT_CONNECT:
            let system = osErrno != 0 ? Self.systemMessage(osErrno) : reason
            // Through a proxy (named, or found in the environment by curl), the
            // connection that failed may be the one to the proxy: name that one.
            if proxy != .none, let tried = Self.connectionTried(in: reason), tried.host != target.host || tried.port != target.port {
                return .couldNotConnect(host: tried.host, port: tried.port, reason: "the proxy: \(system)")
            }
            return .couldNotConnect(host: target.host, port: target.port, reason: system)
        case CURLE_OPERATION_TIMEDOUT:
            return .timedOut(reason)
        case CURLE_WRITE_ERROR where context.exceededResponseLimit:
            return .responseTooLarge(limit: context.responseLimit)
        case CURLE_ABORTED_BY_CALLBACK:
            return .cancelled
        case CURLE_SSL_CONNECT_ERROR where osErrno != 0:
            // A handshake cut off by the network (reset, EOF) is transient,
            // unlike a handshake the peer refused.
            return .network(reason)
        case CURLE_SSL_CONNECT_ERROR, CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CERTPROBLEM,
             CURLE_SSL_CIPHER, CURLE_SSL_CACERT_BADFILE, CURLE_SSL_CRL_BADFILE, CURLE_SSL_ISSUER_ERROR,
             CURLE_SSL_PINNEDPUBKEYNOTMATCH, CURLE_SSL_INVALIDCERTSTATUS, CURLE_SSL_CLIENTCERT,
             CURLE_SSL_ENGINE_NOTFOUND, CURLE_SSL_ENGINE_SETFAILED, CURLE_SSL_ENGINE_INITFAILED,
             CURLE_SSL_SHUTDOWN_FAILED, CURLE_USE_SSL_FAILED:
            return .tls(reason)
        default:
            return .network(reason)
        }
    }

    /// The error buffer's detail when curl filled it, else the code's name.
    private func curlMessage(for code: CURLcode) -> String {
        let detail = String(cString: errorBuffer).trimmingHTTPWhitespace().withoutLineBreaks()
        return detail.isEmpty ? String(cString: curl_easy_strerror(code)) : detail
    }

    /// curl's messages name hosts, not queries or header values; this makes
    /// sure of it, since those may carry credentials. A proxy string curl
    /// cannot use is quoted whole, password included, hence the userinfo rule.
    private func scrubbed(_ message: String, context: TransferContext, target: TransportURL) -> String {
        var message = Self.withoutUserinfo(message)
        var secrets = target.secrets
        if case .url(let url) = proxy, let address = try? ProxyAddress(parsing: url) {
            secrets += address.secrets
        }
        for secret in secrets where secret.count >= 3 {
            message = message.replacing(secret, with: "…")
        }
        // Long values only: credentials are long, and scrubbing a short one
        // like "close" would mangle ordinary words.
        for secret in context.requestHeaderValues where secret.count >= 8 {
            message = message.replacing(secret, with: "…")
        }
        return message
    }

    /// The host and port of curl's "Failed to connect to HOST port PORT after
    /// N ms: ...", its only record of which connection failed.
    static func connectionTried(in message: String) -> (host: String, port: Int)? {
        let words = message.split(separator: " ")
        guard words.count >= 7, words[..<4] == ["Failed", "to", "connect", "to"], words[5] == "port",
              let port = Int(words[6])
        else { return nil }
        return (words[4].lowercased(), port)
    }

    /// `message` with every "user:password@" before a host removed.
    static func withoutUserinfo(_ message: String) -> String {
        guard message.contains("@") else { return message }
        var result = Substring(message)
        while let at = result.lastIndex(of: "@") {
            // The userinfo starts after the last space, quote or slash before the "@".
            let start = result[..<at].lastIndex(where: { " \t'\"/".contains($0) }).map(result.index(after:)) ?? result.startIndex
            result.removeSubrange(start...at)
        }
        return String(result)
    }

    private static func systemMessage(_ number: Int) -> String {
        guard let text = strerror(Int32(truncatingIfNeeded: number)) else { return "errno \(number)" }
        return String(cString: text)
    }

    // MARK: Typed setopt

    private func set(_ option: CURLoption, _ value: Int) throws(TransportError) {
        try check(xfer_easy_setopt_long(raw, option, value))
    }

    private func set(_ option: CURLoption, _ value: String) throws(TransportError) {
        // curl copies string options, so the temporary C string may go away.
        try check(value.withCString { xfer_easy_setopt_string(raw, option, $0) })
    }

    private func check(_ code: CURLcode) throws(TransportError) {
        guard code == CURLE_OK else {
            throw .network("could not configure the request: \(String(cString: curl_easy_strerror(code)))")
        }
    }
}

// MARK: - C callbacks
//
// Top-level functions capture nothing, so they convert to C function
// pointers. `userdata` is an unretained `TransferContext`: the easy handle
// that curl calls back for owns the context for the whole transfer.

private func transferWriteCallback(
    _ data: UnsafeMutablePointer<CChar>?, _ size: Int, _ count: Int, _ userdata: UnsafeMutableRawPointer?
) -> Int {
    guard let userdata else { return 0 }
    let context = Unmanaged<TransferContext>.fromOpaque(userdata).takeUnretainedValue()
    let length = size * count
    guard length > 0, let data else { return 0 }
    switch context.receiveBody(UnsafeRawBufferPointer(start: data, count: length)) {
    case .taken: return length
    // curl keeps the piece and stops reading until `CurlEasyHandle.resumeSending()`.
    case .paused: return Int(CURL_WRITEFUNC_PAUSE)
    case .failed: return 0
    }
}

private func transferHeaderCallback(
    _ data: UnsafeMutablePointer<CChar>?, _ size: Int, _ count: Int, _ userdata: UnsafeMutableRawPointer?
) -> Int {
    guard let userdata else { return 0 }
    let context = Unmanaged<TransferContext>.fromOpaque(userdata).takeUnretainedValue()
    let length = size * count
    if length > 0, let data {
        context.receiveHeaderLine(UnsafeRawBufferPointer(start: data, count: length))
    }
    return length
}

private func transferReadCallback(
    _ buffer: UnsafeMutablePointer<CChar>?, _ size: Int, _ count: Int, _ userdata: UnsafeMutableRawPointer?
) -> Int {
    guard let userdata, let buffer else { return Int(CURL_READFUNC_ABORT) }
    let context = Unmanaged<TransferContext>.fromOpaque(userdata).takeUnretainedValue()
    switch context.readBody(into: UnsafeMutableRawBufferPointer(start: buffer, count: size * count)) {
    case .bytes(let count): return count
    // curl stops asking until `CurlEasyHandle.resumeSending()`.
    case .paused: return Int(CURL_READFUNC_PAUSE)
    case .failed: return Int(CURL_READFUNC_ABORT)
    }
}

private func transferSeekCallback(_ userdata: UnsafeMutableRawPointer?, _ offset: Int, _ origin: Int32) -> Int32 {
    // curl only ever rewinds with SEEK_SET (0).
    guard let userdata, origin == 0 else { return CURL_SEEKFUNC_CANTSEEK }
    let context = Unmanaged<TransferContext>.fromOpaque(userdata).takeUnretainedValue()
    return context.seekBody(to: offset) ? CURL_SEEKFUNC_OK : CURL_SEEKFUNC_FAIL
}

/// A request field as the line curl is handed, made from its bytes when both its name and its
/// value are ASCII. The rules are `configureHeaders`' own for any text: the name and the value
/// trimmed of spaces and tabs, CR, LF and NUL in the value sent as spaces, a name that is not a
/// token or that names the framing (Content-Length, Transfer-Encoding) not sent, an empty value
/// as "Name;". Other text takes `String`'s path, where a character can be more than a byte.
enum HeaderLine {
    enum Made: Equatable { case line, skipped, notASCII }

    static func make(name: String, value: String, into line: inout [UInt8]) -> Made {
        line.removeAll(keepingCapacity: true)
        var name = name
        var value = value
        return name.withUTF8 { name in
            value.withUTF8 { value in
                guard name.allSatisfy({ $0 < 0x80 }), value.allSatisfy({ $0 < 0x80 }) else { return .notASCII }
                let isBlank = { (byte: UInt8) in byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") }
                let isBreak = { (byte: UInt8) in byte == 0x0D || byte == 0x0A || byte == 0 }
                guard let first = name.firstIndex(where: { !isBlank($0) }), let last = name.lastIndex(where: { !isBlank($0) }) else {
                    return .skipped
                }
                let token = UnsafeBufferPointer(rebasing: name[first...last])
                guard token.allSatisfy(isTokenByte), !equalsIgnoringCase(token, "content-length"),
                    !equalsIgnoringCase(token, "transfer-encoding")
                else { return .skipped }
                line.reserveCapacity(token.count + value.count + 3)
                line.append(contentsOf: token)
                // A line break or NUL becomes a space, so it is trimmed like one.
                let kept = { (byte: UInt8) in !isBlank(byte) && !isBreak(byte) }
                if let start = value.firstIndex(where: kept), let end = value.lastIndex(where: kept) {
                    line.append(UInt8(ascii: ":"))
                    line.append(UInt8(ascii: " "))
                    let from = line.count
                    line.append(contentsOf: UnsafeBufferPointer(rebasing: value[start...end]))
                    for index in from..<line.count where isBreak(line[index]) { line[index] = UInt8(ascii: " ") }
                } else {
                    line.append(UInt8(ascii: ";"))
                }
                line.append(0)
                return .line
            }
        }
    }

    /// Token characters per RFC 9110 §5.6.2.
    static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
            UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: "!"), UInt8(ascii: "#"), UInt8(ascii: "$"),
            UInt8(ascii: "%"), UInt8(ascii: "&"), UInt8(ascii: "'"), UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: "^"),
            UInt8(ascii: "`"), UInt8(ascii: "|"), UInt8(ascii: "~"):
            return true
        default:
            return false
        }
    }

    /// `lowercase`: lowercase ASCII.
    private static func equalsIgnoringCase(_ bytes: UnsafeBufferPointer<UInt8>, _ lowercase: StaticString) -> Bool {
        guard bytes.count == lowercase.utf8CodeUnitCount else { return false }
        let other = UnsafeBufferPointer(start: lowercase.utf8Start, count: lowercase.utf8CodeUnitCount)
        // Setting bit 5 lowercases a letter and leaves the names' other bytes ("-") as they are.
        return zip(bytes, other).allSatisfy { ($0 | 0x20) == $1 }
    }
}

fileprivate extension String {
    /// Token characters per RFC 9110 §5.6.2; anything else cannot be a
    /// header name.
    var isHTTPToken: Bool {
        !isEmpty && utf8.allSatisfy(HeaderLine.isTokenByte)
    }

    func trimmingHTTPWhitespace() -> String {
        let isWhitespace = { (character: Character) in character == " " || character == "\t" }
        guard let start = firstIndex(where: { !isWhitespace($0) }),
              let end = lastIndex(where: { !isWhitespace($0) })
        else { return "" }
        return String(self[start...end])
    }

    /// CR, LF and NUL would end a header line early or truncate the C
    /// string; they become spaces.
    func withoutLineBreaks() -> String {
        guard utf8.contains(where: { $0 == 0x0D || $0 == 0x0A || $0 == 0 }) else { return self }
        return String(unicodeScalars.map { scalar -> Character in
            scalar == "\r" || scalar == "\n" || scalar == "\0" ? " " : Character(scalar)
        })
    }
}
