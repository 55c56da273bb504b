import XferPrimitives

/// The receiver's protocols and its received-log number chunks from 1; the
/// one chunk set of the package (XferPrimitives) holds 0-based indexes. These
/// are the only places the two meet.
extension ChunkSet {
    /// An empty set for an upload of `chunkCount` chunks.
    init(chunkCount: Int) { self.init(capacity: chunkCount) }

    /// Whether chunk number `number` (1-based) is in the set.
    func contains(number: Int) -> Bool { contains(number - 1) }

    /// Adds chunk number `number` (1-based, within the upload).
    mutating func insert(number: Int) { insert(number - 1) }

    /// Removes chunk number `number` (1-based).
    mutating func remove(number: Int) { remove(number - 1) }

    /// The chunk numbers in the set, ascending.
    var memberNumbers: [Int] { members.map { $0 + 1 } }

    /// The chunk numbers not in the set, ascending.
    var missingNumbers: [Int] { missing.map { $0 + 1 } }
}
