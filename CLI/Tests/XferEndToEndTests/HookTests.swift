import Foundation
import XCTest
import XferTestSupport

/// `xfer serve --hook-url`: the application hears of every upload. A small hook server (Python,
/// standard library) records each event and refuses files whose name says so; the tests push
/// real files and read what it recorded.
final class HookTests: XCTestCase {
    var work: TemporaryDirectory!

    override func setUp() { work = TemporaryDirectory("xfer-hooks") }
    override func tearDown() { work = nil }

    /// The hook: appends each event to a file, one JSON per line, and answers a pre-create by
    /// the path: "forbidden" is refused with 403 and a message; "labelled" gets the metadata
    /// `owner: alice` beside the client's; "badmeta" gets metadata that is not strings; "slow"
    /// is answered (yes) after 3 s. Prints its port.
    private func startHookServer(log: String) throws -> (ChildProcess, String) {
        let script = """
            import http.server, json, sys, time
            log = sys.argv[1]
            class Hook(http.server.BaseHTTPRequestHandler):
                def do_POST(self):
                    body = self.rfile.read(int(self.headers["Content-Length"]))
                    event = json.loads(body)
                    with open(log, "a") as out:
                        out.write(json.dumps(event, sort_keys=True) + "\\n")
                    path = event["upload"].get("path", "") if event["type"] == "pre-create" else ""
                    refused = "forbidden" in path
                    answer = {"message": "no forbidden files here"} if refused else {}
                    if "labelled" in path:
                        answer = {"metadata": dict(event["upload"].get("metadata", {}), owner="alice")}
                    if "badmeta" in path:
                        answer = {"metadata": {"owner": 5}}
                    if "slow" in path:
                        time.sleep(3)
                    answer = json.dumps(answer).encode()
                    self.send_response(403 if refused else 200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(answer)))
                    self.end_headers()
                    self.wfile.write(answer)
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

    private func events(in log: String, until done: ([[String: Any]]) -> Bool) throws -> [[String: Any]] {
        // post-* events arrive in the background: wait for them, within a bound.
        let deadline = Date().addingTimeInterval(20)
        while true {
            let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            let events = text.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
            if done(events) || Date() > deadline { return events }
            usleep(50_000)
        }
    }

    func testTheApplicationAuthorisesCreationsAndHearsOfFinishedAndTerminatedUploads() throws {
        let log = work.file("events.jsonl")
        let (hook, hookURL) = try startHookServer(log: log)
        defer { hook.kill(); hook.wait() }
        let server = try ServeProcess(root: work.file("server"), extraArguments: ["--hook-url", hookURL])
        let file = work.file("clip.bin")
        try makeTestFile(at: file, size: 200_000, seed: 3)

        for (backend, target) in [("tus", server.url + "/files/"), ("ietf", server.url + "/resumable/"), ("patch", server.url)] {
            let push = try runXfer(["push", file, "--backend", backend, "--to", target, "--state", work.file("s-\(backend)")])
            XCTAssertEqual(push.status, 0, "\(backend): \(push.stderr)")
        }
        var seen = try events(in: log) { $0.filter { $0["type"] as? String == "post-finish" }.count >= 3 }
        for protocolName in ["tus", "ietf", "patch"] {
            let created = seen.filter { $0["type"] as? String == "pre-create" && $0["protocol"] as? String == protocolName }
            let finished = seen.filter { $0["type"] as? String == "post-finish" && $0["protocol"] as? String == protocolName }
            XCTAssertEqual(created.count, 1, "\(protocolName): \(seen)")
            XCTAssertEqual((created.first?["upload"] as? [String: Any])?["size"] as? Int, 200_000, protocolName)
            XCTAssertEqual(finished.count, 1, "\(protocolName): \(seen)")
            let upload = finished.first?["upload"] as? [String: Any]
            XCTAssertEqual(upload?["path"] as? String, "clip.bin", protocolName)
            XCTAssertEqual(upload?["size"] as? Int, 200_000, protocolName)
            XCTAssertNotNil(upload?["id"] as? String, protocolName)
            // Where the file is on disk, whatever the layout put it: the application reads it there.
            let published = try XCTUnwrap(upload?["file"] as? String, "\(protocolName): \(String(describing: upload))")
            XCTAssertTrue(published.hasPrefix("/"), published)
            XCTAssertEqual(FileManager.default.contents(atPath: published), FileManager.default.contents(atPath: file), protocolName)
            let asked = seen.first { $0["type"] as? String == "pre-finish" && $0["protocol"] as? String == protocolName }
            XCTAssertEqual((asked?["upload"] as? [String: Any])?["file"] as? String, published, "pre-finish is told it too")
        }

        // Refused by the application: the client sees its status and words, nothing is stored.
        let forbidden = work.file("forbidden.bin")
        try makeTestFile(at: forbidden, size: 1000, seed: 4)
        let refused = try runXfer(["push", forbidden, "--backend", "tus", "--to", server.url + "/files/", "--state", work.file("s-refused")])
        XCTAssertNotEqual(refused.status, 0)
        XCTAssertTrue(refused.stderr.contains("no forbidden files here"), refused.stderr)
        XCTAssertTrue(refused.stderr.contains("403"), refused.stderr)

        // A termination, as a tus client's cancel sends it.
        let created = try curlRequest("POST", server.url + "/files/", headers: ["Tus-Resumable: 1.0.0", "Upload-Length: 5"], in: work)
        let location = try XCTUnwrap(created.headers["location"])
        XCTAssertEqual(try curlRequest("DELETE", location, headers: ["Tus-Resumable: 1.0.0"], in: work).status, 204)
        seen = try events(in: log) { $0.contains { $0["type"] as? String == "post-terminate" } }
        let terminated = try XCTUnwrap(seen.first { $0["type"] as? String == "post-terminate" }, "\(seen)")
        XCTAssertEqual((terminated["upload"] as? [String: Any])?["id"] as? String, location.split(separator: "/").last.map(storedID))
    }

    func testAHookThatCannotBeReachedRefusesCreationsAndLosesNoBytesOfOthers() throws {
        // Nothing listens on port 9: every pre-create fails, so nothing is created.
        let server = try ServeProcess(root: work.file("server"), extraArguments: ["--hook-url", "http://127.0.0.1:9/hook"])
        let answer = try curlRequest("POST", server.url + "/files/", headers: ["Tus-Resumable: 1.0.0", "Upload-Length: 5"], in: work)
        XCTAssertEqual(answer.status, 503)
        XCTAssertTrue(String(decoding: answer.body, as: UTF8.self).contains("the upload hook did not answer"))
        let ietf = try curlRequest("POST", server.url + "/resumable/", headers: ["Upload-Complete: ?1"], body: Data("hello".utf8), in: work)
        XCTAssertEqual(ietf.status, 503)
        let bad = try runXfer(["serve", "--root", work.file("x"), "--hook-url", "ftp://hooks.example"])
        XCTAssertEqual(bad.status, 2)
        XCTAssertTrue(bad.stderr.contains("--hook-url must be an http(s) URL"), bad.stderr)
    }

    /// tusd's "may set metadata": a pre-create's answer gives the upload metadata, which tus's
    /// HEAD shows and post-finish carries; a hook slower than `--hook-timeout`, or one whose
    /// metadata cannot be kept, refuses the upload (503) and nothing is created.
    func testTheHookGivesUploadsMetadataAndASlowOrGarbledHookRefuses() throws {
        let log = work.file("events.jsonl")
        let (hook, hookURL) = try startHookServer(log: log)
        defer { hook.kill(); hook.wait() }
        let server = try ServeProcess(root: work.file("server"), extraArguments: ["--hook-url", hookURL, "--hook-timeout", "1s"])

        // tus: the client's metadata goes to the hook; the hook's comes back on HEAD.
        let name = Data("labelled.bin".utf8).base64EncodedString()
        let created = try curlRequest(
            "POST", server.url + "/files/", headers: ["Tus-Resumable: 1.0.0", "Upload-Length: 5", "Upload-Metadata: filename \(name)"], in: work)
        XCTAssertEqual(created.status, 201)
        let location = try XCTUnwrap(created.headers["location"])
        let head = try curlRequest("HEAD", location, headers: ["Tus-Resumable: 1.0.0"], in: work)
        let metadata = try XCTUnwrap(head.headers["upload-metadata"])
        XCTAssertEqual(Set(metadata.split(separator: ",").map(String.init)), ["filename \(name)", "owner \(Data("alice".utf8).base64EncodedString())"])
        let patched = try curlRequest(
            "PATCH", location, headers: ["Tus-Resumable: 1.0.0", "Upload-Offset: 0", "Content-Type: application/offset+octet-stream"],
            body: Data("hello".utf8), in: work)
        XCTAssertEqual(patched.status, 204)

        // ietf: the draft has no metadata; the hook's is kept all the same, for post-finish.
        let file = work.file("labelled-ietf.bin")
        try makeTestFile(at: file, size: 70_000, seed: 5)
        let push = try runXfer(["push", file, "--backend", "ietf", "--to", server.url + "/resumable/", "--state", work.file("s-ietf")])
        XCTAssertEqual(push.status, 0, push.stderr)

        let seen = try events(in: log) { $0.filter { $0["type"] as? String == "post-finish" }.count >= 2 }
        let asked = try XCTUnwrap(seen.first { $0["type"] as? String == "pre-create" && $0["protocol"] as? String == "tus" }, "\(seen)")
        XCTAssertEqual((asked["upload"] as? [String: Any])?["metadata"] as? [String: String], ["filename": "labelled.bin"])
        for (protocolName, expected) in [("tus", ["filename": "labelled.bin", "owner": "alice"]), ("ietf", ["owner": "alice"])] {
            let finished = try XCTUnwrap(
                seen.first { $0["type"] as? String == "post-finish" && $0["protocol"] as? String == protocolName }, "\(protocolName): \(seen)")
            XCTAssertEqual((finished["upload"] as? [String: Any])?["metadata"] as? [String: String], expected, protocolName)
        }

        // Too slow (3 s against a 1 s timeout) or unusable: refused, and nothing was created.
        for (file, words) in [("slow.bin", "did not answer"), ("badmeta.bin", "could not be used")] {
            let answer = try curlRequest(
                "POST", server.url + "/files/",
                headers: ["Tus-Resumable: 1.0.0", "Upload-Length: 5", "Upload-Metadata: filename \(Data(file.utf8).base64EncodedString())"], in: work)
            XCTAssertEqual(answer.status, 503, file)
            XCTAssertNil(answer.headers["location"], file)
            XCTAssertTrue(String(decoding: answer.body, as: UTF8.self).contains(words), "\(file): \(String(decoding: answer.body, as: UTF8.self))")
        }
        let metrics = try runToEnd("/usr/bin/curl", ["-fsS", server.url + "/metrics"]).stdout
        let tusCreated = metrics.filter {
            $0.hasPrefix("xfer_receiver_uploads_total{") && $0.contains(#"protocol="tus""#) && $0.contains(#"event="created""#)
        }
        XCTAssertEqual(tusCreated.map { $0.split(separator: " ").last.map(String.init) ?? "" }, ["1"], "\(metrics)")

        for arguments in [["--hook-url", hookURL, "--hook-timeout", "0s"], ["--hook-timeout", "2s"]] {
            let bad = try runXfer(["serve", "--root", work.file("x")] + arguments)
            XCTAssertEqual(bad.status, 2, "\(arguments)")
            XCTAssertTrue(bad.stderr.contains("--hook-timeout"), bad.stderr)
        }
    }

    /// `--hooks-dir`: tusd's file hooks. The executables that exist are run with the event on
    /// their standard input, without the receiver's credentials in their environment; a refusal
    /// carries its status and words; metadata comes back as with HTTP hooks; a hook past its
    /// timeout is killed with what it started, and the upload refused.
    func testExecutablesInAHooksDirectory() throws {
        let hooks = work.file("hooks")
        try FileManager.default.createDirectory(atPath: hooks, withIntermediateDirectories: true)
        let log = work.file("events.jsonl")
        let scripts = [
            "pre-create": """
                #!/bin/bash
                event=$(cat)
                echo "$event" >> '\(log)'
                echo "environment token: ${XFER_AUTH_TOKEN:-none}" >> '\(log)'
                case "$event" in
                  *forbidden*) echo '{"status": 451, "message": "not this one"}'; exit 1 ;;
                  *labelled*) echo '{"metadata": {"owner": "bob"}}' ;;
                  *slow*) sleep 37 & wait ;;
                esac
                exit 0
                """,
            // No post-terminate: that event is not hooked.
            "post-finish": "#!/bin/bash\ncat >> '\(log)'; echo >> '\(log)'\n",
        ]
        for (name, text) in scripts {
            try text.write(toFile: hooks + "/" + name, atomically: true, encoding: .utf8)
            XCTAssertEqual(chmod(hooks + "/" + name, 0o755), 0)
        }
        let token = "hook-secret-9"
        let (child, url) = try startServer(
            "xfer serve", executable: xferExecutable,
            arguments: ["serve", "--port", "0", "--root", work.file("server"), "--hooks-dir", hooks, "--hook-timeout", "1s"],
            environment: ProcessInfo.processInfo.environment.merging(["XFER_AUTH_TOKEN": token]) { $1 })
        defer { child.kill(SIGTERM); child.wait() }
        let authorization = "Authorization: Bearer \(token)"

        let file = work.file("labelled.bin")
        try makeTestFile(at: file, size: 100_000, seed: 6)
        let push = try runXfer(["push", file, "--backend", "tus", "--to", url + "/files/", "--state", work.file("s"), "--token", token])
        XCTAssertEqual(push.status, 0, push.stderr)
        let seen = try events(in: log) { $0.contains { $0["type"] as? String == "post-finish" } }
        let finished = try XCTUnwrap(seen.first { $0["type"] as? String == "post-finish" }, "\(seen)")
        XCTAssertEqual((finished["upload"] as? [String: Any])?["metadata"] as? [String: String], ["owner": "bob"])
        XCTAssertEqual((finished["upload"] as? [String: Any])?["size"] as? Int, 100_000)

        let refused = try curlRequest(
            "POST", url + "/files/",
            headers: [authorization, "Tus-Resumable: 1.0.0", "Upload-Length: 5", "Upload-Metadata: filename \(Data("forbidden.bin".utf8).base64EncodedString())"],
            in: work)
        XCTAssertEqual(refused.status, 451)
        XCTAssertTrue(String(decoding: refused.body, as: UTF8.self).contains("not this one"))

        // A hook that outlives its 1 s, with a child holding its output: both are killed, and
        // the answer does not wait for the child's 37 s.
        let started = Date()
        let slow = try curlRequest(
            "POST", url + "/files/",
            headers: [authorization, "Tus-Resumable: 1.0.0", "Upload-Length: 5", "Upload-Metadata: filename \(Data("slow.bin".utf8).base64EncodedString())"],
            in: work)
        XCTAssertEqual(slow.status, 503)
        XCTAssertLessThan(Date().timeIntervalSince(started), 20, "the answer waited for the hook's child")
        // Killed, not left behind: the hook's child is gone too (its whole process group).
        let deadline = Date().addingTimeInterval(5)
        var lingering = true
        while lingering, Date() < deadline {
            lingering = try runToEnd("/usr/bin/pgrep", ["-f", "sleep 37"]).status == 0
            if lingering { usleep(50_000) }
        }
        XCTAssertFalse(lingering, "the slow hook's child outlived it")

        // Not hooked: a termination goes through with no post-terminate executable.
        let created = try curlRequest("POST", url + "/files/", headers: [authorization, "Tus-Resumable: 1.0.0", "Upload-Length: 5"], in: work)
        let location = try XCTUnwrap(created.headers["location"])
        XCTAssertEqual(try curlRequest("DELETE", location, headers: [authorization, "Tus-Resumable: 1.0.0"], in: work).status, 204)

        let text = try String(contentsOfFile: log, encoding: .utf8)
        XCTAssertTrue(text.contains("environment token: none"), text)
        XCTAssertFalse(text.contains(token), "the receiver's token reached a hook")

        for arguments in [["--hooks-dir", work.file("missing")], ["--hooks-dir", hooks, "--hook-url", "http://127.0.0.1:9/"]] {
            let bad = try runXfer(["serve", "--root", work.file("x")] + arguments)
            XCTAssertEqual(bad.status, 2, "\(arguments)")
            XCTAssertTrue(bad.stderr.contains("--hooks-dir"), bad.stderr)
        }
    }
}
