import Foundation
import XCTest
import XferTestSupport

/// `xfer serve`'s upload page (`GET /`) in a real browser: Debian's Chromium, headless, driven
/// over the DevTools protocol by Tests/Tools/upload_page_browser.py. A person's 64 MiB file
/// loses its connection at a fifth (the page retries by itself) and the page is reloaded half
/// way (the person picks the file again); the served copy must be byte-identical and the
/// receiver must have been sent each byte once. Skipped, with the driver's one-line reason,
/// only where Chromium cannot start (`make test` installs it).
final class UploadPageTests: XCTestCase {
    var work: TemporaryDirectory!

    override func setUp() { work = TemporaryDirectory("xfer-upload-page") }
    override func tearDown() { work = nil }

    private static let size = 64 << 20
    /// The page's piece size (upload.js, CHUNK): at most what an interruption may cost.
    private static let pageChunk = 8 << 20

    func testA64MiBFileSurvivesALostConnectionAndAReloadOverIETF() throws {
        try upload(protocolName: "ietf", token: nil)
    }

    /// With `--auth-token`: the page itself is open (it holds only code), and sends the token
    /// typed into it with every request of the upload.
    func testA64MiBFileSurvivesALostConnectionAndAReloadOverTusWithAToken() throws {
        try upload(protocolName: "tus", token: "page-token-7f3a")
    }

