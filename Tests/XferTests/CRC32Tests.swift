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
