import XferPrimitives

/// A set of chunk indexes (0-based) as a bitmap; written once, in
/// XferPrimitives, for the engine and the receiver.
public typealias ChunkSet = XferPrimitives.ChunkSet