    private func upload(protocolName: String, token: String?) throws {
        let server = try ServeProcess(root: work.file("server"), extraArguments: token.map { ["--auth-token", $0] } ?? [])
        defer { server.stop() }
        let file = work.file("holiday-\(protocolName).mov")
        try makeTestFile(at: file, size: Self.size, seed: 34)
        // Screenshots outlive the test, beside the build: their paths are printed below.
        let shots = packageRoot + "/.build/test-artifacts/upload-page-\(protocolName)"
        try FileManager.default.createDirectory(atPath: shots, withIntermediateDirectories: true)

        let driver = try runToEnd(
            try TLSFront.python(),
            [packageRoot + "/Tests/Tools/upload_page_browser.py", "--url", server.url + "/", "--file", file,
             "--protocol", protocolName, "--screenshots", shots, "--timeout", "180"] + (token.map { ["--token", $0] } ?? []))
        let line = try XCTUnwrap(driver.stdout.last, "the browser driver printed nothing: \(driver.stderr)")
        let result = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], line)
        if let reason = result["skip"] as? String { throw XCTSkip(reason) }
        guard result["ok"] as? Bool == true else { return XCTFail("the page did not finish the upload: \(line)") }
        for shot in result["screenshots"] as? [String] ?? [] { print("upload page screenshot (\(protocolName)): \(shot)") }
        print("upload page (\(protocolName)) in \(result["browser"] ?? "?"): \(result["status"] ?? "?")")

        // The connection loss: the page said it would try again, and did, by itself.
        XCTAssertTrue((result["retryStatus"] as? String ?? "").contains("trying again"), line)
        // The reload: listed as unfinished, then continued from the server's offset, which is at
        // least what the page had seen acknowledged (a cut body's bytes are kept on disk).
        XCTAssertEqual(result["listedAfterReload"] as? Bool, true, line)
        let acknowledged = int(result["offsetAtReload"])
        let resumedFrom = int(result["resumedFrom"])
        XCTAssertGreaterThan(acknowledged, 0, line)
        XCTAssertGreaterThanOrEqual(resumedFrom, acknowledged, line)
        XCTAssertLessThan(resumedFrom, Self.size, line)
        XCTAssertEqual(int(result["unfinishedLeft"]), 0, "a finished upload is forgotten by the page: \(line)")

        // What the receiver serves is the file, and it was sent once: each interruption cost at
        // most the piece in flight.
        let url = try XCTUnwrap(result["url"] as? String, line)
        let served = work.file("served")
        var curl = ["-fsS", "-o", served, url]
        if let token { curl += ["-H", "Authorization: Bearer \(token)"] }
        XCTAssertEqual(try runToEnd("/usr/bin/curl", curl).status, 0)
        XCTAssertEqual(try sha256sum(served), try sha256sum(file))
        var statsCurl = ["-fsS", server.url + "/stats"]
        if let token { statsCurl += ["-H", "Authorization: Bearer \(token)"] }
        let stats = try runToEnd("/usr/bin/curl", statsCurl)
        let received = int((try JSONSerialization.jsonObject(with: Data(stats.stdout.joined().utf8)) as? [String: Any])?["payloadBytesReceived"])
        XCTAssertGreaterThanOrEqual(received, Self.size)
        XCTAssertLessThanOrEqual(received, Self.size + 2 * Self.pageChunk, "sent again more than the pieces in flight: \(received) bytes")
    }

    /// Pause and Resume finish the file; Cancel deletes the upload on the receiver and the
    /// page forgets it.
    func testPauseResumeAndCancel() throws {
        let server = try ServeProcess(root: work.file("server"))
        defer { server.stop() }
        let file = work.file("paused.bin"), other = work.file("cancelled.bin")
        try makeTestFile(at: file, size: 32 << 20, seed: 35)
        try makeTestFile(at: other, size: 32 << 20, seed: 36)
        let shots = packageRoot + "/.build/test-artifacts/upload-page-controls"
        try FileManager.default.createDirectory(atPath: shots, withIntermediateDirectories: true)
        let driver = try runToEnd(
            try TLSFront.python(),
            [packageRoot + "/Tests/Tools/upload_page_browser.py", "--scenario", "controls", "--url", server.url + "/", "--file", file,
             "--other", other, "--protocol", "tus", "--screenshots", shots, "--timeout", "120"])
        let line = try XCTUnwrap(driver.stdout.last, "the browser driver printed nothing: \(driver.stderr)")
        let result = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], line)
        if let reason = result["skip"] as? String { throw XCTSkip(reason) }
        guard result["ok"] as? Bool == true else { return XCTFail("the page's controls failed: \(line)") }
        for shot in result["screenshots"] as? [String] ?? [] { print("upload page screenshot (controls): \(shot)") }
        XCTAssertTrue((result["pausedStatus"] as? String ?? "").hasPrefix("Paused at"), line)
        let served = work.file("served")
        XCTAssertEqual(try runToEnd("/usr/bin/curl", ["-fsS", "-o", served, try XCTUnwrap(result["url"] as? String)]).status, 0)
        XCTAssertEqual(try sha256sum(served), try sha256sum(file))
        XCTAssertEqual(int(result["cancelledStatus"]), 404, "the cancelled upload is still on the receiver: \(line)")
        XCTAssertEqual(int(result["unfinishedLeft"]), 0, line)
    }

    /// The page's files need no token; `--no-upload-page` takes them away.
    func testThePageIsOpenWithATokenAndAbsentWithNoUploadPage() throws {
        let server = try ServeProcess(root: work.file("a"), extraArguments: ["--auth-token", "t0k3n"])
        defer { server.stop() }
        for path in ["/", "/upload-page/upload.js", "/upload-page/upload.css"] {
            let fetched = try runToEnd("/usr/bin/curl", ["-sS", "-o", "/dev/null", "-w", "%{http_code} %{content_type}", server.url + path])
            XCTAssertTrue(fetched.stdout.joined().hasPrefix("200 text/"), "\(path): \(fetched.stdout)")
        }
        let creation = try runToEnd(
            "/usr/bin/curl", ["-sS", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST", "-H", "Tus-Resumable: 1.0.0", "-H", "Upload-Length: 1",
                              server.url + "/files/"])
        XCTAssertEqual(creation.stdout.joined(), "401", "uploads still need the token")

        let without = try ServeProcess(root: work.file("b"), extraArguments: ["--no-upload-page"])
        defer { without.stop() }
        let page = try runToEnd("/usr/bin/curl", ["-sS", "-o", "/dev/null", "-w", "%{http_code}", without.url + "/"])
        XCTAssertEqual(page.stdout.joined(), "404")
    }
}
