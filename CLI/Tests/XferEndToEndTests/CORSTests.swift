import Foundation
import XCTest
import XferTestSupport

/// Browsers on another origin (`xfer serve --cors-origin`): the requests a browser sends for
/// tus-js-client and for the IETF draft — a preflight, then the request with `Origin` — and the
/// answers that let the page go on: its origin allowed, the protocol's headers exposed. By curl,
/// header for header as Chromium sends them (the browser itself is issue 34's upload-page test).
final class CORSTests: XCTestCase {
    var work: TemporaryDirectory!

    override func setUp() { work = TemporaryDirectory("xfer-cors") }
    override func tearDown() { work = nil }

    private let page = "https://app.example.com"

    func testPreflightsAndAnswersLetAnAllowedPageUploadAndReadWhereItsUploadIs() throws {
        let server = try ServeProcess(
            root: work.file("server"), extraArguments: ["--cors-origin", page, "--auth-token", "t0k"])
        // tus-js-client's creation: a preflight for POST with its headers, no token (browsers send none).
        let preflight = try curlRequest(
            "OPTIONS", server.url + "/files/",
            headers: ["Origin: \(page)", "Access-Control-Request-Method: POST",
                      "Access-Control-Request-Headers: authorization,tus-resumable,upload-length,upload-metadata"], in: work)
        XCTAssertEqual(preflight.status, 204)
        XCTAssertEqual(preflight.headers["access-control-allow-origin"], page)
        for method in ["POST", "PATCH", "HEAD", "DELETE"] {
            XCTAssertTrue(preflight.headers["access-control-allow-methods"]?.contains(method) == true, method)
        }
        let allowedHeaders = preflight.headers["access-control-allow-headers"]?.lowercased() ?? ""
        for header in ["authorization", "tus-resumable", "upload-length", "upload-metadata", "upload-offset", "upload-complete", "content-type"] {
            XCTAssertTrue(allowedHeaders.contains(header), header)
        }
        XCTAssertNil(preflight.headers["access-control-allow-credentials"], "no cookies, so never credentials")

        // The creation itself: the page must read Location and, for the IETF draft, Upload-Offset.
        let created = try curlRequest(
            "POST", server.url + "/files/",
            headers: ["Origin: \(page)", "Authorization: Bearer t0k", "Tus-Resumable: 1.0.0", "Upload-Length: 5"], in: work)
        XCTAssertEqual(created.status, 201)
        XCTAssertEqual(created.headers["access-control-allow-origin"], page)
        let exposed = created.headers["access-control-expose-headers"]?.lowercased() ?? ""
        for header in ["location", "upload-offset", "tus-resumable", "upload-complete", "upload-draft-interop-version"] {
            XCTAssertTrue(exposed.contains(header), header)
        }
        let location = try XCTUnwrap(created.headers["location"])
        let patched = try curlRequest(
            "PATCH", location,
            headers: ["Origin: \(page)", "Authorization: Bearer t0k", "Tus-Resumable: 1.0.0", "Upload-Offset: 0",
                      "Content-Type: application/offset+octet-stream"], body: Data("hello".utf8), in: work)
        XCTAssertEqual(patched.status, 204)
        XCTAssertEqual(patched.headers["upload-offset"], "5")
        XCTAssertEqual(patched.headers["access-control-allow-origin"], page)

        // A refusal is readable too: the page can tell a missing token from a network error.
        let refused = try curlRequest("POST", server.url + "/resumable/", headers: ["Origin: \(page)", "Upload-Complete: ?1"], in: work)
        XCTAssertEqual(refused.status, 401)
        XCTAssertEqual(refused.headers["access-control-allow-origin"], page)

        // Another origin gets no permission, in a preflight or an answer.
        let stranger = try curlRequest(
            "OPTIONS", server.url + "/resumable/",
            headers: ["Origin: https://evil.example", "Access-Control-Request-Method: POST"], in: work)
        XCTAssertNil(stranger.headers["access-control-allow-origin"])
        XCTAssertNil(try curlRequest("GET", server.url + "/health", headers: ["Origin: https://evil.example"], in: work)
            .headers["access-control-allow-origin"])
    }

    func testAnyOriginAndOriginsThatAreNotOriginsAreRefused() throws {
        let server = try ServeProcess(root: work.file("server"), extraArguments: ["--cors-origin", "*"])
        let preflight = try curlRequest(
            "OPTIONS", server.url + "/resumable/",
            headers: ["Origin: https://anywhere.example", "Access-Control-Request-Method: POST"], in: work)
        XCTAssertEqual(preflight.headers["access-control-allow-origin"], "*")
        // No --cors-origin: no CORS answer at all (tus discovery stays what it was).
        let plain = try ServeProcess(root: work.file("plain"))
        let discovery = try curlRequest("OPTIONS", plain.url + "/files/", headers: ["Origin: \(page)"], in: work)
        XCTAssertEqual(discovery.status, 204)
        XCTAssertNil(discovery.headers["access-control-allow-origin"])
        for bad in ["app.example.com", "https://app.example.com/upload", "ftp://app.example.com"] {
            let result = try runXfer(["serve", "--root", work.file("x"), "--cors-origin", bad])
            XCTAssertEqual(result.status, 2, bad)
            XCTAssertTrue(result.stderr.contains("--cors-origin expects an origin"), result.stderr)
        }
    }
}
