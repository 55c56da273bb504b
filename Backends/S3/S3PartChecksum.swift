import FoundationEssentials
import XferPrimitives
import Xfer
import XferS3Core

/// The checksum each part (or the one `PutObject`) carries, so S3 refuses
/// bytes that changed on the way.
public enum S3PartChecksum: String, Sendable, CaseIterable {
    /// One check per part, never two: over https, where the body is not
    /// hashed for the signature, `Content-MD5`; over plain http, where the
    /// signature covers the body's SHA-256 (`x-amz-content-sha256`, which S3
    /// and Ceph's gateway check: `XAmzContentSHA256Mismatch`), that alone.
    /// MD5 is a third of a push's CPU time, and a second check of the same
    /// bytes catches nothing the first misses.
    case auto
    /// `Content-MD5` always, over http too (for a server that checks
    /// Content-MD5 but not the signed SHA-256).
    case md5
    /// `x-amz-checksum-crc32`, with the algorithm declared when the upload
    /// is created: S3's newer checksums. The object then carries a composite
    /// CRC-32 (the CRC-32 of the parts' CRC-32s) that S3 can report, and a
    /// store that would otherwise compute a full-object checksum when the
    /// parts are joined (moto does) has none to compute.
    case crc32
    /// `x-amz-checksum-crc32c`, likewise: CRC-32C, which the CPU computes
    /// about six times faster than CRC-32 (both by ISA-L here).
    case crc32c

    /// The job handle that keeps a job's choice, so a resumed job sends
    /// what its upload was created for.
    static let handleKey = HandleKey("partChecksum")

    /// The algorithm's name in `x-amz-checksum-algorithm`; nil for MD5.
    var algorithmName: String? {
        switch self {
        case .auto, .md5: return nil
        case .crc32: return "CRC32"
        case .crc32c: return "CRC32C"
        }
    }

    /// The header a part's CRC goes in, and S3 echoes; nil for MD5.
    var crcHeader: String? { algorithmName.map { "x-amz-checksum-" + $0.lowercased() } }

    /// The element of `CompleteMultipartUpload` and ListParts that names a part's CRC.
    var crcElement: String? { algorithmName.map { "Checksum" + $0 } }

    /// Whether parts carry a CRC that the completion must repeat.
    var sendsCRC: Bool { algorithmName != nil }

    /// The headers that carry `chunk`'s checksum; `payloadSigned`: whether
    /// the signature covers the body's SHA-256.
    func headers(for chunk: ChunkPayload, payloadSigned: Bool) -> [(name: String, value: String)] {
        switch self {
        case .auto:
            return payloadSigned ? [] : [("Content-MD5", Checksums.base64(chunk.md5))]
        case .md5:
            return [("Content-MD5", Checksums.base64(chunk.md5))]
        case .crc32:
            return [("x-amz-checksum-crc32", Self.crcText(chunk.crc32)), ("x-amz-sdk-checksum-algorithm", "CRC32")]
        case .crc32c:
            return [("x-amz-checksum-crc32c", Self.crcText(chunk.crc32c)), ("x-amz-sdk-checksum-algorithm", "CRC32C")]
        }
    }

    /// S3's spelling of a CRC: its four bytes, big-endian, in base64.
    static func crcText(_ crc: UInt32) -> String { S3Answer.crcText(crc) }
}

/// What a job records of a part S3 stored: its ETag and, for a job that
/// sends CRCs, the part's CRC (in the job's algorithm), because
/// `CompleteMultipartUpload` must repeat both. Stored as the chunk's
/// receipt: `ETAG` or `ETAG crc32=BASE64` (the name from when CRC-32 was the
/// only CRC; the job's handle says which CRC it is).
struct S3PartReceipt: Equatable {
    var etag: String
    var crc: String?

    private static let separator = " crc32="

    init(etag: String, crc: String? = nil) {
        self.etag = etag
        self.crc = crc
    }

    /// Reads a stored receipt; one without a CRC is an ETag alone.
    init(stored: String) {
        if let range = stored.lastRange(of: Self.separator) {
            etag = String(stored[..<range.lowerBound])
            crc = String(stored[range.upperBound...])
        } else {
            etag = stored
            crc = nil
        }
    }

    var stored: String {
        guard let crc else { return etag }
        return etag + Self.separator + crc
    }
}
