import Foundation
import XCTest
import XferTestSupport

/// The hostile names of `ReceiverRawTests` and `ReceiverTreeTests`, over the object store: every
/// key the receiver writes stays in its place (`raw/NAME` with one name, `files/<id>/<path>` of a
/// checked path), whatever the name held.
final class HostileNameTests: CephBucketTestCase {
    func testHostileNamesStayInTheirPlaceInTheBucket() throws {
        let server = try ServeProcess(
            storage: ["--storage", "s3://\(bucket!)/p", "--endpoint", ceph.url], environment: CephGateway.environment)
        let file = work.file("a.bin")
        try makeTestFile(at: file, size: 100)
        for (encoded, expected) in ReceiverRawTests.hostileRawNames {
            let child = try ChildProcess(executable: "/usr/bin/curl", arguments: ["-sS", "-o", "/dev/null", "-w", "%{http_code}", "-T", file, server.url + "/raw/" + encoded])
            let code = child.readRemaining().joined()
            XCTAssertEqual(child.wait(), 0, child.standardError)
            switch expected {
            case .stored: XCTAssertEqual(code, "201", encoded)
            case .refused: XCTAssertTrue(code.hasPrefix("4"), "\(encoded): \(code)")
            }
        }
        // Paths through patch and tus: refused ones write nothing, accepted ones stay below files/<id>/.
        for (path, _) in ReceiverTreeTests.refusedPaths {
            let body = try JSONSerialization.data(withJSONObject: ["fileName": path, "size": 0, "chunkSize": 1])
            let reply = try curlRequest("POST", server.url + "/uploads", headers: ["Content-Type: application/json"], body: body, in: work)
            XCTAssertEqual(reply.status, 400, "\(path.debugDescription): \(reply.text)")
        }
        for name in ["caf\u{E9}.txt", "cafe\u{301}.txt", "a/..\u{301}/b.txt", "\u{301}/c.txt"] {
            let body = try JSONSerialization.data(withJSONObject: ["fileName": name, "size": 0, "chunkSize": 1])
            let created = try curlRequest("POST", server.url + "/uploads", headers: ["Content-Type: application/json"], body: body, in: work)
            XCTAssertEqual(created.status, 201, created.text)
            let id = try XCTUnwrap((try JSONSerialization.jsonObject(with: created.body) as? [String: Any])?["uploadId"] as? String)
            XCTAssertEqual(try curlRequest("POST", server.url + "/uploads/\(id)/complete", in: work).status, 200, name)
        }
        let keys = try allKeys()
        let stored = ReceiverRawTests.hostileRawNames.compactMap { if case .stored(let name) = $0.1 { "p/raw/" + name } else { nil } }
        for key in keys {
            if key.hasPrefix("p/raw/") {
                XCTAssertTrue(stored.contains(key), "an unexpected raw key: \(key.debugDescription)")
            } else if key.hasPrefix("p/files/") {
                let rest = key.dropFirst("p/files/".count).split(separator: "/", omittingEmptySubsequences: false)
                XCTAssertEqual(rest.first?.utf8.count, 32, key)
                XCTAssertFalse(rest.dropFirst().contains { $0.isEmpty || $0 == "." || $0 == ".." }, key.debugDescription)
            } else {
                XCTAssertTrue(key.hasPrefix("p/uploads/"), "a key outside the receiver's places: \(key.debugDescription)")
            }
        }
        XCTAssertEqual(Set(keys.filter { $0.hasPrefix("p/raw/") }), Set(stored))
    }

    /// Every key of the bucket, whatever its prefix: an escape would be outside `p/`.
    private func allKeys() throws -> [String] {
        let listing = try ceph.awsJSON(["list-objects-v2", "--bucket", bucket])
        return (listing["Contents"] as? [[String: Any]] ?? []).compactMap { $0["Key"] as? String }
    }
}
