import HTTPTypes
import XCTest
import XferPrimitives

@testable import XferReceiver

/// What a download's `Range` and `If-*` fields ask for, read and decided without a request: what
/// is honoured, what is ignored (the whole file then), and in which order RFC 9110 evaluates them.
final class RangeRequestTests: XCTestCase {
    private let etag = EntityTag("0123abcd-e3069283")

    private func request(_ fields: [(String, String)], method: HTTPRequest.Method) -> RangeRequest {
        var headers = HTTPFields()
        for (name, value) in fields { headers.append(HTTPField(name: HTTPField.Name(name)!, value: value)) }
        return RangeRequest(method: method, headers: headers)
    }

    private func answer(_ fields: [(String, String)], method: HTTPRequest.Method = .get, size: Int = 10) -> RangeRequest.Answer {
        request(fields, method: method).answer(etag: etag, size: size)
    }

    func testReadsTheThreeFormsOfOneRange() {
        XCTAssertEqual(ByteRangeSpec(header: "bytes=0-499"), .from(0, through: 499))
        XCTAssertEqual(ByteRangeSpec(header: "bytes=500-"), .from(500, through: nil))
        XCTAssertEqual(ByteRangeSpec(header: "bytes=-500"), .suffix(500))
        // The unit is case-insensitive; a list may hold blanks and empty elements.
        XCTAssertEqual(ByteRangeSpec(header: "Bytes= 3-4 ,"), .from(3, through: 4))
        // Positions too large for an Int are past the end of any file.
        XCTAssertEqual(ByteRangeSpec(header: "bytes=0-99999999999999999999999"), .from(0, through: .max))
        XCTAssertEqual(ByteRangeSpec(header: "bytes=99999999999999999999999-"), .from(.max, through: nil))
    }

    func testRefusesSeveralRangesOtherUnitsAndMalformedOnes() {
        for header in [
            "bytes=0-1,5-6", "bytes=0-1, 0-1", "items=0-1", "bytes=5-3", "bytes=-", "bytes=", "bytes=a-b", "bytes=+1-2", "bytes=1 -2",
            "bytes 0-1", "bytes=1-2-3", "bytes=0x1-2",
        ] {
            XCTAssertNil(ByteRangeSpec(header: header), header)
        }
    }

    func testResolvesARangeAgainstTheFilesSize() {
        XCTAssertEqual(ByteRangeSpec.from(0, through: nil).bytes(inFileOf: 10), 0...9)
        XCTAssertEqual(ByteRangeSpec.from(2, through: 4).bytes(inFileOf: 10), 2...4)
        XCTAssertEqual(ByteRangeSpec.from(5, through: 100).bytes(inFileOf: 10), 5...9, "a last position past the end is the end")
        XCTAssertEqual(ByteRangeSpec.from(9, through: 9).bytes(inFileOf: 10), 9...9)
        XCTAssertNil(ByteRangeSpec.from(10, through: nil).bytes(inFileOf: 10), "a range starting at the end names nothing")
        XCTAssertNil(ByteRangeSpec.from(.max, through: nil).bytes(inFileOf: 10))
        XCTAssertEqual(ByteRangeSpec.suffix(3).bytes(inFileOf: 10), 7...9)
        XCTAssertEqual(ByteRangeSpec.suffix(20).bytes(inFileOf: 10), 0...9, "a suffix longer than the file is the file")
        XCTAssertNil(ByteRangeSpec.suffix(0).bytes(inFileOf: 10))
    }

    func testReadsEntityTagLists() {
        XCTAssertEqual(EntityTag.list("\"a\", W/\"b\""), [EntityTag("a"), EntityTag("b", weak: true)])
        XCTAssertEqual(EntityTag.list("\"a,b\""), [EntityTag("a,b")], "a comma inside the quotes is part of the tag")
        XCTAssertEqual(EntityTag.list(" , \"\" ,"), [EntityTag("")])
        XCTAssertEqual(EntityTag.list(""), [])
        XCTAssertNil(EntityTag.list("a"), "unquoted")
        XCTAssertNil(EntityTag.list("\"a\" \"b\""), "no comma between")
        XCTAssertNil(EntityTag.list("w/\"a\""), "the weak prefix is case-sensitive")
        XCTAssertNil(EntityTag.list("\"a"))
        XCTAssertEqual(EntityTag("x").field, "\"x\"")
        XCTAssertEqual(EntityTag("x", weak: true).field, "W/\"x\"")
    }

    func testOneRangeOfAGETIsAPart() {
        XCTAssertEqual(answer([("Range", "bytes=2-4")]), .partial(2...4))
        XCTAssertEqual(answer([("Range", "bytes=7-")]), .partial(7...9))
        XCTAssertEqual(answer([("Range", "bytes=-3")]), .partial(7...9))
        XCTAssertEqual(answer([]), .whole)
    }

    func testARangeStartingPastTheEndIsUnsatisfiable() {
        XCTAssertEqual(answer([("Range", "bytes=10-")]), .unsatisfiable)
        XCTAssertEqual(answer([("Range", "bytes=50-60")]), .unsatisfiable)
        XCTAssertEqual(answer([("Range", "bytes=-0")]), .unsatisfiable)
    }

