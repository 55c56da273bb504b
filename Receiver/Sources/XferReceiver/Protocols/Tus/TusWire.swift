import FoundationEssentials
import HTTPTypes
import Hummingbird
import XferWire
import XferPrimitives

// What tus requests carry in their headers and how its refusals read (see `TusRoutes`).
// Refusals are `{"error": ...}` with their status; `TusProtocolMiddleware` adds `Tus-Resumable`.

enum TusHeaders {
    static let version = TusField.version
    static let extensions = "creation,creation-with-upload,termination,checksum,concatenation"
    /// With `expiration` when unfinished uploads expire (`Upload-Expires` on creations and PATCHes).
    static func extensions(expiring: Bool) -> String { expiring ? extensions + ",expiration" : extensions }
    static let offsetStream = TusField.offsetStream
    /// `Upload-Metadata` is stored and echoed; a larger one is refused, not kept.
    static let metadataLimit = 16 * 1024

    static func isOffsetStream(_ contentType: String?) -> Bool {
        guard let contentType else { return false }
        let mediaType = contentType.split(separator: ";", maxSplits: 1).first ?? ""
        return mediaType.trimmingSpacesAndTabs().lowercased() == offsetStream
    }

    /// `Upload-Expires` of an unfinished upload a request just changed: `expireAfter` from now,
    /// as an HTTP date (RFC 9110); nil when uploads do not expire.
    static func expires(after expireAfter: Duration?, now: Date = Date()) -> String? {
        expireAfter.map { HTTPDate.format(now + $0.seconds) }
    }

    /// A non-negative decimal integer as tus headers carry them (the wire's reading).
    static func number(_ text: String) -> Int? { TusField.number(text) }

    static func contentLength(_ request: Request) throws(Refusal) -> Int? {
        guard let text = request.headers[.contentLength] else { return nil }
        guard let length = number(text) else { throw .error(.badRequest, "Content-Length is not a number") }
        return length
    }
}

extension Refusal {
    static let checksumMismatch = HTTPResponse.Status(code: 460, reasonPhrase: "Checksum Mismatch")

    /// The refusal of a write that did not store its whole body.
    static func tusWrite(_ failure: OffsetWriteFailure, maximumChunkSize: Int) -> Refusal {
        switch failure {
        case .interrupted(let offset):
            // Nobody is left to read this: the client went away.
            .error(.badRequest, "the request body was cut; the upload's offset is \(offset)", headers: [.uploadOffset: String(offset)])
        case .checksumMismatch:
            .error(checksumMismatch, "the body does not match its Upload-Checksum; nothing of it was kept")
        case .tooLarge(let limit):
            .error(
                .contentTooLarge,
                "the body is larger than the \(limit) bytes this request may carry (what is left of Upload-Length, at most \(maximumChunkSize)); nothing of it was kept")
        case .offsetMoved(let offset):
            .error(.conflict, "another request appended at this offset first; the upload's offset is \(offset)", headers: [.uploadOffset: String(offset)])
        case .lengthRequired:
            .error(.lengthRequired, "this receiver needs a PATCH body's Content-Length")
        }
    }
}

extension TusChecksum.Algorithm {
    var streaming: StreamingDigest.Algorithm {
        switch self {
        case .crc32c: .crc32c
        case .sha1: .sha1
        case .sha256: .sha256
        case .md5: .md5
        }
    }
}

extension TusChecksum {
    /// The request's `Upload-Checksum` as the check its body must pass; nil without one.
    static func check(of request: Request) throws(Refusal) -> BodyWriter.Check? {
        guard let header = request.headers[.uploadChecksum] else { return nil }
        switch parse(header) {
        case .success(let checksum):
            return BodyWriter.Check(algorithm: checksum.algorithm.streaming, expected: checksum.digest)
        case .failure(.unsupportedAlgorithm):
            throw .error(.badRequest, "Upload-Checksum algorithm not supported; Tus-Checksum-Algorithm: \(advertised)")
        case .failure(.malformed):
            throw .error(.badRequest, "Upload-Checksum must be 'ALGORITHM BASE64' with the digest's full length")
        }
    }
}

