import Crypto
import Foundation
import XCTest

@testable import Xfer
@testable import XferTus

/// The tus backend is sans-IO: these tests check the requests it builds
/// and how it reads a tus server's answers, with no network.
/// (End to end against the PyPI tus server and `xfer serve`: TusPushTests.)
final class TusBackendTests: XCTestCase {
    let backend = TusBackend()
    let target = "http://127.0.0.1:9/files/"

    private func job(extensions: String = "creation,creation-with-upload,termination,checksum,concatenation",
                     checksum: String? = "sha1", fileHandles: ServerHandles = ServerHandles(), receipts: [Int: String] = [:],
                     size: Int64 = 10, token: String? = nil) -> JobContext {
        var handles = ServerHandles(["tus.extensions": extensions])
        if extensions.contains("concatenation") { handles.set("tus.mode", "parallel") }
        if let checksum { handles.set("tus.checksum", checksum) }
        let file = FileContext(
            index: 0, path: "/tmp/ä b.bin", name: "ä b.bin", size: size, plan: ChunkPlan(fileSize: size, chunkSize: 4),
            handles: fileHandles, receipts: receipts)
        return JobContext(id: JobID(rawValue: "0123456789abcdef"), target: target, handles: handles, files: [file],
                          credentials: Credentials(token: token), concurrency: 4)
    }

    func testDiscoveryKeepsWhatTheServerOffersAndPicksTheOrder() throws {
        let start = try XCTUnwrap(backend.startJob(job()))
        let oneAtATime = JobContext(id: JobID(rawValue: "x"), target: target, handles: ServerHandles(), files: [], credentials: Credentials())
        XCTAssertEqual(start.request.method, .options)
        XCTAssertEqual(start.request.url, target)
        let answer = HTTPResponse(status: 204, headers: [
            "Tus-Resumable": "1.0.0", "Tus-Version": "1.0.0,0.2.2",
            "Tus-Extension": "creation,creation-with-upload,termination,checksum,expiration,concatenation",
            "Tus-Checksum-Algorithm": "md5,sha1", "Tus-Max-Size": "1000",
        ])
        let handles = try start.interpret(answer).handles
        XCTAssertEqual(handles["tus.checksum"], "sha1")
        XCTAssertEqual(handles["tus.maxSize"], "1000")
        let started = JobContext(id: JobID(rawValue: "x"), target: target, handles: handles, files: [], credentials: Credentials())
        XCTAssertEqual(backend.chunkOrder(for: started), .any)
        XCTAssertEqual(backend.chunkOrder(for: job(extensions: "creation,checksum")), .sequentialWithinFile)
        // One request at a time: partial uploads would only add the server's concatenation.
        let single = try backend.startJob(oneAtATime)!.interpret(answer).handles
        XCTAssertEqual(single["tus.mode"], "in order")

        XCTAssertThrowsError(try start.interpret(HTTPResponse(status: 204, headers: ["Tus-Version": "0.2.2", "Tus-Extension": "creation"])))
        XCTAssertThrowsError(try start.interpret(HTTPResponse(status: 204, headers: ["Tus-Version": "1.0.0", "Tus-Extension": "checksum"])))
        let big = JobContext(id: JobID(rawValue: "x"), target: target, handles: ServerHandles(), files: job(size: 5000).files, credentials: Credentials())
        XCTAssertThrowsError(try backend.startJob(big)!.interpret(answer)) { error in
            XCTAssertTrue("\(error)".contains("Tus-Max-Size"), "\(error)")
        }
    }

    func testTargetKeepsItsTrailingSlash() throws {
        XCTAssertEqual(try backend.normalizedTarget("http://h:1080/files/"), "http://h:1080/files/")
        XCTAssertThrowsError(try backend.normalizedTarget("ftp://h/files/"))
    }

