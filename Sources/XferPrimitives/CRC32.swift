import CISAL

/// CRC-32 (the zlib/gzip polynomial), computed by Intel's ISA-L (about 27 GB/s
/// on this project's machines, zlib's took 4): for the engine (chunk
/// checksums, the state store's value seals), the backends (S3's
/// `x-amz-checksum-crc32`, sequence's `crc`) and the receiver.
public struct CRC32: IncrementalCRC {
    /// The checksum of everything fed so far.
    public private(set) var value: UInt32 = 0

    /// An empty checksum.
    public init() {}

    /// Feeds `bytes`.
    public mutating func update(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress?.assumingMemoryBound(to: UInt8.self) else { return }
        // ISA-L's reflected gzip CRC takes and returns the finished value (it
        // conditions the register itself), so it continues from `value`.
        value = crc32_gzip_refl(value, base, UInt64(bytes.count))
    }

    /// The checksum of `a` followed by `b`, from theirs and `b`'s length.
    public static func combine(_ a: UInt32, _ b: UInt32, lengthOfSecond length: Int64) -> UInt32 {
        CRCCombination.combine(a, b, lengthOfSecond: length, reflectedPolynomial: 0xEDB8_8320)
    }

    /// `value` as 8 lowercase hex digits, most significant first.
    public static func hex(_ value: UInt32) -> String {
        Hex.lowercase(bigEndianBytes(value))
    }

    /// `value`'s four bytes, most significant first (how protocols send a CRC).
    public static func bigEndianBytes(_ value: UInt32) -> [UInt8] {
        [UInt8(value >> 24), UInt8(truncatingIfNeeded: value >> 16), UInt8(truncatingIfNeeded: value >> 8), UInt8(truncatingIfNeeded: value)]
    }
}

/// CRC-32C (Castagnoli: iSCSI, ext4, S3's `x-amz-checksum-crc32c`, RFC 9530's
/// `crc32c`), computed by ISA-L with the CPU's CRC instruction.
public struct CRC32C: IncrementalCRC {
    /// The checksum of everything fed so far.
    public var value: UInt32 { ~register }
    /// ISA-L's iSCSI CRC works on the raw register: conditioned here.
    private var register: UInt32 = 0xFFFF_FFFF

    /// An empty checksum.
    public init() {}

    /// Feeds `bytes`.
    public mutating func update(_ bytes: UnsafeRawBufferPointer) {
        guard var base = bytes.baseAddress?.assumingMemoryBound(to: UInt8.self) else { return }
        var remaining = bytes.count
        // The length is a C int.
        while remaining > 0 {
            let step = min(remaining, 1 << 30)
            register = UInt32(crc32_iscsi(UnsafeMutablePointer(mutating: base), Int32(step), register))
            base += step
            remaining -= step
        }
    }


    /// The checksum of `a` followed by `b`, from theirs and `b`'s length.
    public static func combine(_ a: UInt32, _ b: UInt32, lengthOfSecond length: Int64) -> UInt32 {
        CRCCombination.combine(a, b, lengthOfSecond: length, reflectedPolynomial: 0x82F6_3B78)
    }
}

/// A 32-bit CRC fed a piece at a time.
public protocol IncrementalCRC: Sendable, Hashable {
    /// An empty checksum.
    init()
    /// The checksum of everything fed so far.
    var value: UInt32 { get }
    /// Feeds `bytes`.
    mutating func update(_ bytes: UnsafeRawBufferPointer)
}

extension IncrementalCRC {
    /// Feeds `bytes` (an array or a slice of one is read in place). Inlinable,
    /// so callers in other modules get it specialized (the state store seals
    /// every value it writes with one).
    @inlinable
    public mutating func update(_ bytes: some Collection<UInt8>) {
        let done: Void? = bytes.withContiguousStorageIfAvailable { update(UnsafeRawBufferPointer($0)) }
        if done == nil { Array(bytes).withUnsafeBytes { update($0) } }
    }

    /// The checksum of `bytes`.
    @inlinable
    public static func of(_ bytes: some Collection<UInt8>) -> UInt32 {
        var crc = Self()
        crc.update(bytes)
        return crc.value
    }
}

/// The CRC of a concatenation from its parts' CRCs: the CRC of `a` shifted
/// over `length` zero bytes (a product of GF(2) matrices, squared per bit of
/// the length, as zlib's `crc32_combine` does), then added to the CRC of `b`.
/// The only CRC arithmetic of this project's own; the CRCs themselves are
/// ISA-L's.
enum CRCCombination {
    static func combine(_ a: UInt32, _ b: UInt32, lengthOfSecond length: Int64, reflectedPolynomial: UInt32) -> UInt32 {
        guard length > 0 else { return a }
        // The operator for one zero bit, then for two and four.
        var odd = [UInt32](repeating: 0, count: 32)
        odd[0] = reflectedPolynomial
        var row: UInt32 = 1
        for n in 1..<32 {
            odd[n] = row
            row <<= 1
        }
        var even = square(odd)
        odd = square(even)
        var crc = a
        var remaining = length
        // Each round squares the operator: one zero byte, two, four, …
        repeat {
            even = square(odd)
            if remaining & 1 != 0 { crc = times(even, crc) }
            remaining >>= 1
            if remaining == 0 { break }
            odd = square(even)
            if remaining & 1 != 0 { crc = times(odd, crc) }
            remaining >>= 1
        } while remaining != 0
        return crc ^ b
    }

    private static func times(_ matrix: [UInt32], _ vector: UInt32) -> UInt32 {
        var sum: UInt32 = 0
        var vector = vector
        var index = 0
        while vector != 0 {
            if vector & 1 != 0 { sum ^= matrix[index] }
            vector >>= 1
            index += 1
        }
        return sum
    }

    private static func square(_ matrix: [UInt32]) -> [UInt32] {
        (0..<32).map { times(matrix, matrix[$0]) }
    }
}
