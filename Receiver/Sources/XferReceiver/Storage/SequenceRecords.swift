import XferWire
import Crypto
import XferPrimitives

/// What the `sequence` protocol keeps of an upload beyond its chunks, in any storage.
struct SequenceMeta: Codable, Sendable {
    /// SHA-256 of the upToken's secret half: the disk never holds a usable token.
    var tokenDigest: String
    var suffix: String
}

/// The upToken: the upload's id followed by a random secret, 64 lowercase hex digits. The id
/// half finds the upload without an index; the secret half proves the caller was given it.
enum UpToken {
    static let secretLength = 32

    static func make(uploadId: String, secret: String) -> String { uploadId + secret }

    static func split(_ token: String) -> (uploadId: String, secret: String)? {
        guard token.utf8.count == UploadID.length + secretLength,
            token.utf8.allSatisfy(Hex.isLowercaseDigit)
        else { return nil }
        return (String(token.prefix(UploadID.length)), String(token.suffix(secretLength)))
    }

    static func digest(ofSecret secret: String) -> String {
        Hex.lowercase(SHA256.hash(data: Array(secret.utf8)))
    }

    /// Compares in time independent of where the digests differ.
    static func matches(_ secret: String, digest: String) -> Bool {
        let computed = Array(Self.digest(ofSecret: secret).utf8)
        let stored = Array(digest.utf8)
        guard computed.count == stored.count else { return false }
        return zip(computed, stored).reduce(UInt8(0)) { $0 | ($1.0 ^ $1.1) } == 0
    }
}

/// One line of `blocks.log`: `<sequenceNo>.<crc as 8 hex digits>`.
struct SequenceBlockRecord: Equatable {
    var sequenceNo: Int
    var crc: UInt32

    var text: String { "\(sequenceNo).\(SequenceCRC.hex(crc))" }

    init(sequenceNo: Int, crc: UInt32) {
        self.sequenceNo = sequenceNo
        self.crc = crc
    }

    init?(_ record: Substring) {
        let parts = record.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 2, let sequenceNo = Int(parts[0]), sequenceNo >= 1, let crc = SequenceCRC.parse(parts[1]) else { return nil }
        self.init(sequenceNo: sequenceNo, crc: crc)
    }
}

