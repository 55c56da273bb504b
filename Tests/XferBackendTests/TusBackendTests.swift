import Crypto
import Foundation
import XCTest
import Xfer
import XferBackendTesting
import XferPrimitives
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
        var handles: ServerHandles = [Features.extensionsKey: extensions]
        if extensions.contains("concatenation") { handles.set(Features.modeKey, "parallel") }
        if let checksum { handles.set(Features.checksumKey, checksum) }
        let file = BackendTesting.file(name: "ä b.bin", size: size, chunkSize: 4, handles: fileHandles, receipts: receipts)
        return BackendTesting.job(target: target, handles: handles, files: [file], token: token, concurrency: 4)
    }

    private typealias Features = TusBackend.Features

    private func assertUploadUnknown<T>(_ expression: @autoclosure () throws -> T, line: UInt = #line) {
        XCTAssertThrowsError(try expression(), line: line) { error in
            guard case BackendError.uploadUnknown = error else { return XCTFail("\(error)", line: line) }
        }
    }

    func testDiscoveryKeepsWhatTheServerOffersAndPicksTheOrder() throws {
        let parallel = TusBackend(partialUploads: true)
        let start = parallel.startJob(job())
        let oneAtATime = BackendTesting.job(target: target)
        XCTAssertEqual(start.request?.method, .options)
        XCTAssertEqual(start.request?.url, target)
        let answer = HTTPResponse(status: 204, headers: [
            "Tus-Resumable": "1.0.0", "Tus-Version": "1.0.0,0.2.2",
            "Tus-Extension": "creation,creation-with-upload,termination,checksum,expiration,concatenation",
            "Tus-Checksum-Algorithm": "md5,sha1", "Tus-Max-Size": "1000",
        ])
        let handles = try start.outcome(for: answer).handles
        XCTAssertEqual(handles[Features.checksumKey], "sha1")
        // CRC-32C where offered, in whatever order the server lists it.
        var offersCRC = answer
        offersCRC.headers.set("Tus-Checksum-Algorithm", "sha1,md5,crc32c")
        XCTAssertEqual(try start.outcome(for: offersCRC).handles[Features.checksumKey], "crc32c")
        XCTAssertEqual(handles[Features.maximumSizeKey], "1000")
        let started = BackendTesting.job(target: target, handles: handles)
        XCTAssertEqual(backend.chunkOrder(for: started), .any)
        XCTAssertEqual(backend.chunkOrder(for: job(extensions: "creation,checksum")), .sequentialWithinFile)
        // One request at a time: partial uploads would only add the server's concatenation.
        let single = try parallel.startJob(oneAtATime).outcome(for: answer).handles
        XCTAssertEqual(single[Features.modeKey], "in order")
        XCTAssertEqual(backend.chunkOrder(for: BackendTesting.job(target: target, handles: single)), .sequentialWithinFile)
        // Not asked for partial uploads (the default): in order at any concurrency, so the server
        // never copies the file to concatenate it.
        let inOrder = try backend.startJob(job()).outcome(for: answer).handles
        XCTAssertEqual(inOrder[Features.modeKey], "in order")
        XCTAssertEqual(backend.chunkOrder(for: BackendTesting.job(target: target, handles: inOrder)), .sequentialWithinFile)

        XCTAssertThrowsError(try start.outcome(for: HTTPResponse(status: 204, headers: ["Tus-Version": "0.2.2", "Tus-Extension": "creation"])))
        XCTAssertThrowsError(try start.outcome(for: HTTPResponse(status: 204, headers: ["Tus-Version": "1.0.0", "Tus-Extension": "checksum"])))
        let big = BackendTesting.job(target: target, files: job(size: 5000).files.map { $0 })
        XCTAssertThrowsError(try backend.startJob(big).outcome(for: answer)) { error in
            XCTAssertTrue("\(error)".contains("Tus-Max-Size"), "\(error)")
        }
    }

    func testTargetKeepsItsTrailingSlash() throws {
        XCTAssertEqual(try backend.normalizedTarget("http://h:1080/files/"), "http://h:1080/files/")
        XCTAssertThrowsError(try backend.normalizedTarget("ftp://h/files/"))
    }

    /// A stream's parts double every 100 parts up to 1 GiB, so that a long stream is concatenated
    /// from a few hundred parts, not a count that grows with its length.
    func testAStreamsPartsDoubleEveryHundredPartsUpToOneGiB() {
        let eight = 8 << 20
        XCTAssertEqual(backend.streamPartSize(ofPart: 1, requested: eight), eight)
        XCTAssertEqual(backend.streamPartSize(ofPart: 100, requested: eight), eight)
        XCTAssertEqual(backend.streamPartSize(ofPart: 101, requested: eight), 2 * eight)
        XCTAssertEqual(backend.streamPartSize(ofPart: 701, requested: eight), 1 << 30)
        XCTAssertEqual(backend.streamPartSize(ofPart: 5_000, requested: eight), 1 << 30)
        XCTAssertEqual(backend.streamPartSize(ofPart: 5_000, requested: 1 << 30), 1 << 30, "never above the engine's largest chunk")
        let carried = (1...800).reduce(0) { $0 + backend.streamPartSize(ofPart: $1, requested: eight) }
        XCTAssertGreaterThan(carried, 190 << 30)
    }

    func testChunksGoAsPartialUploadsCreatedWithTheirBytesWhenTheServerConcatenates() throws {
        let job = job(token: "t0k")
        XCTAssertTrue(backend.openFile(job.files[0], in: job).isSkipped, "no upload of the whole file in parallel mode")
        XCTAssertTrue(backend.reconcileFile(job.files[0], in: job).isSkipped, "no upload to ask about: the state is trusted")
        let chunk = ChunkPayload(index: 1, offset: 4, bytes: [1, 2, 3, 4])
        let exchange = try backend.uploadChunk(chunk, of: job.files[0], in: job)
        XCTAssertEqual(exchange.request.method, .post)
        XCTAssertEqual(exchange.request.headers["Upload-Concat"], "partial")
        XCTAssertEqual(exchange.request.headers["Upload-Length"], "4")
        XCTAssertEqual(exchange.request.headers["Tus-Resumable"], "1.0.0")
        XCTAssertEqual(exchange.request.headers["Content-Type"], "application/offset+octet-stream")
        XCTAssertEqual(backend.requestAsSent(exchange.request, in: job).headers["Authorization"], "Bearer t0k")
        let named = try XCTUnwrap(exchange.request.body.chunk, "the body names the chunk")
        XCTAssertEqual([named.index, Int(named.offset), named.length], [1, 4, 4])
        XCTAssertEqual(exchange.request.bodyBytes, [1, 2, 3, 4])
        XCTAssertEqual(exchange.request.headers["Upload-Checksum"], "sha1 " + Checksums.base64(Array(Insecure.SHA1.hash(data: [1, 2, 3, 4]))))
        let crcJob = self.job(checksum: "crc32c")
        XCTAssertEqual(
            try backend.uploadChunk(chunk, of: crcJob.files[0], in: crcJob).request.headers["Upload-Checksum"],
            "crc32c " + Checksums.base64(CRC32.bigEndianBytes(CRC32C.of([1, 2, 3, 4]))))
        XCTAssertEqual(
            try exchange.interpret(HTTPResponse(status: 201, headers: ["Location": "/files/p2", "Upload-Offset": "4"])),
            .stored(receipt: "http://127.0.0.1:9/files/p2"))
        XCTAssertThrowsError(try exchange.interpret(HTTPResponse(status: 201, headers: ["Location": "/files/p2", "Upload-Offset": "2"])))
        XCTAssertThrowsError(try exchange.interpret(HTTPResponse(status: 460))) { error in
            guard case BackendError.transient = error else { return XCTFail("\(error)") }
        }

        let finishing = self.job(receipts: [0: "http://127.0.0.1:9/files/p1", 1: "http://127.0.0.1:9/files/p2", 2: "http://127.0.0.1:9/files/p3"])
        let finish = backend.finishFile(finishing.files[0], in: finishing)
        let final = try XCTUnwrap(finish.request)
        XCTAssertEqual(final.method, .post)
        XCTAssertEqual(final.headers["Upload-Concat"],
                       "final;http://127.0.0.1:9/files/p1 http://127.0.0.1:9/files/p2 http://127.0.0.1:9/files/p3")
        XCTAssertEqual(final.headers["Upload-Metadata"], "filename " + Checksums.base64(Array("ä b.bin".utf8)))
        XCTAssertEqual(try finish.outcome(for: HTTPResponse(status: 201, headers: ["Location": "http://127.0.0.1:9/files/f"])),
                       .completed(url: "http://127.0.0.1:9/files/f"))
        XCTAssertEqual(try finish.outcome(for: HTTPResponse(status: 404)), .missing([0, 1, 2]))
        // A refused concatenation is not lost parts: sent again, they would be refused alike.
        let refusal = HTTPResponse(
            status: 400, headers: ["Content-Type": "application/json"],
            body: Array(#"{"error":"a final upload may concatenate at most 1000 partial uploads"}"#.utf8))
        XCTAssertThrowsError(try finish.outcome(for: refusal)) { error in
            guard case BackendError.rejected(let message, _) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(message.contains("at most 1000 partial uploads"), message)
        }
        let lacking = self.job(receipts: [0: "u0"])
        let check = backend.finishFile(lacking.files[0], in: lacking)
        XCTAssertNil(check.request, "no final upload of a missing part")
        XCTAssertEqual(check.immediateAnswer, .missing([1, 2]))
    }

    func testWithoutConcatenationChunksArePatchedAtTheirOffset() throws {
        let job = job(extensions: "creation,termination", checksum: nil)
        XCTAssertEqual(backend.chunkOrder(for: job), .sequentialWithinFile)
        let open = backend.openFile(job.files[0], in: job)
        XCTAssertEqual(open.request?.method, .post)
        XCTAssertEqual(open.request?.headers["Upload-Length"], "10")
        XCTAssertEqual(try open.outcome(for: HTTPResponse(status: 201, headers: ["Location": "abc"])).handles[TusBackend.uploadURL],
                       "http://127.0.0.1:9/files/abc")

        // Without the upload's URL there is nowhere to PATCH: the file is opened afresh.
        assertUploadUnknown(try backend.uploadChunk(ChunkPayload(index: 0, offset: 0, bytes: [1]), of: job.files[0], in: job))

        let opened = self.job(extensions: "creation,termination", checksum: nil, fileHandles: [TusBackend.uploadURL: "http://127.0.0.1:9/files/u"])
        // The server holds 6 bytes: the chunk [4, 8) is sent from byte 6.
        let chunk = ChunkPayload(index: 1, offset: 6, bytes: [7, 8])
        let patch = try backend.uploadChunk(chunk, of: opened.files[0], in: opened)
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

        let head = backend.reconcileFile(opened.files[0], in: opened)
        XCTAssertEqual(head.request?.method, .head)
        XCTAssertEqual(try head.outcome(for: HTTPResponse(status: 200, headers: ["Upload-Offset": "6", "Upload-Length": "10"])),
                       .serverHasPrefix(bytes: 6))
        XCTAssertEqual(try head.outcome(for: HTTPResponse(status: 200, headers: ["Upload-Offset": "10"])),
                       .complete(url: "http://127.0.0.1:9/files/u"))
        // Expired, terminated, or another upload than this file's: the engine opens the file afresh.
        for status in [403, 404, 410] {
            assertUploadUnknown(try head.outcome(for: HTTPResponse(status: status)))
        }
        assertUploadUnknown(try head.outcome(for: HTTPResponse(status: 200, headers: ["Upload-Offset": "1", "Upload-Length": "99"])))

        let confirm = backend.finishFile(opened.files[0], in: opened)
        XCTAssertEqual(confirm.request?.method, .head)
        XCTAssertEqual(try confirm.outcome(for: HTTPResponse(status: 200, headers: ["Upload-Offset": "10"])),
                       .completed(url: "http://127.0.0.1:9/files/u"))
        XCTAssertEqual(try confirm.outcome(for: HTTPResponse(status: 200, headers: ["Upload-Offset": "5"])), .missing([1, 2]))
        XCTAssertEqual(backend.cancelRequests(for: opened).map(\.method), [.delete])
        XCTAssertTrue(backend.cancelRequests(for: self.job(extensions: "creation", fileHandles: [TusBackend.uploadURL: "u"])).isEmpty)
    }

    /// A file of one chunk is one round trip: its upload created with all its
    /// bytes, which completes it — in either mode, where the server offers
    /// `creation-with-upload`.
    func testAFileOfOneChunkIsOnePOSTCarryingAllOfIt() throws {
        for extensions in ["creation,creation-with-upload,checksum,concatenation", "creation,creation-with-upload,checksum"] {
            var job = job(extensions: extensions, size: 3)
            XCTAssertEqual(job.files[0].chunkCount, 1)
            XCTAssertTrue(backend.openFile(job.files[0], in: job).isSkipped, extensions)
            let exchange = try backend.uploadChunk(ChunkPayload(index: 0, offset: 0, bytes: [1, 2, 3]), of: job.files[0], in: job)
            XCTAssertEqual(exchange.request.method, .post)
            XCTAssertEqual(exchange.request.url, target)
            XCTAssertNil(exchange.request.headers["Upload-Concat"], "a whole upload, not a partial one")
            XCTAssertEqual(exchange.request.headers["Upload-Length"], "3")
            XCTAssertEqual(exchange.request.headers["Content-Type"], "application/offset+octet-stream")
            XCTAssertNotNil(exchange.request.headers["Upload-Metadata"])
            XCTAssertNotNil(exchange.request.headers["Upload-Checksum"])
            XCTAssertEqual(try exchange.interpret(HTTPResponse(status: 201, headers: ["Location": "w", "Upload-Offset": "3"])),
                           .stored(fileURL: "http://127.0.0.1:9/files/w"))
            // Taken in part: the retry creates it again, whole.
            XCTAssertThrowsError(try exchange.interpret(HTTPResponse(status: 201, headers: ["Location": "w", "Upload-Offset": "1"]))) { error in
                guard case BackendError.transient = error else { return XCTFail("\(error)") }
            }
            // A larger file keeps its mode; so does an empty one (there is nothing to carry).
            job = self.job(extensions: extensions, size: 10)
            if !extensions.contains("concatenation") { XCTAssertEqual(backend.openFile(job.files[0], in: job).request?.method, .post) }
            let empty = self.job(extensions: extensions, size: 0)
            XCTAssertEqual(backend.openFile(empty.files[0], in: empty).request?.headers["Upload-Length"], "0")
        }
        // Without creation-with-upload a small file is created, then PATCHed.
        let plain = job(extensions: "creation", checksum: nil, size: 3)
        XCTAssertEqual(backend.openFile(plain.files[0], in: plain).request?.method, .post)
    }

    // MARK: Streams

    /// With concatenation and creation-with-upload, a stream's parts are
    /// partial uploads and its end a final upload of them, in order.
    func testAStreamGoesAsPartialUploadsConcatenated() throws {
        let job = self.job(checksum: nil)
        let file = try XCTUnwrap(job.files.first)
        XCTAssertNil(try backend.openStream(file, in: job).request, "no upload is opened for partial uploads")
        let part = try backend.uploadStreamPart(ChunkPayload(index: 1, offset: 4, bytes: [1, 2, 3]), of: file, in: job)
        XCTAssertEqual(part.request.method, .post)
        XCTAssertEqual(part.request.headers["Upload-Concat"], "partial")
        XCTAssertEqual(part.request.headers["Upload-Length"], "3")
        let finish = try backend.finishStream(file, receipts: ["http://h/files/a", "http://h/files/b"], in: job)
        XCTAssertEqual(finish.request?.headers["Upload-Concat"], "final;http://h/files/a http://h/files/b")
        XCTAssertThrowsError(try backend.finishStream(file, receipts: ["http://h/files/a", nil], in: job))
    }

    /// Without them, one upload with a deferred length; the end is an empty
    /// PATCH giving it. With neither extension, a clear refusal.
    func testAStreamGoesAsOneUploadWithADeferredLength() throws {
        let job = self.job(extensions: "creation,creation-defer-length,termination", checksum: nil)
        let file = try XCTUnwrap(job.files.first)
        let open = try backend.openStream(file, in: job)
        XCTAssertEqual(open.request?.method, .post)
        XCTAssertEqual(open.request?.headers["Upload-Defer-Length"], "1")
        XCTAssertNil(open.request?.headers["Upload-Length"])
        let opened = try XCTUnwrap(open.outcome(for: HTTPResponse(status: 201, headers: ["Location": "/files/u1"])))
        let url = try XCTUnwrap(opened.handles[TusBackend.uploadURL])
        let withUpload = BackendTesting.file(name: "s.bin", size: 7, chunkSize: 4, handles: opened.handles)
        let patch = try backend.uploadStreamPart(ChunkPayload(index: 1, offset: 4, bytes: [1, 2, 3]), of: withUpload, in: job)
        XCTAssertEqual(patch.request.method, .patch)
        XCTAssertEqual(patch.request.headers["Upload-Offset"], "4")
        XCTAssertNil(patch.request.headers["Upload-Length"])
        let end = try backend.finishStream(withUpload, receipts: [nil, nil], in: job)
        XCTAssertEqual(end.request?.method, .patch)
        XCTAssertEqual(end.request?.headers["Upload-Offset"], "7")
        XCTAssertEqual(end.request?.headers["Upload-Length"], "7")
        XCTAssertEqual(end.request?.body.count, 0)
        XCTAssertEqual(try end.outcome(for: HTTPResponse(status: 204, headers: ["Upload-Offset": "7"])), .completed(url: url))

        let neither = self.job(extensions: "creation,termination", checksum: nil)
        XCTAssertThrowsError(try backend.openStream(try XCTUnwrap(neither.files.first), in: neither)) { error in
            guard case BackendError.rejected(let message, _) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(message.contains("creation-defer-length"), message)
        }
    }

    /// `cancel` of a stream sent as partial uploads drops each of them.
    func testCancellingPartialUploadsDropsEachOne() {
        let job = self.job(receipts: [0: "http://h/files/a", 1: "http://h/files/b"])
        XCTAssertEqual(backend.cancelRequests(for: job).map(\.url), ["http://h/files/a", "http://h/files/b"])
        XCTAssertEqual(backend.cancelRequests(for: job).map(\.method), [.delete, .delete])
    }
}
