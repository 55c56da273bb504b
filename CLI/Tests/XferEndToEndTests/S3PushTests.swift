import Foundation
import XCTest
import Xfer
import XferS3
import XferTestSupport

/// `--backend s3` end to end: real xfer processes (SIGKILLed mid-push),
/// real LMDB and libcurl, against a real S3 server (moto) on 127.0.0.1;
/// objects read back with boto3.
final class S3PushTests: XCTestCase {
    var work: TemporaryDirectory!
    var s3: S3Server!
    let partSize = 5 << 20

    override func setUpWithError() throws {
        work = TemporaryDirectory("xfer-s3")
        s3 = try S3Server()
        try s3.makeBucket("bucket-a")
    }

    override func tearDown() {
        s3 = nil
        work = nil
    }

    private var state: String { work.file("state") }

    private func pushArguments(_ files: [String], to target: String = "s3://bucket-a/in/", concurrency: Int = 2) -> [String] {
        ["push"] + files + [
            "--backend", "s3", "--to", target, "--endpoint", s3.url, "--state", state, "--chunk-size", "5MiB",
            "--concurrency", String(concurrency),
        ]
    }

    private func push(_ arguments: [String], environment: [String: String] = S3Server.environment) throws -> RunResult {
        let result = try runXfer(arguments, environment: environment)
        let secret = S3Server.environment["AWS_SECRET_ACCESS_KEY"]!
        XCTAssertFalse(result.stdout.joined().contains(secret) || result.stderr.contains(secret), "the secret key was printed")
        return result
    }

    /// Starts a push and SIGKILLs it once `parts` parts are acknowledged.
    private func killedPush(_ file: String, afterParts parts: Int, options: [String] = []) throws {
        try pushKilled(pushArguments([file]) + options + ["--json"], afterChunks: parts, environment: S3Server.environment)
    }

    private func assertObject(_ key: String, equals file: String, parts: Int?, line: UInt = #line) throws {
        try s3.assertObject(bucket: "bucket-a", key: key, equals: file, parts: parts, downloadingInto: work, line: line)
    }

    private func jobID() throws -> String {
        let list = try runXfer(["list", "--all", "--json", "--state", state])
        let jobs = try JSONSerialization.jsonObject(with: Data(list.stdout.joined().utf8)) as? [[String: Any]]
        return try XCTUnwrap(jobs?.first?["id"] as? String)
    }

    func testEmptySmallAndMultipartFilesReadBackIdentical() throws {
        let empty = work.file("empty.bin"), small = work.file("small.bin"), large = work.file("large.bin")
        try makeTestFile(at: empty, size: 0)
        try makeTestFile(at: small, size: 1000, seed: 2)
        try makeTestFile(at: large, size: 2 * partSize + 123, seed: 3)

        let result = try push(pushArguments([empty, small, large]))
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(result.stdout, ["s3://bucket-a/in/empty.bin", "s3://bucket-a/in/small.bin", "s3://bucket-a/in/large.bin"])
        try assertObject("in/empty.bin", equals: empty, parts: nil)
        try assertObject("in/small.bin", equals: small, parts: nil)
        try assertObject("in/large.bin", equals: large, parts: 3)
        XCTAssertTrue(try s3.uploadsInProgress(bucket: "bucket-a").isEmpty)
    }