extension TusMetadata {
    /// The pairs as text, for the application's hooks (a value that is not UTF-8 is decoded
    /// lossily: hooks read names and labels, not bytes).
    static func text(_ pairs: [String: [UInt8]]) -> [String: String] {
        pairs.mapValues { String(decoding: $0, as: UTF8.self) }
    }

    /// `Upload-Metadata` holding `pairs` (keys sorted); nil when a key cannot be one (empty, a
    /// space, a comma or a control character in it) or the whole is past `TusHeaders.metadataLimit`.
    static func header(_ pairs: [String: String]) -> String? {
        guard let text = header(pairs.keys.sorted().map { (key: $0, value: Array(pairs[$0]!.utf8)) }) else { return nil }
        return text.utf8.count <= TusHeaders.metadataLimit ? text : nil
    }

    /// Where the file lands, from the metadata's pairs: `relativePath` when present (validated
    /// like every protocol's path: an unsafe one is 400), else `filename`'s last component (as
    /// before; unusable ones are ignored), else nil (the default name "file").
    ///
    /// `relativePath` "null" counts as absent: Uppy sends `String(null)` for a file that was not
    /// found in a folder.
    static func destination(_ pairs: [String: [UInt8]]) throws(Refusal) -> RelativePath? {
        if let bytes = pairs["relativePath"], bytes != Array("null".utf8) {
            guard let text = String(validating: bytes, as: UTF8.self) else {
                throw .error(.badRequest, "relativePath must be UTF-8 (base64-encoded in Upload-Metadata)")
            }
            return try RelativePath.parse(text, field: "relativePath") { .error(.badRequest, $0) }
        }
        if let bytes = pairs["filename"], let name = String(validating: bytes, as: UTF8.self).flatMap(FileNames.lastComponent) {
            return RelativePath.validated(name)
        }
        return nil
    }
}

extension TusConcat {
    /// The request's `Upload-Concat`, a final concatenation's URLs turned into this server's
    /// upload ids (not checked for existence).
    static func read(_ header: String) throws(Refusal) -> TusConcat {
        let concat: TusConcat
        do {
            concat = try parse(header)
        } catch {
            throw .error(.badRequest, error.description)
        }
        guard case .final(let urls) = concat else { return concat }
        var ids: [String] = []
        for url in urls {
            guard let id = uploadID(fromURL: url) else {
                throw .error(.badRequest, "'\(url.prefix(200))' is not an upload URL of this server (/files/ID)")
            }
            ids.append(id)
        }
        return .final(ids)
    }
}

extension HTTPField.Name {
    static let tusResumable = HTTPField.Name(TusField.tusResumable)!
    static let tusVersion = HTTPField.Name(TusField.tusVersion)!
    static let tusExtension = HTTPField.Name(TusField.tusExtension)!
    static let tusMaxSize = HTTPField.Name(TusField.tusMaxSize)!
    static let tusChecksumAlgorithm = HTTPField.Name(TusField.tusChecksumAlgorithm)!
    static let uploadOffset = HTTPField.Name(TusField.uploadOffset)!
    static let uploadLength = HTTPField.Name(TusField.uploadLength)!
    static let uploadDeferLength = HTTPField.Name(TusField.uploadDeferLength)!
    static let uploadMetadata = HTTPField.Name(TusField.uploadMetadata)!
    static let uploadConcat = HTTPField.Name(TusField.uploadConcat)!
    static let uploadChecksum = HTTPField.Name(TusField.uploadChecksum)!
    static let uploadExpires = HTTPField.Name(TusField.uploadExpires)!
    static let xHTTPMethodOverride = HTTPField.Name("X-HTTP-Method-Override")!
}
