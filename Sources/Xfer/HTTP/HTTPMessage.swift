import XferWire
import Crypto

/// The HTTP values a backend deals in. A backend never performs I/O: it
/// describes an `HTTPRequest` and interprets an `HTTPResponse`; the engine
/// sends one and hands back the other.

/// An HTTP method. Open-ended so a backend can use any verb its server wants.
public struct HTTPMethod: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    /// The method's name, e.g. `POST`.
    public var rawValue: String
    /// A method by name (case matters on the wire).
    public init(rawValue: String) { self.rawValue = rawValue }

    /// `GET`.
    public static let get = HTTPMethod(rawValue: "GET")
    /// `HEAD`.
    public static let head = HTTPMethod(rawValue: "HEAD")
    /// `POST`.
    public static let post = HTTPMethod(rawValue: "POST")
    /// `PUT`.
    public static let put = HTTPMethod(rawValue: "PUT")
    /// `PATCH`.
    public static let patch = HTTPMethod(rawValue: "PATCH")
    /// `DELETE`.
    public static let delete = HTTPMethod(rawValue: "DELETE")
    /// `OPTIONS`.
    public static let options = HTTPMethod(rawValue: "OPTIONS")

    /// The method's name.
    public var description: String { rawValue }
}

/// A request body, described rather than held: bytes, or one chunk of the
/// file being pushed with optional framing before and after it (a multipart
/// form's part headers and closing boundary).
///
/// A backend names the chunk (`RequestBody(chunk:)`) instead of copying its
/// bytes: the engine streams them from the file into curl's buffer as the
/// request is sent, so no buffer of the chunk's size exists anywhere.
public struct RequestBody: Sendable, Hashable {
    /// Bytes sent before the content (e.g. a form's fields and part header).
    public private(set) var framingBefore: [UInt8]
    /// Bytes sent after the content (e.g. a form's closing boundary).
    public private(set) var framingAfter: [UInt8]
    /// The content: bytes the backend built, or the chunk.
    package let content: Content
    /// The chunk the content is, when it is one (its index and offset).
    public private(set) var chunk: ChunkReference?

    package enum Content: Sendable, Hashable {
        case bytes([UInt8])
        case chunk(ChunkBytes)

        var count: Int {
            switch self {
            case .bytes(let bytes): return bytes.count
            case .chunk(let chunk): return chunk.length
            }
        }
    }

    /// Which chunk a body carries.
    public struct ChunkReference: Sendable, Hashable {
        /// The chunk's 0-based index in the file.
        public var index: Int
        /// The byte offset the body's content starts at in the file.
        public var offset: Int64
        /// The content's length in bytes.
        public var length: Int
    }

    /// A body of these bytes.
    public init(_ bytes: [UInt8]) {
        framingBefore = []
        content = .bytes(bytes)
        framingAfter = []
        chunk = nil
    }

    /// A body carrying `chunk`'s bytes, with `before` and `after` around them.
    public init(chunk: ChunkPayload, before: [UInt8] = [], after: [UInt8] = []) {
        framingBefore = before
        content = .chunk(chunk.bytesSource)
        framingAfter = after
        self.chunk = ChunkReference(index: chunk.index, offset: chunk.offset, length: chunk.count)
    }

    /// No body.
    public static let empty = RequestBody([])

    /// Total length in bytes.
    public var count: Int { framingBefore.count + content.count + framingAfter.count }
    /// Whether the body has no bytes.
    public var isEmpty: Bool { count == 0 }

    /// The body's bytes when it holds them in memory (framing included); nil when it names a chunk
    /// of a file, which only the engine's transport reads. For a client of another transport that
    /// sends what a backend or `XferS3` described (the receiver's object storage).
    public var bytesInMemory: [UInt8]? {
        guard case .bytes(let bytes) = content else { return nil }
        if framingBefore.isEmpty, framingAfter.isEmpty { return bytes }
        return framingBefore + bytes + framingAfter
    }

    /// The SHA-256 of the whole body (32 bytes), e.g. for a signature over
    /// the payload. A chunk's bytes are read from the file for it (and the
    /// chunk's digest is kept for the next attempt).
    public var sha256: [UInt8] {
        get throws(XferError) {
            if framingBefore.isEmpty, framingAfter.isEmpty, case .chunk(let bytes) = content {
                let digest = bytes.digest(.sha256)
                if let failure = bytes.failure { throw failure }
                return digest
            }
            var hash = SHA256()
            hash.update(data: framingBefore)
            switch content {
            case .bytes(let bytes): hash.update(data: bytes)
            case .chunk(let bytes): try bytes.forEachBlock { hash.update(data: $0) }
            }
            hash.update(data: framingAfter)
            return Array(hash.finalize())
        }
    }

    /// The body's bytes in order, the chunk's read into memory (for tests
    /// and small bodies; the transport streams instead).
    package func materializedSegments() throws(XferError) -> [[UInt8]] {
        let middle: [UInt8]
        switch content {
        case .bytes(let bytes): middle = bytes
        case .chunk(let bytes): middle = try bytes.materialized()
        }
        if framingBefore.isEmpty, framingAfter.isEmpty { return [middle] }
        return [framingBefore, middle, framingAfter]
    }
}

/// A request as a backend describes it.
///
/// `url` is absolute. Backends usually build it with `job.url("/path")`,
/// which joins a path to the job's target.
public struct HTTPRequest: Sendable, Hashable {
    /// The method.
    public var method: HTTPMethod
    /// The absolute URL.
    public var url: String
    /// Header fields; the engine adds the user's `--header` fields the backend did not set.
    public var headers: HTTPHeaders
    /// The body.
    public var body: RequestBody

    /// A request.
    public init(method: HTTPMethod, url: String, headers: HTTPHeaders = [:], body: RequestBody = .empty) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
    }
}

/// A response as the engine received it. The body is capped (see
/// `TransportOptions.maximumResponseBodySize`): upload APIs answer with small
/// JSON documents, and a server that streams megabytes back is misbehaving.
public struct HTTPResponse: Sendable, Hashable {
    /// The status code.
    public var status: Int
    /// The response's header fields.
    public var headers: HTTPHeaders
    /// The response body (capped in size).
    public var body: [UInt8]

    /// A response (the engine makes these; tests of a backend may too).
    public init(status: Int, headers: HTTPHeaders = [:], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// Whether the status is 2xx.
    public var isSuccess: Bool { (200..<300).contains(status) }

    /// The body decoded as UTF-8 (lossy), for messages.
    public var text: String { String(decoding: body, as: UTF8.self) }
}

extension String {
    func caseInsensitiveEquals(_ other: String) -> Bool {
        utf8.count == other.utf8.count && lowercased() == other.lowercased()
    }
}
