import Foundation
import XCTest
import XferTestSupport

/// `GET /metrics` of `xfer serve`, in Prometheus's text format: uploads by protocol and event,
/// uploads open, bytes received, request latency — read after real pushes and a termination,
/// behind the token like every route but `/health`.
final class MetricsTests: XCTestCase {
    func testUploadsBytesAndLatenciesAreCountedAfterRealPushes() throws {
        let work = TemporaryDirectory("xfer-metrics")
        let server = try ServeProcess(root: work.file("server"), extraArguments: ["--auth-token", "t0k"])
        let tree = work.file("tree")
        try FileManager.default.createDirectory(atPath: tree, withIntermediateDirectories: true)
        for index in 0..<3 { try makeTestFile(at: tree + "/f\(index).bin", size: 100_000, seed: UInt64(index)) }
        let big = work.file("big.bin")
        try makeTestFile(at: big, size: 3 << 20, seed: 9)
        let environment = ["XFER_TOKEN": "t0k"]
        XCTAssertEqual(try runXfer(["push", tree, "--backend", "tus", "--to", server.url + "/files/", "--state", work.file("s1")], environment: environment).status, 0)
        XCTAssertEqual(try runXfer(["push", big, "--backend", "patch", "--to", server.url, "--state", work.file("s2"), "--chunk-size", "1MiB"], environment: environment).status, 0)
        // An upload created and terminated by hand, as a tus client's cancel does.
        let created = try curlRequest(
            "POST", server.url + "/files/", headers: ["Authorization: Bearer t0k", "Tus-Resumable: 1.0.0", "Upload-Length: 5"], in: work)
        let location = try XCTUnwrap(created.headers["location"])
        XCTAssertEqual(try curlRequest("DELETE", location, headers: ["Authorization: Bearer t0k", "Tus-Resumable: 1.0.0"], in: work).status, 204)

        // Methods the receiver does not serve make no series of their own.
        for method in ["PROPFIND", "MKCOL", "PURGE"] { _ = try curlRequest(method, server.url + "/files/", in: work) }

        XCTAssertEqual(try curlRequest("GET", server.url + "/metrics", in: work).status, 401, "behind the token")
        let scrape = try curlRequest("GET", server.url + "/metrics", headers: ["Authorization: Bearer t0k"], in: work)
        XCTAssertEqual(scrape.status, 200)
        XCTAssertTrue(scrape.headers["content-type"]?.hasPrefix("text/plain; version=0.0.4") == true, "\(scrape.headers)")
        let text = String(decoding: scrape.body, as: UTF8.self)
        func value(_ name: String, _ labels: [String] = []) -> Double? {
            text.split(separator: "\n").first { line in
                line.hasPrefix(name + "{") || line.hasPrefix(name + " ")
                    ? labels.allSatisfy { line.contains($0) } : false
            }.flatMap { Double($0.split(separator: " ").last ?? "") }
        }
        XCTAssertEqual(value("xfer_receiver_uploads_total", [#"protocol="tus""#, #"event="created""#]), 4, text)
        XCTAssertEqual(value("xfer_receiver_uploads_total", [#"protocol="tus""#, #"event="completed""#]), 3, text)
        XCTAssertEqual(value("xfer_receiver_uploads_total", [#"protocol="tus""#, #"event="terminated""#]), 1, text)
        XCTAssertEqual(value("xfer_receiver_uploads_total", [#"protocol="patch""#, #"event="created""#]), 1, text)
        XCTAssertEqual(value("xfer_receiver_uploads_total", [#"protocol="patch""#, #"event="completed""#]), 1, text)
        XCTAssertEqual(value("xfer_receiver_open_uploads", [#"protocol="tus""#]), 0, text)
        XCTAssertEqual(value("xfer_receiver_open_uploads", [#"protocol="patch""#]), 0, text)
        XCTAssertGreaterThanOrEqual(value("xfer_receiver_received_bytes_total") ?? 0, Double(3 * 100_000 + (3 << 20)), text)
        XCTAssertTrue(text.contains("http_server_request_duration"), "request latency, by route")
        XCTAssertFalse(text.contains("PROPFIND") || text.contains("MKCOL") || text.contains("PURGE"), text)
        XCTAssertTrue(text.contains(#"http_request_method="_OTHER""#), text)
    }
}
