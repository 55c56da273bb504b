import Foundation
import XCTest
import Xfer
import XferBackendTesting
@testable import XferIETF

/// The IETF resumable uploads backend is sans-IO: these tests check the
/// requests it builds and how it reads answers of servers speaking interop
/// versions 3, 6 and 8, with no network. (End to end against `xfer serve`
/// and Apple's server: IETFPushTests.)
final class IETFBackendTests: XCTestCase {
    let backend = IETFBackend()
    let target = "http://127.0.0.1:9/resumable/"

    private func file(size: Int64 = 10, handles: ServerHandles = ServerHandles(), relativePath: String = "d/ä b.bin") -> FileContext {
        BackendTesting.file(name: "ä b.bin", relativePath: relativePath, size: size, chunkSize: 4, emptyFileHasOneChunk: true, handles: handles)
    }

    private func job(_ files: [FileContext], handles: ServerHandles = [IETFBackend.versionKey: "8"], target: String? = nil) -> JobContext {
        BackendTesting.job(target: target ?? self.target, handles: handles, files: files)
    }

    private func assertError<T>(_ expression: @autoclosure () throws -> T, contains text: String, line: UInt = #line) {
        XCTAssertThrowsError(try expression(), line: line) { error in
            XCTAssertTrue("\(error)".contains(text), "\(error)", line: line)
        }
    }

    func testDiscoveryChoosesTheInteropVersionAndReadsLimitsAndDigests() throws {
        let start = backend.startJob(job([file()], handles: ServerHandles()))
        XCTAssertEqual(start.request?.method, .options)
        XCTAssertEqual(start.request?.headers["Upload-Draft-Interop-Version"], "8", "asks with the newest")
        let accepted = try start.outcome(for: HTTPResponse(
            status: 204, headers: ["Upload-Limit": "max-size=1000, min-size=0", "Want-Content-Digest": "sha-256=3, crc32c=9"])).handles
        XCTAssertEqual(accepted[IETFBackend.versionKey], "8")
        XCTAssertEqual(accepted[IETFBackend.digestKey], "crc32c")
        XCTAssertEqual(accepted[IETFBackend.maximumSizeKey], "1000")
        // Apple's server refuses a version it does not speak and names its own.
        let apple = try start.outcome(for: HTTPResponse(status: 400, headers: ["Upload-Draft-Interop-Version": "6"])).handles
        XCTAssertEqual(apple[IETFBackend.versionKey], "6")
        XCTAssertNil(apple[IETFBackend.digestKey])
        // A server without OPTIONS: the version deployed servers speak.
        XCTAssertEqual(try start.outcome(for: HTTPResponse(status: 405)).handles[IETFBackend.versionKey], "6")
        XCTAssertThrowsError(try start.outcome(for: HTTPResponse(status: 503)))

        let told = IETFBackend(interopVersion: .v8).startJob(job([file()], handles: ServerHandles()))
        assertError(try told.outcome(for: HTTPResponse(status: 400, headers: ["Upload-Draft-Interop-Version": "6"])), contains: "version 6")
        assertError(try start.outcome(for: HTTPResponse(status: 200, headers: ["Upload-Limit": "max-size=5"])), contains: "max-size")
        assertError(try start.outcome(for: HTTPResponse(status: 200, headers: ["Upload-Limit": "max-append-size=3"])), contains: "smaller chunks")
    }

