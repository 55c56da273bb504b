import Foundation
import XCTest

@testable import Xfer
import XferPatch

/// The patch backend is sans-IO: these tests check the requests it builds
/// and how it reads answers, with no network.
final class PatchBackendTests: XCTestCase {
    let backend = PatchBackend()

    private func job(handles: ServerHandles = ServerHandles(), token: String? = nil, size: Int64 = 10, chunkSize: Int = 4) -> JobContext {
        let file = FileContext(
            index: 0, path: "/tmp/a b.bin", name: "a b.bin", size: size,
            plan: ChunkPlan(fileSize: size, chunkSize: chunkSize), handles: handles)
        return JobContext(
            id: JobID(rawValue: "0123456789abcdef"), target: "http://127.0.0.1:9", handles: ServerHandles(), files: [file],
            credentials: Credentials(token: token))
    }

    private var opened: ServerHandles {
        var handles = ServerHandles()
        handles.set("uploadId", "u1")
        return handles
    }

    func testOpenSendsNameSizeAndChunkSizeAndAdoptsTheServersChunkSize() throws {
        let job = job(token: "t0k")
        let exchange = try XCTUnwrap(backend.openFile(job.files[0], in: job))
        XCTAssertEqual(exchange.request.method, .post)
        XCTAssertEqual(exchange.request.url, "http://127.0.0.1:9/uploads")
        XCTAssertEqual(exchange.request.headers["Authorization"], "Bearer t0k")
        let sent = try JSONValue.parse(exchange.request.body.segments.flatMap { $0 })
        XCTAssertEqual(sent["fileName"]?.stringValue, "a b.bin")
        XCTAssertEqual(sent["size"]?.intValue, 10)
        XCTAssertEqual(sent["chunkSize"]?.intValue, 4)

        let answer = HTTPResponse(status: 201, body: Array(#"{"uploadId":"u1","chunkSize":8}"#.utf8))
        let opening = try exchange.interpret(answer)
        XCTAssertEqual(opening.handles["uploadId"], "u1")
        XCTAssertEqual(opening.chunkSize, 8)
    }

    func testChunkRequestCarriesRangeAndMD5() throws {
        let job = job(handles: opened)
        let payload = ChunkPayload(index: 2, offset: 8, bytes: [1, 2])
        let exchange = backend.uploadChunk(payload, of: job.files[0], in: job)
        XCTAssertEqual(exchange.request.method, .patch)
        XCTAssertEqual(exchange.request.url, "http://127.0.0.1:9/uploads/u1/chunks/3")
        XCTAssertEqual(exchange.request.headers["Content-Range"], "bytes 8-9/10")
        XCTAssertEqual(exchange.request.headers["Content-Type"], "application/octet-stream")
        XCTAssertEqual(exchange.request.headers["Content-MD5"], "DLmI0EKn8o3V/itVs/Wseg==")  // openssl md5 -binary of 01 02, base64
        XCTAssertEqual(exchange.request.body.segments, [[1, 2]])
        XCTAssertEqual(try exchange.interpret(HTTPResponse(status: 204)), .stored())
    }

    func testChunkAnswersAreClassified() {
        let job = job(handles: opened)
        let exchange = backend.uploadChunk(ChunkPayload(index: 0, offset: 0, bytes: [0]), of: job.files[0], in: job)
        XCTAssertThrowsError(try exchange.interpret(HTTPResponse(status: 404))) { error in
            guard case BackendError.uploadUnknown = error else { return XCTFail("\(error)") }
        }
        XCTAssertThrowsError(try exchange.interpret(HTTPResponse(status: 503, headers: ["Retry-After": "2"]))) { error in
            XCTAssertEqual(error as? BackendError, .transient("send chunk 1 of a b.bin: HTTP 503", retryAfter: .seconds(2)))
        }
        XCTAssertThrowsError(
            try exchange.interpret(HTTPResponse(status: 400, headers: ["Content-Type": "application/json"], body: Array(#"{"error":"md5 mismatch"}"#.utf8)))
        ) { error in
            XCTAssertEqual(error as? BackendError, .rejected("send chunk 1 of a b.bin: HTTP 400: md5 mismatch"))
        }
    }

    func testReconcileTurnsOneBasedChunksIntoIndexes() throws {
        let job = job(handles: opened)
        let exchange = try XCTUnwrap(backend.reconcileFile(job.files[0], in: job))
        XCTAssertEqual(exchange.request.method, .get)
        XCTAssertEqual(exchange.request.url, "http://127.0.0.1:9/uploads/u1")
        let answer = HTTPResponse(status: 200, body: Array(#"{"uploadId":"u1","size":10,"chunkSize":4,"received":[1,3]}"#.utf8))
        XCTAssertEqual(try exchange.interpret(answer), .serverHas(chunks: [0, 2]))
        XCTAssertEqual(try exchange.interpret(HTTPResponse(status: 404)), .unknownUpload)

        // Spaced out, empty, or in a shape the fast reader declines: the same answer either way.
        let spaced = HTTPResponse(status: 200, body: Array(#"{ "received" : [ 1 , 3 ] , "chunkSize" : 4 }"#.utf8))
        XCTAssertEqual(try exchange.interpret(spaced), .serverHas(chunks: [0, 2]))
        XCTAssertEqual(try exchange.interpret(HTTPResponse(status: 200, body: Array(#"{"received":[]}"#.utf8))), .serverHas(chunks: []))
        let exponent = HTTPResponse(status: 200, body: Array(#"{"received":[1,3e0]}"#.utf8))
        XCTAssertEqual(try exchange.interpret(exponent), .serverHas(chunks: [0, 2]))
        XCTAssertThrowsError(try exchange.interpret(HTTPResponse(status: 200, body: Array(#"{"received":"1,3"}"#.utf8))))
    }

    func testIntegerArraysAreReadStraightFromTheBytes() {
        let body = Array(#"{"name":"\"received\":[9]","received":[4, 5,6 ],"size":2}"#.utf8)
        XCTAssertEqual(HTTPResponse(status: 200, body: body).integers(inArrayNamed: "received"), [4, 5, 6])
        XCTAssertNil(HTTPResponse(status: 200, body: Array(#"{"received":[1,-2]}"#.utf8)).integers(inArrayNamed: "received"))
        XCTAssertNil(HTTPResponse(status: 200, body: Array(#"{"received":[1,"#.utf8)).integers(inArrayNamed: "received"))
        XCTAssertNil(HTTPResponse(status: 200, body: Array(#"{"other":[1]}"#.utf8)).integers(inArrayNamed: "received"))
    }

    func testCompleteReadsUrlShaOrMissing() throws {
        let job = job(handles: opened)
        let exchange = try XCTUnwrap(backend.finishFile(job.files[0], in: job))
        XCTAssertEqual(exchange.request.url, "http://127.0.0.1:9/uploads/u1/complete")
        let done = HTTPResponse(status: 200, body: Array(#"{"url":"http://x/d/u1/a","sha256":"ab"}"#.utf8))
        XCTAssertEqual(try exchange.interpret(done), .completed(url: "http://x/d/u1/a", sha256: "ab"))
        let missing = HTTPResponse(status: 409, body: Array(#"{"missing":[2]}"#.utf8))
        XCTAssertEqual(try exchange.interpret(missing), .missing([1]))
        XCTAssertThrowsError(try exchange.interpret(HTTPResponse(status: 200, body: Array("<html>".utf8)))) { error in
            guard case BackendError.transient = error else { return XCTFail("\(error)") }
        }
    }

    func testCancelDeletesEveryOpenedUpload() {
        let requests = backend.cancelRequests(for: job(handles: opened))
        XCTAssertEqual(requests.map(\.method), [.delete])
        XCTAssertEqual(requests.map(\.url), ["http://127.0.0.1:9/uploads/u1"])
    }
}
