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
        do {
            return try JSONStringLiteral.read(bytes, at: &offset)
        } catch {
            throw fail(error.description)
        }
    }

    private func fail(_ problem: String) -> Malformed {
        Malformed(offset: offset, problem: problem)
    }
}
