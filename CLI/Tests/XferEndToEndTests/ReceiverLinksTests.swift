import Foundation
import XCTest
import XferTestSupport

/// The links `xfer serve` writes never come from a request's `Host` (the public URL it was given,
/// else the address it is bound to), and a download link opens nothing but the download: the
/// URLs that change an upload carry a handle the link does not show.
final class ReceiverLinksTests: XCTestCase {
    var work: TemporaryDirectory!
    static let evil = "evil.example"

    override func setUpWithError() throws {
        work = TemporaryDirectory("xfer-links")
    }

    override func tearDown() {
        work = nil
    }

    /// One of each protocol's answers that carry a link, asked with a hostile `Host`.
    private func linksAnswered(by server: ServeProcess) throws -> [String] {
        let host = "Host: \(Self.evil)"
        var links: [String] = []
        func remember(_ reply: CurlReply, _ what: String) {
            XCTAssertFalse(reply.headers.values.contains { $0.contains(Self.evil) }, "\(what): \(reply.headers)")
            XCTAssertFalse(reply.text.contains(Self.evil), "\(what): \(reply.text)")
            if let location = reply.headers["location"] { links.append(location) }
        }
        // patch: Location, then the download link of the completion.
        let body = try JSONSerialization.data(withJSONObject: ["fileName": "a.txt", "size": 0, "chunkSize": 1])
        let created = try curlRequest("POST", server.url + "/uploads", headers: [host, "Content-Type: application/json"], body: body, in: work)
        XCTAssertEqual(created.status, 201, created.text)
        remember(created, "patch create")
        let id = try XCTUnwrap((try JSONSerialization.jsonObject(with: created.body) as? [String: Any])?["uploadId"] as? String)
        let completed = try curlRequest("POST", server.url + "/uploads/\(id)/complete", headers: [host], in: work)
        XCTAssertEqual(completed.status, 200, completed.text)
        remember(completed, "patch complete")
        links.append(try XCTUnwrap((try JSONSerialization.jsonObject(with: completed.body) as? [String: Any])?["url"] as? String))
        // tus and the IETF draft: Location.
        let tus = try curlRequest("POST", server.url + "/files/", headers: [host, "Tus-Resumable: 1.0.0", "Upload-Length: 5"], in: work)
        XCTAssertEqual(tus.status, 201, tus.text)
        remember(tus, "tus create")
        let ietf = try curlRequest(
            "POST", server.url + "/resumable/b.txt", headers: [host, "Upload-Draft-Interop-Version: 8", "Upload-Complete: ?0", "Upload-Length: 5"],
            body: Data("ab".utf8), in: work)
        XCTAssertEqual(ietf.status, 201, ietf.text)
        XCTAssertTrue(ietf.statusLines.contains { $0.contains(" 104") }, "\(ietf.statusLines)")
        remember(ietf, "ietf create (with its 104)")
        return links
    }

    func testLinksNameThePublicURLNeverTheRequestsHost() throws {
        let publicURL = "https://uploads.example.com/xfer"
        let server = try ServeProcess(root: work.file("server"), extraArguments: ["--public-url", publicURL])
        let links = try linksAnswered(by: server)
        XCTAssertEqual(links.count, 4, "\(links)")
        for link in links { XCTAssertTrue(link.hasPrefix(publicURL + "/"), link) }
    }

    func testWithoutAPublicURLLinksNameTheBoundAddress() throws {
        let server = try ServeProcess(root: work.file("server"))
        for link in try linksAnswered(by: server) { XCTAssertTrue(link.hasPrefix(server.url + "/"), link) }
        let bad = try runXfer(["serve", "--root", work.file("other"), "--public-url", "ftp://x"])
        XCTAssertEqual(bad.status, 2, bad.stderr)
        XCTAssertTrue(bad.stderr.contains("--public-url"), bad.stderr)
    }

