import Foundation
import XCTest

@testable import XferWire

/// The HTTP fields every protocol shares: what one side writes the other reads back, and what
/// no side writes is refused.
final class ContentRangeTests: XCTestCase {
    func testWhatIsWrittenReadsBack() {
        for range in [
            ContentRange(first: 0, last: 0, size: 1), ContentRange(first: 0, last: 99, size: 1000),
            ContentRange(offset: 1 << 40, count: 8 << 20, size: 1 << 41), ContentRange(first: 5, last: 9, size: nil),
            ContentRange(first: 0, last: Int64.max - 1, size: Int64.max),
        ] {
            XCTAssertEqual(ContentRange(range.header), range, range.header)
        }
        XCTAssertEqual(ContentRange(offset: 100, count: 10, size: 200).header, "bytes 100-109/200")
        XCTAssertEqual(ContentRange(first: 5, last: 9, size: nil).header, "bytes 5-9/*")
        XCTAssertEqual(ContentRange(first: 5, last: 9, size: nil).count, 5)
    }

    func testSpacesAroundAndTheUnitsCase() {
        XCTAssertEqual(ContentRange("bytes 0-99/1000"), ContentRange("bytes  0-99/1000"))
        XCTAssertEqual(ContentRange(" \tBYTES 0-99/1000 "), ContentRange(first: 0, last: 99, size: 1000))
        XCTAssertEqual(ContentRange("bytes 5-9/*")?.size, nil)
        XCTAssertEqual(ContentRange("bytes 5-9/*")?.last, 9)
    }

    func testRefusesWhatNoSideWrites() {
        let bad = [
            "", "bytes", "bytes ", "bytes0-1/2", "items 0-1/2", "bytes 9-5/10", "bytes 0-10/10", "bytes 0-1/0",
            "bytes -1-5/10", "bytes 0--5/10", "bytes +0-5/10", "bytes 0-5/-10", "bytes 0 -5/10", "bytes 0- 5/10", "bytes 0-5 /10",
            "bytes 0-5", "bytes 0/10", "bytes -5/10", "bytes 0-/10", "bytes 0-5/", "bytes 0-5/10/10", "bytes 0-5/10x",
            "bytes 0x0-5/10", "bytes ０-5/10", "bytes */10", "bytes 0-5/*/", "bytes 1.5-2/10",
            // Past Int64: refused, not wrapped around.
            "bytes 0-9223372036854775808/9223372036854775809", "bytes 0-1/99999999999999999999999",
            "bytes 18446744073709551616-18446744073709551617/*",
        ]
        for text in bad {
            XCTAssertNil(ContentRange(text), "'\(text)'")
        }
    }

    func testVeryLongInputIsRefusedInOnePass() {
        let zeros = String(repeating: "0", count: 1_000_000)
        XCTAssertEqual(ContentRange("bytes \(zeros)1-\(zeros)2/3"), ContentRange(first: 1, last: 2, size: 3), "leading zeros are digits")
        XCTAssertNil(ContentRange("bytes 1-2/" + String(repeating: "9", count: 1_000_000)))
        XCTAssertNil(ContentRange("bytes " + String(repeating: " ", count: 1_000_000)))
    }

    func testTheUnsatisfiedForm() {
        XCTAssertEqual(ContentRange.unsatisfied(size: 10), "bytes */10")
        XCTAssertEqual(ContentRange.unsatisfiedSize(ContentRange.unsatisfied(size: 10)), 10)
        XCTAssertNil(ContentRange.unsatisfiedSize("bytes 0-1/10"))
        XCTAssertNil(ContentRange.unsatisfiedSize("bytes */*"))
        XCTAssertNil(ContentRange.unsatisfiedSize("bytes */-1"))
    }
}

