import Foundation
import XCTest
import XferTestSupport

/// `xfer serve --storage s3://BUCKET/PREFIX` on the Ceph gateway the tests start (`CephGateway`):
/// every protocol's pushes end byte-identical when read back through the receiver and straight
/// from the bucket; two receivers over one bucket decide a race through the store alone.
final class ObjectStorageTests: CephBucketTestCase {
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

    /// A PATCH cut mid-body on one receiver leaves nothing: a HEAD through another reports the
    /// offset before it, and the body sent again through that other one completes the upload.
    func testAPatchCutOnOneReceiverCountsNothingOnAnother() throws {
        let one = try serve(), two = try serve()
        let body = work.file("body.bin")
        let length = 6 << 20
        try makeTestFile(at: body, size: length, seed: 13)
        let created = try curl(["-X", "POST", "-H", "Tus-Resumable: 1.0.0", "-H", "Upload-Length: \(length)", one.url + "/files/"])
        let path = try XCTUnwrap(URL(string: try XCTUnwrap(created.headers["location"]))?.path)
        let patch = ["-X", "PATCH", "-H", "Tus-Resumable: 1.0.0", "-H", "Upload-Offset: 0", "-H", "Content-Type: application/offset+octet-stream",
                     "--data-binary", "@" + body]
        let slow = try ChildProcess(executable: "/usr/bin/curl", arguments: ["-sS", "-o", "/dev/null", "--limit-rate", "512K"] + patch + [one.url + path])
        // Cut once the first receiver has read part of the body (its own count says so).
        var received = 0
        for _ in 0..<400 where received == 0 {
            received = int(try getJSON(one.url + "/stats")["payloadBytesReceived"])
            if received == 0 { usleep(25_000) }
        }
        XCTAssertGreaterThan(received, 0, "the body started")
        slow.kill(SIGKILL)
        slow.wait()
        let head = try curl(["-I", "-H", "Tus-Resumable: 1.0.0", two.url + path])
        XCTAssertEqual(head.headers["upload-offset"], "0", "nothing of the cut body is durable, so nothing is reported")
        let again = try curl(patch + [two.url + path])
        XCTAssertEqual(again.status, 204)
        XCTAssertEqual(again.headers["upload-offset"], String(length))
        XCTAssertEqual(try downloadSHA256(two.url + path, into: work), try sha256sum(body))
    }

    /// An unfinished upload untouched for `--expire-after` is dropped by the receivers' sweep,
    /// its multipart upload aborted; a completed one stays.
    func testUnfinishedUploadsExpireAndTheirMultipartUploadsAreAborted() throws {
        let server = try serve(extra: ["--expire-after", "2s", "--claim-lifetime", "0.5"])
        let body = work.file("part.bin")
        try makeTestFile(at: body, size: 6 << 20, seed: 21)
        let created = try curl(["-X", "POST", "-H", "Tus-Resumable: 1.0.0", "-H", "Upload-Length: \(12 << 20)", server.url + "/files/"])
        let path = try XCTUnwrap(URL(string: try XCTUnwrap(created.headers["location"]))?.path)
        let patched = try curl([
            "-X", "PATCH", "-H", "Tus-Resumable: 1.0.0", "-H", "Upload-Offset: 0", "-H", "Content-Type: application/offset+octet-stream",
            "--data-binary", "@" + body, server.url + path,
        ])
        // 6 MiB of 12: a part (at least the 5 MiB minimum), so the upload has a multipart upload now.
        XCTAssertEqual(patched.headers["upload-offset"], String(6 << 20))
        let small = work.file("small.bin")
        try makeTestFile(at: small, size: 1000, seed: 22)
        let finished = try runXfer(push([small], backend: "ietf", to: server.url))
        XCTAssertEqual(finished.status, 0, finished.stderr)
        // The sweep runs every second here: wait, bounded, for the store to show it happened.
        var left = 1
        for _ in 0..<120 where left > 0 {
            left = try ceph.uploadsInProgress(bucket: bucket).count
            if left > 0 { usleep(100_000) }
        }
        XCTAssertEqual(left, 0, "the expired upload's multipart upload is aborted")
        XCTAssertEqual(try curl(["-I", "-H", "Tus-Resumable: 1.0.0", server.url + path]).status, 404)
        XCTAssertEqual(try downloadSHA256(try XCTUnwrap(finished.stdout.first), into: work), try sha256sum(small), "a completed upload stays")
    }

