import Foundation
import XCTest
import Xfer
import XferBackendTesting
import XferSequence

/// The sequence backend is sans-IO: these tests check the forms it builds and
/// how it reads every answer the protocol defines, with no network.
final class SequenceBackendTests: XCTestCase {
    let backend = SequenceBackend()
    let upToken = "u".padding(toLength: 64, withPad: "7", startingAt: 0)

    private func job(
        name: String = "a b.bin", size: Int64 = 10, chunkSize: Int = 4, token: String? = nil, opened: Bool = true
    ) -> JobContext {
        let handles: ServerHandles = opened ? [SequenceBackend.upToken: upToken] : ServerHandles()
        let file = BackendTesting.file(
            name: name, size: size, chunkSize: chunkSize, emptyFileHasOneChunk: backend.traits.emptyFileHasOneChunk, handles: handles)
        return BackendTesting.job(target: "http://127.0.0.1:9/api", files: [file], token: token)
    }

    private func answer(_ json: String, status: Int = 200) -> HTTPResponse {
        .json(status, json)
    }

    private func block(_ index: Int, of job: JobContext, bytes: [UInt8]) throws -> Exchange<ChunkOutcome> {
        try backend.uploadChunk(BackendTesting.chunk(index, of: job.files[0], bytes: bytes), of: job.files[0], in: job)
    }

    // MARK: Traits

    func testTraitsAskForOrderedBlocksAndOneEmptyBlockForAnEmptyFile() {
        XCTAssertEqual(backend.name, "sequence")
        XCTAssertEqual(backend.traits.defaultChunkSize, 1 << 20)
        XCTAssertEqual(backend.traits.defaultConcurrency, 4)
        XCTAssertEqual(backend.chunkOrder(for: job()), .sequentialWithinFile)
        XCTAssertEqual(backend.chunkOrder(for: job(opened: false)), .sequentialWithinFile)
        XCTAssertTrue(backend.traits.emptyFileHasOneChunk)
        let erased: any UploadBackend = backend
        XCTAssertFalse(erased is any FileReconciling, "the client just sends its next block; the server answers where to go")
        XCTAssertFalse(erased is any FileFinishing, "the last block's answer completes the file")
        XCTAssertFalse(erased is any UploadCancelling, "the protocol has no way to drop an upload")
    }

    // MARK: Requests

    func testOpenSendsSequenceNoZeroWithAnEmptyBlockNamedAfterTheFile() throws {
        let job = job(name: "视频 01.mp4", token: "t0k", opened: false)
        let request = try XCTUnwrap(backend.openFile(job.files[0], in: job).request)
        XCTAssertEqual(request.method, .post)
        XCTAssertEqual(request.url, "http://127.0.0.1:9/api/upload")
        // The token travels in its form field, not in an Authorization header.
        XCTAssertNil(backend.requestAsSent(request, in: job).headers["Authorization"])
        let form = try FormBody(request)
        XCTAssertEqual(form.fieldNames, ["sequenceNo", "blockSize", "totFileSize", "suffix", "token", "upToken", "crc", "block"])
        XCTAssertEqual(form.text("sequenceNo"), "0")
        XCTAssertEqual(form.text("blockSize"), "4")
        XCTAssertEqual(form.text("totFileSize"), "10")
        XCTAssertEqual(form.text("suffix"), "mp4")
        XCTAssertEqual(form.text("token"), "t0k")
        XCTAssertEqual(form.text("upToken"), "")
        XCTAssertEqual(form.text("crc"), "")
        let block = try XCTUnwrap(form.part("block"))
        XCTAssertEqual(block.filename, "视频 01.mp4")
        XCTAssertEqual(block.contentType, "application/octet-stream")
        XCTAssertEqual(block.content, [])
    }

