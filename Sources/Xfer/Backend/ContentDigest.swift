import Foundation

/// The `Content-Digest` algorithms (RFC 9530) a backend can send with a
/// chunk, and the reading of a server's `Want-Content-Digest`, for
/// protocols that negotiate a digest of each request's body.
public enum ContentDigest: String, Sendable, CaseIterable {
    /// CRC-32C: hardware speed on both ends (ISA-L here).
    case crc32c = "crc32c"
    case sha256 = "sha-256"

    /// The algorithm to use from a `Want-Content-Digest` value (a dictionary
    /// of algorithm = preference 0–10, 0 meaning "not acceptable"): the most
    /// preferred one of these, CRC-32C on a tie. Nil when none fits.
    public static func preferred(in header: String) -> ContentDigest? {
        var best: (digest: ContentDigest, weight: Int)?
        for member in header.split(separator: ",") {
            let parts = member.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            guard let name = parts.first?.lowercased(), let digest = ContentDigest(rawValue: name) else { continue }
            let weight = parts.count == 2 ? Int(parts[1]) ?? 0 : 1
            guard weight > 0 else { continue }
            if best == nil || weight > best!.weight || (weight == best!.weight && digest == .crc32c) { best = (digest, weight) }
        }
        return best?.digest
    }

    /// The `Content-Digest` value for `chunk`'s bytes, e.g. `crc32c=:AAAAAA==:`.
    public func header(for chunk: ChunkPayload) -> String {
        switch self {
        case .crc32c: "crc32c=:\(Checksums.base64(CRC32.bigEndianBytes(chunk.crc32c))):"
        case .sha256: "sha-256=:\(Checksums.base64(chunk.sha256)):"
        }
    }
}
