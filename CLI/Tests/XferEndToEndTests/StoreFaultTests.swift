import Foundation
import XCTest
import XferTestSupport

/// The store-fault proxy (Tests/Tools/storefaults.py) between receivers and the Ceph gateway: it
/// forwards every request as it is, and on command fails one before the store sees it, drops or
/// replaces the answer of one the store applied, delays one, or holds everything from the k-th
/// request on (the moment to kill the receiver). Its log says what the store was asked.
final class StoreFaultProxy {
    let child: ChildProcess
    /// Where receivers send their store requests (`--endpoint`).
    let url: String
    private let control: String

    init(upstream: String) throws {
        child = try ChildProcess(
            executable: try pythonTool(venv: "venv-s3"), arguments: [packageRoot + "/Tests/Tools/storefaults.py", upstream])
        let fields = child.readLine()?.split(separator: " ").map(String.init) ?? []
        guard fields.count == 5, fields[0] == "listening", fields[3] == "control" else {
            child.kill(SIGKILL)
            child.wait()
            throw HarnessError("storefaults.py did not start: \(child.standardError)")
        }
        url = fields[2]
        control = fields[4]
    }

    deinit {
        child.kill(SIGKILL)
        child.wait()
    }

    /// A rule, as storefaults.py's docstring describes it.
    func add(_ rule: [String: Any]) throws {
        _ = try call("POST", "/rules", rule)
    }

    /// Holds the answer of the `k`-th request from now, once the store applied it, and forwards
    /// none after it.
    func stop(after k: Int) throws {
        _ = try call("POST", "/stop", ["after": k])
    }

    /// Whether the request `stop(after:)` named was applied, waiting for it at most `timeout`
    /// seconds.
    func waitUntilStopped(timeout: Int) throws -> Bool {
        (try call("GET", "/stopped?timeout=\(timeout)", nil) as? [String: Any])?["stopped"] as? Bool ?? false
    }

    /// Closes the connections held, unanswered, and forwards again.
    func release() throws {
        _ = try call("POST", "/release", nil)
    }

    /// Rules, stop and log cleared.
    func reset() throws {
        _ = try call("POST", "/reset", nil)
    }

    /// Every request seen since the last reset: `n`, `method`, `target`, `action`, `status`, `applied`.
    func log() throws -> [[String: Any]] {
        try call("GET", "/log", nil) as? [[String: Any]] ?? []
    }

    private func call(_ method: String, _ path: String, _ body: [String: Any]?) throws -> Any {
        var arguments = ["-sS", "-f", "-X", method, control + path]
        if let body { arguments += ["--data-binary", String(decoding: try JSONSerialization.data(withJSONObject: body), as: UTF8.self)] }
        let child = try ChildProcess(executable: "/usr/bin/curl", arguments: arguments)
        let text = child.readRemaining().joined(separator: "\n")
        guard child.wait() == 0 else { throw HarnessError("storefaults.py \(method) \(path): \(child.standardError)") }
        return try JSONSerialization.jsonObject(with: Data(text.utf8), options: [.fragmentsAllowed])
    }
}

/// A bucket of the Ceph gateway and the store-fault proxy in front of it.
class CephProxiedBucketTestCase: CephBucketTestCase {
    var proxy: StoreFaultProxy!

    override func setUpWithError() throws {
        try super.setUpWithError()
        proxy = try StoreFaultProxy(upstream: ceph.url)
    }

    override func tearDownWithError() throws {
        proxy = nil
        try super.tearDownWithError()
    }
}

/// The receiver's object storage when the store fails (Docs/reliability.md, "The store
/// failing"): writes the store applied but whose answers were lost or were errors, a completion
/// failing for a while, concurrent reads of a state being written, thousands of tiny appends,
/// and a receiver killed after each store request of an upload's life in turn. In every case the
/// client's push ends byte-identical, every answer a client saw agrees with what the store holds,
/// and nothing is left in the bucket but completed uploads.
final class StoreFaultTests: CephProxiedBucketTestCase {

