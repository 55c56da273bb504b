import Foundation
import XCTest
import XferTestSupport

/// Policy that holds (issue 42, item 6): every file of every protocol passes `pre-create`, the
/// application may refuse a completion (`pre-finish`), progress is paced (`post-receive`), hooks
/// run with an allow-listed environment and a cap on how many at once, and the receiver's token
/// is not on its command line. Real `xfer serve` processes, a real hook server (Python) and real
/// hook scripts.
final class HookPolicyTests: XCTestCase {
    var work: TemporaryDirectory!

    override func setUp() { work = TemporaryDirectory("xfer-hook-policy") }
    override func tearDown() { work = nil }

    // MARK: A hook server

    /// Appends each event, with the time it arrived (`"at"`, seconds), to `log`, one JSON per
    /// line, and answers by the upload's path: a `pre-create` of "forbidden" is refused (403,
    /// "no forbidden files here"), a `pre-finish` of "infected" too (422, "malware found"), a
    /// `pre-finish` of "slowscan" answers after 3 s. Everything else: 200 `{}`.
    private func startHookServer(log: String) throws -> (ChildProcess, String) {
        let script = """
            import http.server, json, sys, time
            log = sys.argv[1]
            class Hook(http.server.BaseHTTPRequestHandler):
                def do_POST(self):
                    event = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                    event["at"] = time.monotonic()
                    with open(log, "a") as out:
                        out.write(json.dumps(event, sort_keys=True) + "\\n")
                    path = event["upload"].get("path", "")
                    status, answer = 200, {}
                    if event["type"] == "pre-create" and "forbidden" in path:
                        status, answer = 403, {"message": "no forbidden files here"}
                    if event["type"] == "pre-finish" and "infected" in path:
                        status, answer = 422, {"message": "malware found"}
                    if event["type"] == "pre-finish" and "slowscan" in path:
                        time.sleep(3)
                    body = json.dumps(answer).encode()
                    try:
                        self.send_response(status)
                        self.send_header("Content-Type", "application/json")
                        self.send_header("Content-Length", str(len(body)))
                        self.end_headers()
                        self.wfile.write(body)
                    except OSError:
                        pass
                def log_message(self, *args):
                    pass
            server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
            print(server.server_address[1], flush=True)
            server.serve_forever()
            """
        let child = try ChildProcess(executable: try TLSFront.python(), arguments: ["-c", script, log])
        let port = try XCTUnwrap(child.readLine(), "the hook server did not start: \(child.standardError)")
        return (child, "http://127.0.0.1:\(port)/hook")
    }

    /// The events in `log` once `done` holds of them (post-* events arrive in the background),
    /// or when 20 s have passed.
    private func events(in log: String, until done: ([[String: Any]]) -> Bool = { _ in true }) -> [[String: Any]] {
        let deadline = Date().addingTimeInterval(20)
        while true {
            let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            let events = text.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
            if done(events) || Date() > deadline { return events }
            usleep(50_000)
        }
    }

    private func upload(_ event: [String: Any]) -> [String: Any] { event["upload"] as? [String: Any] ?? [:] }

    private func events(_ events: [[String: Any]], _ type: String, path: String? = nil) -> [[String: Any]] {
        events.filter { $0["type"] as? String == type && (path == nil || upload($0)["path"] as? String == path) }
    }

    /// Waits until `path` exists (a hook script's mark), at most 20 s.
    private func waitForFile(_ path: String) -> Bool {
        let deadline = Date().addingTimeInterval(20)
        while !FileManager.default.fileExists(atPath: path) {
            if Date() > deadline { return false }
            usleep(20_000)
        }
        return true
    }

