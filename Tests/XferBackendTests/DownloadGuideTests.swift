import Foundation
import XCTest
import Xfer
import XferBackendTesting

/// Docs/backend-guide.md's download source (section 8) is the code built here, and it works.
final class DownloadGuideTests: XCTestCase {
    func testTheGuideShowsTheSourceWordForWord() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let guide = try String(contentsOf: root.appendingPathComponent("Docs/backend-guide.md"), encoding: .utf8)
        let code = try String(contentsOf: root.appendingPathComponent("Tests/XferBackendTests/MirrorSource.swift"), encoding: .utf8)
        let body = try XCTUnwrap(code.range(of: "struct MirrorSource")).lowerBound
        XCTAssertTrue(guide.contains(String(code[body...])), "the guide's MirrorSource differs from Tests/XferBackendTests/MirrorSource.swift")
    }

    func testTheGuidesSourceAsksConditionalRanges() throws {
        let source = MirrorSource()
        let job = BackendTesting.pullJob()
        let object = try source.describeObject(at: "https://m/disk.img", in: job)
            .interpret(HTTPResponse(status: 200, headers: ["Content-Length": "10", "ETag": "\"e\""]))
        XCTAssertEqual(object.size, 10)
        let request = source.rangeRequest(0...4, of: object, in: job)
        XCTAssertEqual(request.headers["Range"], "bytes=0-4")
        XCTAssertEqual(request.headers["If-Match"], "\"e\"")
    }
}