    /// A receiver on `s3://BUCKET/prefix`, reaching the store through the proxy unless `direct`.
    private func serve(prefix: String, direct: Bool = false, port: Int = 0, extra: [String] = []) throws -> ServeProcess {
        try ServeProcess(
            storage: ["--storage", "s3://\(bucket!)/\(prefix)", "--endpoint", direct ? ceph.url : proxy.url] + extra, port: port,
            environment: CephGateway.environment)
    }

    private func target(_ backend: String, _ url: String) -> String {
        switch backend {
        case "tus": url + "/files/"
        case "ietf": url + "/resumable/"
        default: url
        }
    }

    /// The keys under `prefix`, but the receivers' key of upload handles (`uploadHandleKeyName`):
    /// made once per prefix and kept, part of no upload.
    private func keys(under prefix: String) throws -> [String] {
        try allKeys(under: prefix).filter { !$0.hasSuffix("/" + uploadHandleKeyName) }
    }

    private func allKeys(under prefix: String) throws -> [String] {
        var keys: [String] = []
        var token: String?
        repeat {
            var arguments = ["list-objects-v2", "--bucket", bucket!, "--prefix", prefix]
            if let token { arguments += ["--continuation-token", token] }
            let page = try ceph.awsJSON(arguments)
            keys += (page["Contents"] as? [[String: Any]] ?? []).compactMap { $0["Key"] as? String }
            token = page["NextContinuationToken"] as? String
        } while token != nil
        return keys
    }

    /// The multipart uploads in progress under `prefix`.
    private func uploadsInProgress(under prefix: String) throws -> [String] {
        try ceph.uploadsInProgress(bucket: bucket).map(\.key).filter { $0.hasPrefix(prefix) }
    }

    /// A hooks directory whose `post-finish` appends each event, one line, to the returned log.
    private func postFinishLog() throws -> (directory: String, log: String) {
        let directory = work.file("hooks")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let log = work.file("post-finish.log")
        let hook = directory + "/post-finish"
        try "#!/bin/sh\n{ tr -d '\\n'; echo; } >> '\(log)'\n".write(toFile: hook, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: hook)
        return (directory, log)
    }

    private func lines(of path: String) -> [String] {
        ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }

    /// Waits (bounded) for `path` to hold at least `count` lines; its lines.
    private func waitForLines(_ path: String, count: Int) -> [String] {
        for _ in 0..<400 {
            let found = lines(of: path)
            if found.count >= count { return found }
            usleep(50_000)
        }
        return lines(of: path)
    }

    private func tus(_ method: String, _ url: String, headers: [String] = [], body: Data? = nil) throws -> CurlReply {
        try curlRequest(method, url, headers: ["Tus-Resumable: 1.0.0"] + headers, body: body, in: work)
    }

    private func patch(_ url: String, at offset: Int, _ body: Data) throws -> CurlReply {
        try tus("PATCH", url, headers: ["Upload-Offset: \(offset)", "Content-Type: application/offset+octet-stream"], body: body)
    }

    private func appendTool(_ arguments: [String]) throws -> RunResult {
        try runToEnd(try pythonTool(venv: "venv-s3"), [packageRoot + "/Tests/Tools/tusappends.py"] + arguments)
    }

    // MARK: Answers lost after the store applied a write

