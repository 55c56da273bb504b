import Foundation
import XCTest
import Xfer
import XferBackendTesting
@testable import XferMultipart

/// The multipart backend is sans-IO: these tests check the requests it
/// builds and how it reads answers, with no network.
final class MultipartBackendTests: XCTestCase {
    let backend = MultipartBackend()

    private struct Spec {
        var name: String
        var size: Int64
        var chunkSize = 4
    }

    private func job(
        _ specs: [Spec] = [Spec(name: "视频 01.mp4", size: 10), Spec(name: "notes", size: 0)],
        fileIds: [String]? = ["f0", "f1"], token: String? = nil
    ) -> JobContext {
        let files = specs.enumerated().map { index, spec in
            var handles = ServerHandles()
            if let fileIds, index < fileIds.count { handles.set(MultipartBackend.fileID, fileIds[index]) }
            return BackendTesting.file(
                index: index, name: spec.name, size: spec.size, chunkSize: spec.chunkSize,
                emptyFileHasOneChunk: backend.traits.emptyFileHasOneChunk, handles: handles)
        }
        return BackendTesting.job(handles: [MultipartBackend.sourceID: "src-1"], files: files, token: token)
    }

    private func answer(_ json: String, status: Int = 200) -> HTTPResponse {
        .json(status, json)
    }

    /// How a step or an exchange reads an answer (`step.outcome(for:)`, `exchange.interpret`).
    private typealias Reading<T> = (HTTPResponse) throws -> T

    private func assertRejected<T>(_ read: Reading<T>, _ response: HTTPResponse, containing text: String, line: UInt = #line) {
        XCTAssertThrowsError(try read(response), line: line) { error in
            guard case BackendError.rejected(let message, _) = error else { return XCTFail("\(error)", line: line) }
            XCTAssertTrue(message.contains(text), message, line: line)
        }
    }

    private func assertMismatch<T>(_ read: Reading<T>, _ response: HTTPResponse, line: UInt = #line) {
        XCTAssertThrowsError(try read(response), line: line) { error in
            guard case BackendError.mismatch = error else { return XCTFail("\(error)", line: line) }
        }
    }

    private func assertTransient<T>(_ read: Reading<T>, _ response: HTTPResponse, line: UInt = #line) {
        XCTAssertThrowsError(try read(response), line: line) { error in
            guard case BackendError.transient = error else { return XCTFail("\(error)", line: line) }
        }
    }

    // MARK: Traits and handles

    func testTraitsFollowTheDocument() {
        XCTAssertEqual(backend.name, "multipart")
        XCTAssertEqual(backend.traits.defaultChunkSize, 512 * 1024)
        XCTAssertEqual(backend.traits.defaultConcurrency, 4)
        XCTAssertTrue(backend.traits.emptyFileHasOneChunk)
        XCTAssertEqual(backend.traits.maximumFinishRounds, 3)
        // Fragments in any order (no ChunkOrdering), and no per-file open, reconcile or finish call.
        let erased: any UploadBackend = backend
        XCTAssertFalse(erased is any ChunkOrdering)
        XCTAssertFalse(erased is any FileOpening)
        XCTAssertFalse(erased is any FileReconciling)
        XCTAssertFalse(erased is any FileFinishing)
    }

    func testEveryJobGetsItsOwnSourceId() {
        let first = backend.makeJobHandles(for: job())[MultipartBackend.sourceID]
        let second = backend.makeJobHandles(for: job())[MultipartBackend.sourceID]
        XCTAssertEqual(first?.count, 32)
        XCTAssertTrue(first?.allSatisfy(\.isHexDigit) ?? false, first ?? "nil")
        XCTAssertNotEqual(first, second)
    }

    // MARK: preLoad.do

    func testPreloadSendsTheSourceAndFileCountAsAForm() throws {
        let job = job(fileIds: nil, token: "t0k")
        let request = try XCTUnwrap(try backend.startJob(job).request)
        XCTAssertEqual(request.method, .post)
        XCTAssertEqual(request.url, "http://127.0.0.1:9/fileSection/preLoad.do")
        XCTAssertEqual(request.headers["Content-Type"], "application/x-www-form-urlencoded")
        XCTAssertEqual(backend.requestAsSent(request, in: job).headers["Authorization"], "Bearer t0k")
        XCTAssertEqual(request.bodyText, "sourceId=src-1&fileCount=2")
    }

