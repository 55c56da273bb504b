import Foundation
import XCTest

@testable import XferWire

/// multipart's and sequence's answers and header: what one side writes, the other reads.
final class EnvelopeWireTests: XCTestCase {
    func testTheEnvelopeRoundTrips() throws {
        for envelope in [
            Envelope(code: 200, msg: "ok"), Envelope(code: 409, msg: "out of order: é", data: ["expectedSequenceNo": 3]),
            Envelope(code: 0, msg: "", data: MultipartFinish(finishStatus: 1, fileUrls: ["a": "http://h/x"]).data),
        ] {
            XCTAssertEqual(try Envelope(parsing: JSONValue.parse(envelope.body)), envelope)
        }
        XCTAssertEqual(String(decoding: Envelope(code: 200, msg: "ok").body, as: UTF8.self), #"{"code":200,"data":{},"msg":"ok"}"#)
        XCTAssertThrowsError(try Envelope(parsing: ["msg": "no code"]))
        XCTAssertThrowsError(try Envelope(parsing: ["code": .number(1.5)]))
        XCTAssertEqual(try Envelope(parsing: ["code": "200"]).code, 200, "servers' answers are read leniently")
    }

    func testTheFileBlockRoundTrips() throws {
        let block = FileBlock(
            sourceId: "s", fileId: "f-1", fragmentIndex: 2, fragmentOffset: 2 << 20, fragmentSize: 1 << 20, totalFileFragment: 3,
            totalFileSize: 3 << 20, fileName: "dir/视频\n01.mp4", fragmentMd5: String(repeating: "Ab", count: 16))
        XCTAssertTrue(block.headerValue.utf8.allSatisfy { $0 >= 0x20 && $0 < 0x7F }, "a header holds plain ASCII")
        XCTAssertEqual(try FileBlock(header: block.headerValue), block)
        XCTAssertEqual(block.md5, [UInt8](repeating: 0xAB, count: 16))
    }

    func testFileBlocksThatAreNotTheProtocolsAreRefused() throws {
        let good = FileBlock(
            sourceId: "s", fileId: "f", fragmentIndex: 0, fragmentOffset: 0, fragmentSize: 1, totalFileFragment: 1, totalFileSize: 1,
            fileName: "a", fragmentMd5: String(repeating: "0", count: 32)
        ).headerValue
        let bad = [
            "", "[]", "{}", "[{}]", good.replacingOccurrences(of: "[{", with: "[{\"x\":1},{"), good.replacingOccurrences(of: "\"fragmentIndex\":0", with: "\"fragmentIndex\":\"0\""),
            good.replacingOccurrences(of: "\"totalFileSize\":1", with: "\"totalFileSize\":1e999"),
            good.replacingOccurrences(of: "\"fileName\":\"a\"", with: "\"fileName\":null"), String(repeating: "[", count: 10_000),
        ]
        for text in bad {
            XCTAssertThrowsError(try FileBlock(header: text), text)
        }
        var block = try FileBlock(header: good)
        for md5 in ["", String(repeating: "g", count: 32), String(repeating: "0", count: 31), String(repeating: "0", count: 34)] {
            block.fragmentMd5 = md5
            XCTAssertNil(block.md5, md5)
        }
    }

    func testSequencesAnswersRoundTrip() throws {
        let answers: [(Envelope, SequencePayload)] = [
            (.sequenceAccepted(SequencePayload(upToken: "t")), SequencePayload(upToken: "t")),
            (.sequenceAccepted(SequencePayload(nextSequenceNo: 2)), SequencePayload(nextSequenceNo: 2)),
            (.sequenceAccepted(SequencePayload(nextSequenceNo: 4, fileUrl: "/d/x")), SequencePayload(nextSequenceNo: 4, fileUrl: "/d/x")),
            (.sequenceOutOfOrder(expected: 7), SequencePayload(expectedSequenceNo: 7)),
        ]
        for (envelope, payload) in answers {
            let read = try Envelope(parsing: JSONValue.parse(envelope.body))
            XCTAssertEqual(SequencePayload(data: read.data), payload)
        }
        XCTAssertEqual(try Envelope(parsing: JSONValue.parse(Envelope.sequenceOutOfOrder(expected: 7).body)).code, SequenceCode.outOfOrder.rawValue)
        XCTAssertEqual(SequencePayload(data: ["upToken": "", "fileUrl": ""]), SequencePayload(), "empty strings count as absent")
    }

    func testSequencesCRCField() {
        for crc: UInt32 in [0, 1, 0xDEAD_BEEF, .max] {
            XCTAssertEqual(SequenceCRC.parse(SequenceCRC.hex(crc)), crc)
        }
        XCTAssertEqual(SequenceCRC.hex(1), "00000001")
        for text in ["", "1", "DEADBEEF", "deadbeef0", "-0000001", "0000000g", " 0000001"] {
            XCTAssertNil(SequenceCRC.parse(text), text)
        }
    }
}

/// tus's headers: what the client backend writes, the receiver reads, and back.
final class TusWireTests: XCTestCase {
    func testNumbers() {
        XCTAssertEqual(TusField.number(" 42\t"), 42)
        XCTAssertEqual(TusField.number("999999999999999999"), 999_999_999_999_999_999)
        for text in ["", " ", "-1", "+1", "1.0", "1e3", "0x10", "１", "9999999999999999999", "1 2", String(repeating: "9", count: 100_000)] {
            XCTAssertNil(TusField.number(text), text)
        }
    }

