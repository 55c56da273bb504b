import Foundation
import HTTPTypes
import Hummingbird

// What tus requests carry in their headers and how its refusals read (see `TusRoutes`).
// Refusals are `{"error": ...}` with their status; `TusProtocolMiddleware` adds `Tus-Resumable`.

enum TusHeaders {
    static let version = "1.0.0"
    static let extensions = "creation,creation-with-upload,termination,checksum,concatenation"
    /// With `expiration` when unfinished uploads expire (`Upload-Expires` on creations and PATCHes).
    static func extensions(expiring: Bool) -> String { expiring ? extensions + ",expiration" : extensions }
    static let offsetStream = "application/offset+octet-stream"
    /// `Upload-Metadata` is stored and echoed; a larger one is refused, not kept.
    static let metadataLimit = 16 * 1024

    static func isOffsetStream(_ contentType: String?) -> Bool {
        guard let contentType else { return false }
        let mediaType = contentType.split(separator: ";", maxSplits: 1).first ?? ""
        return mediaType.trimmingCharacters(in: .whitespaces).lowercased() == offsetStream
    }

    /// `Upload-Expires` of an unfinished upload a request just changed: `expireAfter` from now,
    /// as an HTTP date (RFC 9110); nil when uploads do not expire.
    static func expires(after expireAfter: Duration?, now: Date = Date()) -> String? {
        expireAfter.map { HTTPDate.format(now + $0.seconds) }
    }

    /// A non-negative decimal integer as tus headers carry them; nil for anything else.
    static func number(_ text: String) -> Int? {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        guard (1...18).contains(trimmed.utf8.count), trimmed.utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }) else {
            return nil
        }
        return Int(trimmed)
    }

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

/// The checksum extension: `Upload-Checksum: ALGORITHM BASE64(DIGEST)` of one request's body.
struct TusChecksum: Sendable, Equatable {
    /// Cheapest first: a client that takes the first it knows sends CRC-32C (4 bytes, big-endian,
    /// as RFC 9530's `crc32c`), which costs the receiver ~1/20 of SHA-1's CPU.
    enum Algorithm: String, Sendable, CaseIterable {
        case crc32c, sha1, sha256, md5

        var digestLength: Int {
            switch self {
            case .crc32c: 4
            case .sha1: 20
            case .sha256: 32
            case .md5: 16
            }
        }

        var streaming: StreamingDigest.Algorithm {
            switch self {
            case .crc32c: .crc32c
            case .sha1: .sha1
            case .sha256: .sha256
            case .md5: .md5
            }
        }
    }

    /// `Tus-Checksum-Algorithm`, in the order of `Algorithm`.
    static let advertised = Algorithm.allCases.map(\.rawValue).joined(separator: ",")

    enum Problem: Error, Equatable {
        /// 400 by the spec, like a malformed header.
        case unsupportedAlgorithm
        case malformed
    }

    let algorithm: Algorithm
    let digest: [UInt8]

    static func parse(_ header: String) -> Result<TusChecksum, Problem> {
        let parts = header.trimmingCharacters(in: .whitespaces).split(separator: " ", omittingEmptySubsequences: true)
        guard parts.count == 2 else { return .failure(.malformed) }
        guard let algorithm = Algorithm(rawValue: String(parts[0])) else { return .failure(.unsupportedAlgorithm) }
        guard let digest = Data(base64Encoded: String(parts[1])), digest.count == algorithm.digestLength else {
            return .failure(.malformed)
        }
        return .success(TusChecksum(algorithm: algorithm, digest: Array(digest)))
    }

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

/// `Upload-Metadata`: `key base64,key base64,key` (the value may be left out).
enum TusMetadata {
    /// Keys and decoded values; nil when malformed (empty or repeated key, a space or comma in a
    /// key, a value that is not base64).
    static func parse(_ header: String) -> [String: [UInt8]]? {
        var pairs: [String: [UInt8]] = [:]
        for item in header.split(separator: ",", omittingEmptySubsequences: false) {
            let parts = item.trimmingCharacters(in: .whitespaces).split(separator: " ", omittingEmptySubsequences: false)
            guard parts.count == 1 || parts.count == 2 else { return nil }
            let key = String(parts[0])
            guard !key.isEmpty, pairs[key] == nil, key.utf8.allSatisfy({ $0 > 0x20 && $0 != 0x7F && $0 != UInt8(ascii: ",") }) else {
                return nil
            }
            var value: [UInt8] = []
            if parts.count == 2 {
                guard let decoded = Data(base64Encoded: String(parts[1])) else { return nil }
                value = Array(decoded)
            }
            pairs[key] = value
        }
        return pairs
    }

