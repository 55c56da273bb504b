import XferPrimitives
/// A strict JSON reader (RFC 8259) producing `JSONValue`, for the small
/// answers upload APIs give.
struct JSONParser {
    struct Malformed: Error, CustomStringConvertible {
        let offset: Int
        let problem: String
        var description: String { "malformed JSON at byte \(offset): \(problem)" }
    }

    /// Deeper nesting is refused rather than allowed to exhaust the stack.
    static let maximumDepth = 256

    private let bytes: [UInt8]
    private var offset = 0

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    /// One value, with nothing but whitespace around it.
    mutating func document() throws(Malformed) -> JSONValue {
        let value = try self.value(depth: 0)
        skipWhitespace()
        guard offset == bytes.count else { throw fail("unexpected text after the value") }
        return value
    }

    private mutating func value(depth: Int) throws(Malformed) -> JSONValue {
        guard depth < Self.maximumDepth else { throw fail("nested deeper than \(Self.maximumDepth)") }
        skipWhitespace()
        guard offset < bytes.count else { throw fail("unexpected end") }
        switch bytes[offset] {
        case UInt8(ascii: "{"):
            offset += 1
            var members: [String: JSONValue] = [:]
            skipWhitespace()
            if peek(UInt8(ascii: "}")) { return .object(members) }
            while true {
                skipWhitespace()
                guard offset < bytes.count, bytes[offset] == UInt8(ascii: "\"") else { throw fail("expected a member name") }
                let key = try string()
                skipWhitespace()
                try expect(UInt8(ascii: ":"))
                members[key] = try value(depth: depth + 1)
                skipWhitespace()
                if peek(UInt8(ascii: "}")) { return .object(members) }
                try expect(UInt8(ascii: ","))
            }
        case UInt8(ascii: "["):
            offset += 1
            var elements: [JSONValue] = []
            skipWhitespace()
            if peek(UInt8(ascii: "]")) { return .array(elements) }
            while true {
                elements.append(try value(depth: depth + 1))
                skipWhitespace()
                if peek(UInt8(ascii: "]")) { return .array(elements) }
                try expect(UInt8(ascii: ","))
            }
        case UInt8(ascii: "\""):
            return .string(try string())
        case UInt8(ascii: "t"):
            try literal("true")
            return .bool(true)
        case UInt8(ascii: "f"):
            try literal("false")
            return .bool(false)
        case UInt8(ascii: "n"):
            try literal("null")
            return .null
        default:
            return .number(try number())
        }
    }

    /// Consumes `byte` if it is next.
    private mutating func peek(_ byte: UInt8) -> Bool {
        guard offset < bytes.count, bytes[offset] == byte else { return false }
        offset += 1
        return true
    }

    private mutating func expect(_ byte: UInt8) throws(Malformed) {
        guard peek(byte) else { throw fail("expected '\(Character(Unicode.Scalar(byte)))'") }
    }

    private mutating func skipWhitespace() {
        while offset < bytes.count, bytes[offset] == 0x20 || bytes[offset] == 0x0A || bytes[offset] == 0x0D || bytes[offset] == 0x09 {
            offset += 1
        }
    }

    private mutating func literal(_ word: StaticString) throws(Malformed) {
        let count = word.utf8CodeUnitCount
        guard bytes.count - offset >= count else { throw fail("unexpected end") }
        let matches = word.withUTF8Buffer { expected in
            expected.indices.allSatisfy { bytes[offset + $0] == expected[$0] }
        }
        guard matches else { throw fail("unknown literal") }
        offset += count
    }

    private mutating func number() throws(Malformed) -> Double {
        let start = offset
        func digits() -> Int {
            let from = offset
            while offset < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[offset]) { offset += 1 }
            return offset - from
        }
        _ = peek(UInt8(ascii: "-"))
        let integral = offset
        guard digits() > 0 else { throw fail("expected a value") }
        if bytes[integral] == UInt8(ascii: "0"), offset - integral > 1 { throw fail("a number with a leading zero") }
        if peek(UInt8(ascii: ".")) {
            guard digits() > 0 else { throw fail("expected digits after '.'") }
        }
        if peek(UInt8(ascii: "e")) || peek(UInt8(ascii: "E")) {
            if !peek(UInt8(ascii: "+")) { _ = peek(UInt8(ascii: "-")) }
            guard digits() > 0 else { throw fail("expected digits in the exponent") }
        }
        guard let value = Double(String(decoding: bytes[start..<offset], as: UTF8.self)) else { throw fail("unreadable number") }
        return value
    }

    /// A string literal, `offset` at its opening quote.
    private mutating func string() throws(Malformed) -> String {
        offset += 1
        let start = offset
        // Most strings have no escape: taken whole from the bytes.
        while offset < bytes.count {
            let byte = bytes[offset]
            if byte == UInt8(ascii: "\"") {
                defer { offset += 1 }
                return try validated(bytes[start..<offset])
            }
            if byte == UInt8(ascii: "\\") { break }
            guard byte >= 0x20 else { throw fail("a control character in a string") }
            offset += 1
        }
        var decoded = Array(bytes[start..<offset])
        while offset < bytes.count {
            let byte = bytes[offset]
            offset += 1
            switch byte {
            case UInt8(ascii: "\""):
                return try validated(decoded[...])
            case UInt8(ascii: "\\"):
                guard offset < bytes.count else { throw fail("unexpected end") }
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
                    var scalar = UInt32(try hex4())
                    if (0xD800..<0xDC00).contains(scalar) {
                        // A high surrogate must be followed by its low half.
                        guard peek(UInt8(ascii: "\\")), peek(UInt8(ascii: "u")) else { throw fail("a lone surrogate") }
                        let low = UInt32(try hex4())
                        guard (0xDC00..<0xE000).contains(low) else { throw fail("a lone surrogate") }
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    }
                    guard let unicode = Unicode.Scalar(scalar) else { throw fail("a lone surrogate") }
                    decoded.append(contentsOf: Array(String(Character(unicode)).utf8))
                default:
                    throw fail("an unknown escape")
                }
            default:
                guard byte >= 0x20 else { throw fail("a control character in a string") }
                decoded.append(byte)
            }
        }
        throw fail("an unterminated string")
    }

    private mutating func hex4() throws(Malformed) -> UInt16 {
        guard bytes.count - offset >= 4 else { throw fail("unexpected end") }
        var value: UInt16 = 0
        for _ in 0..<4 {
            guard let digit = Hex.value(of: bytes[offset]) else { throw fail("a bad \\u escape") }
            value = value << 4 | UInt16(digit)
            offset += 1
        }
        return value
    }

    /// The UTF-8 `slice` as a string; invalid UTF-8 is malformed JSON.
    private func validated(_ slice: ArraySlice<UInt8>) throws(Malformed) -> String {
        guard let text = String(validating: slice, as: UTF8.self) else { throw fail("invalid UTF-8 in a string") }
        return text
    }

    private func fail(_ problem: String) -> Malformed {
        Malformed(offset: offset, problem: problem)
    }
}
