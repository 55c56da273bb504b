import CCurl

/// Sends one request on the calling thread, through libcurl configured as
/// the engine's transport configures it (timeouts, TLS trust, proxy,
/// User-Agent, response size cap, scrubbed errors), but outside any engine.
///
/// For the few requests a backend must make itself, apart from the steps
/// the engine sends: fetching temporary credentials from a token service or
/// a metadata endpoint, say. Each call opens its own connection, so it
/// suits a request every few minutes, not a data path.
///
/// `send` blocks the calling thread until the answer, for as long as the
/// options' timeouts allow: give it short ones, and call it from a thread
/// that may block, not from a task expected to yield.
public struct BlockingHTTPClient: Sendable {
    /// How connections are made and how long a request may take.
    public var options: TransportOptions

    /// A client with `options`; `TransportOptions.maximumSendRate` is not
    /// applied (these requests are small and must not wait behind uploads).
    public init(options: TransportOptions = TransportOptions()) {
        self.options = options
    }

    /// Sends `request` and returns the final response, whatever its status;
    /// redirects are not followed.
    public func send(_ request: HTTPRequest) throws(TransportError) -> HTTPResponse {
        try CurlLibrary.initialize()
        let target = try TransportURL(parsing: request.url)
        guard let easy = CurlEasyHandle() else { throw .network("could not create a curl easy handle") }
        let context = TransferContext(
            request: request, id: 0, responseLimit: options.maximumResponseBodySize, bodyBytesSent: TransferByteCounter())
        try easy.prepare(request, target: target, options: options, context: context)
        // The handle is in no multi handle: curl drives it here, on this thread.
        let code = curl_easy_perform(easy.raw)
        return try easy.outcome(for: code).get()
    }
}