    func testWhereFilesAreCreated() {
        let tree = file()
        XCTAssertEqual(IETFBackend.creationURL(of: tree, in: job([tree])), target + "d/%C3%A4%20b.bin")
        let query = job([tree], target: "https://h/up?key=v")
        XCTAssertEqual(IETFBackend.creationURL(of: tree, in: query), "https://h/up/d/%C3%A4%20b.bin?key=v")
        // As `curl -T`: one file named, a target without a trailing slash names it.
        let one = file(relativePath: "ä b.bin")
        let named = BackendTesting.job(target: "https://h/photos/x.bin", files: [one], namedFile: "ä b.bin")
        let handles = backend.makeJobHandles(for: named)
        XCTAssertEqual(IETFBackend.creationURL(of: one, in: job([one], handles: handles, target: "https://h/photos/x.bin")), "https://h/photos/x.bin")
        XCTAssertTrue(backend.makeJobHandles(for: BackendTesting.job(target: target, files: [one], namedFile: "ä b.bin")).isEmpty)
    }

    /// A plain path is taken as it is; anything else is encoded a segment at a time, as before.
    func testCreationPathsAreEncodedASegmentAtATime() {
        XCTAssertEqual(IETFBackend.encodedPath("d00/f-0001.bin_~"), "d00/f-0001.bin_~")
        XCTAssertEqual(IETFBackend.encodedPath("a b/c%d?#.bin"), "a%20b/c%25d%3F%23.bin")
        XCTAssertEqual(IETFBackend.encodedPath("a//b"), "a/b")
        XCTAssertEqual(IETFBackend.encodedPath("/a/"), "a")
        XCTAssertEqual(IETFBackend.encodedPath("x.bin"), "x.bin")
    }

