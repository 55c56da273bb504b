/// A set of chunk indexes as a bitmap: one bit a chunk, so a million-chunk
/// file costs 125 KiB in memory and in the store. One convention for the
/// engine and the receiver: indexes are 0-based (`0..<capacity`); a wire's
/// 1-based chunk numbers are converted where they are read or written.
public struct ChunkSet: Sendable, Hashable {
    // Inlinable members read the words in place: the set crosses a module boundary (engine,
    // receiver), and a call per chunk cost a resume of a million-chunk file ~80 ms.
    @usableFromInline internal(set) var words: [UInt64]
    /// Indexes run from 0 to `capacity - 1`.
    public let capacity: Int
    /// How many indexes are in the set: kept in step by every change, so
    /// asking costs nothing (the scheduler asks after every chunk).
    public var count: Int { storedCount }
    @usableFromInline internal var storedCount = 0

    /// An empty set for `capacity` chunks.
    public init(capacity: Int) {
        precondition(capacity >= 0)
        self.capacity = capacity
        words = Array(repeating: 0, count: (capacity + 63) / 64)
    }

    /// Whether `index` is in the set (false outside `0..<capacity`).
    @inlinable
    public func contains(_ index: Int) -> Bool {
        guard index >= 0 && index < capacity else { return false }
        return words[index >> 6] & (1 << UInt64(index & 63)) != 0
    }

    /// Adds `index`, which must be in `0..<capacity`.
    @inlinable
    public mutating func insert(_ index: Int) {
        precondition(index >= 0 && index < capacity, "chunk \(index) is outside 0..<\(capacity)")
        let mask: UInt64 = 1 << UInt64(index & 63)
        if words[index >> 6] & mask == 0 { storedCount += 1 }
        words[index >> 6] |= mask
    }

    /// Adds every index in `0..<end` (clamped to the capacity).
    public mutating func insertAll(below end: Int) {
        let end = min(max(0, end), capacity)
        for word in 0..<(end >> 6) { words[word] = .max }
        if end & 63 != 0 { words[end >> 6] |= (1 << UInt64(end & 63)) - 1 }
        storedCount = words.reduce(0) { $0 + $1.nonzeroBitCount }
    }

    /// Removes `index` (ignored outside `0..<capacity`).
    @inlinable
    public mutating func remove(_ index: Int) {
        guard index >= 0 && index < capacity else { return }
        let mask: UInt64 = 1 << UInt64(index & 63)
        if words[index >> 6] & mask != 0 { storedCount -= 1 }
        words[index >> 6] &= ~mask
    }

    /// Empties the set.
    public mutating func removeAll() {
        for i in words.indices { words[i] = 0 }
        storedCount = 0
    }
    /// Whether every index is in the set.
    public var isComplete: Bool { count == capacity }

    /// The lowest index not in the set at or after `start`, or nil.
    public func firstMissing(from start: Int = 0) -> Int? {
        var index = max(start, 0)
        while index < capacity {
            let word = words[index >> 6] | ((1 << UInt64(index & 63)) &- 1)
            if word != .max {
                let bit = (~word).trailingZeroBitCount
                let found = (index & ~63) + bit
                return found < capacity ? found : nil
            }
            index = (index & ~63) + 64
        }
        return nil
    }

    /// Every index not in the set, ascending.
    public var missing: [Int] {
        var result: [Int] = []
        var next = firstMissing()
        while let index = next {
            result.append(index)
            next = firstMissing(from: index + 1)
        }
        return result
    }

    /// Every index in the set, ascending: a word at a time, a step per member.
    public var members: [Int] {
        var result: [Int] = []
        result.reserveCapacity(count)
        for (position, word) in words.enumerated() {
            var bits = word
            while bits != 0 {
                result.append(position << 6 + bits.trailingZeroBitCount)
                bits &= bits &- 1
            }
        }
        return result
    }
}

// `package`: the engine's state store keeps a bitmap in segments (and a
// `JobStateStore` outside the engine stores bitmaps as `StateStore` does).
extension ChunkSet {
    /// Chunks per stored segment. A commit rewrites only the segments it
    /// touches, so acknowledging one chunk of a huge file writes 1 KiB.
    package static let segmentSize = 8192

    package var segmentCount: Int { (capacity + Self.segmentSize - 1) / Self.segmentSize }

    /// The stored size of segment `segment` of a set of `capacity` chunks:
    /// whole words for the chunks it holds, so a one-chunk file's bitmap is
    /// 8 bytes, not a full segment's 1 KiB.
    package static func segmentByteCount(_ segment: Int, capacity: Int) -> Int {
        let chunks = min(segmentSize, max(0, capacity - segment * segmentSize))
        return (chunks + 63) / 64 * 8
    }

    /// Whether segment `segment` holds no chunk (it need not be stored).
    package func segmentIsEmpty(_ segment: Int) -> Bool {
        let wordsPerSegment = Self.segmentSize / 64
        let start = segment * wordsPerSegment
        let end = min(start + wordsPerSegment, words.count)
        return start >= end || words[start..<end].allSatisfy { $0 == 0 }
    }

    /// The bytes of segment `segment` (little-endian words).
    package func segmentBytes(_ segment: Int) -> [UInt8] {
        let wordsPerSegment = Self.segmentSize / 64
        let start = segment * wordsPerSegment
        let end = min(start + wordsPerSegment, words.count)
        var bytes: [UInt8] = []
        bytes.reserveCapacity((end - start) * 8)
        for word in words[start..<end] {
            withUnsafeBytes(of: word.littleEndian) { bytes.append(contentsOf: $0) }
        }
        return bytes
    }

    /// Replaces segment `segment` with stored bytes. Bits beyond `capacity`
    /// are ignored, so a corrupt segment cannot mark chunks that don't exist.
    package mutating func loadSegment(_ segment: Int, from bytes: [UInt8]) {
        let wordsPerSegment = Self.segmentSize / 64
        let start = segment * wordsPerSegment
        guard start < words.count else { return }
        let available = min(wordsPerSegment, words.count - start, bytes.count / 8)
        let tail = capacity & 63
        for i in 0..<available {
            var word: UInt64 = 0
            for b in 0..<8 { word |= UInt64(bytes[i * 8 + b]) << UInt64(8 * b) }
            if tail != 0, start + i == words.count - 1 { word &= (1 << UInt64(tail)) - 1 }
            storedCount += word.nonzeroBitCount - words[start + i].nonzeroBitCount
            words[start + i] = word
        }
    }
}