    func testPreloadAnswerGivesEachFileItsId() throws {
        let step = try backend.startJob(job(fileIds: nil))
        let start = try step.outcome(for: answer(#"{"code":200,"msg":"ok","data":{"fileIds":["a","b"]}}"#))
        XCTAssertEqual(start.fileHandles[0]?[MultipartBackend.fileID], "a")
        XCTAssertEqual(start.fileHandles[1]?[MultipartBackend.fileID], "b")
        XCTAssertEqual(start.fileHandles.count, 2)
    }

    func testPreloadAnswersThatCannotBeUsed() throws {
        let exchange = try backend.startJob(job(fileIds: nil)).outcome(for:)
        assertRejected(exchange, answer(#"{"code":403,"msg":"quota exceeded","data":{}}"#), containing: "code 403: quota exceeded")
        assertMismatch(exchange, answer(#"{"code":200,"msg":"ok","data":{"fileIds":["a"]}}"#))
        assertMismatch(exchange, answer(#"{"code":200,"msg":"ok","data":{"fileIds":["a","a"]}}"#))
        assertMismatch(exchange, answer(#"{"code":200,"msg":"ok","data":{"fileIds":["a,b","c"]}}"#))
        assertTransient(exchange, answer(#"{"code":200,"msg":"ok","data":{}}"#))
        assertTransient(exchange, answer(#"{"code":200,"#))
        assertTransient(exchange, answer(#"{"msg":"no code"}"#))
        assertTransient(exchange, HTTPResponse(status: 503))
        assertRejected(exchange, HTTPResponse(status: 404), containing: "HTTP 404")
    }

    // MARK: upload.do

    private func fileBlock(_ request: HTTPRequest) throws -> [String: JSONValue] {
        let header = try XCTUnwrap(request.headers["file_block"])
        let array = try XCTUnwrap(try JSONValue.parse(Array(header.utf8)).arrayValue)
        XCTAssertEqual(array.count, 1, "one object in the array")
        return try XCTUnwrap(array.first?.objectValue)
    }

    private func boundary(_ request: HTTPRequest) throws -> String {
        let type = try XCTUnwrap(request.headers["Content-Type"])
        XCTAssertTrue(type.hasPrefix("multipart/form-data; boundary="), type)
        return String(type.dropFirst("multipart/form-data; boundary=".count))
    }

    func testFragmentRequestCarriesThePartAndTheFileBlockHeader() throws {
        let job = job(token: "t0k")
        let bytes: [UInt8] = [1, 2]
        let exchange = try backend.uploadChunk(ChunkPayload(index: 2, offset: 8, bytes: bytes), of: job.files[0], in: job)
        XCTAssertEqual(exchange.request.method, .post)
        XCTAssertEqual(exchange.request.url, "http://127.0.0.1:9/fileSection/upload.do")
        XCTAssertEqual(backend.requestAsSent(exchange.request, in: job).headers["Authorization"], "Bearer t0k")

        let block = try fileBlock(exchange.request)
        XCTAssertEqual(block["sourceId"], "src-1")
        XCTAssertEqual(block["fileId"], "f0")
        XCTAssertEqual(block["fragmentIndex"], 2)
        XCTAssertEqual(block["fragmentOffset"], 8)
        XCTAssertEqual(block["fragmentSize"], 2)
        XCTAssertEqual(block["totalFileFragment"], 3)
        XCTAssertEqual(block["totalFileSize"], 10)
        XCTAssertEqual(block["fileName"], "视频 01.mp4")
        XCTAssertEqual(block["fragmentMd5"], "0cb988d042a7f28dd5fe2b55b3f5ac7a")  // md5 of 01 02
        XCTAssertEqual(block.count, 9, "exactly the contract's fields")

        let header = try XCTUnwrap(exchange.request.headers["file_block"])
        XCTAssertTrue(header.utf8.allSatisfy { (0x20..<0x7f).contains($0) }, "plain printable ASCII: \(header)")
        XCTAssertTrue(header.contains(#""fileName":"\u89c6\u9891 01.mp4""#), header)

        let boundary = try boundary(exchange.request)
        // The body names the chunk (shared, not copied) between the part header and the closing boundary.
        let body = exchange.request.body
        let chunk = try XCTUnwrap(body.chunk, "the body names the chunk")
        XCTAssertEqual([chunk.index, Int(chunk.offset), chunk.length], [2, 8, 2])
        let sent = exchange.request.bodyBytes
        XCTAssertEqual(sent.count, body.framingBefore.count + bytes.count + body.framingAfter.count)
        XCTAssertEqual(Array(sent[body.framingBefore.count..<body.framingBefore.count + bytes.count]), bytes)
        let text = exchange.request.bodyText
        XCTAssertTrue(
            text.hasPrefix(
                "--\(boundary)\r\nContent-Disposition: form-data; name=\"sectionFile\"; filename=\"f0-2.mp4\"\r\n"
                    + "Content-Type: video/mp4\r\n\r\n\u{1}\u{2}\r\n"), text)
        XCTAssertTrue(text.hasSuffix("\r\n--\(boundary)--\r\n"), text)
    }

    func testAZeroByteFileIsOneEmptyFragment() throws {
        let job = job()
        XCTAssertEqual(job.files[1].chunkCount, 1)
        let exchange = try backend.uploadChunk(ChunkPayload(index: 0, offset: 0, bytes: []), of: job.files[1], in: job)
        let block = try fileBlock(exchange.request)
        XCTAssertEqual(block["fragmentSize"], 0)
        XCTAssertEqual(block["totalFileFragment"], 1)
        XCTAssertEqual(block["totalFileSize"], 0)
        XCTAssertEqual(block["fragmentMd5"], "d41d8cd98f00b204e9800998ecf8427e")
        let text = exchange.request.bodyText
        XCTAssertTrue(
            text.contains("filename=\"f1-0\"\r\nContent-Type: application/octet-stream\r\n\r\n\r\n--"),
            "no extension: no dot, octet-stream, empty content: \(text)")
    }

    func testHostileNamesCannotBreakTheRequest() throws {
        let name = "a \"quoted\"\r\nX-Evil: 1.JPG"
        let job = job([Spec(name: name, size: 3)], fileIds: ["f\"0\r\nX: y"])
        let exchange = try backend.uploadChunk(ChunkPayload(index: 0, offset: 0, bytes: [7, 8, 9]), of: job.files[0], in: job)

        let header = try XCTUnwrap(exchange.request.headers["file_block"])
        XCTAssertFalse(header.contains("\r") || header.contains("\n"), header)
        XCTAssertTrue(header.utf8.allSatisfy { (0x20..<0x7f).contains($0) }, header)
        XCTAssertEqual(try fileBlock(exchange.request)["fileName"]?.stringValue, name, "the name survives intact")

        let text = exchange.request.bodyText
        XCTAssertFalse(text.contains("\r\nX-Evil") || text.contains("\r\nX: y"), "no injected header line: \(text)")
        XCTAssertTrue(text.contains(#"filename="f%220%0D%0AX: y-0.JPG""#), text)
        XCTAssertTrue(text.contains("Content-Type: image/jpeg\r\n"), text)
        XCTAssertEqual(MultipartForm.unescape("f%220%0D%0AX: y-0.JPG"), "f\"0\r\nX: y-0.JPG")
    }

    func testFragmentFileNames() {
        XCTAssertEqual(MultipartBackend.fragmentFileName(fileID: "abc", index: 0, fileExtension: "mp4"), "abc-0.mp4")
        XCTAssertEqual(MultipartBackend.fragmentFileName(fileID: "abc", index: 12, fileExtension: ""), "abc-12")
    }

    func testFragmentAnswers() throws {
        let job = job()
        let exchange = try backend.uploadChunk(ChunkPayload(index: 0, offset: 0, bytes: [0, 1, 2, 3]), of: job.files[0], in: job).interpret
        XCTAssertEqual(try exchange(answer(#"{"code":200,"msg":"ok","data":{}}"#)), .stored())
        XCTAssertEqual(try exchange(answer(#"{"code":200}"#)), .stored())
        assertRejected(exchange, answer(#"{"code":400,"msg":"fragmentMd5 does not match"}"#), containing: "fragmentMd5 does not match")
        assertRejected(exchange, answer(#"{"code":404,"msg":"unknown sourceId"}"#), containing: "code 404")
        assertTransient(exchange, HTTPResponse(status: 500))
        assertTransient(exchange, HTTPResponse(status: 429, headers: ["Retry-After": "1"]))
        assertTransient(exchange, answer("<html>"))
    }

    // MARK: isFinish.do

    func testMergeCheckSendsTheSourceAndItsFileIds() throws {
        let request = try XCTUnwrap(try backend.finishJob(job()).request)
        XCTAssertEqual(request.url, "http://127.0.0.1:9/fileSection/isFinish.do")
        XCTAssertEqual(request.headers["Content-Type"], "application/x-www-form-urlencoded")
        XCTAssertEqual(request.bodyText, "sourceId=src-1&fileIds=f0%2Cf1")
    }

    func testAFinishedSourceGivesEveryFileItsURL() throws {
        let exchange = try backend.finishJob(job()).outcome(for:)
        let done = answer(#"{"code":200,"msg":"ok","data":{"finishStatus":1,"fileUrls":{"f1":"http://x/b","f0":"http://x/a"}}}"#)
        XCTAssertEqual(try exchange(done), .completed(urls: [0: "http://x/a", 1: "http://x/b"]))
        assertMismatch(exchange, answer(#"{"code":200,"data":{"finishStatus":1,"fileUrls":{"f0":"http://x/a"}}}"#))
        assertTransient(exchange, answer(#"{"code":200,"data":{"finishStatus":1}}"#))
    }

    func testFailedMergesRollThoseFilesBack() throws {
        let exchange = try backend.finishJob(job()).outcome(for:)
        let failed = answer(#"{"code":200,"msg":"ok","data":{"finishStatus":0,"failFileIds":"f1"}}"#)
        XCTAssertEqual(try exchange(failed), .rollback(files: [1]))
        let both = answer(#"{"code":200,"data":{"finishStatus":0,"failFileIds":"f1, f0"}}"#)
        XCTAssertEqual(try exchange(both), .rollback(files: [0, 1]))
        let asArray = answer(#"{"code":200,"data":{"finishStatus":0,"failFileIds":["f0"]}}"#)
        XCTAssertEqual(try exchange(asArray), .rollback(files: [0]))
        assertMismatch(exchange, answer(#"{"code":200,"data":{"finishStatus":0,"failFileIds":""}}"#))
        assertMismatch(exchange, answer(#"{"code":200,"data":{"finishStatus":0,"failFileIds":"zz"}}"#))
        assertTransient(exchange, answer(#"{"code":200,"data":{}}"#))
        assertRejected(exchange, answer(#"{"code":404,"msg":"unknown sourceId"}"#), containing: "unknown sourceId")
    }

    // MARK: delete.do

    func testCancelDeletesTheSource() {
        let requests = backend.cancelRequests(for: job())
        XCTAssertEqual(requests.map(\.method), [.post])
        XCTAssertEqual(requests.map(\.url), ["http://127.0.0.1:9/fileSection/delete.do"])
        XCTAssertEqual(requests.first?.bodyText, "sourceId=src-1&fileIds=f0%2Cf1")
    }

    // MARK: Sources of at most filesPerSource files

    /// Five files, two a source: three sources, `src-1`, `src-1-1` and `src-1-2`.
    private func fiveFiles(fileIds: [String]? = nil) -> (MultipartBackend, JobContext) {
        let backend = MultipartBackend(filesPerSource: 2)
        return (backend, job((0..<5).map { Spec(name: "f\($0)", size: 3) }, fileIds: fileIds))
    }

    private func ids(_ ids: String...) -> HTTPResponse {
        answer(#"{"code":200,"msg":"ok","data":{"fileIds":["# + ids.map { "\"\($0)\"" }.joined(separator: ",") + "]}}")
    }

    func testAJobOfMoreFilesThanASourceHoldsIsPreloadedOneSourceAfterAnother() throws {
        XCTAssertEqual(MultipartBackend().filesPerSource, 1_000, "xfer serve's most files a source")
        let (backend, job) = fiveFiles()
        var server = ScriptedServer([ids("a", "b"), ids("c", "d"), ids("e")])
        let start = try XCTUnwrap(try server.take(try backend.startJob(job), of: backend, in: job))
        XCTAssertTrue(server.isExhausted)
        XCTAssertEqual(
            server.requests.map(\.bodyText),
            ["sourceId=src-1&fileCount=2", "sourceId=src-1-1&fileCount=2", "sourceId=src-1-2&fileCount=1"])
        XCTAssertEqual((0..<5).map { start.fileHandles[$0]?[MultipartBackend.fileID] }, ["a", "b", "c", "d", "e"])
        XCTAssertEqual(start.fileHandles.count, 5)

        // A job of one source is one request, as before there were sources.
        let single = try backend.startJob(self.job(fileIds: nil))
        guard case .send(let exchange) = single else { return XCTFail("a request") }
        XCTAssertNil(exchange.then)

        // A source's answer that cannot be used fails the step with that source's files named.
        var short = ScriptedServer([ids("a", "b"), ids("c")])
        XCTAssertThrowsError(try short.take(try backend.startJob(job), of: backend, in: job)) { error in
            guard case BackendError.mismatch(let message, _) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(message.contains("files 3-4 of 5"), message)
        }
    }

    func testAFragmentNamesItsFilesSource() throws {
        let (backend, job) = fiveFiles(fileIds: ["a", "b", "c", "d", "e"])
        for (index, source) in [(0, "src-1"), (1, "src-1"), (2, "src-1-1"), (4, "src-1-2")] {
            let request = try backend.uploadChunk(BackendTesting.chunk(0, of: job.files[index]), of: job.files[index], in: job).request
            XCTAssertEqual(try fileBlock(request)["sourceId"]?.stringValue, source, "file \(index)")
        }
    }

    func testEverySourceIsAskedWhetherItMergedAndTheJobCompletesWhenAllHave() throws {
        let (backend, job) = fiveFiles(fileIds: ["a", "b", "c", "d", "e"])
        func merged(_ urls: [String: String]) -> HTTPResponse {
            let pairs = urls.map { "\"\($0.key)\":\"\($0.value)\"" }.joined(separator: ",")
            return answer(#"{"code":200,"msg":"ok","data":{"finishStatus":1,"fileUrls":{"# + pairs + "}}}")
        }
        var server = ScriptedServer([merged(["a": "u/a", "b": "u/b"]), merged(["c": "u/c", "d": "u/d"]), merged(["e": "u/e"])])
        let finish = try server.take(try backend.finishJob(job), of: backend, in: job)
        XCTAssertEqual(finish, .completed(urls: [0: "u/a", 1: "u/b", 2: "u/c", 3: "u/d", 4: "u/e"]))
        XCTAssertEqual(
            server.requests.map(\.bodyText),
            ["sourceId=src-1&fileIds=a%2Cb", "sourceId=src-1-1&fileIds=c%2Cd", "sourceId=src-1-2&fileIds=e"])

        // A source that failed some files: every source is still asked, and the job rolls back
        // exactly the failed files, by their index in the job.
        let failed = answer(#"{"code":200,"msg":"ok","data":{"finishStatus":0,"failFileIds":"d"}}"#)
        var partly = ScriptedServer([merged(["a": "u/a", "b": "u/b"]), failed, merged(["e": "u/e"])])
        XCTAssertEqual(try partly.take(try backend.finishJob(job), of: backend, in: job), .rollback(files: [3]))
        XCTAssertTrue(partly.isExhausted)

        // A URL missing from one source's answer names that source's file.
        var missing = ScriptedServer([merged(["a": "u/a", "b": "u/b"]), merged(["c": "u/c"])])
        XCTAssertThrowsError(try missing.take(try backend.finishJob(job), of: backend, in: job)) { error in
            guard case BackendError.mismatch(let message, _) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(message.hasSuffix("no URL for f3"), message)
        }
    }

    func testCancelDeletesEverySource() {
        let (backend, job) = fiveFiles(fileIds: ["a", "b", "c", "d", "e"])
        XCTAssertEqual(
            backend.cancelRequests(for: job).map(\.bodyText),
            ["sourceId=src-1&fileIds=a%2Cb", "sourceId=src-1-1&fileIds=c%2Cd", "sourceId=src-1-2&fileIds=e"])
    }

    func testErrorMessagesStayOnOneLine() throws {
        let job = job([Spec(name: "a\nb.bin", size: 3)], fileIds: ["f0"])
        let exchange = try backend.uploadChunk(ChunkPayload(index: 0, offset: 0, bytes: [1, 2, 3]), of: job.files[0], in: job)
        XCTAssertThrowsError(try exchange.interpret(answer(#"{"code":400,"msg":"bad\nthing"}"#))) { error in
            XCTAssertFalse("\(error)".contains("\n"), "\(error)")
        }
    }
}
