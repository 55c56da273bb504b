import Foundation
import XCTest
import XferTestSupport

/// `xfer push -` and `xfer push FIFO`: a stream of unknown length, read
/// once, to moto (S3 multipart with growing parts) and to the PyPI tus
/// server (partial uploads concatenated), through real pipelines of real
/// processes.
final class StreamPushTests: XCTestCase {
    var work: TemporaryDirectory!
    let part = 6 << 20  // S3's smallest first part of a stream

    override func setUpWithError() throws {
        work = TemporaryDirectory("xfer-stream")
    }

    override func tearDown() {
        work = nil
    }

    private var state: String { work.file("state") }

    private func xferCommand(_ arguments: [String]) -> String {
        ([xferExecutable] + arguments).map(Self.quoted).joined(separator: " ")
    }

    private static func quoted(_ text: String) -> String { "'" + text.replacingOccurrences(of: "'", with: "'\\''") + "'" }

    /// Runs `producer | xfer ARGUMENTS` in a shell; the result is xfer's.
    private func pipeline(_ producer: String, _ arguments: [String], environment: [String: String] = [:]) throws -> RunResult {
        let child = try ChildProcess(
            executable: "/bin/sh", arguments: ["-c", producer + " | " + xferCommand(arguments)], environment: environment)
        let lines = child.readRemaining()
        return RunResult(status: child.wait(), stdout: lines, stderr: child.standardError)
    }

    // MARK: S3

    private func s3Arguments(_ s3: S3Server, name: String, extra: [String] = []) -> [String] {
        ["push", "-", "--name", name, "--backend", "s3", "--to", "s3://bucket-a/in", "--endpoint", s3.url, "--state", state,
         "--chunk-size", "6MiB"] + extra
    }

    private func assertS3Object(_ s3: S3Server, _ key: String, equals file: String, parts: Int?, line: UInt = #line) throws {
        try s3.assertObject(bucket: "bucket-a", key: key, equals: file, parts: parts, downloadingInto: work, line: line)
    }

    /// Starts `xfer push FIFO` with a producer writing `file` into the FIFO and
    /// waits for the first part's acknowledgement. The producer blocks in the
    /// FIFO once xfer stops reading: the caller kills both.
    private func pushFromFIFO(_ s3: S3Server, of file: String, name: String?) throws -> (producer: ChildProcess, push: ChildProcess) {
        let fifo = work.file("fifo")
        XCTAssertEqual(mkfifo(fifo, 0o600), 0)
        let producer = try ChildProcess(executable: "/bin/sh", arguments: ["-c", "cat \(Self.quoted(file)) > \(Self.quoted(fifo))"])
        let push = try ChildProcess(
            executable: xferExecutable,
            arguments: ["push", fifo] + (name.map { ["--name", $0] } ?? []) + [
                "--backend", "s3", "--to", "s3://bucket-a/in", "--endpoint", s3.url, "--state", state, "--chunk-size", "6MiB", "--json",
            ],
            environment: S3Server.environment)
        XCTAssertNotNil(push.readLine { $0.contains("\"event\":\"chunk\"") }, push.standardError)
        return (producer, push)
    }

