import XferPrimitives

/// Chunk numbers (1-based, as the receiver's protocols and records count them) as runs: sorted,
/// disjoint, never adjacent ranges.
///
/// Why runs and not a bitmap: a bitmap costs what the client *declared* (2^24 chunks of one byte
/// are 2 MiB of bits, and a CRC table beside them 64 MiB, for an upload that sent one chunk), runs
/// cost what it *sent*: chunks that arrive in order, or nearly (concurrency leaves a few holes),
/// are one run whatever their number. Only a client that sends every other chunk makes a run per
/// chunk, and each of those cost it a request.
struct ChunkRanges: Sendable, Equatable {
    /// Ascending, disjoint, with a gap of at least one chunk between two.
    private(set) var runs: [ClosedRange<Int>]
    /// How many chunk numbers are in the set, kept in step by every change.
    private(set) var count: Int

    init() {
        runs = []
        count = 0
    }

    /// The set of `runs`, which must be ascending and disjoint (adjacent ones are joined).
    init(_ runs: some Sequence<ClosedRange<Int>>) {
        self.init()
        for run in runs {
            precondition(run.lowerBound > (self.runs.last?.upperBound ?? Int.min), "runs must be ascending and disjoint")
            if let last = self.runs.last, last.upperBound + 1 == run.lowerBound {
                self.runs[self.runs.count - 1] = last.lowerBound...run.upperBound
            } else {
                self.runs.append(run)
            }
            count += run.count
        }
    }

    /// The set of `numbers`, in any order, repeats allowed.
    init(numbers: some Sequence<Int>) {
        self.init()
        for number in numbers.sorted() where !contains(number) { insert(number) }
    }

    /// Every chunk of an upload of `chunkCount`.
    static func all(_ chunkCount: Int) -> ChunkRanges {
        chunkCount > 0 ? ChunkRanges([1...chunkCount]) : ChunkRanges()
    }

    var isEmpty: Bool { count == 0 }

    /// Whether every chunk of an upload of `chunkCount` is in.
    func isComplete(of chunkCount: Int) -> Bool { count == chunkCount && (chunkCount == 0 || runs == [1...chunkCount]) }

    /// The index of the first run that starts after `number`.
    private func firstRun(after number: Int) -> Int {
        var low = 0
        var high = runs.count
        while low < high {
            let middle = (low + high) / 2
            if runs[middle].lowerBound <= number { low = middle + 1 } else { high = middle }
        }
        return low
    }

    /// The index of the run holding `number`, if one does.
    func run(holding number: Int) -> Int? {
        let next = firstRun(after: number)
        return next > 0 && runs[next - 1].contains(number) ? next - 1 : nil
    }

    func contains(_ number: Int) -> Bool { run(holding: number) != nil }

    /// What `insert(number)` would do to the number of runs: +1 for a chunk between gaps, 0 for
    /// one that extends a run (or is in already), -1 for one that joins two.
    func runChange(inserting number: Int) -> Int {
        if contains(number) { return 0 }
        let next = firstRun(after: number)
        let joinsPrevious = next > 0 && runs[next - 1].upperBound + 1 == number
        let joinsNext = next < runs.count && runs[next].lowerBound - 1 == number
        return joinsPrevious && joinsNext ? -1 : joinsPrevious || joinsNext ? 0 : 1
    }

    /// Adds `number`. Returns how it went in, for a caller keeping something per run
    /// (`ReceivedChunks`' CRCs).
    @discardableResult
    mutating func insert(_ number: Int) -> Insertion {
        if let index = run(holding: number) { return .present(index) }
        count += 1
        let next = firstRun(after: number)
        let joinsPrevious = next > 0 && runs[next - 1].upperBound + 1 == number
        let joinsNext = next < runs.count && runs[next].lowerBound - 1 == number
        switch (joinsPrevious, joinsNext) {
        case (true, true):
            runs[next - 1] = runs[next - 1].lowerBound...runs[next].upperBound
            runs.remove(at: next)
            return .joined(next - 1)
        case (true, false):
            runs[next - 1] = runs[next - 1].lowerBound...number
            return .appended(next - 1)
        case (false, true):
            runs[next] = number...runs[next].upperBound
            return .prepended(next)
        case (false, false):
            runs.insert(number...number, at: next)
            return .alone(next)
        }
    }

    enum Insertion: Equatable {
        /// It was in already, in run `index`.
        case present(Int)
        /// It joined the run before it and the one after into run `index`.
        case joined(Int)
        /// It extended run `index` at its end.
        case appended(Int)
        /// It extended run `index` at its start.
        case prepended(Int)
        /// It is run `index`, alone.
        case alone(Int)
    }

    /// Removes `number`. Returns how it went out.
    @discardableResult
    mutating func remove(_ number: Int) -> Removal {
        guard let index = run(holding: number) else { return .absent }
        count -= 1
        let run = runs[index]
        if run.count == 1 {
            runs.remove(at: index)
            return .emptied(index)
        }
        if number == run.lowerBound {
            runs[index] = (number + 1)...run.upperBound
            return .shortened(index)
        }
        if number == run.upperBound {
            runs[index] = run.lowerBound...(number - 1)
            return .shortened(index)
        }
        runs[index] = run.lowerBound...(number - 1)
        runs.insert((number + 1)...run.upperBound, at: index + 1)
        return .split(index)
    }

