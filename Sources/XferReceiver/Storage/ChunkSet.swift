/// The set of received chunk numbers (1-based), as a bitset: a large upload can have millions of chunks.
struct ChunkSet: Sendable, Equatable {
    let chunkCount: Int
    private var words: [UInt64]
    private(set) var count = 0

    init(chunkCount: Int) {
        self.chunkCount = chunkCount
        self.words = Array(repeating: 0, count: (chunkCount + 63) / 64)
    }

    func contains(_ chunk: Int) -> Bool {
        guard chunk >= 1 && chunk <= chunkCount else { return false }
        let (word, bit) = Self.position(chunk)
        return words[word] & (1 << bit) != 0
    }

    mutating func insert(_ chunk: Int) {
        precondition(chunk >= 1 && chunk <= chunkCount, "chunk out of range")
        let (word, bit) = Self.position(chunk)
        if words[word] & (1 << bit) == 0 {
            words[word] |= 1 << bit
            count += 1
        }
    }

    mutating func remove(_ chunk: Int) {
        precondition(chunk >= 1 && chunk <= chunkCount, "chunk out of range")
        let (word, bit) = Self.position(chunk)
        if words[word] & (1 << bit) != 0 {
            words[word] &= ~(1 << bit)
            count -= 1
        }
    }

    var isComplete: Bool { count == chunkCount }

    /// Ascending.
    var members: [Int] { chunks(present: true) }

    /// Ascending.
    var missing: [Int] { chunks(present: false) }

    private func chunks(present: Bool) -> [Int] {
        var result: [Int] = []
        result.reserveCapacity(present ? count : chunkCount - count)
        for chunk in stride(from: 1, through: chunkCount, by: 1) where contains(chunk) == present {
            result.append(chunk)
        }
        return result
    }

    private static func position(_ chunk: Int) -> (Int, UInt64) {
        ((chunk - 1) / 64, UInt64((chunk - 1) % 64))
    }
}
