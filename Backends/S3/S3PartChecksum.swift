import Foundation
import Xfer

/// The checksum each part (or the one `PutObject`) carries, so S3 refuses
/// bytes that changed on the way.
public enum S3PartChecksum: String, Sendable, CaseIterable {
    /// `Content-MD5`: what every S3-compatible store checks.
    case md5
    /// `x-amz-checksum-crc32`, with the algorithm declared when the upload
    /// is created: S3's newer checksums. The object then carries a composite
    /// CRC-32 (the CRC-32 of the parts' CRC-32s) that S3 can report, and a
    /// store that would otherwise compute a full-object checksum when the
    /// parts are joined (moto does) has none to compute.
    case crc32

    /// The job handle that keeps a job's choice, so a resumed job sends
    /// what its upload was created for.
    static let handleKey = HandleKey("partChecksum")

    /// The headers that carry `chunk`'s checksum.
    func headers(for chunk: ChunkPayload) -> [(name: String, value: String)] {
        switch self {
        case .md5:
            return [("Content-MD5", Checksums.base64(chunk.md5))]
        case .crc32:
            return [("x-amz-checksum-crc32", Self.crc32Text(chunk.crc32)), ("x-amz-sdk-checksum-algorithm", "CRC32")]
        }
    }

    /// S3's spelling of a CRC-32: its four bytes, big-endian, in base64.
    static func crc32Text(_ crc: UInt32) -> String {
        Checksums.base64([UInt8(crc >> 24), UInt8(crc >> 16 & 0xFF), UInt8(crc >> 8 & 0xFF), UInt8(crc & 0xFF)])
    }
}

/// What a job records of a part S3 stored: its ETag and, for a job that
/// sends CRC-32s, the part's CRC-32, because `CompleteMultipartUpload` must
/// repeat both. Stored as the chunk's receipt: `ETAG` or `ETAG crc32=BASE64`.
struct S3PartReceipt: Equatable {
    var etag: String
    var crc32: String?

    private static let separator = " crc32="

    init(etag: String, crc32: String? = nil) {
        self.etag = etag
        self.crc32 = crc32
    }

    /// Reads a stored receipt; one without a CRC-32 is an ETag alone.
    init(stored: String) {
        if let range = stored.range(of: Self.separator, options: .backwards) {
            etag = String(stored[..<range.lowerBound])
            crc32 = String(stored[range.upperBound...])
        } else {
            etag = stored
            crc32 = nil
        }
    }

    var stored: String {
        guard let crc32 else { return etag }
        return etag + Self.separator + crc32
    }
}