    /// An upload's pending marker goes with its completion, and the sweeps read the states of the
    /// uploads that may be unfinished alone: with completed uploads in the store, an idle
    /// receiver's sweeps (every second here) cost a listing each, not a read of every state
    /// (which each sweep made before: a request per completed upload, a minute, for ever).
    func testSweepsReadNoCompletedUploadsState() throws {
        let server = try serve(extra: ["--expire-after", "2s", "--claim-lifetime", "0.5"])
        let tus = ["-H", "Tus-Resumable: 1.0.0"]
        func create() throws -> String {
            let created = try curl(["-X", "POST"] + tus + ["-H", "Upload-Length: 4", server.url + "/files/"])
            XCTAssertEqual(created.status, 201)
            return try XCTUnwrap(URL(string: try XCTUnwrap(created.headers["location"]))?.path)
        }
        for _ in 0..<6 {
            // Created empty (a state object, and its marker), then completed by one PATCH.
            let path = try create()
            let patched = try curl(
                ["-X", "PATCH"] + tus + ["-H", "Upload-Offset: 0", "-H", "Content-Type: application/offset+octet-stream", "--data-binary", "abcd", server.url + path])
            XCTAssertEqual(patched.headers["upload-offset"], "4")
        }
        XCTAssertEqual(try keys(under: "uploads/uploads/").count, 6, "six states")
        XCTAssertEqual(try keys(under: "uploads/pending/"), [], "a completion takes its upload's marker")
        let unfinished = try create()
        XCTAssertEqual(try keys(under: "uploads/pending/").count, 1, "an unfinished upload has its marker")

        // Past its expiry the sweep drops it, and its marker: waited for, bounded.
        var gone = false
        for _ in 0..<150 where !gone {
            gone = try keys(under: "uploads/pending/").isEmpty && curl(["-I"] + tus + [server.url + unfinished]).status == 404
            if !gone { usleep(100_000) }
        }
        XCTAssertTrue(gone, "the unfinished upload expired, its marker with it")

        // A receiver that died between a completion and its marker's removal left the marker: a
        // sweep reads the state once more, finds it complete, and takes the marker; the upload stays.
        let completedKey = try XCTUnwrap(try keys(under: "uploads/uploads/").first)
        let completedID = String(completedKey.dropFirst("uploads/uploads/".count).dropLast(".json".count))
        _ = try ceph.awsJSON(["put-object", "--bucket", bucket, "--key", "uploads/pending/" + completedID])
        var swept = false
        for _ in 0..<150 where !swept {
            swept = try keys(under: "uploads/pending/").isEmpty
            if !swept { usleep(100_000) }
        }
        XCTAssertTrue(swept, "a completed upload's leftover marker goes with a sweep")
        XCTAssertEqual(try keys(under: "uploads/uploads/").count, 6, "and the upload stays")

        // Four seconds of sweeps: a listing each; before, each read the six states too (7 a sweep).
        let before = int(try getJSON(server.url + "/stats")["storeRequests"])
        let start = Date()
        while Date().timeIntervalSince(start) < 4 { usleep(100_000) }
        let used = int(try getJSON(server.url + "/stats")["storeRequests"]) - before
        XCTAssertLessThanOrEqual(used, 10, "store requests in 4 s of idle sweeps")
        XCTAssertEqual(try keys(under: "uploads/uploads/").count, 6, "completed uploads stay")
    }

