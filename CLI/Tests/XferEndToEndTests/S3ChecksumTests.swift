import Foundation
import XCTest
import Xfer
import XferS3
import XferTestSupport

/// S3's checksums end to end (issue 45, part 5) against moto on 127.0.0.1,
/// run as `s3tool.py serve --aws-checksums`: moto 5.2 keeps whatever checksum
/// it is sent, so the wrapper checks them as AWS does (a part's and a
/// PutObject's against their bodies, a completion's full-object one against
/// the parts: 400 BadDigest otherwise), and lists parts in
/// GetObjectAttributes as AWS does. Expected values come from awscrt, not
/// from xfer's own CRCs.
final class S3ChecksumTests: XCTestCase {
    var work: TemporaryDirectory!
    var s3: S3Server!
    let partSize = 5 << 20

    override func setUpWithError() throws {
        work = TemporaryDirectory("xfer-s3-checksums")
        s3 = try S3Server(arguments: ["--aws-checksums"])
        try s3.makeBucket("sums")
    }

    override func tearDown() {
        s3 = nil
        work = nil
    }

    private var state: String { work.file("state") }

    private func partialFiles(in directory: String) -> [String] {
        let names = (FileManager.default.enumerator(atPath: directory)?.allObjects as? [String]) ?? []
        return names.filter { $0.hasSuffix(".xfer-partial") }
    }

    private func pushArguments(_ files: [String], _ options: [String]) -> [String] {
        ["push"] + files + [
            "--backend", "s3", "--to", "s3://sums/in/", "--endpoint", s3.url, "--state", state, "--chunk-size", "5MiB",
            "--concurrency", "2",
        ] + options
    }

    private func pull(_ location: String, to path: String, chunkSize: String = "8MiB", verbose: Bool = false) throws -> RunResult {
        try runXfer(
            ["pull", location, path, "--endpoint", s3.url, "--state", work.file("pull-state"), "--chunk-size", chunkSize]
                + (verbose ? ["--verbose"] : []), environment: S3Server.environment)
    }

    /// A multipart push killed after two parts and resumed still completes with
    /// the whole object's CRC64NVME, combined from the parts' CRCs kept in
    /// LMDB; the store (checking it against the parts it assembled, as AWS
    /// does) keeps it as FULL_OBJECT, the value awscrt computes of the file.
    func testAFullObjectCRC64NVMESurvivesAKillAndIsTheFilesCRC() throws {
        let file = work.file("big.bin"), small = work.file("small.bin"), empty = work.file("empty.bin")
        try makeTestFile(at: file, size: 4 * partSize + 77, seed: 51)
        try makeTestFile(at: small, size: 1_000, seed: 52)
        try makeTestFile(at: empty, size: 0)
        _ = try pushKilled(pushArguments([file], ["--checksum-algorithm", "crc64nvme", "--json"]), afterChunks: 2, environment: S3Server.environment)
        // Resumed without the option: the job keeps what its upload was created for.
        let resumed = try runXfer(pushArguments([file], []), environment: S3Server.environment)
        XCTAssertEqual(resumed.status, 0, resumed.stderr)
        try s3.assertObject(bucket: "sums", key: "in/big.bin", equals: file, parts: 5, downloadingInto: work)
        XCTAssertEqual(try s3.checksums(bucket: "sums", key: "in/big.bin"), ["CRC64NVME": try s3.crc64nvme(ofFile: file), "type": "FULL_OBJECT"])

        // One PutObject each: the CRC64NVME of the bytes, checked by the store.
        let singles = try runXfer(pushArguments([small, empty], ["--checksum-algorithm", "crc64nvme"]), environment: S3Server.environment)
        XCTAssertEqual(singles.status, 0, singles.stderr)
        XCTAssertEqual(try s3.checksums(bucket: "sums", key: "in/small.bin")["CRC64NVME"], try s3.crc64nvme(ofFile: small))
        XCTAssertEqual(try s3.checksums(bucket: "sums", key: "in/empty.bin")["CRC64NVME"], "AAAAAAAAAAA=")

        // And a pull checks the object against it (ranges' CRC64NVMEs combined).
        let copy = work.file("copy.bin")
        let pulled = try pull("s3://sums/in/big.bin", to: copy, chunkSize: "3MiB")
        XCTAssertEqual(pulled.status, 0, pulled.stderr)
        XCTAssertEqual(try sha256sum(copy), try sha256sum(file))
    }