    /// Every third conditional write of a state is applied and its answer lost (the connection
    /// closed), the creation's applied and answered 500: each is retried, refused (412:
    /// the version it named is gone), and recognised by its nonce as the writer's own. Before,
    /// such a record was taken for another's: the client got 409 and the staged tail the
    /// committed state named was deleted, and the upload could never be completed.
    func testWritesAppliedButUnansweredAreRecognisedAsTheirWritersOwn() throws {
        let file = work.file("file.bin")
        try makeTestFile(at: file, size: (6 << 20) + 321, seed: 41)
        let hooks = try postFinishLog()
        for (index, backend) in ["tus", "ietf", "patch"].enumerated() {
            let prefix = "lost-\(backend)"
            let server = try serve(
                prefix: prefix, extra: ["--hooks-dir", hooks.directory] + (backend == "patch" ? ["--patch-chunk-size", String(1 << 20)] : []))
            try proxy.reset()
            // The completion's record among them: its writer must know it completed the upload.
            try proxy.add([
                "method": "PUT", "path": "/uploads/[^/]+\\.json$", "header": "If-Match", "action": "drop",
                "after": ["method": "POST", "path": "\\?uploadId="],
            ])
            try proxy.add(["method": "PUT", "path": "/uploads/[^/]+\\.json$", "header": "If-Match", "action": "drop", "every": 3, "times": NSNull()])
            try proxy.add(["method": "PUT", "path": "/uploads/[^/]+\\.json$", "header": "If-None-Match", "action": "error"])
            let result = try runXfer([
                "push", file, "--backend", backend, "--to", target(backend, server.url), "--state", work.file("state-\(backend)"),
                "--chunk-size", "1MiB", "--concurrency", "1",
            ])
            XCTAssertEqual(result.status, 0, "\(backend): \(result.stderr)")
            let url = try XCTUnwrap(result.stdout.last, backend)
            XCTAssertEqual(try downloadSHA256(url, into: work), try sha256sum(file), backend)
            let log = try proxy.log()
            XCTAssertGreaterThanOrEqual(log.filter { $0["action"] as? String == "drop" }.count, 1, "\(backend): the faults happened")
            XCTAssertGreaterThanOrEqual(log.filter { $0["action"] as? String == "error" }.count, 1, "\(backend): the faults happened")
            let stored = try keys(under: prefix + "/")
            XCTAssertEqual(stored.filter { $0.hasPrefix(prefix + "/uploads/") }.count, 1, "\(backend): one upload, no orphan of a creation retried: \(stored)")
            let left = stored.filter { !$0.hasPrefix(prefix + "/files/") && !$0.hasPrefix(prefix + "/uploads/") }
            XCTAssertEqual(left, [], "\(backend): nothing staged or recorded is left")
            XCTAssertEqual(waitForLines(hooks.log, count: index + 1).count, index + 1, "\(backend): post-finish fires once")
            XCTAssertEqual(try uploadsInProgress(under: prefix + "/"), [], backend)
            server.stop()
        }
        XCTAssertEqual(lines(of: hooks.log).count, 3, "post-finish fired once a push")
    }

    // MARK: A completion failing for a while

    /// `CompleteMultipartUpload` fails until the test lets it work again (a step, not a clock: a
    /// slow host must not finish the PATCH after the failure ended): the PATCH that brought the
    /// last byte answers an error, and the `HEAD`s that follow answer errors too — never
    /// the full offset before the file exists; the first that can completes the upload (no byte
    /// is sent again), and `post-finish` fires once. Before, `HEAD` answered offset = length at
    /// once, and the object appeared only if someone downloaded it, with no `post-finish`.
    func testACompletionFailingForAWhileFinishesOnTheNextRequestAndIsReportedOnce() throws {
        let hooks = try postFinishLog()
        let server = try serve(prefix: "completion", extra: ["--hooks-dir", hooks.directory])
        let file = work.file("file.bin")
        let length = (6 << 20) + 100
        try makeTestFile(at: file, size: length, seed: 43)
        let bytes = try Data(contentsOf: URL(fileURLWithPath: file))
        let created = try tus("POST", server.url + "/files/", headers: ["Upload-Length: \(length)"])
        let upload = try XCTUnwrap(created.headers["location"])
        let id = try XCTUnwrap(upload.split(separator: "/").last.map(storedID))
        XCTAssertEqual(try patch(upload, at: 0, bytes.prefix(3 << 20)).status, 204)
        try proxy.add(["method": "POST", "path": "\\?uploadId=", "action": "fail", "times": NSNull()])
        let last = try patch(upload, at: 3 << 20, bytes.suffix(from: 3 << 20))
        XCTAssertGreaterThanOrEqual(last.status, 500, "the completion failed: \(last.status) \(last.text)")

        var refused = 0
        var done = false
        for attempt in 0..<60 where !done {
            // Three HEADs meet the failing store, then it works again.
            if attempt == 3 { try proxy.reset() }
            let head = try tus("HEAD", upload)
            if head.status == 200, head.headers["upload-offset"] == String(length) {
                // Told complete: the file must be in the store now.
                XCTAssertEqual(try keys(under: "completion/files/\(id)/"), ["completion/files/\(id)/file"], "complete only once the file exists")
                done = true
            } else {
                XCTAssertGreaterThanOrEqual(head.status, 500, "a HEAD either errs or tells the whole offset: \(head.status) \(head.headers)")
                refused += 1
            }
        }
        XCTAssertTrue(done, "the upload completed once the store worked again")
        XCTAssertGreaterThan(refused, 0, "HEADs met the failing store")
        XCTAssertEqual(try downloadSHA256(upload, into: work), try sha256sum(file))
        XCTAssertEqual(waitForLines(hooks.log, count: 1).count, 1)
        _ = try tus("HEAD", upload)
        XCTAssertEqual(try downloadSHA256(upload, into: work), try sha256sum(file))
        let reports = lines(of: hooks.log)
        XCTAssertEqual(reports.count, 1, "post-finish fires once: \(reports)")
        XCTAssertTrue(reports.first?.contains(id) ?? false, "\(reports)")
        XCTAssertEqual(try uploadsInProgress(under: "completion/"), [])
        XCTAssertEqual(try keys(under: "completion/staging/"), [])
    }

