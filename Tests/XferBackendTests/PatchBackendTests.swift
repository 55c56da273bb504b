import Foundation
import XCTest
import Xfer
import XferBackendTesting
import XferPatch

/// The patch backend is sans-IO: these tests check the requests it builds
/// and how it reads answers, with no network.
final class PatchBackendTests: XCTestCase {
    let backend = PatchBackend()

    private func job(handles: ServerHandles = ServerHandles(), token: String? = nil, size: Int64 = 10, chunkSize: Int = 4) -> JobContext {
        let file = BackendTesting.file(name: "a b.bin", size: size, chunkSize: chunkSize, handles: handles)
        return BackendTesting.job(files: [file], token: token)
    }

    private let opened: ServerHandles = [PatchBackend.uploadID: "u1"]

    private func assertUploadUnknown<T>(_ expression: @autoclosure () throws -> T, line: UInt = #line) {
        XCTAssertThrowsError(try expression(), line: line) { error in
            guard case BackendError.uploadUnknown = error else { return XCTFail("\(error)", line: line) }
        }
    }

    func testOpenSendsNameSizeAndChunkSizeAndAdoptsTheServersChunkSize() throws {
        let job = job(token: "t0k")
        let step = backend.openFile(job.files[0], in: job)
        let request = try XCTUnwrap(step.request)
        XCTAssertEqual(request.method, .post)
        XCTAssertEqual(request.url, "http://127.0.0.1:9/uploads")
        XCTAssertEqual(backend.requestAsSent(request, in: job).headers["Authorization"], "Bearer t0k")
        let sent = try JSONValue.parse(request.bodyBytes)
        XCTAssertEqual(sent["fileName"]?.stringValue, "a b.bin")
        XCTAssertEqual(sent["size"]?.intValue, 10)
        XCTAssertEqual(sent["chunkSize"]?.intValue, 4)

        let answer = HTTPResponse.json(201, #"{"uploadId":"u1","chunkSize":8}"#)
        let opening = try step.outcome(for: answer)
        XCTAssertEqual(opening.handles[PatchBackend.uploadID], "u1")
        XCTAssertEqual(opening.chunkSize, 8)
    }

    func testChunkRequestCarriesRangeAndMD5() throws {
        let job = job(handles: opened)
        let payload = ChunkPayload(index: 2, offset: 8, bytes: [1, 2])
        let exchange = try backend.uploadChunk(payload, of: job.files[0], in: job)
        XCTAssertEqual(exchange.request.method, .patch)
        XCTAssertEqual(exchange.request.url, "http://127.0.0.1:9/uploads/u1/chunks/3")
        XCTAssertEqual(exchange.request.headers["Content-Range"], "bytes 8-9/10")
        XCTAssertEqual(exchange.request.headers["Content-Type"], "application/octet-stream")
        XCTAssertEqual(exchange.request.headers["Content-MD5"], "DLmI0EKn8o3V/itVs/Wseg==")  // openssl md5 -binary of 01 02, base64
        // The body is the chunk itself, named rather than copied, with nothing around it.
        let chunk = try XCTUnwrap(exchange.request.body.chunk)
        XCTAssertEqual([chunk.index, Int(chunk.offset), chunk.length], [2, 8, 2])
        XCTAssertEqual(exchange.request.body.framingBefore, [])
        XCTAssertEqual(exchange.request.body.framingAfter, [])
        XCTAssertEqual(exchange.request.bodyBytes, [1, 2])
        XCTAssertEqual(try exchange.interpret(HTTPResponse(status: 204)), .stored())
    }

    func testChunkAnswersAreClassified() throws {
        let job = job(handles: opened)
        let exchange = try backend.uploadChunk(ChunkPayload(index: 0, offset: 0, bytes: [0]), of: job.files[0], in: job)
        assertUploadUnknown(try exchange.interpret(HTTPResponse(status: 404)))
        XCTAssertThrowsError(try exchange.interpret(HTTPResponse(status: 503, headers: ["Retry-After": "2"]))) { error in
            XCTAssertEqual(error as? BackendError, .transient("send chunk 1 of a b.bin: HTTP 503", retryAfter: .seconds(2)))
        }
        XCTAssertThrowsError(try exchange.interpret(.json(400, #"{"error":"md5 mismatch"}"#))) { error in
            XCTAssertEqual(error as? BackendError, .rejected("send chunk 1 of a b.bin: HTTP 400: md5 mismatch"))
        }
    }

    func testStepsOfAnUnopenedFileNeedItsUploadID() {
        let job = job()
        assertUploadUnknown(try backend.uploadChunk(ChunkPayload(index: 0, offset: 0, bytes: [0]), of: job.files[0], in: job))
        assertUploadUnknown(try backend.reconcileFile(job.files[0], in: job))
        assertUploadUnknown(try backend.finishFile(job.files[0], in: job))
        XCTAssertTrue(backend.cancelRequests(for: job).isEmpty)
    }

    func testReconcileTurnsOneBasedChunksIntoIndexes() throws {
        let job = job(handles: opened)
        let step = try backend.reconcileFile(job.files[0], in: job)
        let request = try XCTUnwrap(step.request)
        XCTAssertEqual(request.method, .get)
        XCTAssertEqual(request.url, "http://127.0.0.1:9/uploads/u1")
        let answer = HTTPResponse(status: 200, body: Array(#"{"uploadId":"u1","size":10,"chunkSize":4,"received":[1,3]}"#.utf8))
        XCTAssertEqual(try step.outcome(for: answer), .serverHas(chunks: [0, 2]))
        // A server that no longer knows the upload: the engine opens the file afresh.
        assertUploadUnknown(try step.outcome(for: HTTPResponse(status: 404)))

        // Spaced out, empty, or in a shape the fast reader declines: the same answer either way.
        let spaced = HTTPResponse(status: 200, body: Array(#"{ "received" : [ 1 , 3 ] , "chunkSize" : 4 }"#.utf8))
        XCTAssertEqual(try step.outcome(for: spaced), .serverHas(chunks: [0, 2]))
        XCTAssertEqual(try step.outcome(for: HTTPResponse(status: 200, body: Array(#"{"received":[]}"#.utf8))), .serverHas(chunks: []))
        let exponent = HTTPResponse(status: 200, body: Array(#"{"received":[1,3e0]}"#.utf8))
        XCTAssertEqual(try step.outcome(for: exponent), .serverHas(chunks: [0, 2]))
        XCTAssertThrowsError(try step.outcome(for: HTTPResponse(status: 200, body: Array(#"{"received":"1,3"}"#.utf8))))

        // As the engine asks it: one question, one answer.
        var server = ScriptedServer([.json(200, #"{"chunkSize":4,"received":[2]}"#)])
        XCTAssertEqual(try server.reconcile(job.files[0], with: backend, in: job), .serverHas(chunks: [1]))
        XCTAssertTrue(server.isExhausted)
        XCTAssertEqual(server.requests.map(\.url), ["http://127.0.0.1:9/uploads/u1"])
    }

    /// Runs, when the server sends them, stand for the list (which may stop short of them), and
    /// runs reaching outside the file are cut to it: an answer cannot make the client hold more
    /// than its own file's chunks.
    func testRunsOfChunksWinOverTheListAndStayWithinTheFile() throws {
        let job = job(handles: opened, size: 40, chunkSize: 4)
        let reconcile = try backend.reconcileFile(job.files[0], in: job)
        let both = HTTPResponse(status: 200, body: Array(#"{"chunkSize":4,"received":[1],"receivedRanges":[[1,3],[6,6]]}"#.utf8))
        XCTAssertEqual(try reconcile.outcome(for: both), .serverHas(chunks: [0, 1, 2, 5]))
        let wide = HTTPResponse(status: 200, body: Array(#"{"receivedRanges":[[-5,1],[9,1000000000000]]}"#.utf8))
        XCTAssertEqual(try reconcile.outcome(for: wide), .serverHas(chunks: [0, 8, 9]))
        XCTAssertThrowsError(try reconcile.outcome(for: HTTPResponse(status: 200, body: Array(#"{"receivedRanges":[[1]]}"#.utf8))))

        let finish = try backend.finishFile(job.files[0], in: job)
        let missing = HTTPResponse(status: 409, body: Array(#"{"missing":[2],"missingCount":4,"missingRanges":[[2,3],[9,10]]}"#.utf8))
        XCTAssertEqual(try finish.outcome(for: missing), .missing([1, 2, 8, 9]))
    }

    func testIntegerArraysAreRead() {
        let body = Array(#"{"name":"\"received\":[9]","received":[4, 5,6 ],"size":2}"#.utf8)
        XCTAssertEqual(HTTPResponse(status: 200, body: body).integers(inArrayNamed: "received"), [4, 5, 6])
        XCTAssertNil(HTTPResponse(status: 200, body: Array(#"{"received":[1,-2]}"#.utf8)).integers(inArrayNamed: "received"))
        XCTAssertNil(HTTPResponse(status: 200, body: Array(#"{"received":[1,"#.utf8)).integers(inArrayNamed: "received"))
        XCTAssertNil(HTTPResponse(status: 200, body: Array(#"{"other":[1]}"#.utf8)).integers(inArrayNamed: "received"))
    }

    func testCompleteReadsUrlShaOrMissing() throws {
        let job = job(handles: opened)
        let step = try backend.finishFile(job.files[0], in: job)
        XCTAssertEqual(step.request?.url, "http://127.0.0.1:9/uploads/u1/complete")
        let done = HTTPResponse(status: 200, body: Array(#"{"url":"http://x/d/u1/a","sha256":"ab"}"#.utf8))
        XCTAssertEqual(try step.outcome(for: done), .completed(url: "http://x/d/u1/a", sha256: "ab"))
        let missing = HTTPResponse(status: 409, body: Array(#"{"missing":[2]}"#.utf8))
        XCTAssertEqual(try step.outcome(for: missing), .missing([1]))
        XCTAssertThrowsError(try step.outcome(for: HTTPResponse(status: 200, body: Array("<html>".utf8)))) { error in
            guard case BackendError.transient = error else { return XCTFail("\(error)") }
        }
    }

    func testCancelDeletesEveryOpenedUpload() {
        let job = job(handles: opened, token: "t0k")
        let requests = backend.cancelRequests(for: job)
        XCTAssertEqual(requests.map(\.method), [.delete])
        XCTAssertEqual(requests.map(\.url), ["http://127.0.0.1:9/uploads/u1"])
        XCTAssertEqual(requests.map { backend.requestAsSent($0, in: job).headers["Authorization"] }, ["Bearer t0k"])
    }

    // MARK: Digest negotiation (RFC 9530)

    private func negotiated(_ wanted: String?) throws -> String? {
        let job = job()
        var headers: HTTPHeaders = [:]
        if let wanted { headers.set("Want-Content-Digest", wanted) }
        let opened = try backend.openFile(job.files[0], in: job).outcome(for: .json(201, #"{"uploadId":"u1"}"#, headers: headers))
        return opened.handles[PatchBackend.digestAlgorithm]
    }

    func testTheDigestIsTheBestOfferedThatTheClientHasAndNoneWithoutAnOffer() throws {
        XCTAssertNil(try negotiated(nil), "a server that asks for nothing gets Content-MD5")
        XCTAssertEqual(try negotiated("crc32c=10, sha-256=5"), "crc32c")
        XCTAssertEqual(try negotiated("sha-256=9, crc32c=3"), "sha-256")
        XCTAssertEqual(try negotiated("sha-256=5, crc32c=5"), "crc32c", "a tie goes to the cheaper")
        XCTAssertEqual(try negotiated("crc32c=0, sha-256=1"), "sha-256", "0 means not acceptable")
        XCTAssertNil(try negotiated("sha-512=10, unixsum=3"), "nothing the client has: Content-MD5")
    }

    func testChunksCarryTheAgreedDigestOrContentMD5() throws {
        let bytes: [UInt8] = [1, 2, 3, 4]
        func headers(_ algorithm: String?) throws -> HTTPHeaders {
            var handles = opened
            if let algorithm { handles.set(PatchBackend.digestAlgorithm, algorithm) }
            let job = job(handles: handles)
            let chunk = BackendTesting.chunk(0, of: job.files[0], bytes: bytes)
            return try backend.uploadChunk(chunk, of: job.files[0], in: job).request.headers
        }
        let crc = try headers("crc32c")
        XCTAssertEqual(crc["Content-Digest"], "crc32c=:\(Checksums.base64(CRC32.bigEndianBytes(CRC32C.of(bytes)))):")
        XCTAssertNil(crc["Content-MD5"])
        let sha = try headers("sha-256")
        XCTAssertEqual(sha["Content-Digest"], "sha-256=:\(Checksums.base64(BackendTesting.chunk(0, of: job().files[0], bytes: bytes).sha256)):")
        let md5 = try headers(nil)
        XCTAssertNil(md5["Content-Digest"])
        XCTAssertNotNil(md5["Content-MD5"])
    }

    func testADamagedChunkIsSentAgainAndACRCChunkKeepsItsCRCAsItsReceipt() throws {
        var handles = opened
        handles.set(PatchBackend.digestAlgorithm, "crc32c")
        let job = job(handles: handles)
        let chunk = BackendTesting.chunk(0, of: job.files[0], bytes: [9, 9, 9, 9])
        let exchange = try backend.uploadChunk(chunk, of: job.files[0], in: job)
        XCTAssertThrowsError(try exchange.interpret(.json(422, #"{"error":"the body does not match its digest"}"#))) { error in
            guard case BackendError.transient = error else { return XCTFail("\(error)") }
        }
        XCTAssertEqual(try exchange.interpret(HTTPResponse(status: 204)), .stored(receipt: "crc32c=\(CRC32.hex(CRC32C.of([9, 9, 9, 9]))):4"))
    }

    func testTheCompletionsCRC32CIsCheckedAgainstTheChunksCombined() throws {
        // 10 bytes in chunks of 4: the receipts of a run that sent them all.
        let data: [UInt8] = Array(0..<10)
        let parts = [Array(data[0..<4]), Array(data[4..<8]), Array(data[8..<10])]
        var receipts: [Int: String] = [:]
        for (index, part) in parts.enumerated() { receipts[index] = "crc32c=\(CRC32.hex(CRC32C.of(part))):\(part.count)" }
        var handles = opened
        handles.set(PatchBackend.digestAlgorithm, "crc32c")
        let file = BackendTesting.file(name: "a.bin", size: 10, chunkSize: 4, handles: handles, receipts: receipts)
        let job = BackendTesting.job(files: [file])
        XCTAssertFalse(backend.reportsSHA256(of: file, in: job), "no whole-file SHA-256 when CRCs are combined")
        let step = try backend.finishFile(file, in: job)
        let right = CRC32.hex(CRC32C.of(data))
        XCTAssertEqual(
            try step.outcome(for: .json(200, #"{"crc32c":"\#(right)","sha256":"ab","url":"http://x/d"}"#)),
            .completed(url: "http://x/d", sha256: nil))
        XCTAssertThrowsError(try step.outcome(for: .json(200, #"{"crc32c":"00000000","sha256":"ab","url":"http://x/d"}"#))) { error in
            guard case BackendError.mismatch = error else { return XCTFail("\(error)") }
        }
        // A chunk without a receipt (found on the server by a resume): the engine checks the
        // server's CRC-32C by reading the file, or its SHA-256 when it gave no CRC.
        var partial = receipts
        partial[1] = nil
        let resumed = BackendTesting.file(name: "a.bin", size: 10, chunkSize: 4, handles: handles, receipts: partial)
        XCTAssertEqual(
            try backend.finishFile(resumed, in: job).outcome(for: .json(200, #"{"crc32c":"\#(right)","url":"http://x/d"}"#)),
            .completed(url: "http://x/d", crc32c: CRC32C.of(data)))
        XCTAssertEqual(
            try backend.finishFile(resumed, in: job).outcome(for: .json(200, #"{"sha256":"ab","url":"http://x/d"}"#)),
            .completed(url: "http://x/d", sha256: "ab"))
        XCTAssertTrue(backend.reportsSHA256(of: BackendTesting.file(size: 10, chunkSize: 4, handles: opened), in: job))
    }

    // MARK: A small file in one request

    /// A job whose server answered discovery: whole files up to `limit`, digests in `digest`.
    private func wholeJob(_ files: [FileContext], limit: Int = 1 << 20, digest: String? = "crc32c") -> JobContext {
        var handles: ServerHandles = [HandleKey("patch.whole"): String(limit)]
        if let digest { handles.set(HandleKey("patch.digest"), digest) }
        return BackendTesting.job(handles: handles, files: files)
    }

    func testAJobWithASmallFileAsksWhetherTheServerTakesItWhole() throws {
        let small = BackendTesting.file(name: "s.bin", size: 10, chunkSize: 4)
        let one = BackendTesting.file(index: 1, name: "one.bin", size: 4, chunkSize: 4)
        XCTAssertTrue(backend.startJob(BackendTesting.job(files: [small])).isSkipped, "a job of larger files asks nothing")
        let step = backend.startJob(BackendTesting.job(files: [small, one]))
        let request = try XCTUnwrap(step.request)
        XCTAssertEqual(request.method, .options)
        XCTAssertEqual(request.url, "http://127.0.0.1:9/uploads")

        let takes = HTTPResponse(status: 204, headers: [
            "Accept-Post": "application/json, application/octet-stream", "Upload-Limit": "max-size=100, max-append-size=64",
            "Want-Content-Digest": "crc32c=10, sha-256=5",
        ])
        let started = try step.outcome(for: takes)
        XCTAssertEqual(started.handles[HandleKey("patch.whole")], "64")
        XCTAssertEqual(started.handles[HandleKey("patch.digest")], "crc32c")
        // Servers that do not say so (no such route, no discovery, JSON only) get JSON creations.
        for answer in [
            HTTPResponse(status: 404), HTTPResponse(status: 405), HTTPResponse(status: 200),
            HTTPResponse(status: 204, headers: ["Accept-Post": "application/json", "Upload-Limit": "max-append-size=64"]),
            HTTPResponse(status: 204, headers: ["Accept-Post": "application/octet-stream", "Upload-Limit": "max-size=64"]),
        ] {
            XCTAssertEqual(try step.outcome(for: answer).handles, ServerHandles(), "\(answer)")
        }
        XCTAssertThrowsError(try step.outcome(for: HTTPResponse(status: 503))) { error in
            guard case BackendError.transient = error else { return XCTFail("\(error)") }
        }
        XCTAssertThrowsError(try step.outcome(for: HTTPResponse(status: 401))) { error in
            guard case BackendError.rejected = error else { return XCTFail("\(error)") }
        }
    }

    func testAFileOfOneChunkIsCreatedWithItsBytesAndCompletedByTheAnswer() throws {
        let file = BackendTesting.file(name: "a b.bin", relativePath: "dir/a b.bin", size: 4, chunkSize: 4)
        let job = wholeJob([file])
        XCTAssertTrue(backend.openFile(file, in: job).isSkipped, "its chunk creates it")
        XCTAssertTrue(try backend.reconcileFile(file, in: job).isSkipped, "nothing to ask after a kill: it is sent again")
        XCTAssertFalse(backend.reportsSHA256(of: file, in: job), "its CRC-32C is checked, no SHA-256")
        let bytes: [UInt8] = [1, 2, 3, 4]
        let exchange = try backend.uploadChunk(BackendTesting.chunk(0, of: file, bytes: bytes), of: file, in: job)
        XCTAssertEqual(exchange.request.method, .post)
        XCTAssertEqual(exchange.request.url, "http://127.0.0.1:9/uploads?fileName=dir%2Fa%20b.bin")
        XCTAssertEqual(exchange.request.headers["Content-Type"], "application/octet-stream")
        XCTAssertEqual(exchange.request.headers["Content-Digest"], "crc32c=:\(Checksums.base64(CRC32.bigEndianBytes(CRC32C.of(bytes)))):")
        XCTAssertNil(exchange.request.headers["Content-Range"])
        XCTAssertEqual(exchange.request.bodyBytes, bytes)

        let crc = CRC32.hex(CRC32C.of(bytes))
        XCTAssertEqual(
            try exchange.interpret(.json(201, #"{"crc32c":"\#(crc)","uploadId":"u9","url":"http://x/d/a"}"#)),
            .stored(fileURL: "http://x/d/a"))
        XCTAssertThrowsError(try exchange.interpret(.json(201, #"{"crc32c":"00000000","uploadId":"u9","url":"http://x/d/a"}"#))) { error in
            guard case BackendError.mismatch = error else { return XCTFail("\(error)") }
        }
        XCTAssertThrowsError(try exchange.interpret(.json(422, #"{"error":"the body does not match its digest"}"#))) { error in
            guard case BackendError.transient = error else { return XCTFail("\(error)") }
        }
        XCTAssertThrowsError(try exchange.interpret(.json(201, #"{"uploadId":"u9"}"#)), "an answer without the file's URL")

        // Without a digest the server asked for, the bytes carry their MD5, as a chunk's.
        let md5Job = wholeJob([file], digest: nil)
        let md5 = try backend.uploadChunk(BackendTesting.chunk(0, of: file, bytes: bytes), of: file, in: md5Job)
        XCTAssertNotNil(md5.request.headers["Content-MD5"])
        XCTAssertTrue(backend.reportsSHA256(of: file, in: md5Job))
    }

    func testAnEmptyFileIsOneCreationThatCompletesIt() throws {
        let file = BackendTesting.file(name: "e.bin", size: 0, chunkSize: 4)
        let job = wholeJob([file])
        let step = backend.openFile(file, in: job)
        let request = try XCTUnwrap(step.request)
        XCTAssertEqual(request.url, "http://127.0.0.1:9/uploads?fileName=e.bin")
        XCTAssertEqual(request.bodyBytes, [])
        let opened = try step.outcome(for: .json(201, #"{"crc32c":"00000000","uploadId":"u9","url":"http://x/d/e"}"#))
        let created = BackendTesting.file(name: "e.bin", size: 0, chunkSize: 4, handles: opened.handles)
        XCTAssertEqual(try backend.finishFile(created, in: job).immediateAnswer, .completed(url: "http://x/d/e"), "no request to complete it")
    }

    func testLargerFilesAndFilesAnEarlierRunCreatedGoAsBefore() throws {
        let large = BackendTesting.file(name: "l.bin", size: 10, chunkSize: 4)
        let pastLimit = BackendTesting.file(name: "p.bin", size: 4, chunkSize: 4)
        let created = BackendTesting.file(name: "c.bin", size: 4, chunkSize: 4, handles: opened)
        let job = wholeJob([large, pastLimit, created], limit: 3)
        for file in [large, pastLimit] {
            let request = try XCTUnwrap(backend.openFile(file, in: job).request, file.name)
            XCTAssertEqual(request.url, "http://127.0.0.1:9/uploads", file.name)
            XCTAssertEqual(try JSONValue.parse(request.bodyBytes)["fileName"]?.stringValue, file.name)
        }
        let chunk = try backend.uploadChunk(BackendTesting.chunk(0, of: created, bytes: [1, 2, 3, 4]), of: created, in: job)
        XCTAssertEqual(chunk.request.url, "http://127.0.0.1:9/uploads/u1/chunks/1", "a file an earlier run created with JSON")
        XCTAssertEqual(try backend.reconcileFile(created, in: job).request?.method, .get)
    }
}