    /// As `aws s3 cp`: one file and a key without a trailing slash name the
    /// object (a small one and a multipart one, whose upload is created for
    /// that key); a trailing slash or a directory make a prefix.
    func testOneFileNamedWithAKeyBecomesThatObject() throws {
        let small = work.file("small.bin"), large = work.file("large.bin"), tree = work.file("tree")
        try makeTestFile(at: small, size: 1000, seed: 21)
        try makeTestFile(at: large, size: partSize + 10, seed: 22)
        try FileManager.default.createDirectory(atPath: tree, withIntermediateDirectories: true)
        try makeTestFile(at: tree + "/only.bin", size: 10, seed: 23)

        let named = try push(pushArguments([small], to: "s3://bucket-a/backups/latest.bin"))
        XCTAssertEqual(named.status, 0, named.stderr)
        XCTAssertEqual(named.stdout, ["s3://bucket-a/backups/latest.bin"])
        try assertObject("backups/latest.bin", equals: small, parts: nil)
        let multipart = try push(pushArguments([large], to: "s3://bucket-a/big"))
        XCTAssertEqual(multipart.status, 0, multipart.stderr)
        try assertObject("big", equals: large, parts: 2)

        let folder = try push(pushArguments([small], to: "s3://bucket-a/backups/"))
        XCTAssertEqual(folder.stdout, ["s3://bucket-a/backups/small.bin"], folder.stderr)
        let directory = try push(pushArguments([tree], to: "s3://bucket-a/t"))
        XCTAssertEqual(directory.stdout, ["s3://bucket-a/t/only.bin"], directory.stderr)
        let several = try push(pushArguments([small, large], to: "s3://bucket-a/s"))
        XCTAssertEqual(several.stdout, ["s3://bucket-a/s/small.bin", "s3://bucket-a/s/large.bin"], several.stderr)
    }

    func testExtraHeadersAreSignedSoS3AcceptsThem() throws {
        // A server that refuses unsigned x-amz-* headers, as AWS does: `--header` values
        // reach it inside the signature, on every request (create, parts, complete, PUT).
        s3 = try S3Server(arguments: ["--signed-headers-only"])
        try s3.makeBucket("bucket-a")
        let small = work.file("small.bin"), large = work.file("large.bin")
        try makeTestFile(at: small, size: 1000, seed: 4)
        try makeTestFile(at: large, size: partSize + 10, seed: 5)

        let result = try push(pushArguments([small, large]) + ["--header", "x-amz-meta-owner: qa"])
        XCTAssertEqual(result.status, 0, result.stderr)
        try assertObject("in/small.bin", equals: small, parts: nil)
        try assertObject("in/large.bin", equals: large, parts: 2)
        XCTAssertEqual(try s3.metadata(bucket: "bucket-a", key: "in/small.bin"), ["owner": "qa"])
        XCTAssertEqual(try s3.metadata(bucket: "bucket-a", key: "in/large.bin"), ["owner": "qa"])
    }

    func testKilledPushResumesItsUploadAndListPartsSparesThePartsS3Holds() throws {
        let file = work.file("big.bin")
        let size = 8 * partSize + 77
        try makeTestFile(at: file, size: size, seed: 4)
        try killedPush(file, afterParts: 3)

        let before = try s3.uploadsInProgress(bucket: "bucket-a")
        XCTAssertEqual(before.count, 1, "\(before)")
        let held = try XCTUnwrap(before.first)
        XCTAssertGreaterThanOrEqual(held.parts, 3)
        let status = try runXfer(["status", try jobID(), "--json", "--state", state])
        let details = try JSONSerialization.jsonObject(with: Data(status.stdout.joined().utf8)) as? [String: Any]
        let files = try XCTUnwrap(details?["files"] as? [[String: Any]])
        XCTAssertEqual((files.first?["handles"] as? [String: Any])?["uploadId"] as? String, held.uploadId,
                       "the UploadId was not committed before the parts")

        let resumed = try push(pushArguments([file]) + ["--json"])
        XCTAssertEqual(resumed.status, 0, resumed.stderr)
        let reconciled = try XCTUnwrap(resumed.events.first { $0["event"] as? String == "reconciled" })
        XCTAssertEqual(int(reconciled["chunksOnServer"]), held.parts)
        let completed = try XCTUnwrap(resumed.lastEvent)
        XCTAssertEqual(completed["event"] as? String, "completed")
        // Only the parts S3 lacked were sent (the kill may land after the last, short one).
        XCTAssertEqual(int(completed["bytesSent"]), size - held.bytes)
        // Completing the same upload leaves none behind (a new one would have left the old).
        XCTAssertTrue(try s3.uploadsInProgress(bucket: "bucket-a").isEmpty)
        try assertObject("in/big.bin", equals: file, parts: 9)
    }

