import Testing
import XferPrimitives

/// `CRC32`, the one CRC-32 of the engine, the state store and the receiver.
@Suite struct CRC32Tests {
    @Test func matchesTheCheckValue() {
        // The CRC-32 (zlib, gzip, PNG) check value of "123456789".
        #expect(CRC32.of(Array("123456789".utf8)) == 0xCBF4_3926)
        #expect(CRC32.of([UInt8]()) == 0)
        #expect(CRC32.hex(0xCBF4_3926) == "cbf43926")
        #expect(CRC32.hex(0x0000_00ff) == "000000ff")
    }

    @Test func feedingInPiecesEqualsFeedingWhole() {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<10_000).map { _ in UInt8.random(in: 0...255, using: &generator) }
        for split in [0, 1, 4_999, 9_999, 10_000] {
            var crc = CRC32()
            crc.update(bytes[..<split])
            crc.update(bytes[split...])
            #expect(crc.value == CRC32.of(bytes), "split at \(split)")
        }
        var fromBuffer = CRC32()
        bytes.withUnsafeBytes { fromBuffer.update($0) }
        #expect(fromBuffer.value == CRC32.of(bytes))
    }
}

/// `CRC32C` (ISA-L's iSCSI CRC) and the combination of CRCs of parts.
@Suite struct CRC32CTests {
    @Test func matchesTheCheckValue() {
        // The CRC-32C (Castagnoli) check value of "123456789".
        #expect(CRC32C.of(Array("123456789".utf8)) == 0xE306_9283)
        #expect(CRC32C.of([UInt8]()) == 0)
    }

    @Test func feedingInPiecesEqualsFeedingWhole() {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<10_000).map { _ in UInt8.random(in: 0...255, using: &generator) }
        var crc = CRC32C()
        crc.update(bytes[..<3_333])
        crc.update(bytes[3_333...])
        #expect(crc.value == CRC32C.of(bytes))
    }

    @Test func combiningThePartsOfEverySplitGivesTheWhole() {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<1_000).map { _ in UInt8.random(in: 0...255, using: &generator) }
        let whole32C = CRC32C.of(bytes)
        let whole32 = CRC32.of(bytes)
        for split in 0...bytes.count {
            let head = bytes[..<split]
            let tail = bytes[split...]
            #expect(CRC32C.combine(CRC32C.of(head), CRC32C.of(tail), lengthOfSecond: Int64(tail.count)) == whole32C, "split at \(split)")
            #expect(CRC32.combine(CRC32.of(head), CRC32.of(tail), lengthOfSecond: Int64(tail.count)) == whole32, "split at \(split)")
        }
    }

    @Test func combiningManyChunksGivesTheWhole() {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<100_000).map { _ in UInt8.random(in: 0...255, using: &generator) }
        var combined = CRC32C.of([UInt8]())
        for start in stride(from: 0, to: bytes.count, by: 7_919) {
            let chunk = bytes[start..<min(start + 7_919, bytes.count)]
            combined = CRC32C.combine(combined, CRC32C.of(chunk), lengthOfSecond: Int64(chunk.count))
        }
        #expect(combined == CRC32C.of(bytes))
    }

    /// Lengths far past any test file's (parts of a 5 TiB object): the
    /// combination is associative, as a concatenation is.
    @Test func combiningIsAssociativeAtObjectStoreLengths() {
        let (a, b, c): (UInt32, UInt32, UInt32) = (0x1234_5678, 0x9ABC_DEF0, 0x0F0F_0F0F)
        for (second, third) in [(Int64(5) << 30, Int64(1) << 40), (Int64(64) << 20, Int64(5) << 40 - 3), (1, Int64.max >> 8)] {
            for combine in [CRC32C.combine, CRC32.combine] {
                let left = combine(combine(a, b, second), c, third)
                let right = combine(a, combine(b, c, third), second + third)
                #expect(left == right, "lengths \(second), \(third)")
            }
        }
    }
}