    /// `pushFromFIFO`, SIGKILLed once the first part was acknowledged; returns the job's id.
    private func killAfterFirstPart(_ s3: S3Server, of file: String, name: String?) throws -> String {
        let (producer, push) = try pushFromFIFO(s3, of: file, name: name)
        push.kill(SIGKILL)
        _ = push.wait()
        producer.kill(SIGKILL)
        _ = producer.wait()
        XCTAssertEqual(try s3.uploadsInProgress(bucket: "bucket-a").count, 1)
        let list = try runXfer(["list", "--all", "--json", "--state", state])
        let jobs = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(list.stdout.joined().utf8)) as? [[String: Any]])
        XCTAssertEqual(jobs.first?["state"] as? String, "failed")
        XCTAssertTrue((jobs.first?["lastError"] as? String ?? "").contains("cannot be read again"), "\(jobs)")
        return try XCTUnwrap(jobs.first?["id"] as? String)
    }

    /// Parts sent while the next is read; a stream whose length is a multiple
    /// of the part size ends on an empty read; an empty stream and a short
    /// one are one PutObject; nothing is left in progress.
    func testStreamsToS3ReadBackIdentical() throws {
        let s3 = try S3Server()
        try s3.makeBucket("bucket-a")
        let cases: [(name: String, size: Int, parts: Int?)] = [
            ("long.bin", 3 * part + 12_345, 4), ("multiple.bin", 2 * part, 2), ("empty.bin", 0, nil), ("short.bin", 1000, nil),
        ]
        for (name, size, parts) in cases {
            let file = work.file(name)
            try makeTestFile(at: file, size: size, seed: UInt64(size + 1))
            let result = try pipeline("cat " + Self.quoted(file), s3Arguments(s3, name: name), environment: S3Server.environment)
            XCTAssertEqual(result.status, 0, "\(name): \(result.stderr)")
            XCTAssertEqual(result.stdout.last, "s3://bucket-a/in/\(name)", name)
            try assertS3Object(s3, "in/\(name)", equals: file, parts: parts)
            XCTAssertFalse(result.stderr.contains(S3Server.environment["AWS_SECRET_ACCESS_KEY"]!))
        }
        XCTAssertEqual(try s3.uploadsInProgress(bucket: "bucket-a").count, 0)
    }

    /// A producer that dies mid-stream looks like the end of the stream to a
    /// pipe; with --expected-size the push fails and its upload is dropped.
    func testAProducerThatDiesMidStreamFailsAndLeavesNothingOnS3() throws {
        let s3 = try S3Server()
        try s3.makeBucket("bucket-a")
        let file = work.file("whole.bin")
        try makeTestFile(at: file, size: 4 * part)
        let python = "/usr/bin/python3"
        let producer = "\(python) -c " + Self.quoted(
            "import os,sys; sys.stdout.buffer.write(open(\(Self.pythonString(file)),'rb').read(\(2 * part + 77))); sys.stdout.flush(); os.kill(os.getpid(), 9)")
        let result = try pipeline(
            producer, s3Arguments(s3, name: "cut.bin", extra: ["--expected-size", String(4 * part)]), environment: S3Server.environment)
        XCTAssertEqual(result.status, 1, result.stderr)
        XCTAssertTrue(result.stderr.contains("ended after \(2 * part + 77) bytes"), result.stderr)
        XCTAssertEqual(try s3.uploadsInProgress(bucket: "bucket-a").count, 0, "the multipart upload was left on the server")
        XCTAssertNil(try s3.objects(bucket: "bucket-a")["in/cut.bin"])
        // The job stays listed as failed, with the reason.
        let list = try runXfer(["list", "--all", "--json", "--state", state])
        let jobs = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(list.stdout.joined().utf8)) as? [[String: Any]])
        XCTAssertEqual(jobs.first?["state"] as? String, "failed")
    }

    private static func pythonString(_ text: String) -> String { "'" + text.replacingOccurrences(of: "'", with: "\\'") + "'" }

    /// SIGKILL mid-stream: the job is listed as failed (a stream cannot be
    /// read again), `resume` refuses it, and the next push of the same
    /// stream drops the first one's multipart upload before it starts.
    func testAKilledStreamIsListedFailedAndDroppedByTheNextPush() throws {
        let s3 = try S3Server()
        try s3.makeBucket("bucket-a")
        let file = work.file("big.bin")
        try makeTestFile(at: file, size: 5 * part)
        let id = try killAfterFirstPart(s3, of: file, name: "killed.bin")
        let resume = try runXfer(["resume", id, "--state", state], environment: S3Server.environment)
        XCTAssertEqual(resume.status, 2, resume.stderr)
        XCTAssertTrue(resume.stderr.contains("stream"), resume.stderr)

        let again = try pipeline("cat " + Self.quoted(file), s3Arguments(s3, name: "killed.bin"), environment: S3Server.environment)
        XCTAssertEqual(again.status, 0, again.stderr)
        try assertS3Object(s3, "in/killed.bin", equals: file, parts: 5)
        XCTAssertEqual(try s3.uploadsInProgress(bucket: "bucket-a").count, 0, "the killed push's upload was not dropped")
    }

    /// SIGINT mid-stream: exit 130, and the upload is aborted on the way out.
    func testSIGINTMidStreamAbortsTheUpload() throws {
        let s3 = try S3Server()
        try s3.makeBucket("bucket-a")
        let file = work.file("big.bin")
        try makeTestFile(at: file, size: 4 * part)
        let (producer, push) = try pushFromFIFO(s3, of: file, name: nil)
        push.kill(SIGINT)
        XCTAssertEqual(push.wait(), 130, push.standardError)
        producer.kill(SIGKILL)
        _ = producer.wait()
        XCTAssertEqual(try s3.uploadsInProgress(bucket: "bucket-a").count, 0, "the interrupted stream's upload was left on the server")
    }

    /// `cancel` drops a killed stream's upload too.
    func testCancelDropsAKilledStreamsUpload() throws {
        let s3 = try S3Server()
        try s3.makeBucket("bucket-a")
        let file = work.file("big.bin")
        try makeTestFile(at: file, size: 4 * part)
        // No --name: a FIFO's own name is the stream's.
        let id = try killAfterFirstPart(s3, of: file, name: nil)
        let cancel = try runXfer(["cancel", id, "--state", state], environment: S3Server.environment)
        XCTAssertEqual(cancel.status, 0, cancel.stderr)
        XCTAssertEqual(try s3.uploadsInProgress(bucket: "bucket-a").count, 0)
    }

    // MARK: tus and the others

    /// Partial uploads, one per part, concatenated by a final upload.
    func testStreamsToTusReadBackIdentical() throws {
        let server = try TusServer(directory: work.file("tus"))
        for (name, size) in [("long.bin", 3 * (1 << 20) + 999), ("multiple.bin", 2 << 20), ("small.bin", 10), ("empty.bin", 0)] {
            let file = work.file(name)
            try makeTestFile(at: file, size: size, seed: 3)
            let result = try pipeline(
                "cat " + Self.quoted(file),
                ["push", "-", "--name", name, "--backend", "tus", "--to", server.url, "--state", state, "--chunk-size", "1MiB"])
            XCTAssertEqual(result.status, 0, "\(name): \(result.stderr)")
            let url = try XCTUnwrap(result.stdout.last)
            XCTAssertEqual(try downloadSHA256(url, into: work), try sha256sum(file), name)
        }
    }

    /// A producer that dies mid-stream, with --expected-size: the push
    /// fails, and the partial uploads it made are deleted (termination).
    func testAProducerThatDiesMidStreamLeavesNoPartialUploadOnTus() throws {
        let directory = work.file("tus")
        let server = try TusServer(directory: directory)
        let file = work.file("whole.bin")
        try makeTestFile(at: file, size: 4 << 20)
        let producer = "/usr/bin/python3 -c " + Self.quoted(
            "import os,sys; sys.stdout.buffer.write(open(\(Self.pythonString(file)),'rb').read(\((2 << 20) + 5))); sys.stdout.flush(); os.kill(os.getpid(), 9)")
        let result = try pipeline(producer, [
            "push", "-", "--name", "cut.bin", "--backend", "tus", "--to", server.url, "--state", state, "--chunk-size", "1MiB",
            "--expected-size", String(4 << 20),
        ])
        XCTAssertEqual(result.status, 1, result.stderr)
        XCTAssertTrue(result.stderr.contains("ended after \((2 << 20) + 5) bytes"), result.stderr)
        let left = (try? FileManager.default.contentsOfDirectory(atPath: directory + "/uploads")) ?? []
        XCTAssertTrue(left.filter { !$0.hasPrefix(".") }.isEmpty, "partial uploads left on the server: \(left)")
    }

    /// A stream of 1,001 KiB in 1 KiB parts into `xfer serve`: its parts grow (doubling every
    /// 100), so it is concatenated from a few hundred, which the receiver takes, and arrives
    /// whole. Sent as 1,001 parts, the final upload's header was refused.
    func testALongStreamsPartsGrowSoThatTheServerConcatenatesThem() throws {
        let server = try ServeProcess(root: work.file("server"))
        let file = work.file("many.bin")
        try makeTestFile(at: file, size: 1001 << 10, seed: 5)
        let result = try pipeline(
            "cat " + Self.quoted(file),
            ["push", "-", "--name", "many.bin", "--backend", "tus", "--to", server.url + "/files/", "--state", state, "--chunk-size", "1KiB"])
        XCTAssertEqual(result.status, 0, result.stderr)
        let url = try XCTUnwrap(result.stdout.last)
        XCTAssertEqual(try downloadSHA256(url, into: work), try sha256sum(file))
    }

    /// A file sent as more partial uploads than `xfer serve` concatenates (its HTTP layer refuses
    /// a header naming 1,001 parts before the 1,000-part rule is asked): the refused
    /// concatenation ends the push in one line saying why, instead of every part sent again
    /// three times and "the server still lacks chunks".
    func testMorePartsThanTheServerConcatenatesFailWithTheReason() throws {
        let server = try ServeProcess(root: work.file("server"))
        let file = work.file("many.bin")
        try makeTestFile(at: file, size: 1001 << 10, seed: 5)
        let result = try runXfer([
            "push", file, "--backend", "tus", "--to", server.url + "/files/", "--state", state, "--chunk-size", "1KiB", "--concurrency", "4",
        ])
        XCTAssertEqual(result.status, 1, result.stderr)
        let lines = result.stderr.split(separator: "\n").filter { $0.hasPrefix("xfer:") }
        XCTAssertEqual(lines.count, 1, result.stderr)
        XCTAssertTrue(result.stderr.contains("concatenate the 1001 parts of many.bin"), result.stderr)
        XCTAssertTrue(result.stderr.contains("Upload-Concat header naming the 1001 parts"), result.stderr)
        XCTAssertTrue(result.stderr.contains("send fewer, larger chunks"), result.stderr)
        XCTAssertFalse(result.stderr.contains("rounds of re-sending"), result.stderr)
    }

    func testProtocolsThatCannotTakeAStreamAreRefused() throws {
        let result = try pipeline("echo hello", ["push", "-", "--name", "x", "--backend", "patch", "--to", "http://127.0.0.1:9", "--state", state])
        XCTAssertEqual(result.status, 2, result.stderr)
        XCTAssertTrue(result.stderr.contains("s3 and tus"), result.stderr)
        let unnamed = try pipeline("echo hello", ["push", "-", "--backend", "s3", "--to", "s3://b/k", "--state", state])
        XCTAssertEqual(unnamed.status, 2, unnamed.stderr)
        XCTAssertTrue(unnamed.stderr.contains("--name"), unnamed.stderr)
    }
}
