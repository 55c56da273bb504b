import Testing
import Xfer
import XferPrimitives

/// `Hex`, the one hexadecimal of the engine, the backends and the receiver.
@Suite struct HexTests {
    @Test func writesLowercaseAndReadsEitherCase() {
        let bytes: [UInt8] = [0x00, 0x0f, 0xa5, 0xff, 0x10]
        #expect(Hex.lowercase(bytes) == "000fa5ff10")
        #expect(Hex.bytes("000fa5ff10") == bytes)
        #expect(Hex.bytes("000FA5FF10") == bytes)
        #expect(Hex.bytes("") == [])
        #expect(Hex.lowercase([UInt8]()) == "")
    }

    /// A backend writing a chunk's CRC as text keeps its 8 digits.
    @Test func writesACRCAsEightDigits() {
        #expect(Checksums.hex(UInt32(0x000a_1b2c)) == "000a1b2c")
        #expect(Checksums.hex(UInt32(0)) == "00000000")
        #expect(Checksums.hex(UInt32.max) == "ffffffff")
    }

    @Test(arguments: ["abc", "0g", "zz", "0x10", " 1", "é0"])
    func refusesWhatIsNotHex(_ text: String) {
        #expect(Hex.bytes(text) == nil)
    }

    @Test func tellsTheDigitsItWrites() {
        #expect(Hex.isLowercase("0123456789abcdef"))
        #expect(!Hex.isLowercase("ABCDEF"))
        #expect(!Hex.isLowercase(""))
        #expect(!Hex.isLowercase("12 3"))
        #expect(Hex.value(of: UInt8(ascii: "F")) == 15)
        #expect(Hex.value(of: UInt8(ascii: "g")) == nil)
    }

    @Test func roundTripsEveryByte() {
        let all = (0...255).map(UInt8.init)
        #expect(Hex.bytes(Hex.lowercase(all)) == all)
    }
}
