import Testing
import Glibc
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

/// `CRC64NVME` (S3's `x-amz-checksum-crc64nvme`) and its combination, against
/// the catalogue's check value, AWS's published vectors (aws-checksums'
/// tests: 32 zero bytes, 32 bytes of 0xFF, 0…31 and 31…0) and values awscrt
/// (`awscrt.checksums.crc64nvme`, what botocore and moto compute with) gave.
@Suite struct CRC64NVMETests {
    /// Byte i is (31·i + 7) mod 256: long and without a period that lines up with 8.
    static func pattern(_ count: Int) -> [UInt8] { (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) } }

    @Test func matchesTheCheckValueAndAWSVectors() {
        #expect(CRC64NVME.of(Array("123456789".utf8)) == 0xAE8B_1486_0A79_9888)
        #expect(CRC64NVME.of([UInt8]()) == 0)
        #expect(CRC64NVME.of(Array("a".utf8)) == 0x8C2F_8445_B4CB_FC3C)
        #expect(CRC64NVME.of([UInt8](repeating: 0, count: 32)) == 0xCF34_7343_4D4E_CF3B)
        #expect(CRC64NVME.of([UInt8](repeating: 0xFF, count: 32)) == 0xA0A0_6974_C34D_63C4)
        #expect(CRC64NVME.of((0..<32).map { UInt8($0) }) == 0xB9D9_D4A8_492C_BD7F)
        #expect(CRC64NVME.of((0..<32).reversed().map { UInt8($0) }) == 0x1711_5A71_2025_F5AF)
        #expect(CRC64NVME.of(Self.pattern(1_000)) == 0x849B_AA14_C18C_6E4E)
        #expect(CRC64NVME.of(Self.pattern(1_000_003)) == 0xDFD6_487E_AC9F_093E)
        #expect(CRC64NVME.hex(0xAE8B_1486_0A79_9888) == "ae8b14860a799888")
        #expect(CRC64NVME.bigEndianBytes(0x0102_0304_0506_0708) == [1, 2, 3, 4, 5, 6, 7, 8])
    }

    @Test func feedingInPiecesEqualsFeedingWhole() {
        let bytes = Self.pattern(10_007)
        for split in [0, 1, 7, 8, 9, 5_003, 10_006, 10_007] {
            var crc = CRC64NVME()
            crc.update(bytes[..<split])
            crc.update(bytes[split...])
            #expect(crc.value == CRC64NVME.of(bytes), "split at \(split)")
        }
        // An unaligned start reads the same words.
        var fromOffset = CRC64NVME()
        bytes.withUnsafeBytes { fromOffset.update(UnsafeRawBufferPointer(rebasing: $0[3...])) }
        #expect(fromOffset.value == CRC64NVME.of(bytes[3...]))
    }

    @Test func combinesPartsAsAWSComputesThem() {
        let bytes = Self.pattern(1_000_003)
        let first = CRC64NVME.of(bytes[..<333_333]), second = CRC64NVME.of(bytes[333_333...])
        #expect(first == 0xF9D0_DB02_2FD1_25A7)
        #expect(second == 0xDF5F_E8AF_344B_1C0A)
        #expect(CRC64NVME.combine(first, second, lengthOfSecond: 666_670) == 0xDFD6_487E_AC9F_093E)
        // Parts of every size, the empty part included, combined in order.
        var combined: UInt64 = 0
        var start = 0
        for length in [0, 1, 7, 4_096, 65_537, 1, 0, 262_144] {
            combined = CRC64NVME.combine(combined, CRC64NVME.of(bytes[start..<(start + length)]), lengthOfSecond: Int64(length))
            start += length
        }
        #expect(combined == CRC64NVME.of(bytes[..<start]))
        #expect(CRC64NVME.combine(first, 0, lengthOfSecond: 0) == first)
    }

    /// The folding (PCLMULQDQ, from 512 bytes on) against the tables alone,
    /// fed byte by byte short of it, at lengths around its rounds and
    /// from unaligned starts.
    @Test func foldingAgreesWithTheTables() {
        let bytes = Self.pattern(70_010)
        for length in [511, 512, 513, 639, 640, 1_023, 1_024, 1_151, 4_096, 65_536, 69_997] {
            for start in [0, 1, 5] {
                let slice = bytes[start..<(start + length)]
                var byTables = CRC64NVME()
                var position = slice.startIndex
                while position < slice.endIndex {
                    // Pieces below the folding's threshold take the tables.
                    let end = min(position + 100, slice.endIndex)
                    byTables.update(slice[position..<end])
                    position = end
                }
                #expect(CRC64NVME.of(slice) == byTables.value, "\(length) bytes from \(start)")
            }
        }
    }

    /// S3's largest object is 5 TiB: a length of 2^42 bytes and more combines too.
    @Test func combinesAtObjectStoreLengths() {
        let a = CRC64NVME.of(Self.pattern(100))
        // x^(8·2^43) shifted as two halves equals the whole shift.
        let once = CRC64NVME.combine(a, 0, lengthOfSecond: 1 << 43)
        let twice = CRC64NVME.combine(CRC64NVME.combine(a, 0, lengthOfSecond: 1 << 42), 0, lengthOfSecond: 1 << 42)
        #expect(once == twice)
    }
}

/// `FileChecksums`: a local file's CRC-32C and CRC64NVME in one read, as a
/// sync compares them with an object's full-object checksum.
@Suite struct FileChecksumsTests {
    @Test func readsAFilesCRCsOnce() throws {
        let path = "/tmp/xfer-file-checksums-\(getpid())"
        defer { unlink(path) }
        let bytes = CRC64NVMETests.pattern(3 << 20 + 17)
        let descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        #expect(bytes.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) } == bytes.count)
        close(descriptor)
        let both = try FileChecksums(ofFileAt: path)
        #expect(both.crc32c == CRC32C.of(bytes))
        #expect(both.crc64nvme == CRC64NVME.of(bytes))
        #expect(both.size == Int64(bytes.count))
        let one = try FileChecksums(ofFileAt: path, crc32c: false)
        #expect(one.crc32c == nil)
        #expect(one.crc64nvme == both.crc64nvme)
        #expect(throws: FileChecksums.Failure.self) { try FileChecksums(ofFileAt: path + ".missing") }
        #expect(throws: FileChecksums.Failure.self) { try FileChecksums(ofFileAt: "/tmp") }
    }
}