    /// The id in a download link opens no upload: not to change it, nor to delete it, in any
    /// protocol whose upload URL is its only credential. The upload's own URL does both.
    func testADownloadLinkCannotChangeOrDeleteItsUpload() throws {
        let server = try ServeProcess(root: work.file("server"))
        // patch: a file of two chunks, one sent; the link of a completed one shows the id.
        let body = try JSONSerialization.data(withJSONObject: ["fileName": "p.bin", "size": 2, "chunkSize": 1])
        let created = try JSONSerialization.jsonObject(
            with: try curlRequest("POST", server.url + "/uploads", headers: ["Content-Type: application/json"], body: body, in: work).body) as? [String: Any]
        let handle = try XCTUnwrap(created?["uploadId"] as? String)
        let id = String(handle.prefix(32))
        XCTAssertEqual(handle.count, 64)
        let chunk = ["Content-Type: application/octet-stream", "Content-Range: bytes 0-0/2"]
        XCTAssertEqual(try curlRequest("PATCH", server.url + "/uploads/\(id)/chunks/1", headers: chunk, body: Data("x".utf8), in: work).status, 404)
        XCTAssertEqual(try curlRequest("GET", server.url + "/uploads/\(id)", in: work).status, 404)
        XCTAssertEqual(try curlRequest("POST", server.url + "/uploads/\(id)/complete", in: work).status, 404)
        XCTAssertEqual(try curlRequest("DELETE", server.url + "/uploads/\(id)", in: work).status, 404)
        let forged = id + String(repeating: "0", count: 32)
        XCTAssertEqual(try curlRequest("DELETE", server.url + "/uploads/\(forged)", in: work).status, 404)
        XCTAssertEqual(try curlRequest("PATCH", server.url + "/uploads/\(handle)/chunks/1", headers: chunk, body: Data("x".utf8), in: work).status, 204)

        // tus: the download link of a finished upload is /downloads/<id>/...; its id changes nothing.
        let tus = try curlRequest(
            "POST", server.url + "/files/", headers: ["Tus-Resumable: 1.0.0", "Upload-Length: 3", "Content-Type: application/offset+octet-stream"],
            body: Data("abc".utf8), in: work)
        let location = try XCTUnwrap(tus.headers["location"])
        let tusHandle = String(location.split(separator: "/").last ?? "")
        let tusID = String(tusHandle.prefix(32))
        let bare = server.url + "/files/" + tusID
        XCTAssertEqual(try curlRequest("HEAD", bare, headers: ["Tus-Resumable: 1.0.0"], in: work).status, 404)
        XCTAssertEqual(try curlRequest("DELETE", bare, headers: ["Tus-Resumable: 1.0.0"], in: work).status, 404)
        XCTAssertEqual(try curlRequest("GET", server.url + "/downloads/\(tusID)/file", in: work).text, "abc")
        XCTAssertEqual(try curlRequest("DELETE", location, headers: ["Tus-Resumable: 1.0.0"], in: work).status, 204)

        // The IETF draft: the same.
        let ietf = try curlRequest(
            "POST", server.url + "/resumable/c.txt", headers: ["Upload-Draft-Interop-Version: 8", "Upload-Complete: ?0", "Upload-Length: 4"],
            body: Data("ab".utf8), in: work)
        let ietfLocation = try XCTUnwrap(ietf.headers["location"])
        let ietfID = String((ietfLocation.split(separator: "/").last ?? "").prefix(32))
        let ietfBare = ietfLocation.replacingOccurrences(of: String(ietfLocation.split(separator: "/").last ?? ""), with: ietfID)
        let append = ["Upload-Draft-Interop-Version: 8", "Upload-Offset: 2", "Upload-Complete: ?1", "Content-Type: application/partial-upload"]
        XCTAssertEqual(try curlRequest("PATCH", ietfBare, headers: append, body: Data("cd".utf8), in: work).status, 404)
        XCTAssertEqual(try curlRequest("DELETE", ietfBare, headers: ["Upload-Draft-Interop-Version: 8"], in: work).status, 404)
        XCTAssertEqual(try curlRequest("PATCH", ietfLocation, headers: append, body: Data("cd".utf8), in: work).status, 201)
    }
}