    func testResumeThroughTheLibraryPagesThroughListParts() async throws {
        let file = work.file("paged.bin")
        let size = 6 * partSize + 5
        try makeTestFile(at: file, size: size, seed: 6)
        // Paced (~1 part a second): unpaced, the last two of the 7 parts and the completion
        // could all be done before the test had read the fifth part's event and killed the
        // push, leaving no upload to resume (CI, 2026-12-07).
        try killedPush(file, afterParts: 5, options: ["--limit-rate", "5MiB"])
        let held = try XCTUnwrap(try s3.uploadsInProgress(bucket: "bucket-a").first)

        let environment = S3Server.environment
        let credentials = AWSCredentials(
            accessKeyID: environment["AWS_ACCESS_KEY_ID"]!, secretAccessKey: environment["AWS_SECRET_ACCESS_KEY"]!)
        // Two parts per ListParts page: the engine must ask page after page.
        let backend = S3Backend(configuration: AWSConfiguration(credentials: credentials, region: nil, source: "test"), listPageSize: 2)
        let engine = try TransferEngine(stateDirectory: state)
        let job = try await engine.resume(JobID(rawValue: try jobID()), using: [backend])
        var onServer: Int?
        for await event in job.events {
            if case .reconciled(let reconciled) = event { onServer = reconciled.chunksOnServer }
        }
        let report = try await job.report
        XCTAssertEqual(onServer, held.parts)
        XCTAssertGreaterThan(held.parts, 2, "the listing needs more than one page")
        XCTAssertEqual(report.bytesSent, Int64(size - held.bytes))
        try assertObject("in/paged.bin", equals: file, parts: 7)
    }

    func testACompletionWhoseAnswerWasLostIsFoundByHEADNotUploadedAgain() throws {
        // The first CompleteMultipartUpload completes the object but answers 500; the retry
        // gets NoSuchUpload, as S3 may answer for an upload it completed.
        s3 = try S3Server(arguments: ["--lose-complete"])
        try s3.makeBucket("bucket-a")
        let file = work.file("lost.bin")
        let size = 3 * partSize + 9
        try makeTestFile(at: file, size: size, seed: 11)

        let result = try push(pushArguments([file]) + ["--json"])
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertTrue(s3.child.readLine()?.hasPrefix("lost the answer to completing") == true, "no answer was lost")
        let completed = try XCTUnwrap(result.lastEvent)
        XCTAssertEqual(completed["event"] as? String, "completed")
        XCTAssertEqual(int(completed["bytesSent"]), size, "parts were uploaded again")
        let url = (completed["files"] as? [[String: Any]])?.first?["url"] as? String
        XCTAssertEqual(url, "s3://bucket-a/in/lost.bin")
        XCTAssertTrue(try s3.uploadsInProgress(bucket: "bucket-a").isEmpty, "a second upload was started")
        try assertObject("in/lost.bin", equals: file, parts: 4)
    }

