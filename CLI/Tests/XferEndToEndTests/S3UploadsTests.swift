import Foundation
import XCTest
import XferS3
import XferTestSupport

@testable import XferCLI

/// `xfer uploads list|abort` end to end: real xfer processes (a push
/// SIGKILLed to leave its upload behind), against a real S3 server (moto,
/// answering listings of uploads in pages of three as S3 pages them), with
/// boto3 to start uploads no local job knows and to check what is left.
///
/// moto dates every upload 2010-11-10T20:48:33Z: ages are tested against
/// that date here, and against an injected clock in `UploadAgeFilterTests`.
final class S3UploadsTests: XCTestCase {
    var work: TemporaryDirectory!
    var s3: S3Server!
    let partSize = 5 << 20

    override func setUpWithError() throws {
        work = TemporaryDirectory("xfer-s3-uploads")
        s3 = try S3Server(arguments: ["--page-uploads", "3"])
        try s3.makeBucket("bucket-a")
    }

    override func tearDown() {
        s3 = nil
        work = nil
    }

    private var state: String { work.file("state") }

    private func uploads(_ arguments: [String], environment: [String: String] = S3Server.environment) throws -> RunResult {
        let result = try runXfer(
            ["uploads"] + arguments + ["--endpoint", s3.url, "--state", state, "--max-attempts", "2"], environment: environment)
        let secret = S3Server.environment["AWS_SECRET_ACCESS_KEY"]!
        XCTAssertFalse(result.stdout.joined().contains(secret) || result.stderr.contains(secret), "the secret key was printed")
        return result
    }

    /// The upload ids S3 holds in progress.
    private func inProgress() throws -> Set<String> {
        Set(try s3.uploadsInProgress(bucket: "bucket-a").map(\.uploadId))
    }

    /// A push of a file of four parts to s3://bucket-a/in/, killed after its
    /// first part: a local job that can resume the upload it left.
    private func localUpload() throws -> (job: String, file: String, uploadID: String) {
        let file = work.file("big.bin")
        try makeTestFile(at: file, size: 4 * partSize, seed: 21)
        let job = try pushKilled(
            [
                "push", file, "--backend", "s3", "--to", "s3://bucket-a/in/", "--endpoint", s3.url, "--state", state,
                "--chunk-size", "5MiB", "--concurrency", "1", "--json",
            ], afterChunks: 1, environment: S3Server.environment)
        let held = try s3.uploadsInProgress(bucket: "bucket-a").filter { $0.key == "in/big.bin" }
        XCTAssertEqual(held.count, 1)
        return (job, file, try XCTUnwrap(held.first).uploadId)
    }

    func testListMarksTheLocalJobsUploadAmongOthersPageByPage() throws {
        let local = try localUpload()
        let others = try s3.createUploads(bucket: "bucket-a", keys: ["in/a", "in/b", "in/b", "in/c", "inbox/d", "in/e", "other/f"])

        // Eight uploads: three pages.
        let list = try uploads(["list", "s3://bucket-a", "--json"])
        XCTAssertEqual(list.status, 0, list.stderr)
        XCTAssertEqual(list.stderr, "")
        let rows = list.events
        let ids = rows.compactMap { $0["uploadId"] as? String }
        XCTAssertEqual(ids.count, 8, "\(list.stdout)")
        XCTAssertEqual(Set(ids), Set(others + [local.uploadID]), "every upload once")
        let keys = rows.compactMap { $0["key"] as? String }
        XCTAssertEqual(keys, keys.sorted(), "in S3's order")
        let mine = try XCTUnwrap(rows.first { $0["uploadId"] as? String == local.uploadID })
        XCTAssertEqual(mine["key"] as? String, "in/big.bin")
        XCTAssertEqual(mine["job"] as? String, local.job)
        XCTAssertEqual(mine["jobState"] as? String, "resumable")
        XCTAssertEqual(mine["path"] as? String, local.file)
        XCTAssertEqual(mine["initiated"] as? String, "2010-11-10T20:48:33Z")
        XCTAssertEqual(mine["storageClass"] as? String, "STANDARD")
        for row in rows where row["uploadId"] as? String != local.uploadID {
            XCTAssertTrue(row["job"] is NSNull, "\(row)")
        }

        // The table: a header, then a row an upload; the prefix as S3 matches it ('in/' leaves 'inbox/' out).
        let table = try uploads(["list", "s3://bucket-a/in/"])
        XCTAssertEqual(table.status, 0, table.stderr)
        XCTAssertEqual(table.stdout.first?.split(separator: " ").map(String.init), ["INITIATED", "AGE", "KEY", "UPLOAD", "ID", "LOCAL"])
        XCTAssertEqual(table.stdout.count, 1 + 6, "\(table.stdout)")
        let localRow = try XCTUnwrap(table.stdout.first { $0.contains(local.uploadID) })
        XCTAssertTrue(localRow.hasPrefix("2010-11-10T20:48:33Z"), localRow)
        XCTAssertTrue(localRow.hasSuffix("  job \(local.job) (resumable)"), localRow)
        XCTAssertEqual(table.stdout.filter { $0.hasSuffix("  not a local job") }.count, 5, "\(table.stdout)")
        XCTAssertFalse(table.stdout.contains { $0.contains("inbox/") || $0.contains("other/") }, "\(table.stdout)")
    }

