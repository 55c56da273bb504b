import XferPrimitives

/// The project's one JSON reader (RFC 8259), producing `JSONValue`: servers' answers in the
/// backends, clients' bodies and headers in the receiver, records on disk.
///
/// Read by hand over the bytes as they lie (an array's or a network buffer's), with limits that
/// keep a hostile document's cost bounded by its length: nesting past `maximumDepth` is refused
/// before it can exhaust the stack, and a number must fit a `Double`.
struct JSONParser {
    /// Why the bytes are not a document this reader takes.
    struct Malformed: Error, CustomStringConvertible {
        let offset: Int
        let problem: String
        var description: String { "malformed JSON at byte \(offset): \(problem)" }
    }

    /// Deeper nesting is refused rather than allowed to exhaust the stack.
    static let maximumDepth = 256

    private let bytes: UnsafeRawBufferPointer
    private var offset = 0

    init(_ bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

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
            if take(UInt8(ascii: "}")) { return .object(members) }
            while true {
                skipWhitespace()
                guard offset < bytes.count, bytes[offset] == UInt8(ascii: "\"") else { throw fail("expected a member name") }
                let at = offset
                let key = try string()
                skipWhitespace()
                try expect(UInt8(ascii: ":"))
                // Two readers of a repeated name may keep different values: a document whose
                // meaning depends on which is refused, not guessed at.
                guard members.updateValue(try value(depth: depth + 1), forKey: key) == nil else {
                    throw Malformed(offset: at, problem: "the member name '\(key.prefix(64))' appears twice")
                }
                skipWhitespace()
                if take(UInt8(ascii: "}")) { return .object(members) }
                try expect(UInt8(ascii: ","))
            }
        case UInt8(ascii: "["):
            offset += 1
            var elements: [JSONValue] = []
            skipWhitespace()
            if take(UInt8(ascii: "]")) { return .array(elements) }
            while true {
                elements.append(try value(depth: depth + 1))
                skipWhitespace()
                if take(UInt8(ascii: "]")) { return .array(elements) }
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
    private mutating func take(_ byte: UInt8) -> Bool {
        guard offset < bytes.count, bytes[offset] == byte else { return false }
        offset += 1
        return true
    }

    private mutating func expect(_ byte: UInt8) throws(Malformed) {
        guard take(byte) else { throw fail("expected '\(Character(Unicode.Scalar(byte)))'") }
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
        _ = take(UInt8(ascii: "-"))
        let integral = offset
        guard digits() > 0 else { throw fail("expected a value") }
        if bytes[integral] == UInt8(ascii: "0"), offset - integral > 1 { throw fail("a number with a leading zero") }
        if take(UInt8(ascii: ".")) {
            guard digits() > 0 else { throw fail("expected digits after '.'") }
        }
        if take(UInt8(ascii: "e")) || take(UInt8(ascii: "E")) {
            if !take(UInt8(ascii: "+")) { _ = take(UInt8(ascii: "-")) }
            guard digits() > 0 else { throw fail("expected digits in the exponent") }
        }
        // A plain integer (what sizes, counts and chunk lists are) is summed from its digits:
        // no `String` per number, which a list of a million chunk numbers would feel.
        if offset - integral <= 15, !bytes[integral..<offset].contains(where: { !(UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }) {
            let magnitude = bytes[integral..<offset].reduce(0) { $0 * 10 + Int64($1 - UInt8(ascii: "0")) }
            return Double(start == integral ? magnitude : -magnitude)
        }
        // `1e999` reads as infinity: a size or count no protocol carries, refused rather than
        // handed on as a number no arithmetic can use.
        guard let value = Double(String(decoding: bytes[start..<offset], as: UTF8.self)), value.isFinite else {
            throw Malformed(offset: start, problem: "a number too large")
        }
        return value
    }

    private mutating func digits() -> Int {
        let from = offset
        while offset < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[offset]) { offset += 1 }
        return offset - from
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