    func testAFileOfOneChunkGoesInOneRequestOthersAreCreatedEmptyThenAppended() throws {
        let small = file(size: 3)
        XCTAssertTrue(backend.openFile(small, in: job([small])).isSkipped)
        let whole = try backend.uploadChunk(BackendTesting.chunk(0, of: small), of: small, in: job([small]))
        XCTAssertEqual(whole.request.method, .post)
        XCTAssertEqual(whole.request.headers["Upload-Complete"], "?1")
        XCTAssertEqual(whole.request.headers["Upload-Length"], "3")
        XCTAssertEqual(whole.request.bodyText, "aaa")
        XCTAssertEqual(
            try whole.interpret(HTTPResponse(status: 201, headers: ["Location": "/resumable-uploads/1", "Upload-Complete": "?1"])),
            .stored(fileURL: "http://127.0.0.1:9/resumable-uploads/1"))

        let large = file(size: 10)
        let open = backend.openFile(large, in: job([large]))
        XCTAssertEqual(open.request?.headers["Upload-Complete"], "?0")
        XCTAssertEqual(open.request?.headers["Upload-Length"], "10")
        XCTAssertEqual(open.request?.body.count, 0)
        let opened = try open.outcome(for: HTTPResponse(status: 201, headers: ["Location": "/resumable-uploads/7"]))
        let url = "http://127.0.0.1:9/resumable-uploads/7"
        XCTAssertEqual(opened.handles[IETFBackend.uploadURL], url)
        assertError(try open.outcome(for: HTTPResponse(status: 201)), contains: "no Location")

        let created = file(size: 10, handles: opened.handles)
        let digested = job([created], handles: [IETFBackend.versionKey: "6", IETFBackend.digestKey: "crc32c"])
        let first = try backend.uploadChunk(BackendTesting.chunk(0, of: created), of: created, in: digested)
        XCTAssertEqual(first.request.method, .patch)
        XCTAssertEqual(first.request.url, url)
        XCTAssertEqual(first.request.headers["Upload-Offset"], "0")
        XCTAssertEqual(first.request.headers["Upload-Complete"], "?0")
        XCTAssertEqual(first.request.headers["Content-Type"], "application/partial-upload")
        XCTAssertEqual(first.request.headers["Upload-Draft-Interop-Version"], "6")
        XCTAssertEqual(first.request.headers["Content-Digest"]?.hasPrefix("crc32c=:"), true)
        XCTAssertEqual(try first.interpret(HTTPResponse(status: 204, headers: ["Upload-Offset": "4"])), .stored())
        XCTAssertEqual(try first.interpret(HTTPResponse(status: 201)), .stored(), "later drafts may leave the offset out")
        XCTAssertThrowsError(try first.interpret(HTTPResponse(status: 204, headers: ["Upload-Offset": "2"]))) { error in
            guard case BackendError.outOfSync = error else { return XCTFail("\(error)") }
        }
        // Bytes damaged on the way (the digest caught it): sent again, not given up.
        let damaged = HTTPResponse(
            status: 400, headers: ["Content-Type": "application/problem+json"],
            body: Array(#"{"type":"about:blank","title":"the body does not match its Content-Digest"}"#.utf8))
        XCTAssertThrowsError(try first.interpret(damaged)) { error in
            guard case BackendError.transient = error else { return XCTFail("\(error)") }
        }
        // Mid-chunk: from where the server's copy ends; the last request completes the upload.
        let last = try backend.uploadChunk(BackendTesting.chunk(2, of: created, offset: 9), of: created, in: digested)
        XCTAssertEqual(last.request.headers["Upload-Offset"], "9")
        XCTAssertEqual(last.request.headers["Upload-Complete"], "?1")
        XCTAssertEqual(try last.interpret(HTTPResponse(status: 201)), .stored(fileURL: url))
        XCTAssertEqual(backend.cancelRequests(for: job([created])).map(\.method), [.delete])
        XCTAssertTrue(backend.cancelRequests(for: job([small])).isEmpty)
    }

    func testResumeReadsTheOffsetAndCompletenessOfEveryVersion() throws {
        let url = "http://127.0.0.1:9/resumable-uploads/7"
        let created = file(size: 10, handles: [IETFBackend.uploadURL: url])
        let reconcile = backend.reconcileFile(created, in: job([created]))
        XCTAssertEqual(reconcile.request?.method, .head)
        XCTAssertNil(reconcile.request?.headers["Upload-Offset"], "no Upload-* fields on HEAD: interop 6 servers refuse them")
        XCTAssertEqual(try reconcile.outcome(for: HTTPResponse(status: 204, headers: ["Upload-Offset": "5", "Upload-Complete": "?0"])), .serverHasPrefix(bytes: 5))
        XCTAssertEqual(try reconcile.outcome(for: HTTPResponse(status: 200, headers: ["Upload-Offset": "10", "Upload-Complete": "?1"])), .complete(url: url))
        XCTAssertEqual(try reconcile.outcome(for: HTTPResponse(status: 204, headers: ["Upload-Offset": "10", "Upload-Incomplete": "?0"])), .complete(url: url))
        XCTAssertThrowsError(try reconcile.outcome(for: HTTPResponse(status: 404))) { error in
            guard case BackendError.uploadUnknown = error else { return XCTFail("\(error)") }
        }
        XCTAssertThrowsError(try reconcile.outcome(for: HTTPResponse(status: 204, headers: ["Upload-Offset": "3", "Upload-Length": "11"])))
        XCTAssertTrue(backend.reconcileFile(file(size: 3), in: job([file(size: 3)])).isSkipped, "a one-request file has no upload to ask")

        // Every byte there but never completed: an empty append completes it; a 409 names what is missing.
        let finish = backend.finishFile(created, in: job([created]))
        XCTAssertEqual(finish.request?.headers["Upload-Offset"], "10")
        XCTAssertEqual(finish.request?.headers["Upload-Complete"], "?1")
        XCTAssertEqual(try finish.outcome(for: HTTPResponse(status: 201)), .completed(url: url))
        XCTAssertEqual(try finish.outcome(for: HTTPResponse(status: 409, headers: ["Upload-Offset": "6"])), .missing([1, 2]))
        XCTAssertEqual(
            try finish.outcome(for: HTTPResponse(status: 400, headers: ["Content-Type": "application/problem+json"],
                                                 body: Array(#"{"type":"https://iana.org/assignments/http-problem-types#completed-upload"}"#.utf8))),
            .completed(url: url))
    }
}
