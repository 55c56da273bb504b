/// How a re-run lists a remote side at once: as key ranges split at the keys
/// xfer saw there last time (`sync.objects`), each listed from after its
/// first split key (S3's `start-after`) to the next one. Range `i` holds the
/// keys in (`splits[i-1]`, `splits[i]`]: the first from the start, the last
/// to the end, so every key is in exactly one, whatever changed since.
struct SyncKeyRanges: Sendable, Hashable {
    /// Keys apart between two splits: a page of a listing (1,000 keys) with
    /// room for 40 added since, so a range is usually one request.
    static let stride = 960
    /// The most ranges, however many keys: what a sync's state holds of them.
    static let maxRanges = 256

    /// Sorted in the listing's order (UTF-8 bytes), without repeats.
    let splits: [String]

    init(splits: [String]) {
        self.splits = splits
    }

    var count: Int { splits.count + 1 }

    /// Where range `index` starts: after this key; nil: from the start.
    func start(of index: Int) -> String? { index == 0 ? nil : splits[index - 1] }

    /// Its last key; nil: to the end of the listing.
    func end(of index: Int) -> String? { index < splits.count ? splits[index] : nil }

    /// Stored before any range is listed, so a resumed listing lists the same ranges.
    var encoded: [UInt8] {
        var writer = RecordWriter(capacity: 16 * splits.count)
        writer.strings(splits)
        return writer.bytes
    }

    init?(decoding bytes: [UInt8]) {
        var reader = RecordReader(bytes)
        guard let splits = reader.strings(), reader.isAtEnd, Self.isSorted(splits) else { return nil }
        self.init(splits: splits)
    }

    /// A listing's order: S3's, UTF-8 bytes (not `String`'s `<`).
    static func precedes(_ a: String, _ b: String) -> Bool { a.utf8.lexicographicallyPrecedes(b.utf8) }

    static func isSorted(_ keys: [String]) -> Bool {
        zip(keys, keys.dropFirst()).allSatisfy { precedes($0, $1) }
    }

    /// What of a page (in order) is in a range ending at `end`, and whether
    /// the range is listed: the page reached its end key or went past it
    /// (the rest of the page is the next range's). Reaching the key itself
    /// ends it too, which saves a request for a page that would hold none
    /// of the range.
    static func cut<Entry>(_ page: [Entry], endingAt end: String?, key: (Entry) -> String) -> (kept: ArraySlice<Entry>, ended: Bool) {
        guard let end else { return (page[...], false) }
        let past = page.firstIndex { precedes(end, key($0)) } ?? page.endIndex
        let reached = past > page.startIndex && key(page[past - 1]) == end
        return (page[..<past], past < page.endIndex || reached)
    }

    /// Picks split keys from keys met in order, one every `stride`, as many
    /// as there may be ranges: when there would be more, every other one is
    /// dropped and the stride doubled, so memory stays `maxRanges` keys
    /// however many the place holds.
    struct Splitter {
        private(set) var splits: [String] = []
        private var stride: Int
        private let maxRanges: Int
        private var seen = 0

        init(stride: Int = SyncKeyRanges.stride, maxRanges: Int = SyncKeyRanges.maxRanges) {
            precondition(stride > 0 && maxRanges >= 2)
            self.stride = stride
            self.maxRanges = maxRanges
        }

        mutating func add(_ key: String) {
            seen += 1
            guard seen % stride == 0 else { return }
            splits.append(key)
            if splits.count >= maxRanges {
                // Kept: the keys at multiples of twice the stride.
                splits = Swift.stride(from: 1, to: splits.count, by: 2).map { splits[$0] }
                stride *= 2
            }
        }

        /// nil when there is nothing to split at (a first sync, a small place): listed a page after the other.
        var ranges: SyncKeyRanges? { splits.isEmpty ? nil : SyncKeyRanges(splits: splits) }
    }
}
