import XCTest

@testable import Xfer

final class MultipartFormTests: XCTestCase {
    func testBodyIsWellFormedAndSharesTheChunk() throws {
        var form = MultipartForm(boundary: "B")
        form.addField("sequenceNo", "3")
        let chunk: [UInt8] = [0, 1, 2, 13, 10]
        form.addFile(
            "block", filename: "视频 \"01\"\r\nX-Evil: 1.mp4", contentType: "video/mp4",
            chunk: ChunkPayload(index: 2, offset: 10, bytes: chunk))
        form.addField("after", "the chunk")
        let body = form.body
        XCTAssertEqual(form.contentType, "multipart/form-data; boundary=B")
        XCTAssertEqual(body.chunk, RequestBody.ChunkReference(index: 2, offset: 10, length: chunk.count), "the body names the chunk")
        XCTAssertEqual((try body.materializedSegments()).count, 3, "framing, the chunk, framing: the chunk is not copied into the framing")
        XCTAssertEqual((try body.materializedSegments())[1], chunk)
        let text = String(decoding: (try body.materializedSegments()).flatMap { $0 }, as: UTF8.self)
        XCTAssertTrue(text.hasPrefix("--B\r\nContent-Disposition: form-data; name=\"sequenceNo\"\r\n\r\n3\r\n"))
        XCTAssertTrue(text.contains("filename=\"视频 %2201%22%0D%0AX-Evil: 1.mp4\"\r\nContent-Type: video/mp4\r\n\r\n"))
        XCTAssertFalse(text.contains("\r\nX-Evil"), "a CR/LF in a name cannot start a header line")
        XCTAssertTrue(text.hasSuffix("\r\n--B\r\nContent-Disposition: form-data; name=\"after\"\r\n\r\nthe chunk\r\n--B--\r\n"), text)
        XCTAssertEqual(body.count, text.utf8.count)
        XCTAssertEqual(MultipartForm.unescape(MultipartForm.escape("a\"b\r\nc")), "a\"b\r\nc")
    }

    func testMIMETypes() {
        XCTAssertEqual(MIMEType.forFileExtension("MP4"), "video/mp4")
        XCTAssertEqual(MIMEType.forFileExtension("jpg"), "image/jpeg")
        XCTAssertEqual(MIMEType.forFileExtension(""), "application/octet-stream")
        XCTAssertEqual(MIMEType.forFileExtension("weird"), "application/octet-stream")
    }

    func testJSONStringsAreASCIIWithUnicodeEscapes() {
        let value: JSONValue = ["fileName": "视频 01.mp4", "n": 3]
        let text = String(decoding: value.encoded, as: UTF8.self)
        XCTAssertEqual(text, #"{"fileName":"\u89c6\u9891 01.mp4","n":3}"#)
        XCTAssertTrue(text.utf8.allSatisfy { $0 < 128 })
        XCTAssertEqual(try JSONValue.parse(value.encoded), value)
    }
}
