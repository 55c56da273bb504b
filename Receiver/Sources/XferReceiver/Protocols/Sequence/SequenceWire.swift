import XferWire
import HTTPTypes
import Hummingbird

// What the `sequence` protocol's requests carry and its answers say (see `SequenceRoutes`).
// Every answer is an `Envelope`, HTTP 200 with the outcome in `code`, except a storage failure
// (HTTP 500) and a wrong `token` under `--auth-token` (HTTP 401).

extension Refusal {
    static func sequence(_ code: SequenceCode, _ message: String) -> Refusal {
        .envelope(code.rawValue, message)
    }

    /// Block `sequenceNo`, which must hold `expectedLength` bytes, is not what its fields say.
    static func block(_ failure: BodyWriter.Failure, sequenceNo: Int, expectedLength: Int) -> Refusal {
        switch failure {
        case .tooLarge, .tooShort, .interrupted(FormFailure.partLength):
            sequenceNo == 0
                ? .sequence(.badRequest, "the block of sequenceNo 0 must be empty")
                : .sequence(.badRequest, "block \(sequenceNo) must have \(expectedLength) bytes")
        case .digestMismatch(let actual):
            .sequence(
                .damaged,
                "block \(sequenceNo) has crc \(SequenceCRC.hex(StreamingDigest.crc32(bytes: actual))), not the one its crc field names")
        case .interrupted(let error):
            .sequence(.badRequest, ((error as? FormFailure) ?? .interrupted).description)
        }
    }
}

/// The text fields of one request, checked for shape (not yet against the upload).
struct SequenceRequest: Equatable {
    var sequenceNo: Int
    var blockSize: Int
    var totFileSize: Int
    var suffix: String
    var upToken: String
    /// Nil only for sequenceNo 0, where the field is empty.
    var crc: UInt32?

    init(fields: [String: String]) throws(Refusal) {
        sequenceNo = try Self.number(SequenceForm.sequenceNo, in: fields)
        blockSize = try Self.number(SequenceForm.blockSize, in: fields)
        totFileSize = try Self.number(SequenceForm.totFileSize, in: fields)
        suffix = fields[SequenceForm.suffix] ?? ""
        upToken = fields[SequenceForm.upToken] ?? ""
        if sequenceNo == 0 {
            crc = nil
        } else {
            guard let text = fields[SequenceForm.crc], let parsed = SequenceCRC.parse(text) else {
                throw .sequence(.badRequest, "crc must be the block's CRC-32 as 8 lowercase hex digits")
            }
            crc = parsed
        }
    }

    private static func number(_ name: String, in fields: [String: String]) throws(Refusal) -> Int {
        guard let text = fields[name] else {
            throw .sequence(.badRequest, "field '\(name)' is missing (the text fields come before the block)")
        }
        guard !text.isEmpty, text.utf8.count <= 18, text.utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }),
            let value = Int(text)
        else { throw .sequence(.badRequest, "field '\(name)' must be a non-negative integer") }
        return value
    }
}

extension BodyWriter.Check {
    /// A block's `crc` field.
    static func crc32(_ value: UInt32) -> BodyWriter.Check {
        BodyWriter.Check(algorithm: .crc32, expected: StreamingDigest.bytes(crc32: value))
    }
}