    /// `PUT /raw/NAME` streams the body into one object under the prefix.
    /// A small file whole in the request that creates its upload (the IETF draft's one-request
    /// upload, tus's creation-with-upload) costs the store one request: the file's object, the
    /// upload's state in its metadata, no state object. Another receiver finds each upload
    /// complete, serves it and deletes it; then the first finds it gone.
    func testAWholeFileInItsCreationIsOneStoreRequest() throws {
        let one = try serve(), two = try serve()
        let body = work.file("small.bin")
        try makeTestFile(at: body, size: 4096, seed: 21)
        let before = int(try getJSON(one.url + "/stats")["storeRequests"])
        let ietf = try curl(["-X", "POST", "-H", "Upload-Complete: ?1", "--data-binary", "@" + body, one.url + "/resumable/small.bin"])
        let tus = try curl([
            "-X", "POST", "-H", "Tus-Resumable: 1.0.0", "-H", "Upload-Length: 4096", "-H", "Content-Type: application/offset+octet-stream",
            "--data-binary", "@" + body, one.url + "/files/",
        ])
        XCTAssertEqual(int(try getJSON(one.url + "/stats")["storeRequests"]) - before, 2, "one PutObject a file")
        XCTAssertEqual(ietf.status, 201)
        XCTAssertEqual(tus.status, 201)
        XCTAssertEqual(tus.headers["upload-offset"], "4096")
        let ietfPath = try XCTUnwrap(URL(string: try XCTUnwrap(ietf.headers["location"]))?.path)
        let tusPath = try XCTUnwrap(URL(string: try XCTUnwrap(tus.headers["location"]))?.path)

        let stored = try keys(under: "uploads/")
        XCTAssertEqual(stored.filter { $0.hasPrefix("uploads/uploads/") }, [], "no state object: \(stored)")
        XCTAssertEqual(stored.filter { $0.hasPrefix("uploads/files/") }.count, 2, "\(stored)")
        XCTAssertEqual(try curl(["-I", two.url + ietfPath]).headers["upload-complete"], "?1")
        XCTAssertEqual(try curl(["-I", "-H", "Tus-Resumable: 1.0.0", two.url + tusPath]).headers["upload-offset"], "4096")
        for path in [ietfPath, tusPath] {
            XCTAssertEqual(try downloadSHA256(two.url + path, into: work), try sha256sum(body), path)
        }
        // An append at an offset the upload has left is refused as on disk, from the state in the
        // metadata.
        let late = try curl([
            "-X", "PATCH", "-H", "Tus-Resumable: 1.0.0", "-H", "Upload-Offset: 0", "-H", "Content-Type: application/offset+octet-stream",
            "--data-binary", "x", two.url + tusPath,
        ])
        XCTAssertEqual(late.status, 409)

        XCTAssertEqual(try curl(["-X", "DELETE", two.url + ietfPath]).status, 204)
        XCTAssertEqual(try curl(["-X", "DELETE", "-H", "Tus-Resumable: 1.0.0", two.url + tusPath]).status, 204)
        XCTAssertEqual(try curl(["-I", one.url + ietfPath]).status, 404)
        XCTAssertEqual(try curl(["-I", "-H", "Tus-Resumable: 1.0.0", one.url + tusPath]).status, 404)
        XCTAssertEqual(try keys(under: "uploads/").filter { !$0.hasSuffix("/" + uploadHandleKeyName) }, [], "each upload went with its file")
    }

    private func keys(under prefix: String) throws -> [String] {
        let listing = try ceph.awsJSON(["list-objects-v2", "--bucket", bucket, "--prefix", prefix])
        return (listing["Contents"] as? [[String: Any]] ?? []).compactMap { $0["Key"] as? String }
    }

