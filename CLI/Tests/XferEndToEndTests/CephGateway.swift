import Foundation
import XCTest
import XferTestSupport

/// A real S3 store: the RADOS Gateway of a one-machine Ceph cluster
/// (`scripts/ceph-cluster.sh`: one monitor, one bluestore OSD on a sparse
/// file, one gateway, on free 127.0.0.1 ports), with the AWS CLI — not
/// xfer — to make buckets and read objects back.
///
/// One cluster serves the whole test process (it takes ~8 s to start):
/// `CephGateway.shared()` starts it on first use, in a fresh temporary
/// directory, and it is stopped when the process ends. A start that
/// failed fails every test that asks for it, with the script's message.
final class CephGateway: @unchecked Sendable {
    // @unchecked: every property is set in init and only read afterwards
    // (the pipes' handles are closed and read once, at exit).

    /// The keys `ceph-cluster.sh` gives the gateway's one user; the CLI and
    /// xfer both sign with them. The region is any: the gateway has one zone.
    static let environment = [
        "AWS_ACCESS_KEY_ID": "XFERCEPHTESTKEY", "AWS_SECRET_ACCESS_KEY": "xfer-ceph-test-secret",
        "AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "us-east-1", "AWS_PROFILE": "", "AWS_SESSION_TOKEN": "",
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent", "AWS_CONFIG_FILE": "/nonexistent",
        // botocore's default CRC-32s on every request: not the subject here.
        "AWS_REQUEST_CHECKSUM_CALCULATION": "when_required", "AWS_RESPONSE_CHECKSUM_VALIDATION": "when_required",
    ]

    /// The gateway's endpoint, `http://127.0.0.1:PORT` (path-style buckets).
    let url: String
    /// The cluster's directory (configuration, daemons' data and logs).
    let directory: String
    private let python: String
    /// The watcher's stdin: this process holds the only writing end, so the
    /// watcher reads end-of-file when this process ends, whichever way it ends.
    private let lifeline: Pipe
    /// The watcher's stdout, which ends when the watcher has stopped the cluster.
    private let watcherOutput: Pipe

    /// The test process's one gateway, started on first use.
    static func shared() throws -> CephGateway {
        try started.get()
    }

    private static let started: Result<CephGateway, any Error> = {
        let result = Result { try CephGateway() }
        // At a normal exit the cluster is stopped before the process is gone.
        if case .success = result { atexit { CephGateway.stopAtExit() } }
        return result
    }()

    private static var script: String { repositoryRoot + "/scripts/ceph-cluster.sh" }

    private init() throws {
        python = try pythonTool(venv: "venv-s3")
        let check = try runToEnd(python, ["-c", "import awscli"])
        guard check.status == 0 else {
            throw HarnessError("the AWS CLI is missing from .tools/venv-s3 (\(check.stderr.suffix(200))); run `make python-tools` (make test does)")
        }
        directory = (NSTemporaryDirectory() as NSString).appendingPathComponent("xfer-ceph-\(UUID().uuidString.prefix(8))")
        let start = try runToEnd("/bin/bash", [Self.script, "start", directory])
        guard start.status == 0, let last = start.stdout.last, last.hasPrefix("endpoint ") else {
            // The script has killed whatever it started; its directory keeps the logs.
            throw HarnessError(
                "scripts/ceph-cluster.sh start \(directory) failed (exit \(start.status)): \(start.stderr.suffix(1500))")
        }
        url = String(last.dropFirst("endpoint ".count))

        // The watcher stops the cluster once this process's end closes its stdin:
        // after a crash or a SIGKILL of the tests as well as at a normal exit.
        // Foundation closes every other descriptor in the children it starts, so
        // no later child holds the lifeline open.
        lifeline = Pipe()
        watcherOutput = Pipe()
        let watcher = Process()
        watcher.executableURL = URL(fileURLWithPath: "/bin/sh")
        watcher.arguments = ["-c", #"cat >/dev/null; exec /bin/bash "$0" stop "$1""#, Self.script, directory]
        watcher.standardInput = lifeline
        watcher.standardOutput = watcherOutput
        do {
            try watcher.run()
        } catch {
            _ = try? runToEnd("/bin/bash", [Self.script, "stop", directory])
            throw HarnessError("could not start the Ceph cluster's watcher: \(error)")
        }
    }

    /// Closes the lifeline and waits for the watcher's output to end: the
    /// daemons are dead and the directory removed when this returns.
    private static func stopAtExit() {
        guard case .success(let gateway) = started else { return }
        try? gateway.lifeline.fileHandleForWriting.close()
        _ = gateway.watcherOutput.fileHandleForReading.readDataToEndOfFile()
    }

    // MARK: The AWS CLI

    /// Runs `aws --endpoint-url URL ARGUMENTS` (the venv's awscli, not any
    /// `aws` on PATH) and returns its stdout.
    @discardableResult
    func aws(_ arguments: [String]) throws -> String {
        // No profile at all: the CLI takes an empty AWS_PROFILE (which keeps xfer off
        // this machine's profiles) for a profile named "".
        let result = try runToEnd(
            "/usr/bin/env", ["-u", "AWS_PROFILE", python, "-m", "awscli", "--endpoint-url", url] + arguments,
            environment: Self.environment)
        guard result.status == 0 else {
            throw HarnessError("aws \(arguments.prefix(2).joined(separator: " ")) failed (exit \(result.status)): \(result.stderr.suffix(600))")
        }
        return result.stdout.joined(separator: "\n")
    }

    /// `aws s3api …` whose answer is JSON (or nothing).
    func awsJSON(_ arguments: [String]) throws -> [String: Any] {
        let text = try aws(["s3api"] + arguments + ["--output", "json"])
        guard !text.isEmpty else { return [:] }
        return try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any] ?? [:]
    }