    func testPartChecksumCRC32SurvivesAKillAndGivesTheObjectItsCompositeCRC() throws {
        let file = work.file("crc.bin")
        let size = 4 * partSize + 5
        try makeTestFile(at: file, size: size, seed: 12)
        try killedPush(file, afterParts: 2, options: ["--part-checksum", "crc32"])
        let held = try XCTUnwrap(try s3.uploadsInProgress(bucket: "bucket-a").first)

        // Resumed without the option: the job keeps the checksum its upload was created for.
        let resumed = try push(pushArguments([file]) + ["--json"])
        XCTAssertEqual(resumed.status, 0, resumed.stderr)
        // The parts this job recorded are spared. moto lists no part's CRC-32, so a part
        // it holds but the killed run never heard back about is sent again.
        let sent = int(try XCTUnwrap(resumed.lastEvent)["bytesSent"])
        XCTAssertLessThanOrEqual(sent, size - 2 * partSize)
        XCTAssertGreaterThanOrEqual(sent, size - held.bytes)
        try assertObject("in/crc.bin", equals: file, parts: 5)

        // S3's composite CRC-32: the CRC-32 of the parts' big-endian CRC-32s. S3 keeps
        // one only for an upload created with the algorithm, and completes it only
        // when every part carried its CRC-32.
        var partCRCs: [UInt8] = []
        let handle = try XCTUnwrap(FileHandle(forReadingAtPath: file))
        while let part = try handle.read(upToCount: partSize), !part.isEmpty {
            let crc = Checksums.crc32(Array(part))
            partCRCs += [UInt8(crc >> 24), UInt8(crc >> 16 & 0xFF), UInt8(crc >> 8 & 0xFF), UInt8(crc & 0xFF)]
        }
        let composite = Checksums.crc32(partCRCs)
        let expected = Checksums.base64([UInt8(composite >> 24), UInt8(composite >> 16 & 0xFF), UInt8(composite >> 8 & 0xFF), UInt8(composite & 0xFF)])
        XCTAssertEqual(try s3.crc32(bucket: "bucket-a", key: "in/crc.bin"), expected)

        // The default (Content-MD5) declares no algorithm.
        let plain = work.file("plain.bin")
        try makeTestFile(at: plain, size: 2 * partSize, seed: 13)
        XCTAssertEqual(try push(pushArguments([plain])).status, 0)
        XCTAssertEqual(try s3.crc32(bucket: "bucket-a", key: "in/plain.bin"), "none")
    }

    func testPartChecksumCRC32CGivesTheObjectItsCompositeCRC32C() throws {
        let file = work.file("crcc.bin")
        let size = 3 * partSize + 11
        try makeTestFile(at: file, size: size, seed: 14)
        let result = try push(pushArguments([file]) + ["--part-checksum", "crc32c"])
        XCTAssertEqual(result.status, 0, result.stderr)
        try assertObject("in/crcc.bin", equals: file, parts: 4)
        // The composite CRC-32C: the CRC-32C of the parts' big-endian CRC-32Cs.
        var partCRCs: [UInt8] = []
        let handle = try XCTUnwrap(FileHandle(forReadingAtPath: file))
        while let part = try handle.read(upToCount: partSize), !part.isEmpty {
            partCRCs += CRC32.bigEndianBytes(CRC32C.of(Array(part)))
        }
        let expected = Checksums.base64(CRC32.bigEndianBytes(CRC32C.of(partCRCs)))
        XCTAssertEqual(try s3.crc32c(bucket: "bucket-a", key: "in/crcc.bin"), expected)
    }

    func testCancelAbortsTheMultipartUpload() throws {
        let file = work.file("c.bin")
        try makeTestFile(at: file, size: 4 * partSize, seed: 7)
        try killedPush(file, afterParts: 1)
        XCTAssertEqual(try s3.uploadsInProgress(bucket: "bucket-a").count, 1)

        let cancel = try push(["cancel", try jobID(), "--state", state])
        XCTAssertEqual(cancel.status, 0, cancel.stderr)
        XCTAssertTrue(cancel.stdout.contains { $0.contains("DELETE") && $0.contains("HTTP 204") }, "\(cancel.stdout)")
        XCTAssertTrue(try s3.uploadsInProgress(bucket: "bucket-a").isEmpty, "the upload was not aborted")
    }

