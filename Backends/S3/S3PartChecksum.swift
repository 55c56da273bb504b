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

/// A checksum of the whole object that S3 checks and keeps, for multipart
/// uploads too (`x-amz-checksum-type: FULL_OBJECT`), where the
/// `S3PartChecksum` CRCs give a composite one (a checksum of the parts'
/// checksums, which a file cannot be compared with). Each part carries its
/// own CRC (`x-amz-checksum-crc32c` or `-crc64nvme`, kept with its ETag as
/// its receipt, so a resumed job still has them), and
/// `CompleteMultipartUpload` the whole object's, combined from the parts'
/// CRCs and lengths without reading the file again. A one-part file is one
/// `PutObject` carrying the whole object's CRC.
///
/// The store must say it keeps it: `CreateMultipartUpload`'s answer names
/// `x-amz-checksum-type: FULL_OBJECT`, a `PutObject`'s answer repeats the CRC
/// (AWS and moto do; Ceph 16's gateway ignores both headers and says neither).
/// Otherwise the file fails before any part is sent (a `PutObject` has been
/// stored by then, without the checksum): a push that asked for the checksum
/// never ends as if the object had it. Stores that refuse the headers fail
/// the request with their own error. Leave the option out for such stores.
public enum S3FullObjectChecksum: String, Sendable, CaseIterable {
    /// CRC-32C, by the CPU's CRC instruction (ISA-L).
    case crc32c
    /// CRC-64/NVME: what S3 keeps of every new object since 2025, by default.
    case crc64nvme

    /// The algorithm's name in S3's headers.
    var algorithm: S3ChecksumAlgorithm {
        switch self {
        case .crc32c: return .crc32c
        case .crc64nvme: return .crc64nvme
        }
    }

    /// `chunk`'s CRC, as S3 writes it (base64 of the big-endian value).
    func text(of chunk: ChunkPayload) -> String {
        switch self {
        case .crc32c: return Data(CRC32.bigEndianBytes(chunk.crc32c)).base64EncodedString()
        case .crc64nvme: return Data(CRC64NVME.bigEndianBytes(chunk.crc64nvme)).base64EncodedString()
        }
    }

    /// The CRC of parts (in order) from their CRCs as S3 writes them and
    /// their lengths; nil when one is unreadable.
    func combined(_ parts: [(crc: String, length: Int64)]) -> String? {
        var whole: UInt64 = 0
        for part in parts {
            guard let bytes = Data(base64Encoded: part.crc).map(Array.init), bytes.count == algorithm.digestLength else { return nil }
            let value = bytes.reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
            switch self {
            case .crc32c: whole = UInt64(CRC32C.combine(UInt32(whole), UInt32(value), lengthOfSecond: part.length))
            case .crc64nvme: whole = CRC64NVME.combine(whole, value, lengthOfSecond: part.length)
            }
        }
        switch self {
        case .crc32c: return Data(CRC32.bigEndianBytes(UInt32(whole))).base64EncodedString()
        case .crc64nvme: return Data(CRC64NVME.bigEndianBytes(whole)).base64EncodedString()
        }
    }
}

/// What a job's parts carry, and its completion repeats: a composite choice
/// (`S3PartChecksum`) or the CRCs of a full-object checksum, read from the
/// job's handles (so a resumed job sends what its uploads were created for).
struct S3PartCheck: Sendable {
    let composite: S3PartChecksum
    let fullObject: S3FullObjectChecksum?

    init(handles: ServerHandles) {
        composite = handles[S3PartChecksum.handleKey].flatMap(S3PartChecksum.init(rawValue:)) ?? .auto
        fullObject = S3ObjectOptions.checksum(from: handles)
    }

    /// The algorithm's name in `x-amz-checksum-algorithm`; nil for MD5.
    var algorithmName: String? { fullObject?.algorithm.rawValue ?? composite.algorithmName }
    var crcHeader: String? { algorithmName.map { "x-amz-checksum-" + $0.lowercased() } }
    var crcElement: String? { algorithmName.map { "Checksum" + $0 } }
    var sendsCRC: Bool { algorithmName != nil }

    /// What `CreateMultipartUpload` declares.
    var creationHeaders: [(name: String, value: String)] {
        guard let algorithmName else { return [] }
        if fullObject != nil { return [("x-amz-checksum-algorithm", algorithmName), ("x-amz-checksum-type", "FULL_OBJECT")] }
        return [("x-amz-checksum-algorithm", algorithmName)]
    }

    func headers(for chunk: ChunkPayload, payloadSigned: Bool) -> [(name: String, value: String)] {
        guard let fullObject else { return composite.headers(for: chunk, payloadSigned: payloadSigned) }
        return [(fullObject.algorithm.header, fullObject.text(of: chunk)), ("x-amz-sdk-checksum-algorithm", fullObject.algorithm.rawValue)]
    }
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