    func testMetadataRoundTrips() throws {
        let pairs: [(key: String, value: [UInt8])] = [("filename", Array("视频 01.mp4".utf8)), ("relativePath", Array("a/b".utf8)), ("flag", [])]
        let header = try XCTUnwrap(TusMetadata.header(pairs))
        let read = try XCTUnwrap(TusMetadata.parse(header))
        XCTAssertEqual(read.count, 3)
        for (key, value) in pairs { XCTAssertEqual(read[key], value) }
        XCTAssertNil(TusMetadata.header([("a b", [1])]))
        XCTAssertNil(TusMetadata.header([("", [1])]))
        for bad in ["a !!!", "a b c", "a YQ==,a YQ==", ",", "a  YQ==", "a\u{1} YQ==", "a\u{7F} YQ=="] {
            XCTAssertNil(TusMetadata.parse(bad), bad)
        }
    }

    func testChecksumsRoundTrip() throws {
        for checksum in [TusChecksum.crc32c(0xDEAD_BEEF), TusChecksum(algorithm: .sha1, digest: Array(repeating: 1, count: 20))] {
            XCTAssertEqual(try TusChecksum.parse(checksum.header).get(), checksum)
        }
        XCTAssertEqual(TusChecksum.crc32c(0xDEAD_BEEF).header, "crc32c 3q2+7w==")
        XCTAssertEqual(TusChecksum.parse("crc99 AAAA"), .failure(.unsupportedAlgorithm))
        for bad in ["crc32c", "crc32c AAAA", "sha1 3q2+7w==", "crc32c 3q2+7w== x", "crc32c !!!!"] {
            XCTAssertEqual(TusChecksum.parse(bad), .failure(.malformed), bad)
        }
    }

    func testConcatRoundTrips() throws {
        for concat in [TusConcat.partial, .final(["http://h/files/a", "/files/b"])] {
            XCTAssertEqual(try TusConcat.parse(concat.header), concat)
        }
        XCTAssertThrowsError(try TusConcat.parse("final;"))
        XCTAssertThrowsError(try TusConcat.parse("whole"))
        XCTAssertEqual(TusConcat.uploadID(fromURL: "http://h:1/files/a/"), "a")
        for url in ["http://h", "/files/", "/files/a/b", "/other/a", "/files/a?x", "/files/a#y"] {
            XCTAssertNil(TusConcat.uploadID(fromURL: url), url)
        }
    }

    func testLists() {
        XCTAssertEqual(TusField.list(" creation , ,checksum,"), ["creation", "checksum"])
        XCTAssertEqual(TusField.list(nil), [])
    }
}

/// The IETF draft's structured fields.
final class IETFWireTests: XCTestCase {
    func testBooleansAndIntegersRoundTrip() {
        for value in [true, false] { XCTAssertEqual(IETFField.boolean(IETFField.boolean(value)), value) }
        XCTAssertEqual(IETFField.boolean(" ?1 "), true)
        for text in ["", "?2", "1", "true", "?", "? 1"] { XCTAssertNil(IETFField.boolean(text), text) }
        XCTAssertEqual(IETFField.integer("\t999999999999999 "), 999_999_999_999_999)
        for text in ["", "-1", "+1", "1.5", "1000000000000000", "1_000", String(repeating: "1", count: 100_000)] {
            XCTAssertNil(IETFField.integer(text), text)
        }
    }

    func testTheLimitRoundTrips() {
        XCTAssertEqual(IETFField.limits(IETFField.limit(maximumSize: 1 << 30)), ["max-size": 1 << 30])
        XCTAssertEqual(IETFField.limits(IETFField.limit(maximumSize: 5, expiresAfterSeconds: 60)), ["max-size": 5, "expires": 60])
        XCTAssertEqual(IETFField.limits("MAX-SIZE=3, min-size=-1, junk, max-append-size=9999999999999999"), ["max-size": 3])
        XCTAssertEqual(IETFField.limits(nil), [:])
    }
}