    /// `--restart` starts a new upload and aborts the one the job had: no
    /// multipart upload is left billed on the server.
    func testRestartAbortsTheUploadItLeavesBehind() throws {
        let file = work.file("r.bin")
        try makeTestFile(at: file, size: 4 * partSize, seed: 8)
        try killedPush(file, afterParts: 1)
        XCTAssertEqual(try s3.uploadsInProgress(bucket: "bucket-a").count, 1)

        let restarted = try push(pushArguments([file]) + ["--restart"])
        XCTAssertEqual(restarted.status, 0, restarted.stderr)
        try assertObject("in/r.bin", equals: file, parts: 4)
        XCTAssertTrue(try s3.uploadsInProgress(bucket: "bucket-a").isEmpty, "the first upload was left on the server")
    }

    /// A file changed between a killed run and the next: the new run drops
    /// the upload of the old bytes before it starts one for the new.
    func testAFileChangedSinceItsUploadBeganHasThatUploadAborted() throws {
        let file = work.file("ch.bin")
        try makeTestFile(at: file, size: 4 * partSize, seed: 9)
        try killedPush(file, afterParts: 1)
        XCTAssertEqual(try s3.uploadsInProgress(bucket: "bucket-a").count, 1)
        try makeTestFile(at: file, size: 3 * partSize + 17, seed: 10)

        let again = try push(pushArguments([file]))
        XCTAssertEqual(again.status, 0, again.stderr)
        try assertObject("in/ch.bin", equals: file, parts: 4)
        XCTAssertTrue(try s3.uploadsInProgress(bucket: "bucket-a").isEmpty, "the upload of the old bytes was left on the server")
    }

    /// Each object's Content-Type follows its extension (the system's
    /// table), for a PutObject and a multipart upload alike; --content-type
    /// sets one for every object of the job, and a resume keeps it.
    func testObjectsGetTheirContentType() throws {
        let json = work.file("a.json"), jpeg = work.file("b.JPG"), plain = work.file("c"), big = work.file("d.html")
        try makeTestFile(at: json, size: 10)
        try makeTestFile(at: jpeg, size: 10)
        try makeTestFile(at: plain, size: 10)
        try makeTestFile(at: big, size: 2 * partSize + 1)
        let pushed = try push(pushArguments([json, jpeg, plain, big]))
        XCTAssertEqual(pushed.status, 0, pushed.stderr)
        XCTAssertEqual(try s3.contentType(bucket: "bucket-a", key: "in/a.json"), "application/json")
        XCTAssertEqual(try s3.contentType(bucket: "bucket-a", key: "in/b.JPG"), "image/jpeg")
        XCTAssertEqual(try s3.contentType(bucket: "bucket-a", key: "in/c"), "application/octet-stream")
        XCTAssertEqual(try s3.contentType(bucket: "bucket-a", key: "in/d.html"), "text/html")

        let chosen = work.file("e.bin")
        try makeTestFile(at: chosen, size: 3 * partSize, seed: 12)
        try killedPush(chosen, afterParts: 1, options: ["--content-type", "text/x-chosen"])
        let resumed = try push(pushArguments([chosen]))
        XCTAssertEqual(resumed.status, 0, resumed.stderr)
        XCTAssertEqual(try s3.contentType(bucket: "bucket-a", key: "in/e.bin"), "text/x-chosen", "the resume kept the job's type")
        let bad = try push(pushArguments([chosen]) + ["--content-type", "nonsense", "--restart"])
        XCTAssertEqual(bad.status, 2, bad.stderr)
        XCTAssertTrue(bad.stderr.contains("--content-type must look like type/subtype"), bad.stderr)
    }

