import CWBackend
import XCTest
import Xfer
import XferBackendTesting

/// The CW backend's steps with no network: the requests it describes, its
/// readings of the answers, and a conversation cut by a crash and resumed,
/// played against scripted answers as the engine would play it.
final class CWBackendTests: XCTestCase {
    let backend = CWBackend(bizID: "app1")
    let md5 = "9e107d9d372bb6826bd81d3542a419d6"

    /// `openFile` registers the file; the parameters of its answer become
    /// handles that every chunk echoes, with its 1-based number.
    func testRegistersTheFileThenSendsEachChunkWithTheServersParameters() throws {
        let file = BackendTesting.file(for: backend, name: "clip.mp4", size: 10, chunkSize: 4, digests: [.md5: md5])
        let job = BackendTesting.job(files: [file], token: "t0k")
        XCTAssertEqual(file.chunkCount, 3)

        let open = try backend.openFile(file, in: job)
        let request = try XCTUnwrap(open.request)
        XCTAssertEqual(request.url, "http://127.0.0.1:9/upload/checkFileChunk")
        XCTAssertTrue(request.bodyText.contains("saveName=\(md5)"), request.bodyText)
        // The engine adds the token: the backend's traits say `.authorizationHeader`.
        XCTAssertEqual(backend.requestAsSent(request, in: job).headers["Authorization"], "Bearer t0k")
        let opened = try open.outcome(for: .json(200, #"{"code":"200","data":{"uploadId":"u1","upToken":"s3cr3t"}}"#))
        XCTAssertEqual(opened.handles.values["param.uploadId"], "u1")

        // The engine commits those handles, then hands them back in the file's view.
        let registered = BackendTesting.file(for: backend, name: "clip.mp4", size: 10, chunkSize: 4, handles: opened.handles)
        let send = try backend.uploadChunk(BackendTesting.chunk(2, of: registered), of: registered, in: job)
        XCTAssertTrue(send.request.bodyText.contains("name=\"chunk\"\r\n\r\n3\r\n"), "1-based")
        XCTAssertTrue(send.request.bodyText.contains("name=\"uploadId\"\r\n\r\nu1\r\n"), "echoed")
        XCTAssertTrue(send.request.bodyText.contains("\r\n\r\naa\r\n"), "the last chunk's 2 bytes, in the part `file`")
        let last = try send.outcome(for: .json(200, #"{"code":"200","data":{"url":"https://cdn.example.com/clip.mp4"}}"#))
        guard case .stored(let stored) = last else { return XCTFail("\(last)") }
        XCTAssertEqual(stored.fileURL, "https://cdn.example.com/clip.mp4")

        // A server that forgot the upload: the engine registers the file afresh.
        XCTAssertThrowsError(try send.outcome(for: HTTPResponse(status: 404))) { error in
            guard case BackendError.uploadUnknown = error else { return XCTFail("\(error)") }
        }
        // A refusal in the body fails the job with the server's words.
        XCTAssertThrowsError(try open.outcome(for: .json(200, #"{"code":"500","desc":"bizId unknown"}"#))) { error in
            guard case BackendError.rejected(let message, _) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(message.hasSuffix("bizId unknown"), message)
        }
    }

    /// A run killed after its first chunk: the handles and that chunk were
    /// committed, so the next run registers nothing and sends the rest,
    /// echoing the parameters of the first run.
    func testAResumedUploadSendsTheRestWithTheParametersOfTheFirstRun() throws {
        let file = BackendTesting.file(for: backend, size: 8, chunkSize: 4, digests: [.md5: md5])
        let job = BackendTesting.job(files: [file])
        var first = ScriptedServer([
            .json(200, #"{"code":"200","data":{"uploadId":"u1"}}"#),
            .json(200, #"{"code":"200","data":{}}"#),
        ])
        let opened = try XCTUnwrap(try first.take(backend.openFile(file, in: job), of: backend, in: job))
        let registered = BackendTesting.file(for: backend, size: 8, chunkSize: 4, handles: opened.handles)
        XCTAssertEqual(
            try first.take(backend.uploadChunk(BackendTesting.chunk(0, of: registered), of: registered, in: job), of: backend, in: job),
            .stored())
        XCTAssertTrue(first.isExhausted)
        // kill -9 here. The next run's view of the file holds the committed handles.
        var second = ScriptedServer([.json(200, #"{"code":"200","data":{"url":"https://cdn.example.com/a.bin"}}"#)])
        let resumed = BackendTesting.file(for: backend, size: 8, chunkSize: 4, handles: opened.handles)
        let outcome = try second.take(
            backend.uploadChunk(BackendTesting.chunk(1, of: resumed), of: resumed, in: job), of: backend, in: job)
        XCTAssertEqual(outcome, .stored(fileURL: "https://cdn.example.com/a.bin"))
        XCTAssertEqual(second.requests.map(\.url), ["http://127.0.0.1:9/upload/file"], "no second registration")
        XCTAssertTrue(second.requests[0].bodyText.contains("name=\"uploadId\"\r\n\r\nu1\r\n"))
        XCTAssertEqual(second.requests[0].headers["api_version"], "v1")
    }

    /// The protocol counts chunks from 1 and needs at least one.
    func testAnEmptyFileIsOneEmptyChunk() throws {
        let empty = BackendTesting.file(for: backend, size: 0)
        XCTAssertEqual(empty.chunkCount, 1)
        XCTAssertEqual(BackendTesting.chunk(0, of: empty).count, 0)
    }
}
