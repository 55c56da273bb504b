import CISAL

/// CRC-32 (the zlib/gzip polynomial), computed by Intel's ISA-L (about 27 GB/s
/// on this project's machines, zlib's took 4): for the engine (chunk
/// checksums, the state store's value seals), the backends (S3's
/// `x-amz-checksum-crc32`, sequence's `crc`) and the receiver.
public struct CRC32: IncrementalCRC {
    /// The generator, bit-reversed (x^0 at the top), as the combination works in.
    static let reflectedPolynomial: UInt32 = 0xEDB8_8320
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
        CRCCombination.combine(a, b, lengthOfSecond: length, reflectedPolynomial: reflectedPolynomial)
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
    /// The generator, bit-reversed (x^0 at the top), as the combination works in.
    static let reflectedPolynomial: UInt32 = 0x82F6_3B78
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
        CRCCombination.combine(a, b, lengthOfSecond: length, reflectedPolynomial: reflectedPolynomial)
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
/// over `length` zero bytes, then added to the CRC of `b`. Shifting is a
/// product in GF(2)[x] modulo the polynomial: by x^(8·length), built from a
/// table of x^(2^k) (one product per set bit of the length), so a combine
/// costs a few dozen shifts and no allocation (the squared 32×32 matrices
/// of zlib's first `crc32_combine` were 4 % of a 64 KiB-chunk push's CPU,
/// combining 4,096 receipts at completion). Written once for 32- and 64-bit
/// registers (CRC-32, CRC-32C, CRC-64/NVME); the CRCs themselves are ISA-L's,
/// or `CRC64NVME`'s tables.
enum CRCCombination {
    static func combine(_ a: UInt32, _ b: UInt32, lengthOfSecond length: Int64, reflectedPolynomial: UInt32) -> UInt32 {
        guard length > 0 else { return a }
        let powers: [UInt32]
        switch reflectedPolynomial {
        case CRC32C.reflectedPolynomial: powers = castagnoliPowers
        case CRC32.reflectedPolynomial: powers = zlibPowers
        default: powers = Self.powers(of: reflectedPolynomial)
        }
        return multiply(shift(UInt64(length), log2Bits: 3, powers: powers, polynomial: reflectedPolynomial), a, polynomial: reflectedPolynomial) ^ b
    }

    static func combine(_ a: UInt64, _ b: UInt64, lengthOfSecond length: Int64, reflectedPolynomial: UInt64) -> UInt64 {
        guard length > 0 else { return a }
        let powers = reflectedPolynomial == CRC64NVME.reflectedPolynomial ? nvmePowers : Self.powers(of: reflectedPolynomial)
        return multiply(shift(UInt64(length), log2Bits: 3, powers: powers, polynomial: reflectedPolynomial), a, polynomial: reflectedPolynomial) ^ b
    }

    /// x^(2^k) mod P for k = 0..<64, in the reflected order (x^0 is the top bit).
    private static let castagnoliPowers = powers(of: CRC32C.reflectedPolynomial)
    private static let zlibPowers = powers(of: CRC32.reflectedPolynomial)
    private static let nvmePowers = powers(of: CRC64NVME.reflectedPolynomial)

    private static func powers<Register: FixedWidthInteger & UnsignedInteger>(of polynomial: Register) -> [Register] {
        var table = [Register](repeating: 0, count: 64)
        table[0] = 1 << (Register.bitWidth - 2)  // x^1
        for k in 1..<64 { table[k] = multiply(table[k - 1], table[k - 1], polynomial: polynomial) }
        return table
    }

    /// x^(n · 2^log2Bits) mod P.
    private static func shift<Register: FixedWidthInteger & UnsignedInteger>(
        _ n: UInt64, log2Bits: Int, powers: [Register], polynomial: Register
    ) -> Register {
        var product: Register = 1 << (Register.bitWidth - 1)  // x^0
        var n = n
        var k = log2Bits
        while n != 0 {
            if n & 1 != 0 { product = multiply(powers[k & 63], product, polynomial: polynomial) }
            n >>= 1
            k += 1
        }
        return product
    }

    /// a · b mod P, both reflected.
    private static func multiply<Register: FixedWidthInteger & UnsignedInteger>(_ a: Register, _ b: Register, polynomial: Register) -> Register {
        var product: Register = 0
        var b = b
        var mask: Register = 1 << (Register.bitWidth - 1)
        while mask != 0 {
            if a & mask != 0 {
                product ^= b
                if a & (mask - 1) == 0 { break }
            }
            mask >>= 1
            b = b & 1 != 0 ? (b >> 1) ^ polynomial : b >> 1
        }
        return product
    }
}
