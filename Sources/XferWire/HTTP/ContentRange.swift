/// `Content-Range: bytes FIRST-LAST/SIZE` (RFC 9110 §14.4), as a chunk is sent with it (patch)
/// and as a ranged answer names its bytes (downloads, S3's `GetObject`): read and written here
/// only, for every side.
///
/// Read strictly, since the range decides where bytes land: ASCII digits only (no sign, no
/// spaces inside), no number past `Int64`, `FIRST <= LAST`, and `LAST < SIZE` when the size is
/// known. A reader that took `bytes 5-1/3` or a wrapped-around number would write bytes where
/// none were sent.
public struct ContentRange: Sendable, Hashable {
    /// The first byte's offset.
    public var first: Int64
    /// The last byte's offset (inclusive).
    public var last: Int64
    /// The whole representation's size; nil when the sender wrote `*` (not known).
    public var size: Int64?

    public init(first: Int64, last: Int64, size: Int64?) {
        self.first = first
        self.last = last
        self.size = size
    }

    /// The range of `count` bytes from `offset` (at least one) of a representation of `size`.
    public init(offset: Int64, count: Int64, size: Int64?) {
        self.init(first: offset, last: offset + count - 1, size: size)
    }

    /// How many bytes the range holds.
    public var count: Int64 { last - first + 1 }

    /// The header's value: `bytes FIRST-LAST/SIZE`, `*` for an unknown size.
    public var header: String {
        "bytes \(first)-\(last)/\(size.map(String.init) ?? "*")"
    }

    /// The header's value of a 416 answer: `bytes */SIZE`.
    public static func unsatisfied(size: Int64) -> String { "bytes */\(size)" }

    /// Reads `bytes FIRST-LAST/SIZE` (or `/*`); nil for anything else, the unsatisfied form
    /// included (see `unsatisfiedSize(_:)`). Spaces and tabs around the value and after the unit
    /// are allowed; the unit is matched without regard to case.
    public init?(_ header: some StringProtocol) {
        guard var reader = Reader(header), let first = reader.number(), reader.take(UInt8(ascii: "-")),
            let last = reader.number(), reader.take(UInt8(ascii: "/"))
        else { return nil }
        var size: Int64?
        if !reader.take(UInt8(ascii: "*")) {
            guard let known = reader.number() else { return nil }
            size = known
        }
        guard reader.atEnd, first <= last, size.map({ last < $0 }) ?? true else { return nil }
        self.init(first: first, last: last, size: size)
    }

    /// The size in `bytes */SIZE`, the `Content-Range` of a 416 answer; nil for anything else.
    public static func unsatisfiedSize(_ header: some StringProtocol) -> Int64? {
        guard var reader = Reader(header), reader.take(UInt8(ascii: "*")), reader.take(UInt8(ascii: "/")),
            let size = reader.number(), reader.atEnd
        else { return nil }
        return size
    }

    /// The value past `bytes ` with its surrounding spaces dropped, read byte by byte (this
    /// header comes with every chunk: no `String` is made of its parts).
    private struct Reader {
        var bytes: ArraySlice<UInt8>

        init?(_ header: some StringProtocol) {
            var bytes = ArraySlice(header.utf8)
            func isSpace(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x09 }
            while let first = bytes.first, isSpace(first) { bytes.removeFirst() }
            while let last = bytes.last, isSpace(last) { bytes.removeLast() }
            let unit = Array("bytes".utf8)
            guard bytes.count > unit.count, zip(bytes.prefix(unit.count), unit).allSatisfy({ $0 | 0x20 == $1 }),
                isSpace(bytes[bytes.startIndex + unit.count])
            else { return nil }
            bytes.removeFirst(unit.count)
            while let first = bytes.first, isSpace(first) { bytes.removeFirst() }
            self.bytes = bytes
        }

        var atEnd: Bool { bytes.isEmpty }

        mutating func take(_ byte: UInt8) -> Bool {
            guard bytes.first == byte else { return false }
            bytes.removeFirst()
            return true
        }

        /// One or more ASCII digits that fit an `Int64`.
        mutating func number() -> Int64? {
            var value: Int64 = 0
            var digits = 0
            while let byte = bytes.first, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) {
                let (times, overflow1) = value.multipliedReportingOverflow(by: 10)
                let (sum, overflow2) = times.addingReportingOverflow(Int64(byte - UInt8(ascii: "0")))
                guard !overflow1, !overflow2 else { return nil }
                value = sum
                digits += 1
                bytes.removeFirst()
            }
            return digits > 0 ? value : nil
        }
    }
}
