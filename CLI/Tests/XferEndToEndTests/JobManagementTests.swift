import Foundation
import XCTest
import XferTestSupport

/// `xfer resume`, `list`, `status` and `cancel` end to end: the real binary,
/// real LMDB and libcurl, and a real `xfer serve` on 127.0.0.1.
final class JobManagementTests: XCTestCase {
    var work: TemporaryDirectory!
    var server: ServeProcess!

    override func setUpWithError() throws {
        work = TemporaryDirectory("xfer-jobs")
        server = try ServeProcess(root: work.file("server"))
    }

    override func tearDown() {
        server = nil
        work = nil
    }

    private var state: String { work.file("state") }

    private func xfer(_ arguments: [String]) throws -> RunResult {
        try runXfer(arguments + ["--state", state])
    }

    /// Starts a push and kills it with SIGKILL once the server acknowledged
    /// a chunk; returns the job id. SIGSTOP first freezes the push where it
    /// is, so it cannot finish between the acknowledgement and the kill.
    private func interruptedPush(_ file: String, _ extra: [String] = []) throws -> String {
        try interruptedPush([file], backend: "patch", extra)
    }

    private func interruptedPush(_ files: [String], backend: String, _ extra: [String] = []) throws -> String {
        try pushKilledAfterFirstChunk(
            ["push"] + files + ["--backend", backend, "--to", server.url, "--state", state,
                                "--chunk-size", "64KiB", "--concurrency", "1", "--json"] + extra)
    }