    func testChunksGoAsPartialUploadsCreatedWithTheirBytesWhenTheServerConcatenates() throws {
        let job = job(token: "t0k")
        XCTAssertNil(backend.openFile(job.files[0], in: job), "no upload of the whole file in parallel mode")
        let chunk = ChunkPayload(index: 1, offset: 4, bytes: [1, 2, 3, 4])
        let exchange = backend.uploadChunk(chunk, of: job.files[0], in: job)
        XCTAssertEqual(exchange.request.method, .post)
        XCTAssertEqual(exchange.request.headers["Upload-Concat"], "partial")
        XCTAssertEqual(exchange.request.headers["Upload-Length"], "4")
        XCTAssertEqual(exchange.request.headers["Tus-Resumable"], "1.0.0")
        XCTAssertEqual(exchange.request.headers["Content-Type"], "application/offset+octet-stream")
        XCTAssertEqual(exchange.request.headers["Authorization"], "Bearer t0k")
        XCTAssertEqual(exchange.request.headers["Upload-Checksum"], "sha1 " + Checksums.base64(Array(Insecure.SHA1.hash(data: [1, 2, 3, 4]))))
        XCTAssertEqual(
            try exchange.interpret(HTTPResponse(status: 201, headers: ["Location": "/files/p2", "Upload-Offset": "4"])),
            .stored(receipt: "http://127.0.0.1:9/files/p2"))
        XCTAssertThrowsError(try exchange.interpret(HTTPResponse(status: 201, headers: ["Location": "/files/p2", "Upload-Offset": "2"])))
        XCTAssertThrowsError(try exchange.interpret(HTTPResponse(status: 460))) { error in
            guard case BackendError.transient = error else { return XCTFail("\(error)") }
        }

        let finishing = self.job(receipts: [0: "http://127.0.0.1:9/files/p1", 1: "http://127.0.0.1:9/files/p2", 2: "http://127.0.0.1:9/files/p3"])
        let finish = try XCTUnwrap(backend.finishFile(finishing.files[0], in: finishing))
        XCTAssertEqual(finish.request.headers["Upload-Concat"],
                       "final;http://127.0.0.1:9/files/p1 http://127.0.0.1:9/files/p2 http://127.0.0.1:9/files/p3")
        XCTAssertEqual(finish.request.headers["Upload-Metadata"], "filename " + Checksums.base64(Array("ä b.bin".utf8)))
        XCTAssertEqual(try finish.interpret(HTTPResponse(status: 201, headers: ["Location": "http://127.0.0.1:9/files/f"])),
                       .completed(url: "http://127.0.0.1:9/files/f"))
        XCTAssertEqual(try finish.interpret(HTTPResponse(status: 404)), .missing([0, 1, 2]))
        let lacking = self.job(receipts: [0: "u0"])
        let check = try XCTUnwrap(backend.finishFile(lacking.files[0], in: lacking))
        XCTAssertNotEqual(check.request.method, .post, "no final upload of a missing part")
        XCTAssertEqual(try check.interpret(HTTPResponse(status: 204)), .missing([1, 2]))
    }

    func testWithoutConcatenationChunksArePatchedAtTheirOffset() throws {
        let job = job(extensions: "creation,termination", checksum: nil)
        let open = try XCTUnwrap(backend.openFile(job.files[0], in: job))
        XCTAssertEqual(open.request.headers["Upload-Length"], "10")
        XCTAssertEqual(try open.interpret(HTTPResponse(status: 201, headers: ["Location": "abc"])).handles["url"],
                       "http://127.0.0.1:9/files/abc")

        let opened = self.job(extensions: "creation,termination", checksum: nil, fileHandles: ServerHandles(["url": "http://127.0.0.1:9/files/u"]))
        // The server holds 6 bytes: the chunk [4, 8) is sent from byte 6.
        let chunk = ChunkPayload(index: 1, offset: 6, bytes: [7, 8])
        let patch = backend.uploadChunk(chunk, of: opened.files[0], in: opened)
        XCTAssertEqual(patch.request.method, .patch)
        XCTAssertEqual(patch.request.url, "http://127.0.0.1:9/files/u")
        XCTAssertEqual(patch.request.headers["Upload-Offset"], "6")
        XCTAssertNil(patch.request.headers["Upload-Checksum"])
        XCTAssertEqual(try patch.interpret(HTTPResponse(status: 204, headers: ["Upload-Offset": "8"])), .stored())
        for answer in [HTTPResponse(status: 409), HTTPResponse(status: 204, headers: ["Upload-Offset": "7"])] {
            XCTAssertThrowsError(try patch.interpret(answer)) { error in
                guard case BackendError.outOfSync = error else { return XCTFail("\(error)") }
            }
        }
        XCTAssertThrowsError(try patch.interpret(HTTPResponse(status: 410))) { error in
            guard case BackendError.uploadUnknown = error else { return XCTFail("\(error)") }
        }

        let head = try XCTUnwrap(backend.reconcileFile(opened.files[0], in: opened))
        XCTAssertEqual(head.request.method, .head)
        XCTAssertEqual(try head.interpret(HTTPResponse(status: 200, headers: ["Upload-Offset": "6", "Upload-Length": "10"])),
                       .serverHasPrefix(bytes: 6))
        XCTAssertEqual(try head.interpret(HTTPResponse(status: 200, headers: ["Upload-Offset": "10"])),
                       .complete(url: "http://127.0.0.1:9/files/u"))
        XCTAssertEqual(try head.interpret(HTTPResponse(status: 404)), .unknownUpload)
        XCTAssertEqual(try head.interpret(HTTPResponse(status: 200, headers: ["Upload-Offset": "1", "Upload-Length": "99"])), .unknownUpload)

        let confirm = try XCTUnwrap(backend.finishFile(opened.files[0], in: opened))
        XCTAssertEqual(try confirm.interpret(HTTPResponse(status: 200, headers: ["Upload-Offset": "10"])),
                       .completed(url: "http://127.0.0.1:9/files/u"))
        XCTAssertEqual(try confirm.interpret(HTTPResponse(status: 200, headers: ["Upload-Offset": "5"])), .missing([1, 2]))
        XCTAssertEqual(backend.cancelRequests(for: opened).map(\.method), [.delete])
        XCTAssertTrue(backend.cancelRequests(for: self.job(extensions: "creation", fileHandles: ServerHandles(["url": "u"]))).isEmpty)
    }
}