    func testAFullObjectCRC32CIsTheFilesCRC32C() throws {
        let file = work.file("c.bin")
        try makeTestFile(at: file, size: 3 * partSize + 5, seed: 53)
        let result = try runXfer(pushArguments([file], ["--checksum-algorithm", "crc32c"]), environment: S3Server.environment)
        XCTAssertEqual(result.status, 0, result.stderr)
        let bytes = Array(try Data(contentsOf: URL(fileURLWithPath: file)))
        XCTAssertEqual(
            try s3.checksums(bucket: "sums", key: "in/c.bin"),
            ["CRC32C": Checksums.base64(CRC32.bigEndianBytes(CRC32C.of(bytes))), "type": "FULL_OBJECT"])
    }

    func testChecksumOptionsThatCannotBeKeptAreRefused() throws {
        let file = work.file("x.bin")
        try makeTestFile(at: file, size: 10, seed: 54)
        for (options, message) in [
            (["--checksum-algorithm", "sha1"], "--checksum-algorithm must be crc32c, crc64nvme or none"),
            (["--checksum-algorithm", "crc32c", "--part-checksum", "crc32"], "name one of them"),
        ] {
            let result = try runXfer(pushArguments([file], options), environment: S3Server.environment)
            XCTAssertEqual(result.status, 2, result.stderr)
            XCTAssertTrue(result.stderr.contains(message), result.stderr)
        }
        // none: the switch for stores that refuse them: a push as without the option.
        let none = try runXfer(pushArguments([file], ["--checksum-algorithm", "none"]), environment: S3Server.environment)
        XCTAssertEqual(none.status, 0, none.stderr)
        XCTAssertEqual(try s3.checksums(bucket: "sums", key: "in/x.bin"), [:])
    }

    /// An object whose full-object CRC64NVME is not its bytes' (moto keeps a
    /// PutObject's claimed value unchecked): the pull fails that file, says
    /// why, and publishes nothing — fetched whole and in ranges alike.
    func testAPullOfAnObjectWhoseChecksumDiffersFailsTheFileAndPublishesNothing() throws {
        // Plain moto: it keeps the claimed value (the wrapper would refuse it, as AWS does).
        let lax = try S3Server()
        try lax.makeBucket("sums")
        for (size, name) in [(1_000, "small.bin"), (3 * partSize, "large.bin")] {
            let file = work.file(name)
            try makeTestFile(at: file, size: size, seed: UInt64(55 + size % 7))
            try lax.put(file, bucket: "sums", key: "bad/" + name, claiming: "AAAAAAAAAAE=", algorithm: "CRC64NVME")
            let target = work.file("copy-" + name)
            let result = try runXfer(
                ["pull", "s3://sums/bad/" + name, target, "--endpoint", lax.url, "--state", work.file("lax-state"), "--chunk-size", "5MiB"],
                environment: S3Server.environment)
            XCTAssertEqual(result.status, 1, result.stderr)
            XCTAssertTrue(result.stderr.contains("CRC64NVME"), result.stderr)
            XCTAssertFalse(FileManager.default.fileExists(atPath: target), "a file that failed its check was published")
            XCTAssertEqual(partialFiles(in: work.path), [], "the partial file was dropped")
        }
    }

