// The `sequence` protocol's codes and answers (Docs/protocols.md), written once: the client
// backend (Backends/Sequence) and the receiver's routes (Receiver/.../Protocols/Sequence)
// both speak them through these types. Every answer is an `Envelope`, HTTP 200 with the
// outcome in `code`, except a storage failure (HTTP 500) and a wrong `token` (HTTP 401).

/// The request: `POST /upload`, a `multipart/form-data` form whose text fields come first,
/// then the block.
public enum SequenceForm {
    public static let path = "/upload"
    public static let sequenceNo = "sequenceNo"
    public static let blockSize = "blockSize"
    public static let totFileSize = "totFileSize"
    public static let suffix = "suffix"
    /// The receiver's token (`--auth-token`), when it has one.
    public static let token = "token"
    public static let upToken = "upToken"
    public static let crc = "crc"
    /// The file part holding the block (empty for sequenceNo 0).
    public static let block = "block"
}

/// The codes of the envelope.
public enum SequenceCode: Int, Sendable {
    case ok = 0
    case badRequest = 400
    /// The upload's `upToken` is not known (expired, or never handed out).
    case unknownUpToken = 401
    /// The block is not the one the server expects: `expectedSequenceNo` names it.
    case outOfOrder = 409
    /// Another crc for a sequenceNo the upload already holds: it holds other bytes.
    case conflict = 412
    /// The block's bytes do not match its crc (damaged on the way; worth sending again).
    case damaged = 422
}

/// An answer's data: a block taken (`upToken` for sequenceNo 0, `nextSequenceNo`, or the
/// last block's `fileUrl`), or the block the server expects instead (`expectedSequenceNo`).
/// Members that are nil are left out.
public struct SequencePayload: Sendable, Equatable {
    public var upToken: String?
    public var nextSequenceNo: Int?
    public var fileUrl: String?
    public var expectedSequenceNo: Int?

    public init(upToken: String? = nil, nextSequenceNo: Int? = nil, fileUrl: String? = nil, expectedSequenceNo: Int? = nil) {
        self.upToken = upToken
        self.nextSequenceNo = nextSequenceNo
        self.fileUrl = fileUrl
        self.expectedSequenceNo = expectedSequenceNo
    }

    public var data: JSONValue {
        var members: [String: JSONValue] = [:]
        if let upToken { members["upToken"] = .string(upToken) }
        if let nextSequenceNo { members["nextSequenceNo"] = .int(nextSequenceNo) }
        if let fileUrl { members["fileUrl"] = .string(fileUrl) }
        if let expectedSequenceNo { members["expectedSequenceNo"] = .int(expectedSequenceNo) }
        return .object(members)
    }

    /// Reads an answer's data; empty strings count as absent.
    public init(data: JSONValue) {
        upToken = data["upToken"]?.stringValue.flatMap { $0.isEmpty ? nil : $0 }
        nextSequenceNo = data["nextSequenceNo"]?.intValue
        fileUrl = data["fileUrl"]?.stringValue.flatMap { $0.isEmpty ? nil : $0 }
        expectedSequenceNo = data["expectedSequenceNo"]?.intValue
    }
}

extension Envelope {
    /// A block taken.
    public static func sequenceAccepted(_ payload: SequencePayload) -> Envelope {
        Envelope(code: SequenceCode.ok.rawValue, msg: "ok", data: payload.data)
    }

    /// A block refused as out of order: the server expects `expected`.
    public static func sequenceOutOfOrder(expected: Int) -> Envelope {
        Envelope(
            code: SequenceCode.outOfOrder.rawValue, msg: "out of order: the server expects block \(expected)",
            data: SequencePayload(expectedSequenceNo: expected).data)
    }
}

/// The block's `crc` field: zlib's CRC-32 as 8 lowercase hex digits.
public enum SequenceCRC {
    public static func hex(_ crc: UInt32) -> String {
        let digits = String(crc, radix: 16)
        return String(repeating: "0", count: 8 - digits.count) + digits
    }

    /// Nil for anything but 8 lowercase hex digits.
    public static func parse(_ text: some StringProtocol) -> UInt32? {
        guard text.utf8.count == 8,
            text.utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains($0) })
        else { return nil }
        return UInt32(text, radix: 16)
    }
}