    /// The completion's record fails after `CompleteMultipartUpload` made the file (the state's
    /// writes answered 503 eight times: two requests' worth of retries): the next `HEAD`s finish the
    /// completion from the store (the multipart upload gone, the object there) and record it;
    /// `post-finish` fires once.
    func testACompletionRecordFailingIsFinishedByTheNextRequest() throws {
        let hooks = try postFinishLog()
        let server = try serve(prefix: "record", extra: ["--hooks-dir", hooks.directory])
        let file = work.file("file.bin")
        let length = (5 << 20) + 4096
        try makeTestFile(at: file, size: length, seed: 44)
        let bytes = try Data(contentsOf: URL(fileURLWithPath: file))
        let upload = try XCTUnwrap(try tus("POST", server.url + "/files/", headers: ["Upload-Length: \(length)"]).headers["location"])
        XCTAssertEqual(try patch(upload, at: 0, bytes.prefix(4096)).status, 204)
        // The state's writes fail once the file is made.
        try proxy.add([
            "method": "PUT", "path": "/uploads/[^/]+\\.json$", "header": "If-Match", "action": "fail", "times": 8,
            "after": ["method": "POST", "path": "\\?uploadId="],
        ])
        XCTAssertGreaterThanOrEqual(try patch(upload, at: 4096, bytes.suffix(from: 4096)).status, 500)
        var answers: [Int] = []
        for _ in 0..<10 where answers.last != 200 {
            let head = try tus("HEAD", upload)
            answers.append(head.status)
            if head.status == 200 { XCTAssertEqual(head.headers["upload-offset"], String(length)) }
        }
        XCTAssertEqual(answers.last, 200, "\(answers)")
        XCTAssertGreaterThan(answers.count, 1, "a HEAD met the failing record: \(answers)")
        XCTAssertEqual(try downloadSHA256(upload, into: work), try sha256sum(file))
        XCTAssertEqual(waitForLines(hooks.log, count: 1).count, 1)
        XCTAssertEqual(lines(of: hooks.log).count, 1, "post-finish fires once")
    }

