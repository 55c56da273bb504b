import Foundation
import XCTest
import XferTestSupport

/// `xfer serve --tls-cert --tls-key`: the receiver speaks HTTPS itself (what an iOS app's upload
/// endpoint needs), answers https:// URLs, offers HTTP/1.1 by ALPN, and a push trusts it with
/// `--cacert` — never without (verification stays on). A certificate made by openssl at test time.
final class TLSServeTests: XCTestCase {
    func testTheReceiverSpeaksHTTPSAndPushesTrustItWithTheirCACertificate() throws {
        let work = TemporaryDirectory("xfer-tls-serve")
        let (certificate, key) = try TLSFront.makeCertificate(in: work)
        let server = try ServeProcess(root: work.file("server"), extraArguments: ["--tls-cert", certificate, "--tls-key", key])
        XCTAssertTrue(server.url.hasPrefix("https://127.0.0.1:"), server.url)
        let file = work.file("clip.mov")
        try makeTestFile(at: file, size: 3 << 20, seed: 21)

        // Verification is on by default: a certificate no CA of the system signed is refused.
        let refused = try runXfer(["push", file, "--backend", "ietf", "--to", server.url + "/resumable/", "--state", work.file("refused"), "--max-attempts", "1"])
        XCTAssertNotEqual(refused.status, 0)
        XCTAssertTrue(refused.stderr.lowercased().contains("certificate"), refused.stderr)

        // tus and the IETF draft name their endpoints (/files/, /resumable/); patch takes the root.
        for (backend, target) in [("patch", server.url), ("tus", server.url + "/files/"), ("ietf", server.url + "/resumable/")] {
            let push = try runXfer(
                ["push", file, "--backend", backend, "--to", target, "--state", work.file("state-\(backend)"), "--cacert", certificate, "--json"])
            XCTAssertEqual(push.status, 0, "\(backend): \(push.stderr)")
            let completed = try XCTUnwrap(push.stdout.last { $0.contains("\"fileCompleted\"") }, "\(backend): \(push.stdout)")
            let event = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(completed.utf8)) as? [String: Any])
            let url = try XCTUnwrap(event["url"] as? String)
            XCTAssertTrue(url.hasPrefix("https://"), "\(backend): the receiver names https URLs, not \(url)")
            let copy = work.file("copy-\(backend)")
            let download = try runToEnd("/usr/bin/curl", ["-fsS", "--cacert", certificate, "-o", copy, "-w", "%{http_version}", url])
            XCTAssertEqual(download.status, 0, download.stderr)
            XCTAssertEqual(download.stdout.joined(), "1.1", "HTTP/1.1 by ALPN, even to a client that offers HTTP/2")
            XCTAssertEqual(try sha256sum(copy), try sha256sum(file), backend)
        }

        // Half a pair, or a file that is not a certificate, is bad input said before listening.
        let half = try runXfer(["serve", "--root", work.file("x"), "--tls-cert", certificate])
        XCTAssertEqual(half.status, 2)
        XCTAssertTrue(half.stderr.contains("--tls-cert and --tls-key go together"), half.stderr)
        let notACertificate = try runXfer(["serve", "--root", work.file("x"), "--tls-cert", file, "--tls-key", key])
        XCTAssertEqual(notACertificate.status, 2)
        XCTAssertTrue(notACertificate.stderr.contains("TLS certificate") || notACertificate.stderr.contains("PEM"), notACertificate.stderr)
        XCTAssertEqual(notACertificate.stderr.split(separator: "\n").count, 1, notACertificate.stderr)
    }

    /// TLS 1.2 at least (issue 42, item 5): a client offering only TLS 1.1 (openssl, its own floor
    /// lowered so that it can) is refused, one offering 1.2 gets it. And a connection that never
    /// begins its handshake is closed after `--tls-handshake-timeout`.
    func testTLSBelow12IsRefusedAndAHandshakeMustEndInTime() throws {
        let work = TemporaryDirectory("xfer-tls-floor")
        let (certificate, key) = try TLSFront.makeCertificate(in: work)
        let server = try ServeProcess(
            root: work.file("server"), extraArguments: ["--tls-cert", certificate, "--tls-key", key, "--tls-handshake-timeout", "2s"])
        func handshake(_ version: String) throws -> RunResult {
            try runToEnd("/usr/bin/openssl", [
                "s_client", "-connect", "127.0.0.1:\(server.port)", "-servername", "127.0.0.1", "-\(version)",
                "-cipher", "DEFAULT:@SECLEVEL=0", "-CAfile", certificate,
            ])
        }
        let old = try handshake("tls1_1")
        XCTAssertNotEqual(old.status, 0, "a TLS 1.1 handshake must fail: \(old.stdout.joined(separator: "\n"))")
        XCTAssertTrue(old.stderr.contains("alert protocol version"), "the receiver refuses the version: \(old.stderr)")
        let current = try handshake("tls1_2")
        XCTAssertEqual(current.status, 0, current.stderr)
        XCTAssertTrue(current.stdout.contains { $0.contains("Protocol") && $0.contains("TLSv1.2") }, "\(current.stdout)")

        let child = try ChildProcess(
            executable: "/usr/bin/python3", arguments: [repositoryRoot + "/CLI/Tests/Tools/slowclient.py", "silent", String(server.port), "5", "30"])
        let line = try XCTUnwrap(child.readLine(), child.standardError)
        XCTAssertEqual(child.wait(), 0, child.standardError)
        let silent = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        XCTAssertEqual(int(silent["closed"]), 5, line)
        XCTAssertGreaterThanOrEqual((silent["firstClosedAfter"] as? NSNumber)?.doubleValue ?? 0, 1.9, line)
        XCTAssertLessThanOrEqual((silent["lastClosedAfter"] as? NSNumber)?.doubleValue ?? 99, 5, line)
    }
}
