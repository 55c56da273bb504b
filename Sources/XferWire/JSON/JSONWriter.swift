/// The project's one JSON writer: `JSONValue.encoded` goes through it, and answers written
/// member by member (the ones every chunk or file goes through, where building a `JSONValue`
/// first would cost more than the request's own work) append to it directly.
///
/// Objects a `JSONValue` holds are written with their keys sorted, so the same value always
/// makes the same bytes (requests reproducible, answers diffable).
public struct JSONWriter: Sendable {
    /// How characters beyond ASCII are written.
    public enum Encoding: Sendable {
        /// As `\uXXXX` escapes: the text is plain ASCII, safe even in an HTTP header.
        case ascii
        /// As their UTF-8, as JSON's own encoding has them: for bodies.
        case utf8
    }

    /// What has been written so far.
    public private(set) var bytes: [UInt8] = []
    public let encoding: Encoding

    public init(encoding: Encoding = .utf8, capacity: Int = 128) {
        self.encoding = encoding
        bytes.reserveCapacity(capacity)
    }

    /// Appends `text` as it is: punctuation, and keys known to need no escape.
    public mutating func raw(_ text: String) {
        bytes.append(contentsOf: text.utf8)
    }

    /// Appends `value`, objects with their keys sorted.
    public mutating func value(_ value: JSONValue) {
        switch value {
        case .null: raw("null")
        case .bool(let value): raw(value ? "true" : "false")
        case .number(let value): number(value)
        case .string(let value): string(value)
        case .array(let values):
            bytes.append(UInt8(ascii: "["))
            for (index, element) in values.enumerated() {
                if index > 0 { bytes.append(UInt8(ascii: ",")) }
                self.value(element)
            }
            bytes.append(UInt8(ascii: "]"))
        case .object(let members):
            bytes.append(UInt8(ascii: "{"))
            for (index, key) in members.keys.sorted().enumerated() {
                if index > 0 { bytes.append(UInt8(ascii: ",")) }
                string(key)
                bytes.append(UInt8(ascii: ":"))
                self.value(members[key]!)
            }
            bytes.append(UInt8(ascii: "}"))
        }
    }

    /// A number: integral ones (below 10^15, exact in a `Double`) as plain digits, the others
    /// as Swift prints them, which JSON reads back to the same `Double`; `null` for the
    /// infinities and NaN, which JSON cannot hold.
    public mutating func number(_ value: Double) {
        if value.rounded() == value && abs(value) < 1e15 {
            integer(Int(value))
        } else if value.isFinite {
            raw(String(value))
        } else {
            raw("null")
        }
    }

    /// `value`'s decimal digits, with no `String` made per number (answers list a million).
    public mutating func integer(_ value: Int) {
        if value < 0 { bytes.append(UInt8(ascii: "-")) }
        var magnitude = value.magnitude
        var divisor: UInt = 1
        while divisor <= magnitude / 10 { divisor *= 10 }
        while true {
            bytes.append(UInt8(ascii: "0") + UInt8(magnitude / divisor))
            magnitude %= divisor
            if divisor == 1 { return }
            divisor /= 10
        }
    }

    /// `[1,2,3]`.
    public mutating func array(of numbers: some Sequence<Int>) {
        bytes.append(UInt8(ascii: "["))
        for (index, number) in numbers.enumerated() {
            if index > 0 { bytes.append(UInt8(ascii: ",")) }
            integer(number)
        }
        bytes.append(UInt8(ascii: "]"))
    }

    /// `[[1,5],[7,7]]`: runs of numbers as `[first, last]` pairs.
    public mutating func array(ofRuns runs: some Sequence<ClosedRange<Int>>) {
        bytes.append(UInt8(ascii: "["))
        for (index, run) in runs.enumerated() {
            bytes.append(contentsOf: index > 0 ? Array(",[".utf8) : [UInt8(ascii: "[")])
            integer(run.lowerBound)
            bytes.append(UInt8(ascii: ","))
            integer(run.upperBound)
            bytes.append(UInt8(ascii: "]"))
        }
        bytes.append(UInt8(ascii: "]"))
    }

    /// Appends `text` as a JSON string: `"` and `\` escaped, control characters as `\n`, `\r`,
    /// `\t` or `\u00XX`, the rest per `encoding`. `/` is left as it is (URLs stay readable).
    public mutating func string(_ text: String) {
        bytes.append(UInt8(ascii: "\""))
        if text.utf8.allSatisfy(Self.isPlainASCII) {
            bytes.append(contentsOf: text.utf8)
        } else if encoding == .utf8 {
            for byte in text.utf8 { escaped(UInt16(byte)) }
        } else {
            for unit in text.utf16 { escaped(unit) }
        }
        bytes.append(UInt8(ascii: "\""))
    }

    /// One UTF-8 byte (`.utf8`) or UTF-16 unit (`.ascii`) of a string.
    private mutating func escaped(_ unit: UInt16) {
        switch unit {
        case 0x22, 0x5C:
            bytes.append(UInt8(ascii: "\\"))
            bytes.append(UInt8(unit))
        case 0x0A: raw("\\n")
        case 0x0D: raw("\\r")
        case 0x09: raw("\\t")
        case 0x20..<0x7F: bytes.append(UInt8(unit))
        case 0x80..<0x100 where encoding == .utf8: bytes.append(UInt8(unit))
        default:
            let hex = Array("0123456789abcdef".utf8)
            raw("\\u")
            for shift in stride(from: 12, through: 0, by: -4) { bytes.append(hex[Int(unit >> UInt16(shift)) & 0xF]) }
        }
    }

    /// A byte a string can hold as it is in either encoding.
    @inlinable
    public static func isPlainASCII(_ byte: UInt8) -> Bool {
        byte >= 0x20 && byte < 0x7F && byte != 0x22 && byte != 0x5C
    }
}
