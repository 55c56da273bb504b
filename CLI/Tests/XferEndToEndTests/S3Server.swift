import Foundation
import XCTest
import XferTestSupport

/// The CLI package's root (CLI/), from this file's place in it.
let packageRoot: String = {
    var url = URL(fileURLWithPath: #filePath)
    for _ in 0..<3 { url.deleteLastPathComponent() }
    return url.path
}()

/// The repository's root: the engine's package, the Makefile, scripts/ and .tools/.
let repositoryRoot: String = (packageRoot as NSString).deletingLastPathComponent

/// A Python program from `.tools/` (installed by `make python-tools`).
func pythonTool(venv: String) throws -> String {
    let python = repositoryRoot + "/.tools/\(venv)/bin/python"
    guard FileManager.default.isExecutableFile(atPath: python) else {
        throw HarnessError("\(python) is missing; run `make python-tools` (make test does)")
    }
    return python
}

/// A real S3 server (moto, in server mode) on 127.0.0.1, with boto3 —
/// not xfer — to make buckets and read objects back.
final class S3Server {
    /// moto takes any keys; these are the ones every test signs with.
    static let environment = [
        "AWS_ACCESS_KEY_ID": "AKIAXFERTESTKEY", "AWS_SECRET_ACCESS_KEY": "xfer-test-secret-do-not-print",
        "AWS_REGION": "us-east-1", "AWS_PROFILE": "", "AWS_SESSION_TOKEN": "",
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent", "AWS_CONFIG_FILE": "/nonexistent",
    ]

    let child: ChildProcess
    let url: String
    /// What boto3 (s3tool.py) runs with: `environment`, with the keys of
    /// the user `--auth` made when the server checks signatures.
    let toolEnvironment: [String: String]
    /// That user's keys (`--auth` only).
    let adminCredentials: (key: String, secret: String)?
    private let python: String
    private let tool = packageRoot + "/Tests/Tools/s3tool.py"

    /// `arguments` go to `s3tool.py serve` (e.g. `--lose-complete`, `--auth`).
    init(arguments: [String] = []) throws {
        python = try pythonTool(venv: "venv-s3")
        (child, url) = try startServer(
            "the moto S3 server", executable: python, arguments: [tool, "serve"] + arguments, environment: Self.environment)
        var environment = Self.environment
        var admin: (key: String, secret: String)?
        if arguments.contains("--auth") {
            let words = child.readLine()?.split(separator: " ").map(String.init) ?? []
            guard words.count == 3, words[0] == "credentials" else {
                child.kill()
                child.wait()
                throw HarnessError("the moto S3 server did not say its credentials: \(child.standardError)")
            }
            admin = (words[1], words[2])
            environment["AWS_ACCESS_KEY_ID"] = words[1]
            environment["AWS_SECRET_ACCESS_KEY"] = words[2]
        }
        adminCredentials = admin
        toolEnvironment = environment
    }

    deinit {
        child.kill(SIGKILL)
        child.wait()
    }

    @discardableResult
    private func run(_ arguments: [String]) throws -> [String] {
        let process = try ChildProcess(executable: python, arguments: [tool] + arguments, environment: toolEnvironment)
        let lines = process.readRemaining()
        guard process.wait() == 0 else {
            throw HarnessError("s3tool \(arguments.first ?? "") failed: \(process.standardError.suffix(600))")
        }
        return lines
    }

    func makeBucket(_ bucket: String) throws { try run(["mkbucket", url, bucket]) }

    /// Temporary credentials of `role` from the server's STS (`--auth`): the
    /// JSON of `s3tool.py assume`.
    func assume(role: String) throws -> [String: String] {
        let text = try run(["assume", url, role]).joined()
        return try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: String] ?? [:]
    }

    /// What S3 and STS were asked, first to last (`--auth`): each request's
    /// time (seconds since the epoch), service, method, path, access key
    /// (nil when unsigned) and, for STS, its parameters.
    func requests() throws -> [[String: Any]] {
        let child = try ChildProcess(executable: "/usr/bin/curl", arguments: ["-fsS", url + "/xfer-test/requests"])
        let body = child.readRemaining().joined(separator: "\n")
        guard child.wait() == 0 else { throw HarnessError("curl \(url)/xfer-test/requests failed: \(child.standardError)") }
        return try JSONSerialization.jsonObject(with: Data(body.utf8)) as? [[String: Any]] ?? []
    }

    /// Downloads `key` into `path` with boto3; returns the object's ETag.
    @discardableResult
    func download(bucket: String, key: String, to path: String) throws -> String {
        try run(["get", url, bucket, key, path]).last ?? ""
    }

    /// The object's CRC-32 as S3 reports it, without a composite one's part count, or
    /// "none" when S3 keeps none.
    func crc32(bucket: String, key: String) throws -> String {
        try run(["crc32", url, bucket, key]).last ?? ""
    }

    /// The object's CRC-32C as S3 reports it ("none" when it keeps none).
    func crc32c(bucket: String, key: String) throws -> String {
        try run(["crc32c", url, bucket, key]).last ?? ""
    }

    /// The checksums HeadObject reports of the object, by algorithm (`CRC64NVME`: base64),
    /// and its `type` (`FULL_OBJECT`, `COMPOSITE`; absent when S3 says none).
    func checksums(bucket: String, key: String) throws -> [String: String] {
        let text = try run(["checksums", url, bucket, key]).joined()
        return (try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any] ?? [:]).compactMapValues { $0 as? String }
    }

    /// `path`'s CRC64NVME as S3 writes it, computed by awscrt (what botocore and moto use), not by xfer.
    func crc64nvme(ofFile path: String) throws -> String {
        try run(["crc64nvme", path]).last ?? ""
    }

    /// Stores `path` at `key` with one PutObject claiming `value` as its checksum by
    /// `algorithm` (e.g. CRC64NVME): moto keeps what it is told, right or wrong.
    func put(_ path: String, bucket: String, key: String, claiming value: String, algorithm: String) throws {
        try run(["put-checksum", url, bucket, key, path, algorithm, value])
    }

    /// Stores `path` at `key` in parts of `partSize` bytes, each with its checksum by
    /// `algorithm`, the upload of `type` (COMPOSITE or FULL_OBJECT), with boto3.
    func putParts(_ path: String, bucket: String, key: String, partSize: Int, algorithm: String, type: String = "COMPOSITE") throws {
        try run(["put-parts", url, bucket, key, path, String(partSize), algorithm, type])
    }

    /// The object's user metadata (`x-amz-meta-NAME` headers it was created with), by name.
    /// What S3 keeps with the object (`s3tool.py describe`).
    func describe(bucket: String, key: String) throws -> [String: Any] {
        let text = try run(["describe", url, bucket, key]).joined()
        return try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any] ?? [:]
    }

    func contentType(bucket: String, key: String) throws -> String {
        try run(["type", url, bucket, key]).joined().trimmingCharacters(in: .whitespacesAndNewlines)
    }

    func metadata(bucket: String, key: String) throws -> [String: String] {
        let text = try run(["meta", url, bucket, key]).joined()
        return try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: String] ?? [:]
    }

    /// Every object of `bucket`, by key, with its ETag.
    func objects(bucket: String) throws -> [String: String] {
        let text = try run(["objects", url, bucket]).joined()
        return try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: String] ?? [:]
    }

    /// Starts a multipart upload of each of `keys` with boto3 (no local job
    /// knows them); returns their upload ids, in order.
    func createUploads(bucket: String, keys: [String]) throws -> [String] {
        try run(["create-upload", url, bucket] + keys)
    }

    /// Multipart uploads in progress: (key, upload id, parts S3 holds, their bytes).
    func uploadsInProgress(bucket: String) throws -> [(key: String, uploadId: String, parts: Int, bytes: Int)] {
        let text = try run(["uploads", url, bucket]).joined()
        let json = try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any]
        return (json?["uploads"] as? [[String: Any]] ?? []).map {
            ($0["key"] as? String ?? "", $0["uploadId"] as? String ?? "", int($0["parts"]), int($0["bytes"]))
        }
    }
}

/// A client independent of xfer that reads objects back from an S3 store
/// (boto3 for moto, the AWS CLI for Ceph's gateway).
protocol S3ObjectReading {
    /// Downloads `key` into `path`; returns the object's ETag.
    func download(bucket: String, key: String, to path: String) throws -> String
}

extension S3Server: S3ObjectReading {}

extension S3ObjectReading {
    /// Reads `key` back and checks its bytes against `file`, and
    /// its ETag: that of `parts` parts (a multipart upload), or of a single
    /// PutObject when `parts` is nil.
    func assertObject(
        bucket: String, key: String, equals file: String, parts: Int?, downloadingInto work: TemporaryDirectory, line: UInt = #line
    ) throws {
        let copy = work.file("download-\(UUID().uuidString.prefix(6))")
        let etag = try download(bucket: bucket, key: key, to: copy)
        XCTAssertEqual(try sha256sum(copy), try sha256sum(file), "\(key) differs", line: line)
        if let parts {
            XCTAssertTrue(etag.hasSuffix("-\(parts)\""), "\(key): ETag \(etag) is not that of \(parts) parts", line: line)
        } else {
            XCTAssertFalse(etag.contains("-"), "\(key): ETag \(etag) is a multipart one", line: line)
        }
    }
}
