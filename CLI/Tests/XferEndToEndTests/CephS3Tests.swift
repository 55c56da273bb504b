import Crypto
import Foundation
import XCTest
import XferTestSupport

/// `--backend s3` end to end against a real S3 store of another make than
/// moto: Ceph's RADOS Gateway (one cluster for the whole test process, see
/// `CephGateway`), real xfer processes SIGKILLed mid-push, objects read back
/// with the AWS CLI.
final class CephS3Tests: CephBucketTestCase {
    let partSize = 5 << 20

    private var state: String { work.file("state") }

    private func pushArguments(_ files: [String], concurrency: Int = 2) -> [String] {
        ["push"] + files + [
            "--backend", "s3", "--to", "s3://\(bucket!)/in/", "--endpoint", ceph.url, "--state", state,
            "--chunk-size", "5MiB", "--concurrency", String(concurrency),
        ]
    }

    private func xfer(_ arguments: [String]) throws -> RunResult {
        try runXfer(arguments, environment: CephGateway.environment)
    }

    /// Starts a push with --json and SIGKILLs it once `parts` parts are acknowledged; returns the job's id.
    private func killedPush(_ file: String, afterParts parts: Int) throws -> String {
        try pushKilled(pushArguments([file]) + ["--json"], afterChunks: parts, environment: CephGateway.environment)
    }

    private func assertObject(_ key: String, equals file: String, parts: Int?, line: UInt = #line) throws {
        try ceph.assertObject(bucket: bucket, key: key, equals: file, parts: parts, downloadingInto: work, line: line)
    }

    /// The ETag S3 gives an object made of `file` in parts of `partSize`: the
    /// MD5 of the parts' MD5s, "-", the count (computed here, not by xfer).
    private func multipartETag(of file: String) throws -> String {
        let handle = try XCTUnwrap(FileHandle(forReadingAtPath: file))
        defer { try? handle.close() }
        var digests: [UInt8] = []
        var count = 0
        while let part = try handle.read(upToCount: partSize), !part.isEmpty {
            digests += Insecure.MD5.hash(data: part)
            count += 1
        }
        let hex = Insecure.MD5.hash(data: digests).map { String(format: "%02x", $0) }.joined()
        return "\"\(hex)-\(count)\""
    }

    /// The job's one upload in progress on the gateway.
    private func theUploadInProgress() throws -> (key: String, uploadId: String) {
        let uploads = try ceph.uploadsInProgress(bucket: bucket)
        XCTAssertEqual(uploads.count, 1, "\(uploads)")
        return try XCTUnwrap(uploads.first)
    }

    func testEmptySmallAndMultipartFilesReadBackIdenticalWithTheirETags() throws {
        let tree = work.file("tree")
        try FileManager.default.createDirectory(atPath: tree + "/sub", withIntermediateDirectories: true)
        let empty = tree + "/empty.bin", small = tree + "/small.txt", large = tree + "/sub/large.bin"
        try makeTestFile(at: empty, size: 0)
        try makeTestFile(at: small, size: 1000, seed: 2)
        try makeTestFile(at: large, size: 3 * partSize + (2 << 20), seed: 3)  // 17 MiB: 4 parts

        let result = try xfer(pushArguments([tree]))
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(Set(result.stdout), ["s3://\(bucket!)/in/empty.bin", "s3://\(bucket!)/in/small.txt", "s3://\(bucket!)/in/sub/large.bin"])
        try assertObject("in/empty.bin", equals: empty, parts: nil)
        try assertObject("in/small.txt", equals: small, parts: nil)
        try assertObject("in/sub/large.bin", equals: large, parts: 4)
        // Not just its shape: the gateway's ETag is S3's MD5 of the parts' MD5s.
        let head = try ceph.head(bucket: bucket, key: "in/sub/large.bin")
        XCTAssertEqual(head.etag, try multipartETag(of: large))
        XCTAssertEqual(head.length, 3 * partSize + (2 << 20))
        XCTAssertEqual(try ceph.head(bucket: bucket, key: "in/empty.bin").length, 0)
        XCTAssertTrue(try ceph.uploadsInProgress(bucket: bucket).isEmpty)
    }

    func testKilledPushResumesAndListPartsSparesThePartsTheGatewayHolds() throws {
        let file = work.file("big.bin")
        let size = 5 * partSize + 77  // 6 parts
        try makeTestFile(at: file, size: size, seed: 4)
        let job = try killedPush(file, afterParts: 2)

        let upload = try theUploadInProgress()
        let held = try ceph.parts(bucket: bucket, key: upload.key, uploadId: upload.uploadId)
        XCTAssertGreaterThanOrEqual(held.count, 2, "acknowledged parts are missing: \(held)")
        XCTAssertLessThan(held.count, 6, "the push was killed after it had sent everything")

        let resumed = try xfer(["resume", job, "--json", "--state", state])
        XCTAssertEqual(resumed.status, 0, resumed.stderr)
        let reconciled = try XCTUnwrap(resumed.events.first { $0["event"] as? String == "reconciled" })
        XCTAssertEqual(int(reconciled["chunksOnServer"]), held.count)
        // Only the parts the gateway lacked were sent again, each once.
        let sent = resumed.events.filter { $0["event"] as? String == "chunk" }.count
        XCTAssertEqual(sent, 6 - held.count)
        let completed = try XCTUnwrap(resumed.lastEvent)
        XCTAssertEqual(completed["event"] as? String, "completed")
        XCTAssertEqual(int(completed["bytesSent"]), size - held.map(\.size).reduce(0, +))
        // The same upload was completed (a new one would have left the old behind).
        XCTAssertTrue(try ceph.uploadsInProgress(bucket: bucket).isEmpty)
        try assertObject("in/big.bin", equals: file, parts: 6)
        XCTAssertEqual(try ceph.head(bucket: bucket, key: "in/big.bin").etag, try multipartETag(of: file))
    }

