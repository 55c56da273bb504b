import CZlib

/// CRC-32 (the zlib/gzip polynomial), computed by zlib, written once for
/// the engine (chunk checksums, the state store's value seals), the backends
/// and the receiver (sequence blocks checked as they stream in).
public struct CRC32: Sendable, Hashable {
    /// The checksum of everything fed so far.
    public private(set) var value: UInt32 = 0

    /// An empty checksum.
    public init() {}

    /// Feeds `bytes`.
    public mutating func update(_ bytes: UnsafeRawBufferPointer) {
        guard var base = bytes.baseAddress?.assumingMemoryBound(to: UInt8.self) else { return }
        var remaining = bytes.count
        var crc = uLong(value)
        // zlib takes a 32-bit length.
        while remaining > 0 {
            let step = min(remaining, Int(UInt32.max))
            crc = CZlib.crc32(crc, base, uInt(step))
            base += step
            remaining -= step
        }
        value = UInt32(truncatingIfNeeded: crc)
    }

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
        var crc = CRC32()
        crc.update(bytes)
        return crc.value
    }

    /// `value` as 8 lowercase hex digits, most significant first.
    public static func hex(_ value: UInt32) -> String {
        Hex.lowercase([UInt8(value >> 24), UInt8(truncatingIfNeeded: value >> 16), UInt8(truncatingIfNeeded: value >> 8), UInt8(truncatingIfNeeded: value)])
    }
}
