import FoundationEssentials

/// The compact binary form of state-store values: little-endian integers,
/// LEB128 varints for counts and lengths, strings as a length and UTF-8.
///
/// Chosen over JSON because a record is encoded on every change of its file
/// or job: the cost must not depend on anything but the record itself
/// (`JSONEncoder` of a whole job was 70 % of a 1,000-file push's CPU).
struct RecordWriter {
    private(set) var bytes: [UInt8] = []

    init(capacity: Int = 64) { bytes.reserveCapacity(capacity) }

    mutating func byte(_ value: UInt8) { bytes.append(value) }

    mutating func bool(_ value: Bool) { bytes.append(value ? 1 : 0) }

    mutating func bytes(_ value: [UInt8]) { bytes.append(contentsOf: value) }

    mutating func varint(_ value: UInt64) {
        var value = value
        while value >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: value) | 0x80)
            value >>= 7
        }
        bytes.append(UInt8(value))
    }

    mutating func int(_ value: Int) { varint(UInt64(bitPattern: Int64(value))) }

    mutating func int64(_ value: Int64) {
        for shift in stride(from: 0, to: 64, by: 8) { bytes.append(UInt8(truncatingIfNeeded: value >> Int64(shift))) }
    }

    mutating func uint64(_ value: UInt64) { int64(Int64(bitPattern: value)) }

    mutating func double(_ value: Double) { uint64(value.bitPattern) }

    mutating func string(_ value: String) {
        var value = value
        value.withUTF8 { utf8 in
            varint(UInt64(utf8.count))
            bytes.append(contentsOf: utf8)
        }
    }

    mutating func optionalString(_ value: String?) {
        if let value {
            byte(1)
            string(value)
        } else {
            byte(0)
        }
    }

    mutating func strings(_ values: [String]) {
        varint(UInt64(values.count))
        for value in values { string(value) }
    }
}

/// Reads what `RecordWriter` wrote; every read fails (nil) rather than trap
/// on bytes cut short or damaged.
struct RecordReader {
    private let bytes: [UInt8]
    private var offset = 0

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    var isAtEnd: Bool { offset == bytes.count }

    mutating func byte() -> UInt8? {
        guard offset < bytes.count else { return nil }
        defer { offset += 1 }
        return bytes[offset]
    }

    mutating func bool() -> Bool? {
        switch byte() {
        case 0?: return false
        case 1?: return true
        default: return nil
        }
    }

    mutating func varint() -> UInt64? {
        var result: UInt64 = 0
        var shift: UInt64 = 0
        while let next = byte() {
            guard shift < 64 else { return nil }
            result |= UInt64(next & 0x7f) << shift
            if next & 0x80 == 0 { return result }
            shift += 7
        }
        return nil
    }

    mutating func int() -> Int? {
        varint().map { Int(truncatingIfNeeded: Int64(bitPattern: $0)) }
    }

    mutating func int64() -> Int64? {
        guard bytes.count - offset >= 8 else { return nil }
        var value: UInt64 = 0
        for index in 0..<8 { value |= UInt64(bytes[offset + index]) << UInt64(8 * index) }
        offset += 8
        return Int64(bitPattern: value)
    }

    mutating func uint64() -> UInt64? { int64().map { UInt64(bitPattern: $0) } }

    mutating func double() -> Double? { uint64().map(Double.init(bitPattern:)) }

    mutating func string() -> String? {
        guard let length = varint(), length <= UInt64(bytes.count - offset) else { return nil }
        let end = offset + Int(length)
        defer { offset = end }
        return String(decoding: bytes[offset..<end], as: UTF8.self)
    }

    mutating func bytes(_ count: Int) -> [UInt8]? {
        guard count >= 0, count <= bytes.count - offset else { return nil }
        defer { offset += count }
        return Array(bytes[offset..<(offset + count)])
    }

    mutating func optionalString() -> String?? {
        switch byte() {
        case 0?: return .some(nil)
        case 1?: return string().map { .some($0) }
        default: return nil
        }
    }

    mutating func strings() -> [String]? {
        guard let count = varint(), count <= UInt64(bytes.count - offset) else { return nil }
        var values: [String] = []
        values.reserveCapacity(Int(count))
        for _ in 0..<count {
            guard let value = string() else { return nil }
            values.append(value)
        }
        return values
    }
}
