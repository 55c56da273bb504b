/// How the HTTP transport talks to servers. Users set these through the
/// engine's options.
public struct TransportOptions: Sendable, Hashable {
    /// Time allowed for DNS, TCP and TLS setup of a new connection.
    public var connectTimeout: Duration = .seconds(15)
    /// A transfer slower than `lowSpeedLimit` bytes/s for `lowSpeedTime` is
    /// abandoned (-> `TransportError.timedOut`) so it can be retried instead of
    /// hanging. This also covers a server that takes longer than
    /// `lowSpeedTime` to answer after the upload finished. 0 disables it.
    public var lowSpeedLimit: Int = 1024
    /// How long a transfer may stay below `lowSpeedLimit`.
    public var lowSpeedTime: Duration = .seconds(30)
    /// Optional cap on a whole request; nil = none.
    public var requestTimeout: Duration? = nil
    /// Global cap on simultaneous connections to one host
    /// (CURLMOPT_MAX_HOST_CONNECTIONS); 0 means unlimited. A job's
    /// concurrency already bounds its requests; this bounds the transport's
    /// jobs together, and must not be below what one job may ask for (it
    /// was 8: `--concurrency 16` then kept 8 requests waiting in curl's queue).
    public var maximumConnectionsPerHost: Int = 64
    /// TLS verification is on by default; turn it off only for test servers.
    public var verifyTLS: Bool = true
    /// A PEM bundle of trusted CAs (CURLOPT_CAINFO); nil uses the system's.
    public var caCertificatePath: String? = nil
    /// Whether a request over TLS may take HTTP/2 where the server offers it
    /// (ALPN); plain `http://` is HTTP/1.1 either way. Off by default: every
    /// request of a host then shares one connection, and a server's HTTP/2
    /// flow-control window (64 KiB by default in haproxy and SwiftNIO) holds
    /// each chunk to that much per round trip, where HTTP/1.1 keeps a TCP
    /// connection per request in flight (Docs/benchmarks.md, "Far from the
    /// server", measures both).
    public var allowsHTTP2: Bool = false
    /// Which proxy requests go through: by default the one the environment
    /// names, by libcurl's rules.
    public var proxy: Proxy = .environment
    /// Upload APIs answer with small documents; a bigger body is treated as
    /// an error (`TransportError.responseTooLarge`) rather than buffered.
    public var maximumResponseBodySize: Int = 4 << 20
    /// The `User-Agent` header sent with every request.
    public var userAgent: String = "xfer/0.1"
    /// Bytes per second of request bodies for the whole transport — every
    /// request in flight together, not each one; nil means no limit. A
    /// `TransferEngine` has one transport, so this bounds all its jobs.
    /// Responses are not limited. Within `sendRates`.
    public var maximumSendRate: Int64? = nil

    /// The defaults above.
    public init() {}

    /// The send rates accepted, 1 KiB/s to 1 TiB/s: below, a request of a
    /// few KiB would take minutes, which is never what was meant; above is
    /// far beyond any link.
    public static let sendRates: ClosedRange<Int64> = (1 << 10)...(1 << 40)

    /// Checks the values against the transport's bounds; `TransferEngine`
    /// checks them too, so calling this first only moves the error earlier.
    ///
    /// - Throws: `.invalidInput`, saying which value is out of range.
    public func validate() throws(XferError) {
        if let rate = maximumSendRate, !Self.sendRates.contains(rate) {
            throw .invalidInput("the send rate limit must be between 1 KiB/s and 1 TiB/s, not \(rate) bytes/s")
        }
    }
}

extension Duration {
    /// Whole milliseconds, rounded up so that a tiny positive duration never
    /// becomes curl's "0 = no limit".
    var roundedUpMilliseconds: Int {
        let (seconds, attoseconds) = components
        guard seconds >= 0, !(seconds == 0 && attoseconds <= 0) else { return 0 }
        let perMillisecond: Int64 = 1_000_000_000_000_000
        let (wholeMilliseconds, remainder) = attoseconds.quotientAndRemainder(dividingBy: perMillisecond)
        let milliseconds = seconds.multipliedReportingOverflow(by: 1000)
        guard !milliseconds.overflow else { return Int.max }
        return Int(milliseconds.partialValue) + Int(wholeMilliseconds) + (remainder > 0 ? 1 : 0)
    }

    /// Whole seconds, rounded up, for curl options that only take seconds.
    var roundedUpSeconds: Int {
        let milliseconds = roundedUpMilliseconds
        return milliseconds / 1000 + (milliseconds % 1000 > 0 ? 1 : 0)
    }
}