    /// A new bucket of its own name (the gateway wants at least 3 characters).
    func makeBucket() throws -> String {
        let bucket = "xfer-" + UUID().uuidString.prefix(8).lowercased()
        try aws(["s3api", "create-bucket", "--bucket", bucket])
        return bucket
    }

    /// Aborts the bucket's uploads in progress, then deletes its objects and
    /// the bucket: what a test wrote leaves the cluster.
    func removeBucket(_ bucket: String) throws {
        for upload in try uploadsInProgress(bucket: bucket) {
            try abortUpload(bucket: bucket, key: upload.key, uploadId: upload.uploadId)
        }
        try aws(["s3", "rb", "s3://\(bucket)", "--force"])
    }

    /// Multipart uploads in progress (ListMultipartUploads).
    func uploadsInProgress(bucket: String) throws -> [(key: String, uploadId: String)] {
        let answer = try awsJSON(["list-multipart-uploads", "--bucket", bucket])
        return (answer["Uploads"] as? [[String: Any]] ?? []).map { ($0["Key"] as? String ?? "", $0["UploadId"] as? String ?? "") }
    }

    /// The parts the gateway holds of an upload (ListParts): number and size.
    func parts(bucket: String, key: String, uploadId: String) throws -> [(number: Int, size: Int)] {
        let answer = try awsJSON(["list-parts", "--bucket", bucket, "--key", key, "--upload-id", uploadId])
        return (answer["Parts"] as? [[String: Any]] ?? []).map { (int($0["PartNumber"]), int($0["Size"])) }
    }

    func abortUpload(bucket: String, key: String, uploadId: String) throws {
        try aws(["s3api", "abort-multipart-upload", "--bucket", bucket, "--key", key, "--upload-id", uploadId])
    }

    /// HEAD of the object: its ETag (quoted) and length.
    /// Key (less `prefix`) → ETag, unquoted, of every object under `prefix`.
    func etags(bucket: String, prefix: String) throws -> [String: String] {
        var stored: [String: String] = [:]
        var token: String?
        repeat {
            let page = try awsJSON(["list-objects-v2", "--bucket", bucket, "--prefix", prefix] + (token.map { ["--continuation-token", $0] } ?? []))
            for object in page["Contents"] as? [[String: Any]] ?? [] {
                stored[String((object["Key"] as? String ?? "").dropFirst(prefix.count))] = (object["ETag"] as? String ?? "")
                    .replacingOccurrences(of: "\"", with: "")
            }
            token = page["NextContinuationToken"] as? String
        } while token != nil
        return stored
    }

    func head(bucket: String, key: String) throws -> (etag: String, length: Int) {
        let answer = try awsJSON(["head-object", "--bucket", bucket, "--key", key])
        return (answer["ETag"] as? String ?? "", int(answer["ContentLength"]))
    }
}

extension CephGateway: S3ObjectReading {
    /// `aws s3 cp` (ranged GETs in parallel for a large object), then HEAD for the ETag.
    func download(bucket: String, key: String, to path: String) throws -> String {
        try aws(["s3", "cp", "s3://\(bucket)/\(key)", path, "--only-show-errors"])
        return try head(bucket: bucket, key: key).etag
    }
}

/// A test case with a fresh bucket of the Ceph gateway (`CephGateway`), emptied and removed
/// afterwards (what a test wrote goes, so the cluster stays small for the next), and a
/// temporary directory.
class CephBucketTestCase: XCTestCase {
    var work: TemporaryDirectory!
    var ceph: CephGateway!
    var bucket: String!

    override func setUpWithError() throws {
        work = TemporaryDirectory("xfer-\(Self.self)")
        ceph = try CephGateway.shared()
        bucket = try ceph.makeBucket()
    }

    override func tearDownWithError() throws {
        defer {
            bucket = nil
            work = nil
        }
        if let bucket { try ceph.removeBucket(bucket) }
    }
}