    enum Removal: Equatable {
        case absent
        /// Run `index` was `number` alone and is gone.
        case emptied(Int)
        /// Run `index` lost its first or last chunk.
        case shortened(Int)
        /// Run `index` was cut in two: `index` and `index + 1`.
        case split(Int)
    }

    /// The chunks of `1...chunkCount` not in the set, as runs: O(runs), whatever the count.
    func missing(of chunkCount: Int) -> ChunkRanges {
        var gaps: [ClosedRange<Int>] = []
        var next = 1
        for run in runs {
            if run.lowerBound > next { gaps.append(next...(run.lowerBound - 1)) }
            next = run.upperBound + 1
        }
        if next <= chunkCount { gaps.append(next...chunkCount) }
        var result = ChunkRanges()
        result.runs = gaps
        result.count = gaps.reduce(0) { $0 + $1.count }
        return result
    }

    /// The first `limit` numbers, ascending.
    func numbers(limit: Int = .max) -> [Int] {
        var result: [Int] = []
        result.reserveCapacity(min(count, limit))
        for run in runs {
            for number in run {
                guard result.count < limit else { return result }
                result.append(number)
            }
        }
        return result
    }

    /// The first `limit` runs.
    func prefix(runs limit: Int) -> ArraySlice<ClosedRange<Int>> { runs.prefix(limit) }
}

/// The chunks an upload has received, each run with the CRC-32C of its bytes when every chunk of
/// it came with a checked one (`Content-Digest: crc32c`): so a completion answers the file's
/// CRC-32C without reading it back (the read-back's SHA-256 was half the receiver's CPU of a
/// patch upload), in memory that follows the runs, not the chunks. A run whose CRC is unknown (a
/// chunk came without one, or a chunk was written again and cut its run) makes the completion
/// read the file instead.
struct ReceivedChunks: Sendable {
    private(set) var chunks = ChunkRanges()
    /// One per run of `chunks`: the CRC-32C of the run's bytes, nil when unknown.
    private var crcs: [UInt32?] = []
    let meta: UploadMeta

    init(meta: UploadMeta) { self.meta = meta }

    var count: Int { chunks.count }
    var runCount: Int { chunks.runs.count }
    var isComplete: Bool { chunks.isComplete(of: meta.chunkCount) }
    func contains(_ number: Int) -> Bool { chunks.contains(number) }

    /// Bytes of the chunks `run`.
    private func length(of run: ClosedRange<Int>) -> Int64 {
        Int64(meta.byteRange(ofChunk: run.upperBound).upperBound - meta.byteRange(ofChunk: run.lowerBound).lowerBound)
    }

    /// Records chunk `number` (in `1...meta.chunkCount`) as received, with the CRC-32C its body
    /// was checked against, if any.
    mutating func insert(_ number: Int, crc: UInt32?) {
        let own = Int64(meta.byteRange(ofChunk: number).count)
        switch chunks.insert(number) {
        case .present(let index):
            // Written again: the run's CRC holds the older bytes' (equal, if the client is sane).
            crcs[index] = chunks.runs[index].count == 1 ? crc : nil
        case .joined(let index):
            let after = crcs.remove(at: index + 1)
            let lengthAfter = length(of: (number + 1)...chunks.runs[index].upperBound)
            crcs[index] = combine(combine(crcs[index], crc, own), after, lengthAfter)
        case .appended(let index):
            crcs[index] = combine(crcs[index], crc, own)
        case .prepended(let index):
            crcs[index] = combine(crc, crcs[index], length(of: (number + 1)...chunks.runs[index].upperBound))
        case .alone(let index):
            crcs.insert(crc, at: index)
        }
    }

    /// Forgets chunk `number` (about to be written again).
    mutating func remove(_ number: Int) {
        switch chunks.remove(number) {
        case .absent: break
        case .emptied(let index): crcs.remove(at: index)
        // What is left of the run is a part of the bytes its CRC covered: unknown now.
        case .shortened(let index): crcs[index] = nil
        case .split(let index):
            crcs[index] = nil
            crcs.insert(nil, at: index + 1)
        }
    }

    private func combine(_ first: UInt32?, _ second: UInt32?, _ lengthOfSecond: Int64) -> UInt32? {
        guard let first, let second else { return nil }
        return CRC32C.combine(first, second, lengthOfSecond: lengthOfSecond)
    }

    /// The file's CRC-32C when every chunk is in and every CRC known; nil otherwise (and for an
    /// empty file).
    var combinedCRC: UInt32? {
        guard meta.chunkCount > 0, isComplete else { return nil }
        return crcs[0]
    }

    /// `+n~<crc32c hex>`: the log record of a chunk received with its CRC-32C.
    static func record(chunk: Int, crc: UInt32) -> String { "+" + String(chunk) + "~" + CRC32.hex(crc) }
}
