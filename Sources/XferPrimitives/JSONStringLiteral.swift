/// Reads one JSON string literal (RFC 8259 §7): the escape and surrogate
/// rules written once, for the engine's JSON reader and the receiver's.
public enum JSONStringLiteral {
    /// Why the bytes are not a string literal.
    public enum Problem: Error, Sendable, CustomStringConvertible {
        case unexpectedEnd, controlCharacter, unknownEscape, badUnicodeEscape, loneSurrogate, invalidUTF8

        public var description: String {
            switch self {
            case .unexpectedEnd: return "an unterminated string"
            case .controlCharacter: return "a control character in a string"
            case .unknownEscape: return "an unknown escape"
            case .badUnicodeEscape: return "a bad \\u escape"
            case .loneSurrogate: return "a lone surrogate"
            case .invalidUTF8: return "invalid UTF-8 in a string"
            }
        }
    }

    /// The string whose opening quote is at `offset` in `bytes`; `offset`
    /// ends past its closing quote (or where the problem is).
    @inlinable
    public static func read<Bytes: RandomAccessCollection>(
        _ bytes: Bytes, at offset: inout Int
    ) throws(Problem) -> String where Bytes.Element == UInt8, Bytes.Index == Int {
        precondition(offset < bytes.endIndex && bytes[offset] == UInt8(ascii: "\""), "not at a string's opening quote")
        offset += 1
        let start = offset
        // Most strings have no escape: taken whole from the bytes.
        while offset < bytes.endIndex {
            let byte = bytes[offset]
            if byte == UInt8(ascii: "\"") {
                defer { offset += 1 }
                return try validated(bytes[start..<offset])
            }
            if byte == UInt8(ascii: "\\") { break }
            guard byte >= 0x20 else { throw .controlCharacter }
            offset += 1
        }
        var decoded = Array(bytes[start..<offset])
        while offset < bytes.endIndex {
            let byte = bytes[offset]
            offset += 1
            switch byte {
            case UInt8(ascii: "\""):
                return try validated(decoded[...])
            case UInt8(ascii: "\\"):
                guard offset < bytes.endIndex else { throw .unexpectedEnd }
                let escape = bytes[offset]
                offset += 1
                switch escape {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): decoded.append(escape)
                case UInt8(ascii: "b"): decoded.append(0x08)
                case UInt8(ascii: "f"): decoded.append(0x0C)
                case UInt8(ascii: "n"): decoded.append(0x0A)
                case UInt8(ascii: "r"): decoded.append(0x0D)
                case UInt8(ascii: "t"): decoded.append(0x09)
                case UInt8(ascii: "u"):
                    var scalar = try hex4(bytes, at: &offset)
                    if (0xD800..<0xDC00).contains(scalar) {
                        // A high surrogate must be followed by its low half.
                        guard offset + 1 < bytes.endIndex, bytes[offset] == UInt8(ascii: "\\"),
                            bytes[offset + 1] == UInt8(ascii: "u")
                        else { throw .loneSurrogate }
                        offset += 2
                        let low = try hex4(bytes, at: &offset)
                        guard (0xDC00..<0xE000).contains(low) else { throw .loneSurrogate }
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    }
                    guard let unicode = Unicode.Scalar(scalar) else { throw .loneSurrogate }
                    decoded.append(contentsOf: String(Character(unicode)).utf8)
                default:
                    throw .unknownEscape
                }
            default:
                guard byte >= 0x20 else { throw .controlCharacter }
                decoded.append(byte)
            }
        }
        throw .unexpectedEnd
    }

    @usableFromInline
    static func hex4<Bytes: RandomAccessCollection>(
        _ bytes: Bytes, at offset: inout Int
    ) throws(Problem) -> UInt32 where Bytes.Element == UInt8, Bytes.Index == Int {
        guard bytes.endIndex - offset >= 4 else { throw .unexpectedEnd }
        var value: UInt32 = 0
        for _ in 0..<4 {
            guard let digit = Hex.value(of: bytes[offset]) else { throw .badUnicodeEscape }
            value = value << 4 | UInt32(digit)
            offset += 1
        }
        return value
    }

    @usableFromInline
    static func validated<Slice: Collection>(_ slice: Slice) throws(Problem) -> String where Slice.Element == UInt8 {
        guard let text = String(validating: slice, as: UTF8.self) else { throw .invalidUTF8 }
        return text
    }
}
