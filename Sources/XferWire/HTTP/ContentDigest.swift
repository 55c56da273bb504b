import FoundationEssentials
import XferPrimitives

/// RFC 9530's digest fields, in the algorithms both sides compute: the server's
/// `Want-Content-Digest` (which algorithms it checks, by preference) and a request body's
/// `Content-Digest` (`crc32c=:BASE64:`). Patch and the IETF draft negotiate them the same way.
public enum ContentDigest: String, Sendable, CaseIterable {
    /// CRC-32C: hardware speed on both ends (ISA-L here), 4 bytes big-endian.
    case crc32c = "crc32c"
    /// SHA-256, for a side without CRC-32C.
    case sha256 = "sha-256"

    /// The digest's length in bytes.
    public var digestLength: Int {
        switch self {
        case .crc32c: 4
        case .sha256: 32
        }
    }

    /// What the receiver asks for (`Want-Content-Digest`): CRC-32C first, SHA-256 for a
    /// client without it.
    public static let wanted = "crc32c=10, sha-256=5"

    /// The algorithm to use from a `Want-Content-Digest` value (a dictionary of algorithm =
    /// preference 0–10, 0 meaning "not acceptable"): the most preferred one of these, CRC-32C
    /// on a tie. Nil when none fits.
    public static func preferred(in header: String) -> ContentDigest? {
        var best: (digest: ContentDigest, weight: Int)?
        for member in header.split(separator: ",") {
            let parts = member.split(separator: "=", maxSplits: 1).map { $0.trimmingSpacesAndTabs() }
            guard let name = parts.first?.lowercased(), let digest = ContentDigest(rawValue: name) else { continue }
            // A weight that is not 0-10 is not one this side understands: the member is skipped.
            let weight = parts.count == 2 ? Int(parts[1]).flatMap { (0...10).contains($0) ? $0 : nil } ?? 0 : 1
            guard weight > 0 else { continue }
            if best == nil || weight > best!.weight || (weight == best!.weight && digest == .crc32c) { best = (digest, weight) }
        }
        return best?.digest
    }

    /// The `Content-Digest` value for a body whose digest is `digest`: `crc32c=:AAAAAA==:`.
    public func header(digest: [UInt8]) -> String {
        "\(rawValue)=:\(Data(digest).base64EncodedString()):"
    }

    /// The `Content-Digest` value for a body whose CRC-32C is `crc32c`.
    public static func header(crc32c: UInt32) -> String {
        ContentDigest.crc32c.header(digest: withUnsafeBytes(of: crc32c.bigEndian) { Array($0) })
    }

    /// A malformed member in an algorithm this side checks.
    public struct Malformed: Error, Sendable, CustomStringConvertible {
        public let algorithm: ContentDigest
        public var description: String {
            "Content-Digest \(algorithm.rawValue) must be :BASE64: of a \(algorithm.digestLength)-byte digest"
        }
    }

    /// The first member of a `Content-Digest` value in an algorithm this side checks, with its
    /// digest; nil when it names none (a recipient may ignore digests it does not know). Throws
    /// when such a member is malformed (not `:BASE64:`, or a digest of the wrong length).
    public static func parse(_ header: String) throws(Malformed) -> (algorithm: ContentDigest, digest: [UInt8])? {
        for member in header.split(separator: ",") {
            guard let equals = member.firstIndex(of: "=") else { continue }
            let name = member[..<equals].trimmingSpacesAndTabs().lowercased()
            let value = member[member.index(after: equals)...].trimmingSpacesAndTabs()
            guard let algorithm = ContentDigest(rawValue: name) else { continue }
            // A byte sequence (RFC 8941): the base64 between colons.
            guard value.count >= 2, value.hasPrefix(":"), value.hasSuffix(":"),
                let bytes = Data(base64Encoded: String(value.dropFirst().dropLast())), bytes.count == algorithm.digestLength
            else { throw Malformed(algorithm: algorithm) }
            return (algorithm, Array(bytes))
        }
        return nil
    }
}

/// `Content-MD5` (RFC 1864): the base64 of a body's 16-byte MD5, which a client that knows
/// neither digest field sends (and patch's server still checks).
public enum ContentMD5 {
    public static let name = "Content-MD5"

    /// The header's value for a body whose MD5 is `digest`.
    public static func header(_ digest: [UInt8]) -> String {
        Data(digest).base64EncodedString()
    }

    /// The 16 bytes of the header's value (spaces and tabs around allowed); nil when it is not
    /// the base64 of 16 bytes.
    public static func parse(_ header: String) -> [UInt8]? {
        guard let data = Data(base64Encoded: String(HTTPNumber.trimmed(header))), data.count == 16 else { return nil }
        return Array(data)
    }
}