    /// The client goes away after its last append's completion failed: the sweep (`--expire-after`)
    /// completes the upload instead of expiring it — its bytes were all acknowledged — and fires
    /// `post-finish`, once.
    func testAnUploadWhoseCompletionFailedIsCompletedByTheSweep() throws {
        let hooks = try postFinishLog()
        let server = try serve(prefix: "swept", extra: ["--hooks-dir", hooks.directory, "--expire-after", "2s", "--claim-lifetime", "0.5"])
        let file = work.file("file.bin")
        let length = (5 << 20) + 10
        try makeTestFile(at: file, size: length, seed: 45)
        let bytes = try Data(contentsOf: URL(fileURLWithPath: file))
        let upload = try XCTUnwrap(try tus("POST", server.url + "/files/", headers: ["Upload-Length: \(length)"]).headers["location"])
        let id = try XCTUnwrap(upload.split(separator: "/").last.map(storedID))
        XCTAssertEqual(try patch(upload, at: 0, bytes.prefix(4096)).status, 204)
        try proxy.add(["method": "POST", "path": "\\?uploadId=", "action": "fail", "times": NSNull()])
        XCTAssertGreaterThanOrEqual(try patch(upload, at: 4096, bytes.suffix(from: 4096)).status, 500)
        // The store works again once the PATCH has failed (a step, not a clock), and the sweep,
        // not the client, completes the upload.
        try proxy.reset()
        let reports = waitForLines(hooks.log, count: 1)
        XCTAssertEqual(reports.count, 1, "the sweep completed it and reported it")
        XCTAssertEqual(try keys(under: "swept/files/"), ["swept/files/\(id)/file"])
        XCTAssertEqual(try downloadSHA256(upload, into: work), try sha256sum(file))
        XCTAssertEqual(lines(of: hooks.log).count, 1, "post-finish fires once")
        XCTAssertEqual(try uploadsInProgress(under: "swept/"), [])
    }

    // MARK: Reads during writes, tiny appends

    /// A tus upload sent in 512 KiB PATCHes while another connection sends `HEAD`s of it to the
    /// same receiver, every read of the state delayed 50 ms by the store: a `HEAD`'s read lands
    /// after an append's write began. Before, the older sight replaced the newer in the
    /// receiver's cache, the append took its own record for a lost race and deleted a staged
    /// piece the state named, and the upload was stuck for good after its second PATCH.
    func testHeadsDuringAppendsOnOneReceiverNeverCorruptTheUpload() throws {
        let server = try serve(prefix: "heads")
        let file = work.file("file.bin")
        let length = (4 << 20) + 777
        try makeTestFile(at: file, size: length, seed: 47)
        try proxy.add(["method": "GET", "path": "/uploads/[^/]+\\.json$", "action": "delay", "delay": 0.05, "times": NSNull()])
        let created = try appendTool(["create", server.url, String(length)])
        let upload = try XCTUnwrap(created.stdout.first, created.stderr)
        let appended = try appendTool(["append", upload, file, String(512 << 10), "--heads"])
        XCTAssertEqual(appended.status, 0, appended.stderr)
        XCTAssertEqual(appended.stdout.first, "offset \(length)")
        let heads = Int(appended.stdout.last?.split(separator: " ").last ?? "") ?? 0
        XCTAssertGreaterThanOrEqual(heads, 3, "HEADs ran alongside: \(appended.stdout)")
        XCTAssertEqual(try downloadSHA256(upload, into: work), try sha256sum(file))
        XCTAssertEqual(try keys(under: "heads/staging/"), [])
    }

    /// Thousands of appends of 64 bytes (3,000 with `XFER_STORE_FAULT_KILLS=all`, `make
    /// test-store-faults`; 200 otherwise, each costing ~6 store requests): the state object,
    /// rewritten by every append, stays small (the staged tail is folded into fewer, larger
    /// pieces past 32), and the upload completes byte-identical. Before, every append added a
    /// piece to the state for good.
    func testThousandsOfTinyAppendsKeepTheStateSmall() throws {
        let server = try serve(prefix: "tiny", direct: true)
        let file = work.file("file.bin")
        let piece = 64
        let appends = Self.isFullRun ? 3000 : 200
        let length = appends * piece
        try makeTestFile(at: file, size: length, seed: 49)
        let created = try appendTool(["create", server.url, String(length)])
        let upload = try XCTUnwrap(created.stdout.first, created.stderr)
        let id = try XCTUnwrap(upload.split(separator: "/").last.map(storedID))
        let most = try appendTool(["append", upload, file, String(piece), "--upto", String(length - piece)])
        XCTAssertEqual(most.status, 0, most.stderr)
        let state = try ceph.head(bucket: bucket, key: "tiny/uploads/\(id).json")
        XCTAssertLessThan(state.length, 8192, "the state stays small after \(appends - 1) appends")
        let staged = try keys(under: "tiny/staging/\(id)/")
        XCTAssertLessThanOrEqual(staged.count, 32, "\(staged.count) staged pieces")
        print("\(appends - 1) appends of \(piece) bytes: a state of \(state.length) bytes, \(staged.count) staged pieces")
        let rest = try appendTool(["append", upload, file, String(piece)])
        XCTAssertEqual(rest.status, 0, rest.stderr)
        XCTAssertEqual(try downloadSHA256(upload, into: work), try sha256sum(file))
        XCTAssertEqual(try keys(under: "tiny/staging/"), [])
        XCTAssertEqual(try uploadsInProgress(under: "tiny/"), [])
    }