    func testOlderThanTakesUploadsByTheirAge() throws {
        let ids = try s3.createUploads(bucket: "bucket-a", keys: ["in/a", "in/b"])
        // Started in 2010: more than a week ago, less than a century.
        for (age, count) in [("0", 2), ("7d", 2), ("36500d", 0)] {
            let list = try uploads(["list", "s3://bucket-a", "--older-than", age, "--json"])
            XCTAssertEqual(list.status, 0, list.stderr)
            XCTAssertEqual(list.events.count, count, "--older-than \(age): \(list.stdout)")
        }
        let young = try uploads(["abort", "s3://bucket-a", "--older-than", "36500d"])
        XCTAssertEqual(young.status, 0, young.stderr)
        XCTAssertEqual(young.stdout, [])
        XCTAssertEqual(try inProgress(), Set(ids))
        let old = try uploads(["abort", "s3://bucket-a", "--older-than", "7d"])
        XCTAssertEqual(old.status, 0, old.stderr)
        XCTAssertEqual(old.stdout, ["aborted s3://bucket-a/in/a \(ids[0])", "aborted s3://bucket-a/in/b \(ids[1])"])
        XCTAssertEqual(try inProgress(), [])
    }

    func testAbortByIDRemovesThatUploadAndADryRunNothing() throws {
        let ids = try s3.createUploads(bucket: "bucket-a", keys: ["in/a", "in/b", "in/c"])
        let dry = try uploads(["abort", "s3://bucket-a", "--upload-id", ids[0], "--dry-run"])
        XCTAssertEqual(dry.status, 0, dry.stderr)
        XCTAssertEqual(dry.stdout, ["would abort s3://bucket-a/in/a \(ids[0])"])
        XCTAssertEqual(try inProgress(), Set(ids))

        // Their keys found by listing the target.
        let listed = try uploads(["abort", "s3://bucket-a", "--upload-id", ids[2], "--upload-id", ids[0]])
        XCTAssertEqual(listed.status, 0, listed.stderr)
        XCTAssertEqual(listed.stdout, ["aborted s3://bucket-a/in/a \(ids[0])", "aborted s3://bucket-a/in/c \(ids[2])"])
        XCTAssertEqual(try inProgress(), [ids[1]])

        // The key given: no listing.
        let keyed = try uploads(["abort", "s3://bucket-a", "--upload-id", ids[1], "--key", "in/b", "--json"])
        XCTAssertEqual(keyed.status, 0, keyed.stderr)
        XCTAssertEqual(keyed.events.count, 1)
        XCTAssertEqual(keyed.events.first?["result"] as? String, "aborted")
        XCTAssertEqual(keyed.events.first?["key"] as? String, "in/b")
        XCTAssertEqual(try inProgress(), [])

        // Gone already (S3's NoSuchUpload), or not listed: said, and not an error.
        let again = try uploads(["abort", "s3://bucket-a", "--upload-id", ids[1], "--key", "in/b"])
        XCTAssertEqual(again.status, 0, again.stderr)
        XCTAssertEqual(again.stdout, ["already gone s3://bucket-a/in/b \(ids[1])"])
        let unlisted = try uploads(["abort", "s3://bucket-a", "--upload-id", ids[1]])
        XCTAssertEqual(unlisted.status, 0, unlisted.stderr)
        XCTAssertEqual(unlisted.stdout, [])
        XCTAssertTrue(unlisted.stderr.contains("upload \(ids[1]) is not in progress under s3://bucket-a"), unlisted.stderr)
    }

    func testAbortSparesALocalJobsResumableUploadUnlessIncludeLocal() throws {
        let local = try localUpload()
        let other = try XCTUnwrap(try s3.createUploads(bucket: "bucket-a", keys: ["in/x"]).first)

        let all = try uploads(["abort", "s3://bucket-a", "--all"])
        XCTAssertEqual(all.status, 0, all.stderr)
        XCTAssertEqual(all.stdout.count, 2, "\(all.stdout)")
        XCTAssertTrue(all.stdout.contains("aborted s3://bucket-a/in/x \(other)"), "\(all.stdout)")
        let skipped = try XCTUnwrap(all.stdout.first { $0.hasPrefix("skipped s3://bucket-a/in/big.bin \(local.uploadID): ") })
        XCTAssertTrue(skipped.contains("belongs to job \(local.job) (resumable, \(local.file))"), skipped)
        XCTAssertTrue(skipped.contains("'xfer cancel \(local.job)'"), skipped)
        XCTAssertTrue(skipped.contains("--include-local"), skipped)
        XCTAssertEqual(try inProgress(), [local.uploadID])

        let dry = try uploads(["abort", "s3://bucket-a", "--all", "--include-local", "--dry-run"])
        XCTAssertEqual(dry.stdout, ["would abort s3://bucket-a/in/big.bin \(local.uploadID) (job \(local.job), resumable)"])
        let forced = try uploads(["abort", "s3://bucket-a", "--all", "--include-local"])
        XCTAssertEqual(forced.status, 0, forced.stderr)
        XCTAssertEqual(forced.stdout, ["aborted s3://bucket-a/in/big.bin \(local.uploadID) (job \(local.job), resumable)"])
        XCTAssertEqual(try inProgress(), [])

        // The job still completes: S3 no longer knows its upload, so it starts another.
        let resumed = try runXfer(["resume", local.job, "--state", state], environment: S3Server.environment)
        XCTAssertEqual(resumed.status, 0, resumed.stderr)
        try s3.assertObject(bucket: "bucket-a", key: "in/big.bin", equals: local.file, parts: 4, downloadingInto: work)
        XCTAssertEqual(try inProgress(), [])
    }

