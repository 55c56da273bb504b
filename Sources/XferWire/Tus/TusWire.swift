import FoundationEssentials
import XferPrimitives

// The tus 1.0.0 protocol's headers (https://tus.io/protocols/resumable-upload), written once:
// the client backend (Backends/Tus) writes and reads them with these types, the receiver's
// routes (Receiver/.../Protocols/Tus) read and write them with the same ones.

/// The header names and fixed values of tus.
public enum TusField {
    /// The protocol version both sides speak.
    public static let version = "1.0.0"
    /// A PATCH body's media type.
    public static let offsetStream = "application/offset+octet-stream"

    public static let tusResumable = "Tus-Resumable"
    public static let tusVersion = "Tus-Version"
    public static let tusExtension = "Tus-Extension"
    public static let tusMaxSize = "Tus-Max-Size"
    public static let tusChecksumAlgorithm = "Tus-Checksum-Algorithm"
    public static let uploadOffset = "Upload-Offset"
    public static let uploadLength = "Upload-Length"
    public static let uploadDeferLength = "Upload-Defer-Length"
    public static let uploadMetadata = "Upload-Metadata"
    public static let uploadConcat = "Upload-Concat"
    public static let uploadChecksum = "Upload-Checksum"
    public static let uploadExpires = "Upload-Expires"

    /// A non-negative decimal integer as tus headers carry them (`Upload-Offset`,
    /// `Upload-Length`, `Tus-Max-Size`): ASCII digits only, at most 18 of them (no overflow,
    /// no sign), spaces around allowed; nil for anything else.
    public static func number(_ text: some StringProtocol) -> Int? {
        HTTPNumber.nonNegative(text, maximumDigits: 18)
    }

    /// A comma-separated list (`Tus-Version`, `Tus-Extension`, `Tus-Checksum-Algorithm`),
    /// its items trimmed, empty ones dropped.
    public static func list(_ header: String?) -> [String] {
        (header ?? "").split(separator: ",").map { $0.trimmingSpacesAndTabs() }.filter { !$0.isEmpty }
    }
}

/// `Upload-Metadata`: `key base64,key base64,key` (the value may be left out).
public enum TusMetadata {
    /// Keys and decoded values; nil when malformed (empty or repeated key, a space or comma in a
    /// key, a value that is not base64).
    public static func parse(_ header: String) -> [String: [UInt8]]? {
        var pairs: [String: [UInt8]] = [:]
        for item in header.split(separator: ",", omittingEmptySubsequences: false) {
            let parts = item.trimmingSpacesAndTabs().split(separator: " ", omittingEmptySubsequences: false)
            guard parts.count == 1 || parts.count == 2 else { return nil }
            let key = String(parts[0])
            guard isKey(key), pairs[key] == nil else { return nil }
            var value: [UInt8] = []
            if parts.count == 2 {
                guard let decoded = Data(base64Encoded: String(parts[1])) else { return nil }
                value = Array(decoded)
            }
            pairs[key] = value
        }
        return pairs
    }

    /// `Upload-Metadata` holding `pairs` in their order (an empty value as the key alone); nil
    /// when a key cannot be one (empty, a space, a comma or a control character in it).
    public static func header(_ pairs: [(key: String, value: [UInt8])]) -> String? {
        var items: [String] = []
        for (key, value) in pairs {
            guard isKey(key) else { return nil }
            items.append(value.isEmpty ? key : key + " " + Data(value).base64EncodedString())
        }
        return items.joined(separator: ",")
    }

    private static func isKey(_ key: String) -> Bool {
        !key.isEmpty && key.utf8.allSatisfy { $0 > 0x20 && $0 != 0x7F && $0 != UInt8(ascii: ",") }
    }
}

/// The checksum extension: `Upload-Checksum: ALGORITHM BASE64(DIGEST)` of one request's body.
public struct TusChecksum: Sendable, Equatable {
    /// Cheapest first: a client that takes the first it knows sends CRC-32C (4 bytes, big-endian,
    /// as RFC 9530's `crc32c`), which costs the receiver ~1/20 of SHA-1's CPU.
    public enum Algorithm: String, Sendable, CaseIterable {
        case crc32c, sha1, sha256, md5

        public var digestLength: Int {
            switch self {
            case .crc32c: 4
            case .sha1: 20
            case .sha256: 32
            case .md5: 16
            }
        }
    }

    /// `Tus-Checksum-Algorithm`, in the order of `Algorithm`.
    public static let advertised = Algorithm.allCases.map(\.rawValue).joined(separator: ",")

    public enum Problem: Error, Sendable, Equatable {
        /// 400 by the spec, like a malformed header.
        case unsupportedAlgorithm
        case malformed
    }

    public let algorithm: Algorithm
    public let digest: [UInt8]

    public init(algorithm: Algorithm, digest: [UInt8]) {
        self.algorithm = algorithm
        self.digest = digest
    }

    /// The header's value.
    public var header: String { algorithm.rawValue + " " + Data(digest).base64EncodedString() }

    /// The header's value for a body whose CRC-32C is `crc32c`.
    public static func crc32c(_ crc32c: UInt32) -> TusChecksum {
        TusChecksum(algorithm: .crc32c, digest: withUnsafeBytes(of: crc32c.bigEndian) { Array($0) })
    }

    public static func parse(_ header: String) -> Result<TusChecksum, Problem> {
        let parts = header.trimmingSpacesAndTabs().split(separator: " ", omittingEmptySubsequences: true)
        guard parts.count == 2 else { return .failure(.malformed) }
        guard let algorithm = Algorithm(rawValue: String(parts[0])) else { return .failure(.unsupportedAlgorithm) }
        guard let digest = Data(base64Encoded: String(parts[1])), digest.count == algorithm.digestLength else {
            return .failure(.malformed)
        }
        return .success(TusChecksum(algorithm: algorithm, digest: Array(digest)))
    }
}

/// `Upload-Concat`: `partial`, or `final;` and the partial uploads' URLs (absolute or paths),
/// separated by spaces.
public enum TusConcat: Sendable, Equatable {
    case partial
    case final([String])

    /// Why a header is not one.
    public struct Malformed: Error, Sendable, Equatable, CustomStringConvertible {
        public let description: String
    }

    public var header: String {
        switch self {
        case .partial: "partial"
        case .final(let urls): "final;" + urls.joined(separator: " ")
        }
    }

    /// Reads the header; a final concatenation's URLs as they were written (see `uploadID`).
    public static func parse(_ header: String) throws(Malformed) -> TusConcat {
        let trimmed = header.trimmingSpacesAndTabs()
        if trimmed == "partial" { return .partial }
        guard trimmed.hasPrefix("final;") else {
            throw Malformed(description: "Upload-Concat must be 'partial' or 'final;URL URL ...'")
        }
        let urls = trimmed.dropFirst("final;".count).split(separator: " ", omittingEmptySubsequences: true)
        guard !urls.isEmpty else { throw Malformed(description: "Upload-Concat: final; must list the partial uploads' URLs") }
        return .final(urls.map(String.init))
    }

    /// `http://host/files/ID` or `/files/ID` → ID (not checked for existence).
    public static func uploadID(fromURL url: String) -> String? {
        var path = Substring(url)
        if let scheme = path.firstRange(of: "://") {
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
