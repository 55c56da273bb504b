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
        // Prefixes compared on bytes: `hasPrefix` compares Characters, and in "p/raw/\u{301}pwned"
        // the last '/' and the combining mark are one.
        func under(_ prefix: String, _ key: String) -> Bool { key.utf8.starts(with: prefix.utf8) }
        let stored = ReceiverRawTests.hostileRawNames.compactMap { if case .stored(let name) = $0.1 { "p/raw/" + name } else { nil } }
        for key in keys {
            if under("p/raw/", key) {
                XCTAssertTrue(stored.contains { Array($0.utf8) == Array(key.utf8) }, "an unexpected raw key: \(key.debugDescription)")
            } else if under("p/files/", key) {
                // Split on bytes: a '/' followed by a combining mark is one Character.
                let rest = Array(key.utf8.dropFirst("p/files/".utf8.count)).split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false)
                XCTAssertEqual(rest.first?.count, 32, key.debugDescription)
                XCTAssertFalse(rest.dropFirst().contains { $0.isEmpty || $0.elementsEqual(".".utf8) || $0.elementsEqual("..".utf8) }, key.debugDescription)
            } else {
                XCTAssertTrue(
                    under("p/uploads/", key) || key.utf8.elementsEqual(("p/" + uploadHandleKeyName).utf8), "a key outside the receiver's places: \(key.debugDescription)")
            }
        }
        // As bytes: Swift's String equality is canonical, and NFC and NFD spellings are two keys.
        XCTAssertEqual(Set(keys.filter { under("p/raw/", $0) }.map { Array($0.utf8) }), Set(stored.map { Array($0.utf8) }))
    }

    /// Every key of the bucket, whatever its prefix: an escape would be outside `p/`.
    private func allKeys() throws -> [String] {
        let listing = try ceph.awsJSON(["list-objects-v2", "--bucket", bucket])
        return (listing["Contents"] as? [[String: Any]] ?? []).compactMap { $0["Key"] as? String }
    }
}
