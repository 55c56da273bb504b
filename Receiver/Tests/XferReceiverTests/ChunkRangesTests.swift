import Foundation
import Testing
import XferPrimitives

@testable import XferReceiver

/// What a receiver holds of an upload's chunks follows what the client sent, not what it
/// declared: runs, each with the CRC-32C of its bytes.
@Suite struct ChunkRangesTests {
    @Test func insertsJoinRunsAndRemovesCutThem() {
        var set = ChunkRanges()
        #expect(set.insert(5) == .alone(0))
        #expect(set.insert(7) == .alone(1))
        #expect(set.insert(6) == .joined(0))
        #expect(set.runs == [5...7])
        #expect(set.insert(4) == .prepended(0))
        #expect(set.insert(8) == .appended(0))
        #expect(set.insert(6) == .present(0))
        #expect(set.count == 5)
        #expect(set.remove(6) == .split(0))
        #expect(set.runs == [4...5, 7...8])
        #expect(set.remove(4) == .shortened(0))
        #expect(set.remove(5) == .emptied(0))
        #expect(set.remove(5) == .absent)
        #expect(set.runs == [7...8])
        #expect(set.count == 2)
    }

    @Test func missingChunksAreRunsWhateverWasDeclared() {
        // 2^24 chunks declared, one sent: two runs answer what a list of 16 million would.
        let declared = 1 << 24
        let set = ChunkRanges(numbers: [3])
        let missing = set.missing(of: declared)
        #expect(missing.runs == [1...2, 4...declared])
        #expect(missing.count == declared - 1)
        #expect(ChunkRanges.all(10).missing(of: 10).isEmpty)
        #expect(ChunkRanges().missing(of: 0).isEmpty)
        #expect(missing.numbers(limit: 4) == [1, 2, 4, 5])
    }

    @Test func runChangeSaysWhetherAChunkOpensARun() {
        let set = ChunkRanges([1...3, 6...6])
        #expect(set.runChange(inserting: 4) == 0)
        #expect(set.runChange(inserting: 5) == 0)
        #expect(set.runChange(inserting: 9) == 1)
        #expect(set.runChange(inserting: 2) == 0)
        var joining = ChunkRanges([1...3, 5...6])
        #expect(joining.runChange(inserting: 4) == -1)
        joining.insert(4)
        #expect(joining.runs == [1...6])
    }

    /// A model check: random inserts and removes agree with a plain set, and runs stay sorted,
    /// disjoint and never adjacent.
    @Test func agreesWithASetOfNumbers() {
        var generator = SystemRandomNumberGenerator()
        var set = ChunkRanges()
        var model = Set<Int>()
        for _ in 0..<20_000 {
            let number = Int.random(in: 1...300, using: &generator)
            if Bool.random(using: &generator) {
                set.insert(number)
                model.insert(number)
            } else {
                set.remove(number)
                model.remove(number)
            }
        }
        #expect(set.numbers() == model.sorted())
        #expect(set.count == model.count)
        for (a, b) in zip(set.runs, set.runs.dropFirst()) { #expect(a.upperBound + 1 < b.lowerBound) }
        #expect(set.missing(of: 300).numbers() == (1...300).filter { !model.contains($0) })
    }

    private func meta(size: Int, chunkSize: Int) -> UploadMeta {
        UploadMeta(formatVersion: 1, protocolName: "patch", uploadId: UploadID.generate(), fileName: "f", size: size, chunkSize: chunkSize)
    }

    /// The file's CRC-32C from its chunks', whatever order they came in: combined as runs join.
    @Test func combinesChunkCRCsInAnyOrder() {
        let bytes = (0..<10_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        let meta = meta(size: bytes.count, chunkSize: 1000)
        for order in [Array(1...10), Array((1...10).reversed()), [5, 1, 9, 3, 7, 2, 10, 4, 8, 6]] {
            var received = ReceivedChunks(meta: meta)
            for chunk in order {
                let range = meta.byteRange(ofChunk: chunk)
                received.insert(chunk, crc: CRC32C.of(bytes[range]))
            }
            #expect(received.isComplete)
            #expect(received.runCount == 1)
            #expect(received.combinedCRC == CRC32C.of(bytes), "order \(order)")
        }
    }

    /// A chunk written again cuts its run: the CRC of what is left is not known any more, so the
    /// completion reads the file (never answers a wrong CRC).
    @Test func aChunkWrittenAgainMakesTheCRCUnknown() {
        let bytes = [UInt8](repeating: 9, count: 3000)
        let meta = meta(size: 3000, chunkSize: 1000)
        var received = ReceivedChunks(meta: meta)
        for chunk in 1...3 { received.insert(chunk, crc: CRC32C.of(bytes[meta.byteRange(ofChunk: chunk)])) }
        #expect(received.combinedCRC == CRC32C.of(bytes))
        received.remove(2)
        received.insert(2, crc: CRC32C.of(bytes[meta.byteRange(ofChunk: 2)]))
        #expect(received.isComplete)
        #expect(received.combinedCRC == nil)
        // A chunk without a CRC leaves its run's unknown too.
        var partly = ReceivedChunks(meta: meta)
        partly.insert(1, crc: 1)
        partly.insert(2, crc: nil)
        partly.insert(3, crc: 3)
        #expect(partly.combinedCRC == nil)
    }
}

/// `Upload-Expires` is an HTTP date (RFC 9110's IMF-fixdate), whatever the locale.
@Suite struct HTTPDateTests {
    @Test func writesTheIMFFixdate() {
        #expect(HTTPDate.format(Date(timeIntervalSince1970: 784_111_777)) == "Sun, 06 Nov 1994 08:49:37 GMT")
        #expect(HTTPDate.format(Date(timeIntervalSince1970: 0)) == "Thu, 01 Jan 1970 00:00:00 GMT")
    }
}