    /// The pairs as text, for the application's hooks (a value that is not UTF-8 is decoded
    /// lossily: hooks read names and labels, not bytes).
    static func text(_ pairs: [String: [UInt8]]) -> [String: String] {
        pairs.mapValues { String(decoding: $0, as: UTF8.self) }
    }

    /// `Upload-Metadata` holding `pairs` (keys sorted); nil when a key cannot be one (empty, a
    /// space, a comma or a control character in it) or the whole is past `TusHeaders.metadataLimit`.
    static func header(_ pairs: [String: String]) -> String? {
        var items: [String] = []
        for key in pairs.keys.sorted() {
            guard !key.isEmpty, key.utf8.allSatisfy({ $0 > 0x20 && $0 != 0x7F && $0 != UInt8(ascii: ",") }) else { return nil }
            let value = pairs[key]!
            items.append(value.isEmpty ? key : key + " " + Data(value.utf8).base64EncodedString())
        }
        let header = items.joined(separator: ",")
        return header.utf8.count <= TusHeaders.metadataLimit ? header : nil
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

/// `Upload-Concat`: `partial`, or `final;` and the partial uploads' URLs (absolute or paths),
/// separated by spaces.
enum TusConcat: Equatable {
    case partial
    case final([String])

    static func parse(_ header: String) throws(Refusal) -> TusConcat {
        let trimmed = header.trimmingCharacters(in: .whitespaces)
        if trimmed == "partial" { return .partial }
        guard trimmed.hasPrefix("final;") else {
            throw .error(.badRequest, "Upload-Concat must be 'partial' or 'final;URL URL ...'")
        }
        let urls = trimmed.dropFirst("final;".count).split(separator: " ", omittingEmptySubsequences: true)
        guard !urls.isEmpty else { throw .error(.badRequest, "Upload-Concat: final; must list the partial uploads' URLs") }
        var ids: [String] = []
        for url in urls {
            guard let id = uploadID(fromURL: String(url)) else {
                throw .error(.badRequest, "'\(url.prefix(200))' is not an upload URL of this server (/files/ID)")
            }
            ids.append(id)
        }
        return .final(ids)
    }

    /// `http://host/files/ID` or `/files/ID` → ID (not checked for existence).
    static func uploadID(fromURL url: String) -> String? {
        var path = Substring(url)
        if let scheme = path.range(of: "://") {
            let afterScheme = path[scheme.upperBound...]
            guard let slash = afterScheme.firstIndex(of: "/") else { return nil }
            path = afterScheme[slash...]
        }
        guard path.hasPrefix("/files/") else { return nil }
        var id = path.dropFirst("/files/".count)
        if id.hasSuffix("/") { id = id.dropLast() }
        guard !id.isEmpty, !id.contains("/"), !id.contains("?"), !id.contains("#") else { return nil }
        return String(id)
    }
}

extension HTTPField.Name {
    static let tusResumable = HTTPField.Name("Tus-Resumable")!
    static let tusVersion = HTTPField.Name("Tus-Version")!
    static let tusExtension = HTTPField.Name("Tus-Extension")!
    static let tusMaxSize = HTTPField.Name("Tus-Max-Size")!
    static let tusChecksumAlgorithm = HTTPField.Name("Tus-Checksum-Algorithm")!
    static let uploadOffset = HTTPField.Name("Upload-Offset")!
    static let uploadLength = HTTPField.Name("Upload-Length")!
    static let uploadDeferLength = HTTPField.Name("Upload-Defer-Length")!
    static let uploadMetadata = HTTPField.Name("Upload-Metadata")!
    static let uploadConcat = HTTPField.Name("Upload-Concat")!
    static let uploadChecksum = HTTPField.Name("Upload-Checksum")!
    static let uploadExpires = HTTPField.Name("Upload-Expires")!
    static let xHTTPMethodOverride = HTTPField.Name("X-HTTP-Method-Override")!
}