    func testMistakesFailWithOneLineAndTheirExitCode() throws {
        let noCredentials = S3Server.environment.merging(["AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": ""]) { $1 }
        let cases: [(arguments: [String], environment: [String: String], status: Int32, message: String)] = [
            (["list", "s3://bucket-a", "--older-than", "7 days"], S3Server.environment, 2, "--older-than must look like 90s, 30m, 36h or 7d"),
            (["abort", "s3://bucket-a", "--older-than", "1w"], S3Server.environment, 2, "--older-than must look like"),
            (["abort", "s3://bucket-a"], S3Server.environment, 2, "say which uploads to abort"),
            (["abort", "s3://bucket-a", "--all", "--older-than", "1d"], S3Server.environment, 2, "give one of --upload-id, --older-than and --all"),
            (["abort", "s3://bucket-a", "--all", "--key", "k"], S3Server.environment, 2, "--key goes with --upload-id"),
            (["list", "http://example.com/b"], S3Server.environment, 2, "s3://BUCKET/PREFIX"),
            (["list", "s3://Bad_Bucket"], S3Server.environment, 2, "not a valid S3 bucket name"),
            (["list", "s3://bucket-a", "--addressing", "sideways"], S3Server.environment, 2, "--addressing must be path or virtual"),
            (["list", "s3://bucket-a"], noCredentials, 2, "no AWS credentials"),
            (["list", "s3://no-such-bucket"], S3Server.environment, 1, "bucket 'no-such-bucket' does not exist at \(s3.url)"),
            (["abort", "s3://no-such-bucket", "--all"], S3Server.environment, 1, "bucket 'no-such-bucket' does not exist"),
        ]
        for (arguments, environment, status, message) in cases {
            let result = try uploads(arguments, environment: environment)
            XCTAssertEqual(result.status, status, "\(arguments): \(result.stderr)")
            XCTAssertEqual(result.stderr.split(separator: "\n").count, 1, "\(arguments): \(result.stderr)")
            XCTAssertTrue(result.stderr.contains(message), "\(arguments): \(result.stderr)")
            XCTAssertTrue(result.stdout.isEmpty, "\(arguments): \(result.stdout)")
        }
    }
}

/// `--older-than` against an injected clock (moto dates every upload alike).
final class UploadAgeFilterTests: XCTestCase {
    func testOlderThanTakesUploadsStartedAtLeastThatLongAgo() {
        let now = Date(timeIntervalSince1970: 1_700_000_000)
        func upload(startedSecondsAgo seconds: Double?) -> S3MultipartUpload {
            S3MultipartUpload(key: "k", uploadID: "u", initiated: seconds.map { now.addingTimeInterval(-$0) })
        }
        let day = 86_400.0
        let week = AgeFilter(minimumAge: .seconds(7 * 86_400), now: now)
        XCTAssertTrue(week.admits(upload(startedSecondsAgo: 7 * day)))
        XCTAssertTrue(week.admits(upload(startedSecondsAgo: 30 * day)))
        XCTAssertFalse(week.admits(upload(startedSecondsAgo: 7 * day - 1)))
        XCTAssertFalse(week.admits(upload(startedSecondsAgo: nil)), "an upload of unknown age is never old enough")

        let any = AgeFilter(minimumAge: nil, now: now)
        XCTAssertTrue(any.admits(upload(startedSecondsAgo: 0)))
        XCTAssertTrue(any.admits(upload(startedSecondsAgo: nil)))
        // `--older-than 0` is every upload, even one S3's clock dates a little ahead of ours.
        XCTAssertTrue(AgeFilter(minimumAge: .zero, now: now).admits(upload(startedSecondsAgo: -5)))

        XCTAssertEqual(DurationArgument(argument: "90m")?.duration, .seconds(5400))
        XCTAssertEqual(DurationArgument(argument: "36h")?.duration, .seconds(36 * 3600))
        XCTAssertEqual(DurationArgument(argument: "7d")?.duration, .seconds(7 * 86_400))
        for bad in ["7 days", "1w", "", "d", "-1d"] {
            XCTAssertNil(DurationArgument(argument: bad), bad)
        }
    }
}
