import XCTest
import XferTestSupport

@testable import Xfer

/// How a re-run splits a listing into key ranges (`SyncKeyRanges`): the
/// split keys picked, and where each range's pages end.
final class SyncKeyRangesTests: XCTestCase {
    private func keys(_ count: Int) -> [String] { (0..<count).map { String(format: "k%06d", $0) } }

    func testSplitsEveryStrideKeys() throws {
        var splitter = SyncKeyRanges.Splitter(stride: 3, maxRanges: 100)
        for key in keys(10) { splitter.add(key) }
        let ranges = try XCTUnwrap(splitter.ranges)
        XCTAssertEqual(ranges.splits, ["k000002", "k000005", "k000008"])
        XCTAssertEqual(ranges.count, 4)
        XCTAssertEqual(ranges.start(of: 0), nil)
        XCTAssertEqual(ranges.end(of: 0), "k000002")
        XCTAssertEqual(ranges.start(of: 3), "k000008")
        XCTAssertEqual(ranges.end(of: 3), nil)
    }

    func testFewerKeysThanAStrideAreNotSplit() {
        var splitter = SyncKeyRanges.Splitter(stride: 1000)
        for key in keys(999) { splitter.add(key) }
        XCTAssertNil(splitter.ranges)
    }

    func testRangesStayBoundedHoweverManyKeys() throws {
        var splitter = SyncKeyRanges.Splitter(stride: 2, maxRanges: 8)
        let all = keys(1000)
        for key in all { splitter.add(key) }
        let ranges = try XCTUnwrap(splitter.ranges)
        XCTAssertLessThanOrEqual(ranges.count, 8)
        XCTAssertGreaterThanOrEqual(ranges.count, 4)
        XCTAssertTrue(SyncKeyRanges.isSorted(ranges.splits))
        // Evenly spread: every split at a multiple of the widened stride.
        let positions = ranges.splits.map { all.firstIndex(of: $0)! + 1 }
        let step = positions[0]
        XCTAssertEqual(positions, (1...positions.count).map { $0 * step })
    }

    func testRangesCoverEveryKeyExactlyOnce() throws {
        // Known keys split; the listing holds others too (added since), and lacks some.
        var splitter = SyncKeyRanges.Splitter(stride: 4, maxRanges: 16)
        let known = keys(100).filter { !$0.hasSuffix("5") }
        for key in known { splitter.add(key) }
        let ranges = try XCTUnwrap(splitter.ranges)
        let listing = (keys(120) + ["a", "k000003x", "z"]).filter { !$0.hasSuffix("7") }.sorted(by: SyncKeyRanges.precedes)
        var seen: [String] = []
        for index in 0..<ranges.count {
            // What a listing from after the range's start answers, in pages of 3.
            var rest = ranges.start(of: index).map { start in listing.filter { SyncKeyRanges.precedes(start, $0) } } ?? listing
            while !rest.isEmpty {
                let page = Array(rest.prefix(3))
                rest.removeFirst(page.count)
                let (kept, ended) = SyncKeyRanges.cut(page, endingAt: ranges.end(of: index)) { $0 }
                seen += kept
                if ended { break }
            }
        }
        XCTAssertEqual(seen, listing)
    }

    func testAPageEndsItsRangeAtTheFirstKeyPastTheEnd() {
        let page = ["a", "b", "c", "d"]
        XCTAssertTrue(SyncKeyRanges.cut(page, endingAt: "b") { $0 } == (["a", "b"], true))
        XCTAssertTrue(SyncKeyRanges.cut(page, endingAt: "bb") { $0 } == (["a", "b"], true))
        XCTAssertTrue(SyncKeyRanges.cut(page, endingAt: "d") { $0 } == (page[...], true))
        XCTAssertTrue(SyncKeyRanges.cut(page, endingAt: "e") { $0 } == (page[...], false))
        XCTAssertTrue(SyncKeyRanges.cut(page, endingAt: nil) { $0 } == (page[...], false))
        XCTAssertTrue(SyncKeyRanges.cut(page, endingAt: "0") { $0 } == ([], true))
    }

    func testTheOrderIsUTF8BytesAsS3Lists() {
        // String's `<` puts "é" (U+00E9) before "z"; so do UTF-8 bytes, but
        // "\u{FF61}" (3 bytes, EF BD A1) and "\u{10000}" (F0 90 80 80) differ
        // from UTF-16 order.
        XCTAssertTrue(SyncKeyRanges.precedes("\u{FF61}", "\u{10000}"))
        XCTAssertTrue(SyncKeyRanges.precedes("a/b", "a0"))
        XCTAssertFalse(SyncKeyRanges.precedes("b", "b"))
    }

    func testSplitsRoundTripAndRefuseDisorder() throws {
        let ranges = SyncKeyRanges(splits: ["a", "b/c", "\u{10000}"])
        XCTAssertEqual(SyncKeyRanges(decoding: ranges.encoded), ranges)
        XCTAssertNil(SyncKeyRanges(decoding: SyncKeyRanges(splits: ["b", "a"]).encoded))
        XCTAssertNil(SyncKeyRanges(decoding: Array(ranges.encoded.dropLast())))
    }

    func testTheStoreSplitsAtTheKeysKnownAtAPlaceOnly() throws {
        let dir = TemporaryDirectory()
        let store = try StateStore(directory: dir.path)
        let object = KnownObject(version: "v", size: 1, modificationTime: nil, crc32c: nil)
        let here = StateStore.place("s3://bucket/here")
        let long = "k000004" + String(repeating: "x", count: 500)
        try store.putKnownObjects(place: here, (keys(12) + [long]).map { ($0, object) })
        try store.putKnownObjects(place: StateStore.place("s3://bucket/there"), keys(50).map { ("a" + $0, object) })
        // Every 960th of 12: none, listed a page after the other.
        XCTAssertNil(try store.syncKeyRanges(place: here))
        XCTAssertNil(try store.syncKeyRanges(place: StateStore.place("s3://bucket/elsewhere")))
        let more = keys(2500)
        try store.putKnownObjects(place: here, more.map { ($0, object) })
        // The long key, known by its hash only, is passed over.
        XCTAssertEqual(try store.syncKeyRanges(place: here)?.splits, [more[959], more[1919]])
    }
}