    /// An append whose body streams for longer than `--expire-after` (10 s at 200 KB/s, expiry
    /// 8 s) is not expired: its claim renewals keep the state fresh, and a renewal that failed
    /// whole (four attempts answered 503) is retried instead of ending them. Before, renewals
    /// stopped at their first error, and the sweep's unconditional delete could follow.
    func testAnAppendLongerThanTheExpiryIsNotExpired() throws {
        let server = try serve(prefix: "slow", extra: ["--expire-after", "8s", "--claim-lifetime", "2"])
        let file = work.file("file.bin")
        let length = 2 << 20
        try makeTestFile(at: file, size: length, seed: 53)
        let upload = try XCTUnwrap(try tus("POST", server.url + "/files/", headers: ["Upload-Length: \(length)"]).headers["location"])
        // The claim is written; every attempt of the first renewal then fails.
        try proxy.add(["method": "PUT", "path": "/uploads/[^/]+\\.json$", "header": "If-Match", "action": "fail", "skip": 1, "times": 4])
        let slow = try ChildProcess(
            executable: "/usr/bin/curl",
            arguments: [
                "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--limit-rate", "200K", "-X", "PATCH", "-H", "Tus-Resumable: 1.0.0",
                "-H", "Upload-Offset: 0", "-H", "Content-Type: application/offset+octet-stream", "--data-binary", "@" + file, upload,
            ])
        XCTAssertEqual(slow.readRemaining().joined(), "204", slow.standardError)
        XCTAssertEqual(slow.wait(), 0)
        let log = try proxy.log()
        XCTAssertEqual(log.filter { $0["action"] as? String == "fail" }.count, 4, "a renewal failed whole")
        XCTAssertGreaterThan(log.filter { $0["method"] as? String == "PUT" && ($0["target"] as? String ?? "").hasSuffix(".json") }.count, 10, "renewals went on")
        XCTAssertEqual(try downloadSHA256(upload, into: work), try sha256sum(file))
    }

    /// `--expire-after` must stay well above the claim lifetime: a live append shows it is alive
    /// only by renewing its claim.
    func testAnExpiryNotWellAboveTheClaimLifetimeIsRefused() throws {
        let refused = try runXfer(
            ["serve", "--storage", "s3://\(bucket!)/p", "--endpoint", ceph.url, "--expire-after", "1m"], environment: CephGateway.environment)
        XCTAssertEqual(refused.status, 2, refused.stderr)
        XCTAssertEqual(refused.stderr.split(separator: "\n").count, 1, refused.stderr)
        XCTAssertTrue(refused.stderr.contains("--expire-after must be at least 4 times the 30s"), refused.stderr)
    }

    // MARK: A kill at every store request

    func testAKillAtEveryStoreRequestOfATusUploadLosesNothing() throws {
        try killAtEveryStoreRequest("tus")
    }

    func testAKillAtEveryStoreRequestOfAnIETFUploadLosesNothing() throws {
        try killAtEveryStoreRequest("ietf")
    }

    func testAKillAtEveryStoreRequestOfAPatchUploadLosesNothing() throws {
        try killAtEveryStoreRequest("patch")
    }

    /// `make test-store-faults`: every kill point, thousands of tiny appends.
    private static var isFullRun: Bool { ProcessInfo.processInfo.environment["XFER_STORE_FAULT_KILLS"] == "all" }