    func testRawPutIsOneObject() throws {
        let server = try serve()
        let file = work.file("raw.bin")
        try makeTestFile(at: file, size: 3 << 20, seed: 31)
        let put = try curl(["-T", file, server.url + "/raw/a.bin"])
        XCTAssertEqual(put.status, 201)
        let stored = try ceph.head(bucket: bucket, key: "uploads/raw/a.bin")
        XCTAssertEqual(stored.length, 3 << 20)
        _ = try ceph.download(bucket: bucket, key: "uploads/raw/a.bin", to: work.file("back.bin"))
        XCTAssertEqual(try sha256sum(work.file("back.bin")), try sha256sum(file))
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

/// Several receivers over one bucket behind Debian's haproxy, `balance roundrobin` and no
/// stickiness: any request of any upload may land on any receiver, and one of them is killed
/// with SIGKILL mid-push and started again.
final class LoadBalancedReceiverTests: CephBucketTestCase {
    override func setUpWithError() throws {
        try XCTSkipIf(!FileManager.default.isExecutableFile(atPath: "/usr/sbin/haproxy"),
                      "haproxy is not installed (scripts/install-deps.sh installs it: `make test` runs that)")
        try super.setUpWithError()
    }

    /// A receiver on `port` whose links name the balancer (`--public-url`).
    private func serve(port: Int, behind balancer: String) throws -> ServeProcess {
        // Claims lapse after 2 s here, so that an append cut off by the kill is taken over soon.
        try ServeProcess(
            storage: ["--storage", "s3://\(bucket!)/shared", "--endpoint", ceph.url, "--claim-lifetime", "2", "--public-url", balancer],
            port: port, environment: CephGateway.environment)
    }

    func testPushesThroughABalancerSurviveAReceiverKilledMidPush() throws {
        let ports = [try freeTCPPort(), try freeTCPPort()]
        let balancer = try HAProxy(backends: ports, directory: work.path)
        var receivers = try ports.map { try serve(port: $0, behind: balancer.url) }
        try balancer.waitUntilServing()
        let large = work.file("large.bin"), small = work.file("small.bin")
        try makeTestFile(at: large, size: (22 << 20) + 12_345, seed: 11)
        try makeTestFile(at: small, size: 3000, seed: 12)
        for backend in ObjectStorageTests.backends {
            let target = backend == "tus" ? balancer.url + "/files/" : backend == "ietf" ? balancer.url + "/resumable/" : balancer.url
            let push = try ChildProcess(
                executable: xferExecutable,
                arguments: [
                    "push", small, large, "--backend", backend, "--to", target, "--state", work.file("state-\(backend)"),
                    "--chunk-size", "5MiB", "--concurrency", "3", "--json",
                ])
            var chunks = 0
            while chunks < 2, let line = push.readLine() {
                if line.contains("\"event\":\"chunk\"") { chunks += 1 }
            }
            // One receiver dies mid-push and comes back on its port; the balancer sends requests
            // to the other meanwhile.
            let victim = receivers.removeFirst()
            let port = victim.port
            victim.child.kill(SIGKILL)
            victim.child.wait()
            receivers.append(try serve(port: port, behind: balancer.url))
            let rest = push.readRemaining()
            XCTAssertEqual(push.wait(), 0, "\(backend): \(push.standardError)")
            let completed = rest.last.flatMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
            let urls = (completed?["files"] as? [[String: Any]])?.compactMap { $0["url"] as? String } ?? []
            XCTAssertEqual(urls.count, 2, "\(backend): \(rest.suffix(2))")
            for (url, file) in zip(urls, [small, large]) {
                XCTAssertEqual(try downloadSHA256(url, into: work), try sha256sum(file), "\(backend): \(url)")
            }
        }
        XCTAssertEqual(try ceph.uploadsInProgress(bucket: bucket).count, 0, "no multipart upload is left unfinished")
    }
}

/// Debian's haproxy on 127.0.0.1 in front of receivers: round robin, no stickiness, a failed
/// connection sent to another receiver, a receiver that fails its check taken out at once.
/// `backups` take requests only while every one of `backends` is out.
final class HAProxy {
    let child: ChildProcess
    let url: String

    /// On `port` when given (a front whose URL receivers were told before it started), else on
    /// a free one.
    init(backends: [Int], backups: [Int] = [], port: Int? = nil, directory: String) throws {
        let port = try port ?? Self.freePort()
        let servers = (backends.enumerated().map { index, port in
            "  server r\(index) 127.0.0.1:\(port) check inter 200ms fall 1 rise 1"
        } + backups.enumerated().map { index, port in
            "  server b\(index) 127.0.0.1:\(port) check inter 200ms fall 1 rise 1 backup"
        }).joined(separator: "\n")
        let configuration = """
            global
              maxconn 512
            defaults
              mode http
              timeout connect 2s
              timeout client 120s
              timeout server 120s
              retries 3
              option redispatch 1
            frontend receivers
              bind 127.0.0.1:\(port)
              default_backend receivers
            backend receivers
              balance roundrobin
              option httpchk GET /health
            \(servers)

            """
        let path = directory + "/haproxy-\(port).cfg"
        try configuration.write(toFile: path, atomically: true, encoding: .utf8)
        child = try ChildProcess(executable: "/usr/sbin/haproxy", arguments: ["-f", path, "-db"])
        url = "http://127.0.0.1:\(port)"
        // Ready when it accepts: a bounded readiness check, not a guess at a delay.
        for _ in 0..<200 {
            if Self.accepts(port) { return }
            usleep(25_000)
        }
        child.kill(SIGKILL)
        child.wait()
        throw HarnessError("haproxy did not start: \(child.standardError)")
    }

    deinit {
        child.kill(SIGKILL)
        child.wait()
    }

    /// Returns once a request through the balancer reaches a receiver (`GET /health` answers
    /// 200): receivers started after it are in service only once a check found them up.
    func waitUntilServing() throws {
        _ = try waitFor("haproxy to reach a receiver") { () -> Bool? in
            let child = try ChildProcess(executable: "/usr/bin/curl", arguments: ["-s", "-o", "/dev/null", "-w", "%{http_code}", url + "/health"])
            let code = child.readRemaining().joined()
            child.wait()
            return code == "200" ? true : nil
        }
    }

    private static func freePort() throws -> Int {
        let result = try runToEnd("/usr/bin/python3", ["-c", "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"])
        guard let port = result.stdout.first.flatMap({ Int($0) }) else { throw HarnessError("no free port: \(result.stderr)") }
        return port
    }

    private static func accepts(_ port: Int) -> Bool {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(descriptor) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        } == 0
    }
}
