import Foundation
import XCTest
import Xfer
import XferBackendTesting

/// The built-in `http` download source, through Xfer's public API and
/// XferBackendTesting only: what it asks and how it reads the answers.
final class HTTPSourceTests: XCTestCase {
    let source = HTTPSource()
    let job = BackendTesting.pullJob(token: "t0k")

    func testADescriptionIsAHeadReadForSizeValidatorDigestsAndRanges() throws {
        let exchange = try source.describeObject(at: "https://files.example.com/a.bin", in: job)
        XCTAssertEqual(exchange.request.method, .head)
        XCTAssertEqual(exchange.request.headers["Accept-Encoding"], "identity", "a compressed body is not the object's bytes")
        XCTAssertEqual(source.requestAsSent(exchange.request, in: job).headers["Authorization"], "Bearer t0k")

        let crc = Data([0xDE, 0xAD, 0xBE, 0xEF]).base64EncodedString()
        let object = try exchange.interpret(
            HTTPResponse(status: 200, headers: [
                "Content-Length": "1000", "ETag": "\"v1\"", "Accept-Ranges": "bytes", "Repr-Digest": "crc32c=:\(crc):",
            ]))
        XCTAssertEqual(object.size, 1000)
        XCTAssertEqual(object.validator, .etag("\"v1\""))
        XCTAssertEqual(object.digests, [.crc32c(0xDEAD_BEEF)])
        XCTAssertTrue(object.acceptsRanges)

        let weak = try exchange.interpret(
            HTTPResponse(status: 200, headers: ["Content-Length": "5", "ETag": "W/\"w\"", "Last-Modified": "Tue, 01 Dec 2026 00:00:00 GMT"]))
        XCTAssertEqual(weak.validator, .lastModified("Tue, 01 Dec 2026 00:00:00 GMT"), "a weak tag cannot make a range conditional")
        XCTAssertFalse(weak.acceptsRanges)

        XCTAssertThrowsError(try exchange.interpret(HTTPResponse(status: 404))) { error in
            guard case BackendError.rejected(let message, _)? = error as? BackendError else { return XCTFail("\(error)") }
            XCTAssertTrue(message.contains("no such file"), message)
        }
        XCTAssertThrowsError(try exchange.interpret(HTTPResponse(status: 503))) { error in
            guard case BackendError.transient? = error as? BackendError else { return XCTFail("\(error)") }
        }
        XCTAssertThrowsError(try exchange.interpret(HTTPResponse(status: 200)), "no size, no plan")
    }

    func testRangesAreConditionalOnTheValidator() {
        let object = RemoteObject(location: "https://files.example.com/a.bin", size: 100, validator: .etag("\"v1\""))
        let request = source.rangeRequest(10...19, of: object, in: job)
        XCTAssertEqual(request.method, .get)
        XCTAssertEqual(request.headers["Range"], "bytes=10-19")
        XCTAssertEqual(request.headers["If-Match"], "\"v1\"")
        XCTAssertEqual(request.headers["If-Range"], "\"v1\"")

        let whole = source.wholeObjectRequest(object, in: job)
        XCTAssertNil(whole.headers["Range"])
        XCTAssertNil(whole.headers["If-Range"])
        XCTAssertEqual(whole.headers["If-Match"], "\"v1\"")

        let dated = RemoteObject(location: object.location, size: 100, validator: .lastModified("Tue, 01 Dec 2026 00:00:00 GMT"))
        XCTAssertEqual(source.rangeRequest(0...9, of: dated, in: job).headers["If-Range"], "Tue, 01 Dec 2026 00:00:00 GMT")
        XCTAssertNil(source.rangeRequest(0...9, of: dated, in: job).headers["If-Match"])
    }

    func testLocationsMustBeHTTPURLsAndNameTheirFile() {
        XCTAssertThrowsError(try source.normalizedLocation("ftp://example.com/a"))
        XCTAssertEqual(source.fileName(of: "https://h/dir/a%20b.txt?x=1"), "a b.txt")
    }
}