final class ContentDigestTests: XCTestCase {
    func testTheReceiversWishPicksCRC32C() {
        XCTAssertEqual(ContentDigest.preferred(in: ContentDigest.wanted), .crc32c)
        XCTAssertEqual(ContentDigest.preferred(in: "sha-256=10, crc32c=3"), .sha256)
        XCTAssertEqual(ContentDigest.preferred(in: "sha-256=5, crc32c=5"), .crc32c, "a tie: CRC-32C")
        XCTAssertEqual(ContentDigest.preferred(in: "SHA-256"), .sha256)
        XCTAssertNil(ContentDigest.preferred(in: "crc32c=0, sha-256=0"), "0 is not acceptable")
        XCTAssertNil(ContentDigest.preferred(in: "md5=10, unixsum=3"))
        XCTAssertNil(ContentDigest.preferred(in: "crc32c=11, sha-256=-1"), "weights are 0 to 10")
        XCTAssertNil(ContentDigest.preferred(in: ""))
    }

    func testWhatIsWrittenReadsBack() throws {
        let crc = ContentDigest.header(crc32c: 0xDEAD_BEEF)
        XCTAssertEqual(crc, "crc32c=:3q2+7w==:")
        let read = try XCTUnwrap(try ContentDigest.parse(crc))
        XCTAssertEqual(read.algorithm, .crc32c)
        XCTAssertEqual(read.digest, [0xDE, 0xAD, 0xBE, 0xEF])
        let sha = [UInt8](repeating: 7, count: 32)
        let shaRead = try XCTUnwrap(try ContentDigest.parse("unixsum=:AAA=:, " + ContentDigest.sha256.header(digest: sha)))
        XCTAssertEqual(shaRead.algorithm, .sha256, "an unknown member is skipped")
        XCTAssertEqual(shaRead.digest, sha)
    }

    func testMalformedMembersInAKnownAlgorithmAreRefused() throws {
        for text in ["crc32c=bad", "crc32c=:AAAA:", "crc32c=:3q2+7w==", "crc32c=::", "sha-256=:3q2+7w==:", "crc32c=:!!!!!!!!:"] {
            XCTAssertThrowsError(try ContentDigest.parse(text), text)
        }
        XCTAssertNil(try ContentDigest.parse("md5=:AAAA:, nothing"))
        XCTAssertNil(try ContentDigest.parse(String(repeating: ",", count: 100_000)))
    }

    func testContentMD5RoundTrips() {
        let md5 = [UInt8](0..<16)
        XCTAssertEqual(ContentMD5.parse(" " + ContentMD5.header(md5) + "\t"), md5)
        for bad in ["", "AAAA", ContentMD5.header([UInt8](0..<15)), ContentMD5.header([UInt8](0..<17)), "!!!!!!!!!!!!!!!!!!!!!!!!", String(repeating: "A", count: 100_000)] {
            XCTAssertNil(ContentMD5.parse(bad), bad.prefix(40).description)
        }
    }
}

/// The refusal bodies: what the receiver writes, a client reads the message of.
final class ErrorBodyTests: XCTestCase {
    func testEveryFormsMessageIsRead() throws {
        XCTAssertEqual(ErrorBody.message(in: try JSONValue.parse(ErrorBody.error("no such upload"))), "no such upload")
        let problem = ErrorBody.problem(
            type: IETFProblem.mismatchingOffset, title: "offset differs", status: 409,
            members: [(IETFProblem.expectedOffset, 5), (IETFProblem.providedOffset, 3)])
        let json = try JSONValue.parse(problem)
        XCTAssertEqual(ErrorBody.message(in: json), "offset differs")
        XCTAssertEqual(json["type"]?.stringValue, IETFProblem.mismatchingOffset)
        XCTAssertEqual(json["status"]?.intValue, 409)
        XCTAssertEqual(json[IETFProblem.expectedOffset]?.intValue, 5)
        XCTAssertEqual(try JSONValue.parse(ErrorBody.problem(type: nil, title: "t", status: 400))["type"], "about:blank")
        XCTAssertEqual(ErrorBody.message(in: try JSONValue.parse(Envelope(code: 400, msg: "bad fileCount").body)), "bad fileCount")
        XCTAssertEqual(ErrorBody.message(in: ["error": "", "detail": "d"]), "d", "an empty message is no message")
        XCTAssertNil(ErrorBody.message(in: ["code": 1]))
    }
}