    func testWhatCannotBeHonouredExactlyGetsTheWholeFile() {
        XCTAssertEqual(answer([("Range", "bytes=0-1,5-6")]), .whole)
        XCTAssertEqual(answer([("Range", "bytes=4-2")]), .whole)
        XCTAssertEqual(answer([("Range", "bytes=0-1"), ("Range", "bytes=2-3")]), .whole, "two Range fields")
        XCTAssertEqual(answer([("Range", "bytes=0-1")], method: .head), .whole, "a HEAD tells the whole file")
        XCTAssertEqual(answer([("Range", "bytes=0-")], size: 0), .whole, "an empty file has no part to name")
        XCTAssertEqual(answer([("Range", "bytes=-5")], size: 0), .whole)
    }

    func testIfMatchComparesStrongly() {
        XCTAssertEqual(answer([("If-Match", "\"other\"")]), .preconditionFailed)
        XCTAssertEqual(answer([("If-Match", "W/\"0123abcd-e3069283\"")]), .preconditionFailed, "a weak tag never matches strongly")
        XCTAssertEqual(answer([("If-Match", "0123abcd-e3069283")]), .preconditionFailed, "unquoted: malformed, so not shown to hold")
        XCTAssertEqual(answer([("If-Match", "\"other\", \"0123abcd-e3069283\""), ("Range", "bytes=1-2")]), .partial(1...2))
        XCTAssertEqual(answer([("If-Match", "\"other\""), ("If-Match", "\"0123abcd-e3069283\"")]), .whole, "one list on two lines")
        XCTAssertEqual(answer([("If-Match", "*")]), .whole)
        // If-Match is evaluated first, also for a HEAD and before a range is looked at.
        XCTAssertEqual(answer([("If-Match", "\"other\"")], method: .head), .preconditionFailed)
        XCTAssertEqual(
            answer([("If-Match", "\"other\""), ("If-None-Match", "\"0123abcd-e3069283\""), ("Range", "bytes=50-")]), .preconditionFailed)
    }

    func testIfNoneMatchComparesWeakly() {
        XCTAssertEqual(answer([("If-None-Match", "\"0123abcd-e3069283\"")]), .notModified)
        XCTAssertEqual(answer([("If-None-Match", "W/\"0123abcd-e3069283\"")], method: .head), .notModified)
        XCTAssertEqual(answer([("If-None-Match", "*"), ("Range", "bytes=0-1")]), .notModified)
        XCTAssertEqual(answer([("If-None-Match", "\"other\""), ("Range", "bytes=0-1")]), .partial(0...1))
        XCTAssertEqual(answer([("If-None-Match", "garbage")]), .whole, "a list naming no version does not stop the answer")
    }

    func testIfRangeLetsTheRangeThroughOnlyForThisVersion() {
        XCTAssertEqual(answer([("If-Range", "\"0123abcd-e3069283\""), ("Range", "bytes=1-2")]), .partial(1...2))
        XCTAssertEqual(answer([("If-Range", "\"other\""), ("Range", "bytes=1-2")]), .whole)
        XCTAssertEqual(answer([("If-Range", "W/\"0123abcd-e3069283\""), ("Range", "bytes=1-2")]), .whole, "compared strongly")
        XCTAssertEqual(answer([("If-Range", "Wed, 21 Oct 2015 07:28:00 GMT"), ("Range", "bytes=1-2")]), .whole, "a date: no date is kept")
        // Without a range, If-Range means nothing; with an unsatisfiable one that does not match, the whole file.
        XCTAssertEqual(answer([("If-Range", "\"other\"")]), .whole)
        XCTAssertEqual(answer([("If-Range", "\"other\""), ("Range", "bytes=50-")]), .whole)
    }

    func testTheTagAndDigestOfACompletionRecord() throws {
        let sha = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"  // SHA-256 of "abc"
        let both = StoredRepresentation(uploadId: "0123abcd", record: CompletionRecord(sha256: sha, size: 3, crc32c: "e3069283"))
        XCTAssertEqual(both.etag, EntityTag("0123abcd-e3069283"))
        XCTAssertEqual(both.size, 3)
        XCTAssertEqual(both.reprDigest, "sha-256=:ungWv48Bz+pBQUDeXa4iI7ADYaOWF3qctBD/YfIAFa0=:, crc32c=:4waSgw==:")
        let shaOnly = StoredRepresentation(uploadId: "0123abcd", record: CompletionRecord(sha256: sha, size: 3))
        XCTAssertEqual(shaOnly.etag, EntityTag("0123abcd-ba7816bf8f01cfea"))
        XCTAssertEqual(shaOnly.reprDigest, "sha-256=:ungWv48Bz+pBQUDeXa4iI7ADYaOWF3qctBD/YfIAFa0=:")
        let check = CRC32.hex(CRC32C.of(Array("123456789".utf8)))
        let crcOnly = StoredRepresentation(uploadId: "0123abcd", record: CompletionRecord(sha256: nil, size: 9, crc32c: check))
        XCTAssertEqual(crcOnly.etag, EntityTag("0123abcd-e3069283"), "CRC-32C's check value, most significant byte first")
        XCTAssertEqual(crcOnly.reprDigest, "crc32c=:4waSgw==:")
        let neither = StoredRepresentation(uploadId: "0123abcd", record: CompletionRecord(sha256: nil, size: 42))
        XCTAssertEqual(neither.etag, EntityTag("0123abcd-42"))
        XCTAssertNil(neither.reprDigest)
    }
}