    /// Whether child process `pid` has exited (a zombie until waited for).
    private static func hasEnded(_ pid: Int32) -> Bool {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8) else { return true }
        // pid (comm) STATE ...: the state follows the last ')'.
        guard let close = stat.lastIndex(of: ")") else { return true }
        return stat[stat.index(after: close)...].trimmingCharacters(in: .whitespaces).hasPrefix("Z")
    }

    /// Which k to kill at, of an upload's `count` store requests: all of them with
    /// `XFER_STORE_FAULT_KILLS=all` (`make test-store-faults`), else a spread of them.
    private static func killPoints(_ count: Int) -> [Int] {
        if isFullRun { return Array(1...count) }
        // XFER_STORE_FAULT_KILLS=3,26: those alone (to look into one).
        if let chosen = ProcessInfo.processInfo.environment["XFER_STORE_FAULT_KILLS"]?.split(separator: ",").compactMap({ Int($0) }),
            !chosen.isEmpty
        {
            return chosen
        }
        return Array(Set([1, 2, count / 3, count / 2, (2 * count) / 3, count - 1, count].filter { $0 >= 1 })).sorted()
    }

    /// For k = 1…N over an upload's life (N: the store requests of a run with no fault, as the
    /// proxy counts them), a receiver (A) is SIGKILLed right after its k-th store request was
    /// applied, before it hears the answer; `xfer push` goes on through haproxy to the other
    /// receiver (B, A's backup). Every run ends byte-identical. Then the upload is deleted, and
    /// what is left in the bucket is only what uploads the client never learned of hold
    /// (created when A died before answering); a receiver with a short expiry sweeps those, and
    /// the bucket ends empty, with no multipart upload.
    private func killAtEveryStoreRequest(_ backend: String) throws {
        try XCTSkipIf(!FileManager.default.isExecutableFile(atPath: "/usr/sbin/haproxy"), "haproxy is not installed")
        let prefix = "kill-\(backend)"
        // Claims lapse after 1 s: an append A died in is taken over soon. Both receivers' links
        // name the balancer (--public-url), on one port for every run, as receivers behind one
        // are told: a Location or download link naming A would die with it.
        let balancerPort = try freeTCPPort()
        let common = ["--claim-lifetime", "1", "--public-url", "http://127.0.0.1:\(balancerPort)"]
            + (backend == "patch" ? ["--patch-chunk-size", String(1 << 20)] : [])
        let survivor = try serve(prefix: prefix, direct: true, extra: common)
        let file = work.file("file.bin")
        try makeTestFile(at: file, size: (6 << 20) + 123, seed: 51)
        let digest = try sha256sum(file)
        let started = Date()

        /// One push through A, killed after its k-th store request (nil: not killed); the
        /// number of store requests A made.
        func run(killingAfter k: Int?) throws -> Int {
            let tag = k.map(String.init) ?? "clean"
            try proxy.reset()
            let first = try serve(prefix: prefix, extra: common)
            let balancer = try HAProxy(backends: [first.port], backups: [survivor.port], port: balancerPort, directory: work.path)
            try balancer.waitUntilServing()
            if let k { try proxy.stop(after: k) }
            let push = try ChildProcess(
                executable: xferExecutable,
                arguments: [
                    "push", file, "--backend", backend, "--to", target(backend, balancer.url), "--state", work.file("state-\(tag)"),
                    "--chunk-size", "1MiB", "--concurrency", "1", "--json",
                ])
            var requests = 0
            var killedAfter = "nothing"
            if k != nil {
                // Until A's k-th request is applied, or the push ended without it (a run may take a
                // request or two fewer than the clean one: then there is nothing to kill at).
                var stopped = false
                for _ in 0..<120 where !stopped && !Self.hasEnded(push.pid) {
                    stopped = try proxy.waitUntilStopped(timeout: 1)
                }
                if !stopped { print("\(backend) k=\(tag): the push ended before A's k-th store request") }
                first.child.kill(SIGKILL)
                first.child.wait()
                let log = try proxy.log()
                requests = log.filter { $0["applied"] as? Bool == true }.count
                killedAfter = log.first { $0["action"] as? String == "stop" }.map { "\($0["method"] ?? "") \($0["target"] ?? "")" } ?? "nothing"
                try proxy.release()
            }
            let lines = push.readRemaining()
            XCTAssertEqual(
                push.wait(), 0,
                "\(backend) k=\(tag), A killed after \(killedAfter): \(push.standardError.suffix(1500)); B said: \(survivor.child.standardError.suffix(3000))")
            if k == nil { requests = try proxy.log().count }
            let completed = lines.last.flatMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
            let url = try XCTUnwrap((completed?["files"] as? [[String: Any]])?.first?["url"] as? String, "\(backend) k=\(tag): \(lines.suffix(2))")
            XCTAssertEqual(try downloadSHA256(url, into: work), digest, "\(backend) k=\(tag)")
            // The upload goes (through B), and with it everything of it.
            let path = try XCTUnwrap(URL(string: url)?.path)
            let parts = path.split(separator: "/").map(String.init)
            // tus and ietf report the upload's URL (its handle); patch the download link (the id),
            // whose handle the receivers' key makes.
            let id = backend == "patch" ? parts[1] : storedID(parts[parts.count - 1])
            let handle: String
            if backend == "patch" {
                let key = work.file("handle-key-\(tag)")
                _ = try ceph.download(bucket: bucket, key: prefix + "/" + uploadHandleKeyName, to: key)
                handle = uploadHandle(of: id, key: try Data(contentsOf: URL(fileURLWithPath: key)))
            } else {
                handle = parts[parts.count - 1]
            }
            let resource: String
            switch backend {
            case "tus": resource = survivor.url + "/files/\(handle)"
            case "ietf": resource = survivor.url + "/resumable-uploads/\(handle)"
            default: resource = survivor.url + "/uploads/\(handle)"
            }
            // Completed, nothing of it is left but its file and state: no staged piece, no chunk
            // record, no multipart upload (a completion A died in was finished by B, leftovers too).
            let kept = try keys(under: prefix + "/").filter { $0.contains("/\(id)/") || $0.hasSuffix("/\(id).json") }
            XCTAssertEqual(
                kept.filter { !$0.hasPrefix(prefix + "/files/") && !$0.hasPrefix(prefix + "/uploads/") }, [],
                "\(backend) k=\(tag), A killed after \(killedAfter): only the file and the state are left")
            XCTAssertEqual(try uploadsInProgress(under: prefix + "/files/\(id)/"), [], "\(backend) k=\(tag): no multipart upload is left")
            let deleted = try curlRequest("DELETE", resource, headers: backend == "tus" ? ["Tus-Resumable: 1.0.0"] : [], in: work)
            XCTAssertEqual(deleted.status, 204, "\(backend) k=\(tag): \(deleted.text)")
            let left = try keys(under: prefix + "/").filter { $0.contains("/\(id)/") || $0.hasSuffix("/\(id).json") }
            XCTAssertEqual(left, [], "\(backend) k=\(tag): nothing of the upload is left")
            return requests
        }

        let count = try run(killingAfter: nil)
        XCTAssertGreaterThan(count, 10, "\(backend): an upload's life takes store requests")
        let points = Self.killPoints(count)
        for k in points { _ = try run(killingAfter: k) }

        // Uploads the client never learned of (A died before answering their creation) hold
        // what they hold until they expire: a receiver with a short expiry sweeps them.
        let orphans = try keys(under: prefix + "/")
        let sweeper = try serve(prefix: prefix, direct: true, extra: ["--expire-after", "4s", "--claim-lifetime", "1"])
        var left = orphans
        for _ in 0..<200 where !left.isEmpty {
            usleep(100_000)
            left = try keys(under: prefix + "/")
        }
        XCTAssertEqual(left, [], "\(backend): the bucket ends empty (orphans before the sweep: \(orphans))")
        XCTAssertEqual(try uploadsInProgress(under: prefix + "/"), [], "\(backend): no multipart upload is left")
        sweeper.stop()
        print("\(backend): \(count) store requests an upload; killed at \(points.count) of them (\(points)) in \(Int(Date().timeIntervalSince(started))) s; \(orphans.count) keys of orphans swept")
    }
}