    private func writeHook(_ directory: String, _ name: String, _ text: String) throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try text.write(toFile: directory + "/" + name, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(directory + "/" + name, 0o755), 0)
    }

    // MARK: multipart, through curl

    /// POSTs with curl; the HTTP status and the JSON answer.
    private func post(_ url: String, _ arguments: [String]) throws -> (status: Int, answer: [String: Any]) {
        let child = try ChildProcess(executable: "/usr/bin/curl", arguments: ["-sS", "-X", "POST", "-w", "\n%{http_code}"] + arguments + [url])
        let lines = child.readRemaining()
        XCTAssertEqual(child.wait(), 0, "curl: \(child.standardError)")
        let status = Int(lines.last ?? "") ?? -1
        let body = lines.dropLast().joined(separator: "\n")
        return (status, (try? JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any]) ?? ["unreadable": body])
    }

    private func md5(_ data: Data) throws -> String {
        let file = work.file("md5-\(UUID().uuidString.prefix(6))")
        try data.write(to: URL(fileURLWithPath: file))
        let child = try ChildProcess(executable: "/usr/bin/md5sum", arguments: [file])
        let line = child.readLine() ?? ""
        child.wait()
        return String(line.prefix(32))
    }

    /// Sends fragment `index` of `bytes` cut in `fragmentSize` pieces as multipart's upload.do does.
    private func sendFragment(
        _ server: String, sourceId: String, fileId: String, name: String, bytes: Data, fragmentSize: Int, index: Int
    ) throws -> (status: Int, answer: [String: Any]) {
        let count = max(1, (bytes.count + fragmentSize - 1) / fragmentSize)
        let piece = bytes.subdata(in: (index * fragmentSize)..<min(bytes.count, (index + 1) * fragmentSize))
        let block: [String: Any] = [
            "sourceId": sourceId, "fileId": fileId, "fragmentIndex": index, "fragmentOffset": index * fragmentSize,
            "fragmentSize": piece.count, "totalFileFragment": count, "totalFileSize": bytes.count, "fileName": name,
            "fragmentMd5": try md5(piece),
        ]
        let header = String(decoding: try JSONSerialization.data(withJSONObject: [block]), as: UTF8.self)
        let file = work.file("fragment-\(UUID().uuidString.prefix(6))")
        try piece.write(to: URL(fileURLWithPath: file))
        return try post(server + "/fileSection/upload.do", ["-H", "file_block: \(header)", "-F", "sectionFile=@\(file);filename=\(fileId)-\(index).bin"])
    }

    private func code(_ answer: [String: Any]) -> Int { (answer["code"] as? NSNumber)?.intValue ?? -1 }

    /// multipart's upload.do creates each file with its first fragment: the application hears of
    /// each, by name and size, before it is created. A refused file's fragment is answered in
    /// multipart's envelope (HTTP 200, the hook's code and words), its next fragment the same
    /// without another hook call, and the source's other file is stored whole.
    func testMultipartAsksAboutEveryFileAndARefusedFileStaysRefused() throws {
        let log = work.file("events.jsonl")
        let (hook, hookURL) = try startHookServer(log: log)
        defer { hook.kill(); hook.wait() }
        let server = try ServeProcess(root: work.file("server"), extraArguments: ["--hook-url", hookURL])

        let preload = try post(server.url + "/fileSection/preLoad.do", ["--data-urlencode", "sourceId=album", "--data-urlencode", "fileCount=2"])
        XCTAssertEqual(code(preload.answer), 200, "\(preload)")
        let ids = try XCTUnwrap((preload.answer["data"] as? [String: Any])?["fileIds"] as? [String])
        XCTAssertEqual(ids.count, 2)

        var generator = SystemRandomNumberGenerator()
        let refused = Data((0..<3000).map { _ in UInt8.random(in: 0...255, using: &generator) })
        let kept = Data((0..<5000).map { _ in UInt8.random(in: 0...255, using: &generator) })
        for index in 0..<2 {
            let answer = try sendFragment(server.url, sourceId: "album", fileId: ids[0], name: "forbidden.bin", bytes: refused, fragmentSize: 2048, index: index)
            XCTAssertEqual(answer.status, 200, "fragment \(index): the envelope's HTTP status")
            XCTAssertEqual(code(answer.answer), 403, "fragment \(index): \(answer.answer)")
            XCTAssertEqual(answer.answer["msg"] as? String, "no forbidden files here", "fragment \(index)")
        }
        for index in 0..<3 {
            let answer = try sendFragment(server.url, sourceId: "album", fileId: ids[1], name: "photos/kept.bin", bytes: kept, fragmentSize: 2048, index: index)
            XCTAssertEqual(code(answer.answer), 200, "fragment \(index) of the kept file: \(answer.answer)")
        }
        let finish = try post(
            server.url + "/fileSection/isFinish.do", ["--data-urlencode", "sourceId=album", "--data-urlencode", "fileIds=\(ids[1])"])
        let data = try XCTUnwrap(finish.answer["data"] as? [String: Any], "\(finish)")
        XCTAssertEqual((data["finishStatus"] as? NSNumber)?.intValue, 1, "\(finish)")
        let url = try XCTUnwrap((data["fileUrls"] as? [String: String])?[ids[1]])
        XCTAssertEqual(try curlRequest("GET", url, in: work).body, kept, "the kept file, byte for byte")
        let refusedCheck = try post(
            server.url + "/fileSection/isFinish.do", ["--data-urlencode", "sourceId=album", "--data-urlencode", "fileIds=\(ids[0])"])
        XCTAssertEqual(((refusedCheck.answer["data"] as? [String: Any])?["failFileIds"] as? String), ids[0], "nothing of the refused file was stored")

        let seen = events(in: log) { !self.events($0, "post-finish").isEmpty }
        let asked = events(seen, "pre-create")
        XCTAssertEqual((upload(try XCTUnwrap(asked.first)))["fileCount"] as? Int, 2, "the preLoad.do, for the source: \(asked)")
        let forbidden = events(seen, "pre-create", path: "forbidden.bin")
        XCTAssertEqual(forbidden.count, 1, "one call for the refused file, not one per fragment: \(seen)")
        XCTAssertEqual(upload(forbidden[0])["size"] as? Int, 3000)
        XCTAssertEqual(upload(forbidden[0])["id"] as? String, ids[0])
        XCTAssertEqual(upload(forbidden[0])["sourceId"] as? String, "album")
        XCTAssertEqual(upload(forbidden[0])["sizeIsDeferred"] as? Bool, false)
        let keptAsked = events(seen, "pre-create", path: "photos/kept.bin")
        XCTAssertEqual(keptAsked.count, 1, "asked once, when its first fragment created it: \(seen)")
        XCTAssertEqual(upload(keptAsked[0])["size"] as? Int, 5000)
        XCTAssertEqual(events(seen, "post-finish", path: "photos/kept.bin").count, 1, "\(seen)")
    }

    /// A raw PUT without `Content-Length` (a chunked body): the hook hears that the size is not
    /// known (`sizeIsDeferred: true`) and the most it may be (`maximumSize`, the receiver's
    /// `--max-upload-size`); with one, the size (`sizeIsDeferred: false`).
    func testARawPutTellsTheHookWhatIsKnownOfItsSize() throws {
        let log = work.file("events.jsonl")
        let (hook, hookURL) = try startHookServer(log: log)
        defer { hook.kill(); hook.wait() }
        let server = try ServeProcess(root: work.file("server"), extraArguments: ["--hook-url", hookURL, "--max-upload-size", "1000000"])
        let file = work.file("clip.bin")
        try makeTestFile(at: file, size: 70_000, seed: 8)

        let chunked = try runToEnd("/usr/bin/curl", [
            "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-T", file, "-H", "Transfer-Encoding: chunked", server.url + "/raw/chunked.bin",
        ])
        // An object store needs the length (411), after the hook said yes; a disk takes the stream.
        XCTAssertEqual(chunked.stdout.joined(), SuiteStorage.isObjectStore ? "411" : "201", chunked.stderr)
        let sized = try runToEnd("/usr/bin/curl", ["-sS", "-o", "/dev/null", "-w", "%{http_code}", "-T", file, server.url + "/raw/sized.bin"])
        XCTAssertEqual(sized.stdout.joined(), "201", sized.stderr)

        let seen = events(in: log) { self.events($0, "pre-create").count >= 2 }
        let deferred = upload(try XCTUnwrap(events(seen, "pre-create", path: "chunked.bin").first, "\(seen)"))
        XCTAssertEqual(deferred["sizeIsDeferred"] as? Bool, true, "\(deferred)")
        XCTAssertEqual(deferred["maximumSize"] as? Int, 1_000_000, "\(deferred)")
        XCTAssertNil(deferred["size"], "no size rather than a null one: \(deferred)")
        let known = upload(try XCTUnwrap(events(seen, "pre-create", path: "sized.bin").first, "\(seen)"))
        XCTAssertEqual(known["sizeIsDeferred"] as? Bool, false, "\(known)")
        XCTAssertEqual(known["size"] as? Int, 70_000, "\(known)")
        XCTAssertNil(known["maximumSize"], "\(known)")
    }

    // MARK: pre-finish

    /// The application refuses a completion (a scan found malware): the request that completed
    /// the upload gets the hook's status and words in its protocol's form, and the upload is gone
    /// for good — tus, the IETF draft, patch, multipart. A hook that does not answer in time
    /// refuses too (503, `Retry-After`). A clean file is asked about, then finished.
    func testPreFinishRefusesCompletionsForGood() throws {
        let log = work.file("events.jsonl")
        let (hook, hookURL) = try startHookServer(log: log)
        defer { hook.kill(); hook.wait() }
        let server = try ServeProcess(root: work.file("server"), extraArguments: ["--hook-url", hookURL, "--hook-timeout", "1s"])
        let hello = Data("hello".utf8)
        func tusName(_ name: String) -> String { "Upload-Metadata: filename \(Data(name.utf8).base64EncodedString())" }

        // tus: the last PATCH answers 422 {"error"}; HEAD then says 404.
        for (name, status) in [("infected.bin", 422), ("clean.bin", 204)] {
            let created = try curlRequest("POST", server.url + "/files/", headers: ["Tus-Resumable: 1.0.0", "Upload-Length: 5", tusName(name)], in: work)
            XCTAssertEqual(created.status, 201, name)
            let location = try XCTUnwrap(created.headers["location"])
            let patched = try curlRequest(
                "PATCH", location, headers: ["Tus-Resumable: 1.0.0", "Upload-Offset: 0", "Content-Type: application/offset+octet-stream"],
                body: hello, in: work)
            XCTAssertEqual(patched.status, status, "\(name): \(patched.text)")
            let head = try curlRequest("HEAD", location, headers: ["Tus-Resumable: 1.0.0"], in: work)
            if status == 422 {
                XCTAssertEqual(try JSONSerialization.jsonObject(with: patched.body) as? [String: String], ["error": "malware found"])
                XCTAssertEqual(head.status, 404, "the refused upload is gone")
            } else {
                XCTAssertEqual(head.headers["upload-offset"], "5")
            }
        }

        // The IETF draft: the completing append answers a problem with the hook's status and words.
        let ietf = try curlRequest(
            "POST", server.url + "/resumable/infected-ietf.bin", headers: ["Upload-Complete: ?0", "Upload-Length: 5", "Content-Length: 0"], in: work)
        XCTAssertEqual(ietf.status, 201, ietf.text)
        let resource = try XCTUnwrap(ietf.headers["location"])
        let appended = try curlRequest(
            "PATCH", resource, headers: ["Content-Type: application/partial-upload", "Upload-Offset: 0", "Upload-Complete: ?1"], body: hello, in: work)
        XCTAssertEqual(appended.status, 422, appended.text)
        XCTAssertEqual(appended.headers["content-type"], "application/problem+json")
        XCTAssertEqual((try JSONSerialization.jsonObject(with: appended.body) as? [String: Any])?["title"] as? String, "malware found")
        XCTAssertEqual(try curlRequest("HEAD", resource, in: work).status, 404)

        // patch: POST …/complete answers it; the upload is unknown afterwards. A scan slower than
        // --hook-timeout refuses as well: 503 with Retry-After, and the upload discarded.
        for (name, status) in [("infected-patch.bin", 422), ("slowscan-patch.bin", 503)] {
            let created = try curlRequest(
                "POST", server.url + "/uploads", headers: ["Content-Type: application/json"],
                body: Data(#"{"fileName":"\#(name)","size":5,"chunkSize":5}"#.utf8), in: work)
            XCTAssertEqual(created.status, 201, created.text)
            let id = try XCTUnwrap((try JSONSerialization.jsonObject(with: created.body) as? [String: Any])?["uploadId"] as? String)
            let chunk = try curlRequest("PATCH", server.url + "/uploads/\(id)/chunks/1", headers: ["Content-Range: bytes 0-4/5"], body: hello, in: work)
            XCTAssertEqual(chunk.status, 204, chunk.text)
            let completed = try curlRequest("POST", server.url + "/uploads/\(id)/complete", in: work)
            XCTAssertEqual(completed.status, status, "\(name): \(completed.text)")
            if status == 503 {
                XCTAssertEqual(completed.headers["retry-after"], "2", name)
                XCTAssertTrue(completed.text.contains("the upload was discarded"), completed.text)
            } else {
                XCTAssertEqual(try JSONSerialization.jsonObject(with: completed.body) as? [String: String], ["error": "malware found"])
            }
            XCTAssertEqual(try curlRequest("GET", server.url + "/uploads/\(id)", in: work).status, 404, name)
        }

        // multipart: isFinish.do answers the envelope with the hook's code, naming the file.
        let preload = try post(server.url + "/fileSection/preLoad.do", ["--data-urlencode", "sourceId=scan", "--data-urlencode", "fileCount=1"])
        let fileId = try XCTUnwrap(((preload.answer["data"] as? [String: Any])?["fileIds"] as? [String])?.first)
        XCTAssertEqual(code(try sendFragment(server.url, sourceId: "scan", fileId: fileId, name: "infected-mp.bin", bytes: hello, fragmentSize: 5, index: 0).answer), 200)
        let checked = try post(server.url + "/fileSection/isFinish.do", ["--data-urlencode", "sourceId=scan", "--data-urlencode", "fileIds=\(fileId)"])
        XCTAssertEqual(checked.status, 200)
        XCTAssertEqual(code(checked.answer), 422, "\(checked.answer)")
        XCTAssertEqual(checked.answer["msg"] as? String, "fileId \(fileId): malware found")

        let seen = events(in: log) { !self.events($0, "post-finish", path: "clean.bin").isEmpty }
        for name in ["infected.bin", "clean.bin", "infected-ietf.bin", "infected-patch.bin", "slowscan-patch.bin", "infected-mp.bin"] {
            let asked = events(seen, "pre-finish", path: name)
            XCTAssertEqual(asked.count, 1, "\(name): \(seen)")
            XCTAssertEqual(upload(asked.first ?? [:])["size"] as? Int, 5, name)
            XCTAssertNotNil(upload(asked.first ?? [:])["id"] as? String, name)
        }
        XCTAssertEqual(events(seen, "post-finish").compactMap { upload($0)["path"] as? String }, ["clean.bin"], "only the accepted file finished")
        let order = seen.filter { upload($0)["path"] as? String == "clean.bin" }.compactMap { $0["type"] as? String }
        XCTAssertEqual(order, ["pre-create", "pre-finish", "post-finish"])
    }

    // MARK: post-receive

    /// A 6 MiB IETF push in 256 KiB appends over about 3 s (--limit-rate): `post-receive` comes at
    /// most once per upload per --hook-progress-interval (1 s), at least once, each saying more
    /// bytes than the last and fewer than the file's. (Not tus: xfer sends a tus file as
    /// partial uploads of one PATCH each, which end with the PATCH that starts them; not patch:
    /// on an object store its chunks are at least 8 MiB.)
    func testPostReceiveIsPacedPerUpload() throws {
        let log = work.file("events.jsonl")
        let (hook, hookURL) = try startHookServer(log: log)
        defer { hook.kill(); hook.wait() }
        let server = try ServeProcess(root: work.file("server"), extraArguments: ["--hook-url", hookURL, "--hook-progress-interval", "1s"])
        let size = 6 << 20
        let file = work.file("progress.bin")
        try makeTestFile(at: file, size: size, seed: 9)

        let started = Date()
        let push = try runXfer([
            "push", file, "--backend", "ietf", "--to", server.url + "/resumable/", "--state", work.file("s"), "--chunk-size", "256KiB",
            "--limit-rate", "2M",
        ])
        let seconds = Date().timeIntervalSince(started)
        XCTAssertEqual(push.status, 0, push.stderr)

        let seen = events(in: log) { !self.events($0, "post-finish").isEmpty }
        let progress = events(seen, "post-receive")
        XCTAssertGreaterThanOrEqual(progress.count, 1, "\(seen)")
        XCTAssertLessThanOrEqual(progress.count, Int(seconds) + 1, "at most one per second over \(seconds) s: \(progress.count)")
        if seconds >= 2 { XCTAssertGreaterThanOrEqual(progress.count, 2, "over \(seconds) s, progress more than once") }
        let received = progress.compactMap { upload($0)["received"] as? Int }
        XCTAssertEqual(received.count, progress.count, "\(progress)")
        XCTAssertEqual(received, received.sorted(), "\(received)")
        XCTAssertEqual(Set(received).count, received.count, "\(received)")
        XCTAssertTrue(received.allSatisfy { $0 > 0 && $0 < size }, "\(received)")
        XCTAssertTrue(progress.allSatisfy { upload($0)["size"] as? Int == size && upload($0)["path"] as? String == "progress.bin" })
        // Apart by the interval (less a margin for the hook server's clock and scheduling).
        let times = progress.compactMap { $0["at"] as? Double }
        for (earlier, later) in zip(times, times.dropFirst()) {
            XCTAssertGreaterThan(later - earlier, 0.8, "\(times)")
        }
    }

    // MARK: Environment, concurrency, the token

    /// A hook script dumps its environment: the receiver's credentials and everything else not
    /// on the allow-list stay out; PATH, the locale, `XFER_HOOK_*` and `XFER_HOOK_EVENT` come in.
    /// A `post-receive` executable is run too (file hooks have every event).
    func testHooksGetAnAllowListedEnvironment() throws {
        let hooks = work.file("hooks")
        let dump = work.file("env-pre-create.txt")
        try writeHook(hooks, "pre-create", "#!/bin/bash\ncat > /dev/null\nenv > '\(dump)'\n")
        try writeHook(hooks, "post-receive", "#!/bin/bash\ncat >> '\(work.file("progress.jsonl"))'\necho >> '\(work.file("progress.jsonl"))'\n")
        let token = "hook-env-secret-41"
        let secrets = [
            "XFER_AUTH_TOKEN": token, "AWS_CONTAINER_AUTHORIZATION_TOKEN": "aws-container-secret-7", "AWS_SECRET_ACCESS_KEY": "aws-key-secret-3",
            "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE", "DATABASE_URL": "postgres://u:db-secret-5@h/d",
        ]
        let (child, url) = try startServer(
            "xfer serve", executable: xferExecutable,
            arguments: ["serve", "--port", "0", "--root", work.file("server"), "--hooks-dir", hooks],
            environment: ProcessInfo.processInfo.environment.merging(secrets.merging(["XFER_HOOK_GREETING": "hello", "LANG": "C.UTF-8"]) { $1 }) { $1 })
        defer { child.kill(SIGTERM); child.wait() }

        let created = try curlRequest(
            "POST", url + "/files/", headers: ["Authorization: Bearer \(token)", "Tus-Resumable: 1.0.0", "Upload-Length: 10"], in: work)
        XCTAssertEqual(created.status, 201, created.text)
        let location = try XCTUnwrap(created.headers["location"])
        let patched = try curlRequest(
            "PATCH", location,
            headers: ["Authorization: Bearer \(token)", "Tus-Resumable: 1.0.0", "Upload-Offset: 0", "Content-Type: application/offset+octet-stream"],
            body: Data("hello".utf8), in: work)
        XCTAssertEqual(patched.status, 204)

        let environment = try String(contentsOfFile: dump, encoding: .utf8)
        let names = Set(environment.split(separator: "\n").compactMap { $0.split(separator: "=", maxSplits: 1).first.map(String.init) })
        XCTAssertFalse(names.contains { $0.hasPrefix("AWS_") }, "\(names)")
        for secret in secrets.values { XCTAssertFalse(environment.contains(secret), "a secret of the receiver's reached the hook: \(names)") }
        XCTAssertFalse(names.contains("XFER_AUTH_TOKEN"))
        XCTAssertFalse(names.contains("DATABASE_URL"))
        XCTAssertTrue(environment.contains("XFER_HOOK_GREETING=hello\n"), environment)
        XCTAssertTrue(environment.contains("XFER_HOOK_EVENT=pre-create\n"), environment)
        XCTAssertTrue(environment.contains("LANG=C.UTF-8\n"), environment)
        XCTAssertTrue(names.contains("PATH"), environment)
        let allowed: Set<String> = ["PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "PWD", "SHLVL", "_", "OLDPWD"]
        let strangers = names.filter { !allowed.contains($0) && !$0.hasPrefix("LC_") && !$0.hasPrefix("XFER_HOOK_") }
        XCTAssertTrue(strangers.isEmpty, "not on the allow-list: \(strangers)")

        XCTAssertTrue(waitForFile(work.file("progress.jsonl")), "the post-receive executable ran")
        let progress = events(in: work.file("progress.jsonl")) { !$0.isEmpty }
        XCTAssertEqual(progress.first?["type"] as? String, "post-receive")
        XCTAssertEqual(upload(progress.first ?? [:])["received"] as? Int, 5)
    }

    /// 20 creations at once against a pre-create script that takes 0.5 s, with --hook-concurrency 3:
    /// every creation succeeds, and no more than 3 scripts ever run at once (each counts the
    /// scripts running as it starts). Then, with one slot held by a hook that waits: a creation
    /// that waits longer than --hook-timeout for a slot is refused (503, Retry-After) and its hook
    /// never runs.
    func testHookCallsAreCapped() throws {
        let hooks = work.file("hooks")
        let running = work.file("running")
        let counts = work.file("counts")
        try FileManager.default.createDirectory(atPath: running, withIntermediateDirectories: true)
        try writeHook(hooks, "pre-create", """
            #!/bin/bash
            cat > /dev/null
            touch '\(running)'/$$
            ls '\(running)' | wc -l >> '\(counts)'
            sleep 0.5
            rm '\(running)'/$$
            """)
        let server = try ServeProcess(
            root: work.file("server"), extraArguments: ["--hooks-dir", hooks, "--hook-concurrency", "3", "--hook-timeout", "15s"])
        let creations = try (0..<20).map { _ in
            try ChildProcess(
                executable: "/usr/bin/curl",
                arguments: ["-sS", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST", "-H", "Tus-Resumable: 1.0.0", "-H", "Upload-Length: 1",
                    server.url + "/files/"])
        }
        let statuses = creations.map { child in
            let status = child.readRemaining().joined()
            child.wait()
            return status
        }
        XCTAssertEqual(statuses, Array(repeating: "201", count: 20))
        let observed = try String(contentsOfFile: counts, encoding: .utf8).split(separator: "\n").compactMap { Int($0.trimmingCharacters(in: .whitespaces)) }
        XCTAssertEqual(observed.count, 20)
        XCTAssertLessThanOrEqual(observed.max() ?? 0, 3, "more hooks at once than --hook-concurrency 3: \(observed)")
        XCTAssertGreaterThanOrEqual(observed.max() ?? 0, 2, "the hooks never ran side by side: \(observed)")

        // One slot; each hook marks its start (by path) and waits for its release file.
        let waiting = work.file("waiting-hooks")
        try writeHook(waiting, "pre-create", """
            #!/bin/bash
            name=$(grep -o '"path":"[^"]*"' | head -1 | cut -d'"' -f4)
            touch '\(work.path)'/started-$name
            while [ ! -e '\(work.path)'/release ]; do sleep 0.05; done
            """)
        let capped = try ServeProcess(
            root: work.file("server2"), extraArguments: ["--hooks-dir", waiting, "--hook-concurrency", "1", "--hook-timeout", "3s"])
        func create(_ name: String) throws -> ChildProcess {
            try ChildProcess(
                executable: "/usr/bin/curl",
                arguments: ["-sS", "-D", "-", "-o", "/dev/null", "-X", "POST", "-H", "Tus-Resumable: 1.0.0", "-H", "Upload-Length: 1",
                    "-H", "Upload-Metadata: filename \(Data(name.utf8).base64EncodedString())", capped.url + "/files/"])
        }
        let first = try create("a")
        XCTAssertTrue(waitForFile(work.file("started-a")), "the first hook started")
        // Two more wait for the slot: the one ahead takes it when the first hook's 3 s are up,
        // and its hook starts; the other waits behind it, past its own 3 s, and is refused.
        let waiters = ["b": try create("b"), "c": try create("c")]
        let deadline = Date().addingTimeInterval(20)
        var holder: String?
        while holder == nil, Date() < deadline {
            holder = waiters.keys.first { FileManager.default.fileExists(atPath: work.file("started-\($0)")) }
            if holder == nil { usleep(20_000) }
        }
        let taker = try XCTUnwrap(holder, "no waiting creation got the slot")
        let refusedName = taker == "b" ? "c" : "b"
        let refusedChild = try XCTUnwrap(waiters[refusedName])
        let answer = refusedChild.readRemaining()
        refusedChild.wait()
        XCTAssertTrue(answer.first?.contains(" 503") ?? false, "\(answer)")
        XCTAssertTrue(answer.contains { $0.lowercased().hasPrefix("retry-after: 2") }, "\(answer)")
        XCTAssertFalse(FileManager.default.fileExists(atPath: work.file("started-\(refusedName)")), "the refused creation's hook never ran")
        FileManager.default.createFile(atPath: work.file("release"), contents: Data())
        for child in [first] + Array(waiters.values) where child !== refusedChild {
            _ = child.readRemaining()
            child.wait()
        }
    }

    /// `--auth-token-file`: the token is nowhere on the receiver's command line (what any local
    /// user reads in /proc/PID/cmdline), and it is required all the same. `--auth-token` still
    /// works, with a warning; a token file others may read, with a warning too.
    func testTheTokenIsNotOnTheCommandLine() throws {
        let token = "file-token-\(UUID().uuidString.prefix(8))"
        let tokenFile = work.file("token")
        try (token + "\n").write(toFile: tokenFile, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(tokenFile, 0o600), 0)
        let server = try ServeProcess(root: work.file("server"), extraArguments: ["--auth-token-file", tokenFile])
        let commandLine = try XCTUnwrap(FileManager.default.contents(atPath: "/proc/\(server.child.pid)/cmdline"))
        XCTAssertFalse(String(decoding: commandLine, as: UTF8.self).contains(token), "the token is on the command line")
        XCTAssertTrue(String(decoding: commandLine, as: UTF8.self).contains("--auth-token-file"))
        let refused = try curlRequest("POST", server.url + "/files/", headers: ["Tus-Resumable: 1.0.0", "Upload-Length: 1"], in: work)
        XCTAssertEqual(refused.status, 401)
        XCTAssertFalse(refused.text.contains(token))
        let allowed = try curlRequest(
            "POST", server.url + "/files/", headers: ["Authorization: Bearer \(token)", "Tus-Resumable: 1.0.0", "Upload-Length: 1"], in: work)
        XCTAssertEqual(allowed.status, 201)

        // The warnings, seen on a receiver stopped by a later bad flag (one warning line, one error line).
        XCTAssertEqual(chmod(tokenFile, 0o644), 0)
        let readable = try runXfer(["serve", "--root", work.file("x"), "--auth-token-file", tokenFile, "--tls-cert", "only"])
        XCTAssertEqual(readable.status, 2)
        XCTAssertTrue(readable.stderr.contains("warning: --auth-token-file \(tokenFile) can be read by other users"), readable.stderr)
        let inline = try runXfer(["serve", "--root", work.file("x"), "--auth-token", token, "--tls-cert", "only"])
        XCTAssertEqual(inline.status, 2)
        XCTAssertTrue(inline.stderr.contains("warning: --auth-token puts the token on the command line"), inline.stderr)
        for result in [readable, inline] { XCTAssertFalse(result.stderr.contains(token), "the token was printed: \(result.stderr)") }
    }

    /// The new flags' bad values: exit 2 and one line, naming the flag; a hook URL read from a
    /// file is never repeated in an error.
    func testBadHookAndTokenFlags() throws {
        let hookURLFile = work.file("hook-url")
        try "ftp://user:url-secret-8@hooks.example/\n".write(toFile: hookURLFile, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(hookURLFile, 0o600), 0)
        let root = work.file("srv")
        let rows: [(String, [String], String)] = [
            ("--hook-concurrency 0", ["--hook-url", "http://127.0.0.1:9/", "--hook-concurrency", "0"], "--hook-concurrency"),
            ("--hook-concurrency without hooks", ["--hook-concurrency", "4"], "--hook-concurrency"),
            ("--hook-progress-interval nonsense", ["--hook-url", "http://127.0.0.1:9/", "--hook-progress-interval", "often"], "--hook-progress-interval"),
            ("--hook-progress-interval without hooks", ["--hook-progress-interval", "1s"], "--hook-progress-interval"),
            ("--hook-url-file of no http URL", ["--hook-url-file", hookURLFile], "--hook-url"),
            ("--hook-url-file missing", ["--hook-url-file", work.file("none")], "--hook-url-file"),
            ("--hook-url and --hook-url-file", ["--hook-url", "http://127.0.0.1:9/", "--hook-url-file", hookURLFile], "--hook-url-file"),
            ("--auth-token-file missing", ["--auth-token-file", work.file("none")], "--auth-token-file"),
            ("--auth-token and --auth-token-file", ["--auth-token", "t", "--auth-token-file", hookURLFile], "--auth-token-file"),
        ]
        for (label, arguments, fragment) in rows {
            let result = try runXfer(["serve", "--root", root] + arguments)
            XCTAssertEqual(result.status, 2, "\(label): \(result.stderr)")
            XCTAssertEqual(result.stderr.split(separator: "\n").count, 1, "\(label): one line, got \(result.stderr)")
            XCTAssertTrue(result.stderr.contains(fragment), "\(label): \(result.stderr)")
            XCTAssertFalse(result.stderr.contains("url-secret-8"), "\(label): the hook URL's credential was printed")
        }
    }
}