    /// Metadata, storage class, Cache-Control, Content-Disposition, ACL,
    /// tags and encryption reach both kinds of object (signed: moto checks).
    func testObjectOptionsReachEveryObject() throws {
        let small = work.file("s.txt"), large = work.file("l.bin")
        try makeTestFile(at: small, size: 100)
        try makeTestFile(at: large, size: 2 * partSize + 3, seed: 13)
        let options = [
            "--metadata", "Owner=me", "--metadata", "purpose=backup test", "--storage-class", "STANDARD_IA",
            "--cache-control", "max-age=60", "--content-disposition", "attachment", "--acl", "public-read",
            "--tagging", "team=xfer&env=test%20run", "--sse", "AES256",
        ]
        let pushed = try push(pushArguments([small, large]) + options)
        XCTAssertEqual(pushed.status, 0, pushed.stderr)
        for key in ["in/s.txt", "in/l.bin"] {
            let object = try s3.describe(bucket: "bucket-a", key: key)
            XCTAssertEqual(object["Metadata"] as? [String: String], ["owner": "me", "purpose": "backup test"], key)
            XCTAssertEqual(object["StorageClass"] as? String, "STANDARD_IA", key)
            XCTAssertEqual(object["CacheControl"] as? String, "max-age=60", key)
            XCTAssertEqual(object["ContentDisposition"] as? String, "attachment", key)
            XCTAssertEqual(object["ServerSideEncryption"] as? String, "AES256", key)
            XCTAssertEqual(object["Tags"] as? [String: String], ["team": "xfer", "env": "test run"], key)
            XCTAssertEqual(object["PublicRead"] as? Bool, true, key)
        }
        for (bad, message) in [
            (["--metadata", "novalue"], "--metadata must look like NAME=VALUE"), (["--sse", "rot13"], "--sse must be AES256 or aws:kms"),
            (["--sse-kms-key-id", "k"], "--sse-kms-key-id goes with --sse aws:kms"), (["--tagging", "a"], "--tagging must look like"),
        ] {
            let refused = try push(pushArguments([small]) + bad + ["--restart"])
            XCTAssertEqual(refused.status, 2, refused.stderr)
            XCTAssertTrue(refused.stderr.contains(message), refused.stderr)
        }
    }

    func testMistakesFailWithOneLineAndTheirExitCode() throws {
        let file = work.file("m.bin")
        try makeTestFile(at: file, size: 1000)
        let cases: [(arguments: [String], environment: [String: String], status: Int32, message: String)] = [
            (pushArguments([file], to: "s3://no-such-bucket/x"), S3Server.environment, 1, "bucket 'no-such-bucket' does not exist"),
            (pushArguments([file], to: "s3://Bad_Bucket"), S3Server.environment, 2, "not a valid S3 bucket name"),
            (pushArguments([file], to: "http://example.com/b"), S3Server.environment, 2, "s3://BUCKET/PREFIX"),
            (pushArguments([file]).filter { $0 != "--endpoint" && $0 != s3.url } + ["--endpoint", "ftp://x"],
             S3Server.environment, 2, "not a usable URL"),
            (pushArguments([file]) + ["--addressing", "sideways"], S3Server.environment, 2, "--addressing must be path or virtual"),
            (pushArguments([file]) + ["--part-checksum", "sha1"], S3Server.environment, 2, "--part-checksum must be auto, md5, crc32 or crc32c"),
            (pushArguments([file]),
             S3Server.environment.merging(["AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": ""]) { $1 }, 2, "no AWS credentials"),
            (pushArguments([file]) + ["--profile", "nope"], S3Server.environment, 2, "profile 'nope'"),
            (["push", file, "--backend", "patch", "--to", "http://127.0.0.1:9", "--endpoint", s3.url, "--state", state],
             S3Server.environment, 2, "are for --backend s3"),
        ]
        for (arguments, environment, status, message) in cases {
            let result = try push(arguments + ["--max-attempts", "2"], environment: environment)
            XCTAssertEqual(result.status, status, "\(arguments): \(result.stderr)")
            let lines = result.stderr.split(separator: "\n")
            XCTAssertEqual(lines.count, 1, "\(arguments): \(result.stderr)")
            XCTAssertTrue(result.stderr.contains(message), "\(arguments): \(result.stderr)")
            XCTAssertTrue(result.stdout.isEmpty, "\(arguments): \(result.stdout)")
        }
    }
}
