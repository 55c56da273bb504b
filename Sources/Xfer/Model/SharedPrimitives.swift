import XferPrimitives

// What the engine shares with the receiver and the backends, written once in
// XferPrimitives and named here so `import Xfer` is all a backend needs.

/// A set of chunk indexes (0-based) as a bitmap; written once, in
/// XferPrimitives, for the engine and the receiver.
public typealias ChunkSet = XferPrimitives.ChunkSet

/// CRC-32 (the zlib/gzip polynomial), by ISA-L, incremental and combinable.
public typealias CRC32 = XferPrimitives.CRC32
/// CRC-32C (Castagnoli), by ISA-L, incremental and combinable.
public typealias CRC32C = XferPrimitives.CRC32C