    /// A composite CRC-32C (boto3's multipart upload, parts of 5 MiB) is
    /// checked part by part through GetObjectAttributes: from the ranges'
    /// receipts when ranges and parts line up, else by reading the parts back.
    func testAPullChecksACompositeChecksumThroughTheParts() throws {
        let file = work.file("parts.bin")
        try makeTestFile(at: file, size: 3 * partSize + 1_234, seed: 58)
        try s3.putParts(file, bucket: "sums", key: "comp.bin", partSize: partSize, algorithm: "CRC32C")
        XCTAssertEqual(try s3.checksums(bucket: "sums", key: "comp.bin")["type"], "COMPOSITE")
        for chunkSize in ["5MiB", "8MiB"] {
            let copy = work.file("comp-\(chunkSize).bin")
            let result = try pull("s3://sums/comp.bin", to: copy, chunkSize: chunkSize, verbose: true)
            XCTAssertEqual(result.status, 0, result.stderr)
            XCTAssertEqual(try sha256sum(copy), try sha256sum(file))
            XCTAssertTrue(result.stderr.contains("GET \(s3.url)/sums/comp.bin?… 200"), "the parts were asked for: \(result.stderr.suffix(2_000))")
        }
        // A store whose listed part differs from the bytes: the file fails, naming the part, and is not published.
        let lying = try S3Server(arguments: ["--aws-checksums", "--misreport-parts"])
        try lying.makeBucket("sums")
        try lying.putParts(file, bucket: "sums", key: "comp.bin", partSize: partSize, algorithm: "CRC32C")
        let target = work.file("lied.bin")
        let failed = try runXfer(
            ["pull", "s3://sums/comp.bin", target, "--endpoint", lying.url, "--state", work.file("lying-state")], environment: S3Server.environment)
        XCTAssertEqual(failed.status, 1, failed.stderr)
        XCTAssertTrue(failed.stderr.contains("part 1's bytes do not match the server's CRC-32C"), failed.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: target))
        XCTAssertEqual(partialFiles(in: work.path), [])
    }

    /// `xfer sync --checksum` against objects that carry only a full-object CRC64NVME (what S3
    /// keeps for new objects since 2025; here written by `push --checksum-algorithm crc64nvme`):
    /// compared with the files' CRC64NVMEs, read once each and cached, so only a file changed
    /// in place with its size and time kept is sent; a re-run reads and asks nothing.
    func testSyncByChecksumComparesCRC64NVME() throws {
        let tree = work.file("tree")
        try FileManager.default.createDirectory(atPath: tree, withIntermediateDirectories: true)
        for index in 0..<6 { try makeTestFile(at: tree + "/f\(index).bin", size: 3_000 + index, seed: UInt64(60 + index)) }
        let push = try runXfer(
            ["push", tree, "--backend", "s3", "--to", "s3://sums/t", "--endpoint", s3.url, "--state", work.file("push-state"),
             "--checksum-algorithm", "crc64nvme", "--quiet"], environment: S3Server.environment)
        XCTAssertEqual(push.status, 0, push.stderr)
        let changed = tree + "/f2.bin"
        XCTAssertEqual(try runToEnd("/usr/bin/touch", ["-r", changed, work.file("time")]).status, 0)
        var bytes = try Data(contentsOf: URL(fileURLWithPath: changed))
        bytes[5] ^= 0x5a
        try bytes.write(to: URL(fileURLWithPath: changed))
        XCTAssertEqual(try runToEnd("/usr/bin/touch", ["-r", work.file("time"), changed]).status, 0)

        let arguments = ["sync", tree, "s3://sums/t", "--endpoint", s3.url, "--state", state, "--checksum", "--json", "--progress", "none"]
        let first = try runXfer(arguments, environment: S3Server.environment)
        XCTAssertEqual(first.status, 0, first.stderr)
        let copies = first.events.filter { $0["event"] as? String == "decision" && $0["action"] as? String == "copy" }
        XCTAssertEqual(copies.map { $0["key"] as? String ?? "" }, ["f2.bin"], first.stdout.joined(separator: "\n"))
        XCTAssertEqual(copies.first?["reason"] as? String, "checksum differs")
        let again = try runXfer(arguments, environment: S3Server.environment)
        XCTAssertEqual(again.status, 0, again.stderr)
        let planned = try XCTUnwrap(again.events.first { $0["event"] as? String == "planned" })
        XCTAssertEqual(int(planned["copies"]), 0)
        XCTAssertEqual(int(planned["described"]), 0)
    }
}