    private func listJSON(all: Bool = false) throws -> [[String: Any]] {
        let result = try xfer(["list", "--json"] + (all ? ["--all"] : []))
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(result.stdout.count, 1, "one JSON document: \(result.stdout)")
        return try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(result.stdout.joined().utf8)) as? [[String: Any]])
    }

    private func statusJSON(_ job: String) throws -> [String: Any] {
        let result = try xfer(["status", job, "--json"])
        XCTAssertEqual(result.status, 0, result.stderr)
        return try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(result.stdout.joined().utf8)) as? [String: Any])
    }

    func testResumeWithoutArgumentsFinishesEveryUnfinishedJob() throws {
        let files = (0..<3).map { work.file("file\($0).bin") }
        for (index, file) in files.enumerated() { try makeTestFile(at: file, size: 8 << 20, seed: UInt64(10 + index)) }
        let ids = try files.map { try interruptedPush($0) }
        XCTAssertEqual(Set(ids).count, 3)
        // A completed job, which resume must leave alone.
        let done = work.file("done.bin")
        try makeTestFile(at: done, size: 100_000)
        let pushed = try xfer(["push", done, "--backend", "patch", "--to", server.url])
        XCTAssertEqual(pushed.status, 0, pushed.stderr)

        let before = try listJSON()
        XCTAssertEqual(Set(before.compactMap { $0["id"] as? String }), Set(ids))
        for job in before {
            XCTAssertEqual(job["state"] as? String, "unfinished")
            XCTAssertGreaterThan(int(job["doneBytes"]), 0)
            XCTAssertLessThan(int(job["doneBytes"]), 8 << 20)
        }

        let resumed = try xfer(["resume", "--json"])
        XCTAssertEqual(resumed.status, 0, resumed.stderr)
        XCTAssertEqual(resumed.events.count, resumed.stdout.count, "every line is JSON")
        XCTAssertTrue(resumed.events.allSatisfy { $0["job"] as? String != nil }, "every event names its job")
        let completed = resumed.events.filter { $0["event"] as? String == "completed" }
        XCTAssertEqual(Set(completed.compactMap { $0["job"] as? String }), Set(ids), "exactly the unfinished jobs ran")
        let starts = resumed.events.filter { $0["event"] as? String == "started" }
        XCTAssertEqual(starts.count, 3)
        XCTAssertTrue(starts.allSatisfy { $0["resumed"] as? Bool == true && int($0["doneBytes"]) > 0 }, "\(starts)")
        for event in completed {
            let file = try XCTUnwrap((event["files"] as? [[String: Any]])?.first)
            let path = try XCTUnwrap(file["path"] as? String)
            XCTAssertEqual(try downloadSHA256(try XCTUnwrap(file["url"] as? String), into: work), try sha256sum(path), path)
        }

        XCTAssertEqual(try listJSON().count, 0, "nothing unfinished is left")
        let kept = try listJSON(all: true)
        XCTAssertEqual(kept.count, 4)
        XCTAssertTrue(kept.allSatisfy { $0["state"] as? String == "completed" && int($0["doneBytes"]) == int($0["totalBytes"]) })

        let again = try xfer(["resume"])
        XCTAssertEqual(again.status, 0, again.stderr)
        XCTAssertTrue(again.stdout.isEmpty, "nothing to resume: \(again.stdout)")
    }

    func testCancelDropsTheUploadOnTheServerAndTheLocalState() throws {
        let file = work.file("a.bin")
        try makeTestFile(at: file, size: 8 << 20)
        let job = try interruptedPush(file)
        let status = try statusJSON(job)
        let handles = try XCTUnwrap((status["files"] as? [[String: Any]])?.first?["handles"] as? [String: String])
        let uploadID = try XCTUnwrap(handles["uploadId"])
        XCTAssertEqual(try httpStatus(server.url + "/uploads/" + uploadID), 200)

        // While a process runs the job, cancel is refused and nothing changes.
        let running = try ChildProcess(
            executable: xferExecutable,
            arguments: ["push", file, "--backend", "patch", "--to", server.url, "--state", state,
                        "--chunk-size", "64KiB", "--concurrency", "1", "--json"])
        XCTAssertNotNil(running.readLine { $0.contains("\"event\":\"started\"") })
        running.kill(SIGSTOP)
        XCTAssertEqual(try listJSON().first?["state"] as? String, "running")
        XCTAssertEqual(int(try listJSON().first?["pid"]), Int(running.pid))
        let refused = try xfer(["cancel", job])
        XCTAssertEqual(refused.status, 3, refused.stderr)
        XCTAssertTrue(refused.stderr.contains("locked by pid \(running.pid)"), refused.stderr)
        running.kill(SIGKILL)
        running.wait()
        XCTAssertEqual(try httpStatus(server.url + "/uploads/" + uploadID), 200)

        let cancelled = try xfer(["cancel", String(job.prefix(8)), "--json"])
        XCTAssertEqual(cancelled.status, 0, cancelled.stderr)
        let report = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(cancelled.stdout.joined().utf8)) as? [String: Any])
        XCTAssertEqual(report["job"] as? String, job)
        let requests = try XCTUnwrap(report["requests"] as? [[String: Any]])
        XCTAssertEqual(requests.count, 1)
        XCTAssertEqual(requests.first?["method"] as? String, "DELETE")
        XCTAssertEqual(int(requests.first?["status"]), 204)

        XCTAssertEqual(try httpStatus(server.url + "/uploads/" + uploadID), 404, "the server dropped the upload")
        let gone = try xfer(["status", job])
        XCTAssertEqual(gone.status, 2, gone.stderr)
        XCTAssertTrue(gone.stderr.contains("no job"), gone.stderr)
        XCTAssertFalse(try listJSON(all: true).contains { $0["id"] as? String == job })
        XCTAssertFalse(FileManager.default.fileExists(atPath: state + "/locks/\(job).lock"), "the lock file goes too")

        // The same push now starts afresh and still arrives intact.
        let fresh = try xfer(["push", file, "--backend", "patch", "--to", server.url, "--json"])
        XCTAssertEqual(fresh.status, 0, fresh.stderr)
        XCTAssertEqual(fresh.events.first?["resumed"] as? Bool, false)
    }

    func testCancelOfAMultipartJobDeletesItsSourceOnTheServer() throws {
        let files = [work.file("a.mp4"), work.file("b.mp4")]
        for (index, file) in files.enumerated() { try makeTestFile(at: file, size: 4 << 20, seed: UInt64(30 + index)) }
        let job = try interruptedPush(files, backend: "multipart")
        let status = try statusJSON(job)
        let sourceID = try XCTUnwrap((status["handles"] as? [String: String])?["sourceId"])
        let fileIDs = try XCTUnwrap(status["files"] as? [[String: Any]]).compactMap {
            ($0["handles"] as? [String: String])?["fileId"]
        }
        XCTAssertEqual(fileIDs.count, 2)
        let check = "sourceId=\(sourceID)&fileIds=\(fileIDs.joined(separator: ","))"
        XCTAssertEqual(int(try postForm(server.url + "/fileSection/isFinish.do", check)["code"]), 200, "the server knows the source")

        let cancelled = try xfer(["cancel", job, "--json"])
        XCTAssertEqual(cancelled.status, 0, cancelled.stderr)
        let report = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(cancelled.stdout.joined().utf8)) as? [String: Any])
        let request = try XCTUnwrap((report["requests"] as? [[String: Any]])?.first)
        XCTAssertTrue((request["url"] as? String)?.hasSuffix("/fileSection/delete.do") ?? false, "\(request)")
        XCTAssertEqual(request["succeeded"] as? Bool, true, "\(request)")

        XCTAssertEqual(int(try postForm(server.url + "/fileSection/isFinish.do", check)["code"]), 404, "the source is gone")
        XCTAssertEqual(try xfer(["status", job]).status, 2)
    }

    func testCancelOfASequenceJobDropsOnlyLocalState() throws {
        let file = work.file("a.bin")
        try makeTestFile(at: file, size: 4 << 20)
        let job = try interruptedPush([file], backend: "sequence")
        let cancelled = try xfer(["cancel", job])
        XCTAssertEqual(cancelled.status, 0, cancelled.stderr)
        XCTAssertEqual(cancelled.stdout.first, "cancelled \(job)")
        XCTAssertTrue(cancelled.stdout.joined().contains("no call to drop an upload"), "\(cancelled.stdout)")
        XCTAssertEqual(try xfer(["status", job]).status, 2)
        XCTAssertFalse(try listJSON(all: true).contains { $0["id"] as? String == job })
    }

    func testListAndStatusShowProgressAndNoSecrets() throws {
        let file = work.file("a.bin")
        let size = 8 << 20
        try makeTestFile(at: file, size: size)
        let token = "tok-\(UUID().uuidString)"
        let header = "hdr-\(UUID().uuidString)"
        let job = try interruptedPush(file, ["--token", token, "--header", "X-Api-Key: \(header)"])

        let text = try xfer(["list"])
        XCTAssertEqual(text.status, 0, text.stderr)
        XCTAssertEqual(text.stdout.count, 2, "a header and one line per job: \(text.stdout)")
        XCTAssertEqual(text.stdout.first?.split(separator: " ").map(String.init), ["JOB", "STATE", "BACKEND", "FILES", "DONE", "AGE", "TARGET"])
        let line = try XCTUnwrap(text.stdout.last)
        for fragment in [job, "unfinished", "patch", "/ 8.0 MiB", server.url] {
            XCTAssertTrue(line.contains(fragment), "'\(fragment)' missing from \(line)")
        }

        let listed = try XCTUnwrap(try listJSON().first)
        XCTAssertEqual(listed["id"] as? String, job)
        XCTAssertEqual(listed["backend"] as? String, "patch")
        XCTAssertEqual(listed["files"] as? [String], [file])
        XCTAssertEqual(int(listed["totalBytes"]), size)
        XCTAssertTrue(listed["pid"] is NSNull)

        let status = try statusJSON(String(job.prefix(6)))
        XCTAssertEqual(status["id"] as? String, job)
        let detail = try XCTUnwrap((status["files"] as? [[String: Any]])?.first)
        XCTAssertEqual(int(detail["chunkCount"]), size / 65536)
        XCTAssertEqual(int(detail["chunkSize"]), 65536)
        let chunksDone = int(detail["chunksDone"])
        XCTAssertGreaterThan(chunksDone, 0)
        XCTAssertEqual(int(detail["doneBytes"]), chunksDone * 65536)
        XCTAssertEqual(int(status["doneBytes"]), int(listed["doneBytes"]), "list and status agree")
        XCTAssertTrue(detail["url"] is NSNull)
        XCTAssertNotNil((detail["handles"] as? [String: String])?["uploadId"])

        // The server agrees with what the state store calls done.
        let uploadID = try XCTUnwrap((detail["handles"] as? [String: String])?["uploadId"])
        let held = try getJSON(server.url + "/uploads/" + uploadID)["received"] as? [Any]
        XCTAssertGreaterThanOrEqual(held?.count ?? 0, chunksDone)

        let described = try xfer(["status", job])
        XCTAssertEqual(described.status, 0, described.stderr)
        let output = described.stdout.joined(separator: "\n")
        for fragment in ["unfinished", "file 1: \(file)", "\(chunksDone)/128 chunks", "uploadId=\(uploadID)"] {
            XCTAssertTrue(output.contains(fragment), "'\(fragment)' missing from:\n\(output)")
        }

        let everything = [text, try xfer(["list", "--json"]), try xfer(["status", job, "--json"]), described]
            .map { $0.stdout.joined(separator: "\n") + $0.stderr }.joined()
        XCTAssertFalse(everything.contains(token), "token leaked")
        XCTAssertFalse(everything.contains(header), "header value leaked")
    }

    /// An empty file is one chunk for protocols that announce it with an empty chunk (multipart
    /// here) and none for patch: `status` counts them as the engine sends them.
    func testStatusCountsAnEmptyFilesChunkAsItsProtocolSendsIt() throws {
        let empty = work.file("empty.bin")
        try makeTestFile(at: empty, size: 0)
        for (backend, chunks) in [("multipart", 1), ("patch", 0)] {
            let pushed = try xfer(["push", empty, "--backend", backend, "--to", server.url, "--json"])
            XCTAssertEqual(pushed.status, 0, pushed.stderr)
            let job = try XCTUnwrap(pushed.events.first?["job"] as? String, "\(pushed.events.first ?? [:])")
            let file = try XCTUnwrap((try statusJSON(job)["files"] as? [[String: Any]])?.first)
            XCTAssertEqual(int(file["chunkCount"]), chunks, backend)
            XCTAssertEqual(int(file["chunksDone"]), chunks, backend)
            let text = try xfer(["status", job]).stdout.joined(separator: "\n")
            XCTAssertTrue(text.contains("\(chunks)/\(chunks) chunks"), "\(backend): \(text)")
        }
    }

    func testJobCommandsAnswerBadInputWithTheDocumentedCodes() throws {
        let file = work.file("a.bin")
        try makeTestFile(at: file, size: 1000)
        let pushed = try xfer(["push", file, "--backend", "patch", "--to", server.url, "--json"])
        XCTAssertEqual(pushed.status, 0, pushed.stderr)
        let completedJob = try XCTUnwrap(pushed.lastEvent?["job"] as? String)
        let blocker = work.file("blocker")
        _ = FileManager.default.createFile(atPath: blocker, contents: Data("x".utf8))

        let cases: [(String, [String], Int32, String)] = [
            ("status of an unknown job", ["status", "0123456789abcdef", "--state", state], 2, "no job"),
            ("status without a job", ["status", "--state", state], 2, "job"),
            ("status of a non-id", ["status", "not-an-id", "--state", state], 2, "no job"),
            ("cancel of an unknown job", ["cancel", "fedcba9876543210", "--state", state], 2, "no job"),
            ("resume of an unknown job", ["resume", "fedcba98", "--state", state], 2, "no job"),
            ("resume of a completed job", ["resume", completedJob, "--state", state], 2, "already complete"),
            ("resume with a bad header", ["resume", "--header", "NoColon", "--state", state], 2, "--header"),
            ("resume with a bad retention", ["resume", "--keep-finished", "soon", "--state", state], 2, "keep-finished"),
            ("list in an unusable state directory", ["list", "--state", blocker + "/state"], 3, "state"),
        ]
        for (label, arguments, code, fragment) in cases {
            let result = try runXfer(arguments)
            XCTAssertEqual(result.status, code, "\(label): \(result.stderr)")
            XCTAssertEqual(result.stderr.split(separator: "\n").count, 1, "\(label): one line, got \(result.stderr)")
            XCTAssertTrue(result.stderr.hasPrefix("xfer: "), "\(label): \(result.stderr)")
            XCTAssertTrue(result.stderr.lowercased().contains(fragment.lowercased()), "\(label): \(result.stderr)")
            XCTAssertTrue(result.stdout.isEmpty, "\(label): nothing on stdout: \(result.stdout)")
        }
    }

    func testCompletedJobsLeaveTheStoreWhenTheirRetentionEnds() throws {
        let first = work.file("a.bin")
        let second = work.file("b.bin")
        try makeTestFile(at: first, size: 1000, seed: 1)
        try makeTestFile(at: second, size: 1000, seed: 2)
        XCTAssertEqual(try xfer(["push", first, "--backend", "patch", "--to", server.url]).status, 0)
        XCTAssertEqual(try listJSON(all: true).count, 1, "kept for the default retention")
        // A push with no retention prunes every completed job, itself included.
        let pruning = try runXfer(
            ["push", second, "--backend", "patch", "--to", server.url, "--state", state],
            environment: ["XFER_KEEP_FINISHED": "0"])
        XCTAssertEqual(pruning.status, 0, pruning.stderr)
        XCTAssertEqual(try listJSON(all: true).count, 0)
        let locks = (try? FileManager.default.contentsOfDirectory(atPath: state + "/locks")) ?? []
        XCTAssertEqual(locks, [], "pruned jobs leave no lock files behind")
    }
}

/// POST a form-urlencoded `body` to `url` with curl and parse the JSON answer.
func postForm(_ url: String, _ body: String) throws -> [String: Any] {
    let child = try ChildProcess(executable: "/usr/bin/curl", arguments: ["-fsS", "--data", body, url])
    let answer = child.readRemaining().joined(separator: "\n")
    guard child.wait() == 0 else { throw HarnessError("curl POST \(url) failed: \(child.standardError)") }
    return (try JSONSerialization.jsonObject(with: Data(answer.utf8))) as? [String: Any] ?? [:]
}

/// The HTTP status of GET `url`, by the system's curl.
func httpStatus(_ url: String) throws -> Int {
    let child = try ChildProcess(executable: "/usr/bin/curl", arguments: ["-s", "-o", "/dev/null", "-w", "%{http_code}", url])
    let output = child.readRemaining().joined()
    child.wait()
    return Int(output) ?? -1
}
