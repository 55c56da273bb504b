import XferWire
/// How one push runs. Values left nil take the backend's defaults.
public struct TransferOptions: Sendable, Hashable {
    /// Chunk size in bytes (the backend may adjust it per file; the server
    /// may choose another when the file is opened).
    public var chunkSize: Int?
    /// Requests of this job in flight at once.
    public var concurrency: Int?
    /// When and how often failed requests are tried again.
    public var retry: RetryPolicy
    /// Headers added to every request (e.g. from `--header`). Their values
    /// are treated as secrets: never logged or shown.
    public var extraHeaders: HTTPHeaders
    /// What the backend uses to authenticate; never stored or shown.
    public var credentials: Credentials
    /// Whether the job emits `TransferEvent.requestFinished` for every
    /// request. Off by default: it is an event per request, for logs.
    public var reportsRequests: Bool

    /// Options; nil values take the backend's defaults (a resumed job keeps its chunk sizes).
    public init(
        chunkSize: Int? = nil,
        concurrency: Int? = nil,
        retry: RetryPolicy = RetryPolicy(),
        extraHeaders: HTTPHeaders = [:],
        credentials: Credentials = Credentials(),
        reportsRequests: Bool = false
    ) {
        self.chunkSize = chunkSize
        self.concurrency = concurrency
        self.retry = retry
        self.extraHeaders = extraHeaders
        self.credentials = credentials
        self.reportsRequests = reportsRequests
    }

    /// The largest chunk the engine accepts: chunks are held in memory while
    /// in flight, so memory is bounded by concurrency × chunk size.
    public static let maximumChunkSize = 1 << 30
    /// The most requests of one job in flight at once.
    public static let maximumConcurrency = 64
    /// The most attempts per request (`RetryPolicy.maximumAttempts`).
    public static let maximumAttempts = 100

    /// Checks the values set against the engine's bounds; a push checks them
    /// too, so calling this first only moves the error earlier (e.g. before
    /// anything is looked up). The one place these ranges are written.
    ///
    /// - Throws: `.invalidInput`, saying which value is out of range.
    public func validate() throws(XferError) {
        if let chunkSize { try Self.check(chunkSize: chunkSize) }
        if let concurrency { try Self.check(concurrency: concurrency) }
        guard (1...Self.maximumAttempts).contains(retry.maximumAttempts) else {
            throw .invalidInput("attempts per request must be between 1 and \(Self.maximumAttempts), not \(retry.maximumAttempts)")
        }
    }

    static func check(chunkSize: Int) throws(XferError) {
        guard (1...maximumChunkSize).contains(chunkSize) else {
            throw .invalidInput("the chunk size must be between 1 byte and 1 GiB, not \(chunkSize)")
        }
    }

    static func check(concurrency: Int) throws(XferError) {
        guard (1...maximumConcurrency).contains(concurrency) else {
            throw .invalidInput("concurrency must be between 1 and \(maximumConcurrency), not \(concurrency)")
        }
    }
}
