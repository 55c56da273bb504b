/// A parsed JSON document: what every protocol's answers and bodies are read into and written
/// from, on both sides (`JSONValue.parse` reads, `JSONWriter` writes).
///
/// Numbers are `Double`s, as JSON's are: integers are exact up to 2^53, far past any size or
/// count a protocol carries. The engine's `Xfer.JSONValue` is this type.
public enum JSONValue: Sendable, Hashable {
    /// JSON `null`.
    case null
    /// `true` or `false`.
    case bool(Bool)
    /// Any JSON number.
    case number(Double)
    /// A JSON string.
    case string(String)
    /// A JSON array.
    case array([JSONValue])
    /// A JSON object.
    case object([String: JSONValue])

    /// Parses a JSON document (RFC 8259); throws when `bytes` are not JSON.
    ///
    /// Refused besides what RFC 8259 refuses: nesting deeper than 256, a number too large for
    /// a `Double`, and an object that names a member twice (two readers may keep different
    /// ones, so a document that depends on which is not taken at all).
    public static func parse(_ bytes: [UInt8]) throws -> JSONValue {
        try bytes.withUnsafeBytes { try parse($0) }
    }

    /// Parses a JSON document held in memory someone else owns (a network buffer's bytes).
    public static func parse(_ bytes: UnsafeRawBufferPointer) throws -> JSONValue {
        // Read by hand: `JSONDecoder` into this enum tried each kind in turn, throwing on every
        // miss, and was 5 % of a small file's client CPU.
        var parser = JSONParser(bytes)
        return try parser.document()
    }

    /// The member `key` of an object; nil for a missing member or a non-object.
    public subscript(key: String) -> JSONValue? {
        if case .object(let members) = self { return members[key] }
        return nil
    }

    /// A string, or a number or Boolean as text (servers mix them); nil otherwise.
    public var stringValue: String? {
        switch self {
        case .string(let value): return value
        case .number(let value):
            return value.rounded() == value && abs(value) < 1e15 ? String(Int64(value)) : String(value)
        case .bool(let value): return String(value)
        default: return nil
        }
    }

    /// An integral number, or a string holding one; nil otherwise.
    public var intValue: Int? {
        switch self {
        case .number(let value): return value.rounded() == value ? Int(exactly: value) : nil
        case .string(let value): return Int(value)
        default: return nil
        }
    }

    /// The elements of an array; nil otherwise.
    public var arrayValue: [JSONValue]? {
        if case .array(let values) = self { return values }
        return nil
    }

    /// The members of an object; nil otherwise.
    public var objectValue: [String: JSONValue]? {
        if case .object(let members) = self { return members }
        return nil
    }

    /// Serialises the value as plain ASCII (keys sorted, so requests are reproducible; every
    /// character beyond ASCII escaped, so the text is safe even in a header).
    public var encoded: [UInt8] { encoded(.ascii) }

    /// Serialises the value with characters beyond ASCII written as `encoding` says (`.utf8`
    /// for bodies, where escaping them only lengthens the text).
    public func encoded(_ encoding: JSONWriter.Encoding) -> [UInt8] {
        var writer = JSONWriter(encoding: encoding)
        writer.value(self)
        return writer.bytes
    }

    /// The value as text (`encoded(encoding)` decoded).
    public func text(_ encoding: JSONWriter.Encoding = .ascii) -> String {
        String(decoding: encoded(encoding), as: UTF8.self)
    }

    /// Parses a JSON document held in a string.
    public static func parse(_ text: String) throws -> JSONValue {
        var text = text
        return try text.withUTF8 { try parse(UnsafeRawBufferPointer($0)) }
    }

    /// Writes a JSON string literal with every non-ASCII character escaped as
    /// `\uXXXX`, so the result is plain ASCII (safe even in a header).
    public static func writeString(_ value: String, into out: inout String) {
        // Most strings need no escape: appending them whole is many times
        // faster than the writer (felt by `xfer list --json`).
        if value.utf8.allSatisfy(JSONWriter.isPlainASCII) {
            out += "\""
            out += value
            out += "\""
            return
        }
        var writer = JSONWriter(encoding: .ascii, capacity: value.utf8.count + 16)
        writer.string(value)
        out += String(decoding: writer.bytes, as: UTF8.self)
    }
}

extension JSONValue {
    /// A JSON integer (no fraction, no exponent in its value) that fits an `Int`; nil for
    /// anything else, strings holding digits included. For the requests a server reads, where
    /// a field's type is part of the contract (`intValue` is lenient, for servers' answers).
    public var strictInteger: Int? {
        guard case .number(let value) = self, value.rounded() == value, abs(value) < 9_007_199_254_740_992 else { return nil }
        return Int(exactly: value)
    }

    /// A string and nothing else (`stringValue` is lenient, for servers' answers).
    public var strictString: String? {
        if case .string(let value) = self { return value }
        return nil
    }
}

extension JSONValue: Decodable {
    /// Decodes any JSON value.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Double.self) {
            self = .number(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([JSONValue].self) {
            self = .array(value)
        } else {
            self = .object(try container.decode([String: JSONValue].self))
        }
    }
}

extension JSONValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByDictionaryLiteral,
    ExpressibleByArrayLiteral, ExpressibleByBooleanLiteral
{
    /// A string value from a literal.
    public init(stringLiteral value: String) { self = .string(value) }
    /// A number from an integer literal.
    public init(integerLiteral value: Int) { self = .number(Double(value)) }
    /// A Boolean from a literal.
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    /// An object from a dictionary literal (a repeated key keeps the last value).
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self = .object(Dictionary(elements, uniquingKeysWith: { $1 }))
    }
    /// An array from a literal.
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }

    /// A number from any integer (exact up to 2^53).
    public static func int<T: BinaryInteger>(_ value: T) -> JSONValue { .number(Double(value)) }
}
