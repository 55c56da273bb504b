import Foundation
import XCTest
import XferTestSupport

/// `xfer serve --storage s3://BUCKET/PREFIX` on the Ceph gateway the tests start (`CephGateway`):
/// every protocol's pushes end byte-identical when read back through the receiver and straight
/// from the bucket; two receivers over one bucket decide a race through the store alone.
final class ObjectStorageTests: XCTestCase {
    var work: TemporaryDirectory!
    var ceph: CephGateway!
    var bucket: String!

    override func setUpWithError() throws {
        work = TemporaryDirectory("xfer-object-storage")
        ceph = try CephGateway.shared()
        bucket = try ceph.makeBucket()
    }

    override func tearDownWithError() throws {
        defer {
            bucket = nil
            work = nil
        }
        if let bucket { try ceph.removeBucket(bucket) }
    }

    static let backends = ["patch", "multipart", "sequence", "tus", "ietf"]

    /// A receiver over the test's bucket, under `prefix`.
    private func serve(prefix: String = "uploads", port: Int = 0, extra: [String] = []) throws -> ServeProcess {
        try ServeProcess(
            storage: ["--storage", "s3://\(bucket!)/\(prefix)", "--endpoint", ceph.url] + extra, port: port,
            environment: CephGateway.environment)
    }

    private func target(_ backend: String, _ url: String) -> String {
        switch backend {
        case "tus": url + "/files/"
        case "ietf": url + "/resumable/"
        default: url
        }
    }

    private func push(_ files: [String], backend: String, to url: String, chunk: String = "1MiB", extra: [String] = []) -> [String] {
        ["push"] + files + [
            "--backend", backend, "--to", target(backend, url), "--state", work.file("state-\(backend)"), "--chunk-size", chunk,
            "--concurrency", "3",
        ] + extra
    }

    /// Every protocol: an empty file, a small one, one of several chunks (tus and ietf appends
    /// below and above the part minimum), each served back identical, then present in the bucket
    /// as one object, with no multipart upload left unfinished.
    func testEveryProtocolStoresFilesIdenticalInTheBucket() throws {
        let server = try serve()
        let empty = work.file("empty.bin"), small = work.file("small.bin"), large = work.file("large.bin")
        try makeTestFile(at: empty, size: 0)
        try makeTestFile(at: small, size: 4096, seed: 2)
        try makeTestFile(at: large, size: (12 << 20) + 777, seed: 3)
        for backend in Self.backends {
            let result = try runXfer(push([empty, small, large], backend: backend, to: server.url))
            XCTAssertEqual(result.status, 0, "\(backend): \(result.stderr)")
            XCTAssertEqual(result.stdout.count, 3, "\(backend): \(result.stdout)")
            for (url, file) in zip(result.stdout, [empty, small, large]) {
                XCTAssertEqual(try downloadSHA256(url, into: work), try sha256sum(file), "\(backend): \(url)")
            }
        }
        XCTAssertEqual(try ceph.uploadsInProgress(bucket: bucket).count, 0, "every multipart upload is completed")
        let listing = try ceph.aws(["s3", "ls", "--recursive", "s3://\(bucket!)/uploads/files/"])
        XCTAssertEqual(listing.split(separator: "\n").count, 3 * Self.backends.count, listing)
    }

    /// A push killed mid-file resumes against a receiver that was itself killed and restarted:
    /// nothing of an upload lives in a receiver.
    func testAKilledPushResumesThroughAnotherReceiver() throws {
        let file = work.file("big.bin")
        try makeTestFile(at: file, size: 24 << 20, seed: 5)
        for backend in ["patch", "tus", "ietf"] {
            let first = try serve()
            _ = try pushKilled(push([file], backend: backend, to: first.url, chunk: "5MiB") + ["--json"], afterChunks: 1)
            first.child.kill(SIGKILL)
            first.child.wait()
            // A new process on the same port: the same job, resumed against a receiver that
            // knows the upload only through the store.
            let second = try serve(port: first.port)
            let result = try runXfer(push([file], backend: backend, to: second.url, chunk: "5MiB"))
            XCTAssertEqual(result.status, 0, "\(backend): \(result.stderr)")
            XCTAssertEqual(try downloadSHA256(try XCTUnwrap(result.stdout.last), into: work), try sha256sum(file), backend)
            second.stop()
        }
    }

    /// Two appends at one offset of one upload, through two receivers over the same bucket:
    /// exactly one is stored, the other answered 409 with the offset that won.
    func testTwoReceiversRacingOnOneOffsetLetTheStoreDecide() throws {
        let one = try serve(), two = try serve()
        let body = work.file("body.bin")
        try makeTestFile(at: body, size: 64 << 10, seed: 9)
        let created = try curl(["-X", "POST", "-H", "Tus-Resumable: 1.0.0", "-H", "Upload-Length: \(128 << 10)", one.url + "/files/"])
        let location = try XCTUnwrap(created.headers["location"], "\(created)")
        let path = try XCTUnwrap(URL(string: location)?.path)
        let patch = { (server: ServeProcess) throws -> ChildProcess in
            try ChildProcess(
                executable: "/usr/bin/curl",
                arguments: [
                    "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-X", "PATCH", "-H", "Tus-Resumable: 1.0.0", "-H", "Upload-Offset: 0",
                    "-H", "Content-Type: application/offset+octet-stream", "--data-binary", "@" + body, server.url + path,
                ])
        }
        let first = try patch(one), second = try patch(two)
        let codes = [first.readRemaining().joined(), second.readRemaining().joined()]
        first.wait()
        second.wait()
        XCTAssertEqual(codes.sorted(), ["204", "409"], "\(codes)")
        let head = try curl(["-I", "-H", "Tus-Resumable: 1.0.0", two.url + path])
        XCTAssertEqual(head.headers["upload-offset"], String(64 << 10), "one body counted, once")
    }

    private struct Answer {
        var status: Int
        var headers: [String: String]
    }

    private func curl(_ arguments: [String]) throws -> Answer {
        let child = try ChildProcess(executable: "/usr/bin/curl", arguments: ["-sS", "-D", "-", "-o", "/dev/null"] + arguments)
        let lines = child.readRemaining()
        XCTAssertEqual(child.wait(), 0, child.standardError)
        var status = 0
        var headers: [String: String] = [:]
        for line in lines {
            let text = line.trimmingCharacters(in: .whitespacesAndNewlines)
            if text.hasPrefix("HTTP/") {
                status = Int(text.split(separator: " ").dropFirst().first ?? "") ?? 0
            } else if let colon = text.firstIndex(of: ":") {
                headers[text[..<colon].lowercased()] = text[text.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            }
        }
        return Answer(status: status, headers: headers)
    }
}