    /// The gateway forgot the killed push's upload (aborted by another client,
    /// as a lifecycle rule would): the resume starts a new one and sends it all.
    /// Ceph answers ListParts of an unknown upload with NoSuchKey, where AWS
    /// and moto say NoSuchUpload.
    func testAResumeWhoseUploadTheGatewayDroppedStartsANewOne() throws {
        let file = work.file("dropped.bin")
        let size = 3 * partSize + 5
        try makeTestFile(at: file, size: size, seed: 5)
        let job = try killedPush(file, afterParts: 1)
        let dropped = try theUploadInProgress()
        try ceph.abortUpload(bucket: bucket, key: dropped.key, uploadId: dropped.uploadId)

        let resumed = try xfer(["resume", job, "--json", "--state", state])
        XCTAssertEqual(resumed.status, 0, resumed.stderr)
        let completed = try XCTUnwrap(resumed.lastEvent)
        XCTAssertEqual(completed["event"] as? String, "completed", resumed.stderr)
        XCTAssertEqual(int(completed["bytesSent"]), size)
        XCTAssertTrue(try ceph.uploadsInProgress(bucket: bucket).isEmpty)
        try assertObject("in/dropped.bin", equals: file, parts: 4)
    }

    func testCancelOfAKilledPushAbortsItsUpload() throws {
        let file = work.file("c.bin")
        try makeTestFile(at: file, size: 3 * partSize, seed: 7)
        let job = try killedPush(file, afterParts: 1)
        XCTAssertEqual(try ceph.uploadsInProgress(bucket: bucket).count, 1)

        let cancel = try xfer(["cancel", job, "--state", state])
        XCTAssertEqual(cancel.status, 0, cancel.stderr)
        XCTAssertTrue(cancel.stdout.contains { $0.contains("DELETE") && $0.contains("/in/c.bin?") && $0.contains("HTTP 204") }, "\(cancel.stdout)")
        XCTAssertTrue(try ceph.uploadsInProgress(bucket: bucket).isEmpty, "the upload was not aborted")
        XCTAssertTrue(try xfer(["list", "--all", "--state", state]).stdout.allSatisfy { !$0.contains(job) }, "the job is still listed")
    }

    /// Ceph 16's gateway takes full-object checksum headers and keeps
    /// nothing (Docs/protocols.md): a push that asked for one fails each
    /// file, saying why and what to do, rather than end as if the objects had
    /// it. No part is sent; the upload started is dropped by `xfer cancel`.
    func testAFullObjectChecksumTheGatewayIgnoresFailsThePushBeforeAnyPart() throws {
        let large = work.file("full.bin"), small = work.file("one.bin")
        try makeTestFile(at: large, size: 2 * partSize + 1, seed: 8)
        try makeTestFile(at: small, size: 100, seed: 9)
        let multipart = try xfer(pushArguments([large]) + ["--checksum-algorithm", "crc64nvme", "--json"])
        XCTAssertNotEqual(multipart.status, 0)
        XCTAssertTrue(multipart.stderr.contains("x-amz-checksum-type: FULL_OBJECT") && multipart.stderr.contains("--checksum-algorithm"), multipart.stderr)
        let upload = try theUploadInProgress()
        XCTAssertEqual(try ceph.parts(bucket: bucket, key: upload.key, uploadId: upload.uploadId).count, 0, "a part was sent")
        let job = try XCTUnwrap(multipart.events.first { $0["event"] as? String == "started" }?["job"] as? String)
        XCTAssertEqual(try xfer(["cancel", job, "--state", state]).status, 0)
        XCTAssertTrue(try ceph.uploadsInProgress(bucket: bucket).isEmpty, "the upload was not aborted")

        let one = try xfer(pushArguments([small]) + ["--checksum-algorithm", "crc32c", "--state", work.file("state-2")])
        XCTAssertNotEqual(one.status, 0)
        XCTAssertTrue(one.stderr.contains("x-amz-checksum-crc32c"), one.stderr)
        // The switch: without a full-object checksum the same push goes through.
        let none = try xfer(pushArguments([small]) + ["--checksum-algorithm", "none", "--state", work.file("state-3")])
        XCTAssertEqual(none.status, 0, none.stderr)
    }
}