    func testOpenKeepsTheUpTokenAsASecretHandle() throws {
        let job = job(opened: false)
        let exchange = backend.openFile(job.files[0], in: job).outcome(for:)
        let opening = try exchange(answer(#"{"code":0,"msg":"ok","data":{"upToken":"T1"}}"#))
        XCTAssertEqual(opening.handles[SequenceBackend.upToken], "T1")
        XCTAssertEqual(opening.handles.secretKeys, ["upToken"])
        XCTAssertEqual(opening.handles.redacted["upToken"], "<redacted>")
        XCTAssertNil(opening.chunkSize)

        XCTAssertThrowsError(try exchange(answer(#"{"code":0,"msg":"ok","data":{}}"#))) { error in
            XCTAssertEqual(error as? BackendError, .transient("open the upload of a b.bin: the answer has no upToken"))
        }
        XCTAssertThrowsError(try exchange(answer(#"{"code":400,"msg":"blockSize must be between 1 and 9"}"#))) { error in
            XCTAssertEqual(
                error as? BackendError,
                .rejected("open the upload of a b.bin: the server refused it with code 400 (blockSize must be between 1 and 9)"))
        }
        XCTAssertThrowsError(try exchange(answer("{}", status: 503))) { error in
            guard case .transient = error as? BackendError else { return XCTFail("\(error)") }
        }
    }

    func testBlockCarriesEveryFieldTheUpTokenAndItsCRC() throws {
        let job = job(token: "t0k")
        let bytes = Array("1234".utf8)
        let exchange = try block(1, of: job, bytes: bytes)
        XCTAssertEqual(exchange.request.method, .post)
        XCTAssertEqual(exchange.request.url, "http://127.0.0.1:9/api/upload")
        let form = try FormBody(exchange.request)
        XCTAssertEqual(form.fieldNames, ["sequenceNo", "blockSize", "totFileSize", "suffix", "token", "upToken", "crc", "block"])
        XCTAssertEqual(form.text("sequenceNo"), "2", "chunk index 1 is block 2")
        XCTAssertEqual(form.text("blockSize"), "4")
        XCTAssertEqual(form.text("totFileSize"), "10")
        XCTAssertEqual(form.text("suffix"), "bin")
        XCTAssertEqual(form.text("token"), "t0k")
        XCTAssertEqual(form.text("upToken"), upToken)
        XCTAssertEqual(form.text("crc"), "9be3e0a3", "zlib crc32(\"1234\") = 0x9BE3E0A3")
        XCTAssertEqual(form.part("block")?.filename, "a b.bin")
        XCTAssertEqual(form.part("block")?.content, bytes)
        // The block is named, not copied: the body carries chunk 1 (bytes 4..<8) between the fields and the closing boundary.
        let body = exchange.request.body
        let chunk = try XCTUnwrap(body.chunk, "the body names the block")
        XCTAssertEqual([chunk.index, Int(chunk.offset), chunk.length], [1, 4, 4])
        XCTAssertEqual(Array(exchange.request.bodyBytes[body.framingBefore.count..<body.framingBefore.count + bytes.count]), bytes)
        XCTAssertEqual(exchange.request.bodyBytes.count, body.framingBefore.count + bytes.count + body.framingAfter.count)
        XCTAssertNil(backend.requestAsSent(exchange.request, in: job).headers["Authorization"])
    }

    func testBlocksOfAnUnopenedFileNeedItsUpToken() {
        XCTAssertThrowsError(try block(0, of: job(opened: false), bytes: [1, 2, 3, 4])) { error in
            guard case BackendError.uploadUnknown = error else { return XCTFail("\(error)") }
        }
    }

    func testCRCFieldIsEightLowercaseHexDigits() {
        XCTAssertEqual(SequenceBackend.crcField(0xCBF4_3926), "cbf43926")
        XCTAssertEqual(SequenceBackend.crcField(0x1A), "0000001a")
        XCTAssertEqual(SequenceBackend.crcField(0), "00000000")
        XCTAssertEqual(SequenceBackend.crcField(.max), "ffffffff")
        XCTAssertEqual(SequenceBackend.crcField(ChunkPayload(index: 0, offset: 0, bytes: Array("123456789".utf8)).crc32), "cbf43926")
    }

    func testWithoutTokenTheFieldIsEmptyAndAFileWithoutExtensionHasAnEmptySuffix() throws {
        let job = job(name: "README", token: nil)
        let form = try FormBody(try block(0, of: job, bytes: [1, 2, 3, 4]).request)
        XCTAssertEqual(form.text("token"), "")
        XCTAssertEqual(form.text("suffix"), "")
        let gz = self.job(name: "logs.tar.gz")
        XCTAssertEqual(try FormBody(try block(0, of: gz, bytes: [1]).request).text("suffix"), "gz")
    }

    func testAnEmptyFileIsOneEmptyBlockWhoseAnswerCarriesTheURL() throws {
        let job = job(name: "empty.txt", size: 0)
        XCTAssertEqual(job.files[0].chunkCount, 1)
        let exchange = try block(0, of: job, bytes: [])
        let form = try FormBody(exchange.request)
        XCTAssertEqual(form.text("sequenceNo"), "1")
        XCTAssertEqual(form.text("totFileSize"), "0")
        XCTAssertEqual(form.text("crc"), "00000000")
        XCTAssertEqual(form.part("block")?.content, [])
        let url = "http://h/downloads/x/empty.txt"
        XCTAssertEqual(
            try exchange.interpret(answer(#"{"code":0,"msg":"ok","data":{"nextSequenceNo":2,"fileUrl":"\#(url)"}}"#)),
            .stored(fileURL: url))
    }

    // MARK: Answers

    func testAcceptedBlocksAreStoredAndTheLastOneCarriesTheURL() throws {
        let job = job()  // 10 bytes in blocks of 4: 3 blocks
        XCTAssertEqual(try block(0, of: job, bytes: [0, 0, 0, 0]).interpret(answer(#"{"code":0,"msg":"ok","data":{"nextSequenceNo":2}}"#)), .stored())
        XCTAssertEqual(
            try block(2, of: job, bytes: [0, 0]).interpret(answer(#"{"code":0,"msg":"ok","data":{"nextSequenceNo":4,"fileUrl":"http://h/f"}}"#)),
            .stored(fileURL: "http://h/f"))
        // Only the URL matters on the last block.
        XCTAssertEqual(try block(2, of: job, bytes: [0, 0]).interpret(answer(#"{"code":0,"data":{"fileUrl":"http://h/f"}}"#)), .stored(fileURL: "http://h/f"))
    }

    func testAcceptedAnswersThatContradictTheRequestAreNotStored() throws {
        let job = job()
        let first = try block(0, of: job, bytes: [0, 0, 0, 0])
        let last = try block(2, of: job, bytes: [0, 0])
        let cases: [(Exchange<ChunkOutcome>, String, BackendError)] = [
            (last, #"{"code":0,"msg":"ok","data":{"nextSequenceNo":4}}"#,
             .rejected("send block 3/3 of a b.bin: the server accepted the last block but sent no fileUrl")),
            (first, #"{"code":0,"msg":"ok","data":{"nextSequenceNo":2,"fileUrl":"http://h/f"}}"#,
             .mismatch("send block 1/3 of a b.bin: the server sent the file's URL before its last block (3)")),
            (first, #"{"code":0,"msg":"ok","data":{"nextSequenceNo":3}}"#,
             .mismatch("send block 1/3 of a b.bin: the server accepted it but asks for block 3 next, not 2")),
            (first, #"{"code":0,"msg":"ok","data":{}}"#, .transient("send block 1/3 of a b.bin: the answer has no nextSequenceNo")),
            (first, #"{"code":0,"msg":"ok"}"#, .transient("send block 1/3 of a b.bin: the answer has no nextSequenceNo")),
        ]
        for (exchange, json, expected) in cases {
            XCTAssertThrowsError(try exchange.interpret(answer(json)), json) { error in
                XCTAssertEqual(error as? BackendError, expected, json)
            }
        }
    }

    func testA409MovesTheClientToTheExpectedBlockEitherWay() throws {
        let job = job(size: 40, chunkSize: 4)  // 10 blocks
        let sixth = try block(5, of: job, bytes: [0, 0, 0, 0])
        XCTAssertEqual(try sixth.interpret(answer(#"{"code":409,"msg":"out of order","data":{"expectedSequenceNo":9}}"#)), .resync(next: 8), "forward")
        XCTAssertEqual(try sixth.interpret(answer(#"{"code":409,"msg":"out of order","data":{"expectedSequenceNo":3}}"#)), .resync(next: 2), "back")
        XCTAssertEqual(try sixth.interpret(answer(#"{"code":409,"data":{"expectedSequenceNo":1}}"#)), .resync(next: 0), "back to the start")
        XCTAssertEqual(
            try sixth.interpret(answer(#"{"code":409,"data":{"expectedSequenceNo":11}}"#)), .resync(next: 9),
            "the server holds every block: replay the last one, whose answer carries the URL")
    }

    func testA409ThatCannotBeFollowedFailsInsteadOfLooping() throws {
        let job = job(size: 40, chunkSize: 4)
        let sixth = try block(5, of: job, bytes: [0, 0, 0, 0])
        let cases: [(String, BackendError)] = [
            (#"{"code":409,"data":{"expectedSequenceNo":6}}"#,
             .mismatch("send block 6/10 of a b.bin: the server refused block 6 as out of order yet expects that very block")),
            (#"{"code":409,"data":{"expectedSequenceNo":0}}"#,
             .mismatch("send block 6/10 of a b.bin: the server expects block 0, but the file has 10")),
            (#"{"code":409,"data":{"expectedSequenceNo":12}}"#,
             .mismatch("send block 6/10 of a b.bin: the server expects block 12, but the file has 10")),
            (#"{"code":409,"msg":"out of order"}"#,
             .transient("send block 6/10 of a b.bin: the server refused the block as out of order but sent no expectedSequenceNo")),
        ]
        for (json, expected) in cases {
            XCTAssertThrowsError(try sixth.interpret(answer(json)), json) { error in
                XCTAssertEqual(error as? BackendError, expected, json)
            }
        }
        // The last block's replay is how the URL is fetched: refusing it cannot be followed.
        let last = try block(9, of: job, bytes: [0, 0, 0, 0])
        XCTAssertThrowsError(try last.interpret(answer(#"{"code":409,"data":{"expectedSequenceNo":11}}"#))) { error in
            XCTAssertEqual(
                error as? BackendError,
                .mismatch("send block 10/10 of a b.bin: the server refused block 10 as out of order yet expects that very block"))
        }
    }

    func testRefusalsAreClassified() throws {
        let job = job()
        let exchange = try block(1, of: job, bytes: [1, 2, 3, 4])
        let cases: [(HTTPResponse, BackendError)] = [
            (answer(#"{"code":401,"msg":"unknown upToken","data":{}}"#),
             .rejected("send block 2/3 of a b.bin: the server does not know this upload's upToken (expired?)", remedy: .startOver)),
            (answer(#"{"code":412,"msg":"block 2 was accepted with another crc"}"#),
             .mismatch("send block 2/3 of a b.bin: the server holds different bytes for this block (block 2 was accepted with another crc)", remedy: .startOver)),
            (answer(#"{"code":422,"msg":"bad crc"}"#), .transient("send block 2/3 of a b.bin: the block arrived damaged (bad crc)")),
            (answer(#"{"code":500,"msg":"storage error"}"#), .transient("send block 2/3 of a b.bin: server error 500 (storage error)")),
            (answer(#"{"code":400,"msg":"line\nbreak"}"#), .rejected("send block 2/3 of a b.bin: the server refused it with code 400 (line break)")),
            (answer(#"{"code":7}"#), .rejected("send block 2/3 of a b.bin: the server refused it with code 7")),
            (answer(#"{"msg":"no code"}"#), .transient("send block 2/3 of a b.bin: the answer has no code")),
            (HTTPResponse(status: 200, body: Array("<html>".utf8)), .transient("send block 2/3 of a b.bin: the server's answer is not JSON")),
            (HTTPResponse(status: 502), .transient("send block 2/3 of a b.bin: HTTP 502")),
            (answer(#"{"error":"no such endpoint"}"#, status: 404), .rejected("send block 2/3 of a b.bin: HTTP 404: no such endpoint")),
        ]
        for (response, expected) in cases {
            XCTAssertThrowsError(try exchange.interpret(response), response.text) { error in
                XCTAssertEqual(error as? BackendError, expected, response.text)
            }
        }
    }

    func testSecretsNeverReachAMessage() throws {
        let job = job(token: "s3cret-t0ken")
        let exchange = try block(1, of: job, bytes: [1, 2, 3, 4])
        for json in [#"{"code":401}"#, #"{"code":409,"data":{"expectedSequenceNo":2}}"#, #"{"code":412}"#, #"{"code":0,"data":{}}"#] {
            XCTAssertThrowsError(try exchange.interpret(answer(json))) { error in
                let text = "\(error)"
                XCTAssertFalse(text.contains("s3cret-t0ken") || text.contains(upToken), text)
            }
        }
    }
}

/// A minimal multipart/form-data reader for checking what the backend builds.
private struct FormBody {
    struct Part {
        var name: String
        var filename: String?
        var contentType: String?
        var content: [UInt8]
    }

    var parts: [Part] = []

    init(_ request: HTTPRequest) throws {
        let type = try XCTUnwrap(request.headers["Content-Type"])
        let boundary = try XCTUnwrap(type.components(separatedBy: "boundary=").last)
        XCTAssertTrue(type.hasPrefix("multipart/form-data; boundary="), type)
        let body = request.bodyBytes
        let delimiter = Array("\r\n--\(boundary)".utf8)
        // The first delimiter has no line end before it.
        let pieces = Self.split(Array("\r\n".utf8) + body, by: delimiter)
        XCTAssertEqual(pieces.first, [], "nothing before the first boundary")
        XCTAssertEqual(pieces.last, Array("--\r\n".utf8), "the body ends with the closing boundary")
        for piece in pieces.dropFirst().dropLast() {
            let text = piece.dropFirst(2)  // the CRLF after the boundary
            let headerEnd = try XCTUnwrap(Self.split(Array(text), by: Array("\r\n\r\n".utf8)).first)
            let content = Array(text.dropFirst(headerEnd.count + 4))
            var part = Part(name: "", content: content)
            for line in String(decoding: headerEnd, as: UTF8.self).components(separatedBy: "\r\n") {
                if line.hasPrefix("Content-Disposition: form-data; ") {
                    for parameter in line.dropFirst("Content-Disposition: form-data; ".count).components(separatedBy: "; ") {
                        let pair = parameter.split(separator: "=", maxSplits: 1).map(String.init)
                        let value = MultipartForm.unescape(String(pair[1].dropFirst().dropLast()))
                        if pair[0] == "name" { part.name = value } else if pair[0] == "filename" { part.filename = value }
                    }
                } else if line.hasPrefix("Content-Type: ") {
                    part.contentType = String(line.dropFirst("Content-Type: ".count))
                }
            }
            parts.append(part)
        }
    }

    var fieldNames: [String] { parts.map(\.name) }

    func part(_ name: String) -> Part? { parts.first { $0.name == name } }

    func text(_ name: String) -> String? { part(name).map { String(decoding: $0.content, as: UTF8.self) } }

    private static func split(_ bytes: [UInt8], by separator: [UInt8]) -> [[UInt8]] {
        var pieces: [[UInt8]] = []
        var start = 0
        var index = 0
        while index + separator.count <= bytes.count {
            if bytes[index..<index + separator.count].elementsEqual(separator) {
                pieces.append(Array(bytes[start..<index]))
                index += separator.count
                start = index
            } else {
                index += 1
            }
        }
        pieces.append(Array(bytes[start...]))
        return pieces
    }
}
