import Foundation
import XCTest
import XferTestSupport

/// Where `--backend s3` finds its credentials, end to end: real xfer
/// processes against moto with its signature checks on (`s3tool.py serve
/// --auth`: every S3 request's signature, access key and session token must
/// be right, and STS hands out real temporary credentials), and stand-ins
/// for the container and instance metadata endpoints (credserver.py).
final class S3CredentialTests: XCTestCase {
    var work: TemporaryDirectory!
    var s3: S3Server!

    static let role = "arn:aws:iam::123456789012:role/xfer"
    static let externalIDRole = "arn:aws:iam::123456789012:role/xfer-ext"

    override func setUp() {
        work = TemporaryDirectory("xfer-s3-creds")
    }

    override func tearDown() {
        s3 = nil
        work = nil
    }

    private var state: String { work.file("state") }
    private var configFile: String { work.file("config") }
    private var credentialsFile: String { work.file("credentials") }

    /// moto with its checks on, and a bucket.
    private func startS3() throws {
        s3 = try S3Server(arguments: ["--auth"])
        try s3.makeBucket("bucket-a")
    }

    /// No credentials anywhere but where a test puts them: every AWS_*
    /// variable the chain reads is blank (blank counts as unset), the shared
    /// files are the test's, instance metadata is off, and STS is moto.
    private var environment: [String: String] {
        var environment: [String: String] = [:]
        for name in [
            "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE",
            "AWS_ROLE_ARN", "AWS_ROLE_SESSION_NAME", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
            "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_AUTHORIZATION_TOKEN", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
            "AWS_EC2_METADATA_SERVICE_ENDPOINT", "AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION",
        ] {
            environment[name] = ""
        }
        environment["AWS_REGION"] = "us-east-1"
        environment["AWS_SHARED_CREDENTIALS_FILE"] = credentialsFile
        environment["AWS_CONFIG_FILE"] = configFile
        environment["AWS_EC2_METADATA_DISABLED"] = "true"
        environment["AWS_ENDPOINT_URL_STS"] = s3?.url ?? ""
        return environment
    }

    /// Pushes `files` (default: one small file) to s3://bucket-a/in/ and
    /// checks that nothing of `secrets` shows in what xfer printed or in
    /// its state directory.
    @discardableResult
    private func push(
        _ files: [String]? = nil, environment: [String: String], options: [String] = [], secrets: [String], line: UInt = #line
    ) throws -> (result: RunResult, files: [String]) {
        var pushed = files ?? []
        if files == nil {
            let small = work.file("small.bin")
            try makeTestFile(at: small, size: 1000, seed: 7)
            pushed = [small]
        }
        let endpoint = s3.map { ["--endpoint", $0.url] } ?? ["--endpoint", "http://127.0.0.1:9"]
        let result = try runXfer(
            ["push"] + pushed + ["--backend", "s3", "--to", "s3://bucket-a/in/", "--state", state, "--chunk-size", "5MiB", "--json"]
                + endpoint + options,
            environment: environment)
        try assertNothingShows(secrets, in: result, line: line)
        return (result, pushed)
    }

    private func assertNothingShows(_ secrets: [String], in result: RunResult, line: UInt) throws {
        let printed = result.stdout.joined(separator: "\n") + result.stderr
        var stateFiles: [(String, Data)] = []
        if let walker = FileManager.default.enumerator(atPath: state) {
            for case let name as String in walker {
                let path = state + "/" + name
                var isDirectory: ObjCBool = false
                if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), !isDirectory.boolValue {
                    stateFiles.append((name, try Data(contentsOf: URL(fileURLWithPath: path))))
                }
            }
        }
        XCTAssertFalse(stateFiles.isEmpty, "the state directory has no files to search", line: line)
        for secret in secrets {
            XCTAssertFalse(printed.contains(secret), "a secret was printed: …\(secret.suffix(4))", line: line)
            for (name, bytes) in stateFiles where bytes.range(of: Data(secret.utf8)) != nil {
                XCTFail("a secret (…\(secret.suffix(4))) is in the state file \(name)", line: line)
            }
        }
    }

    private func assertPushed(_ result: RunResult, _ files: [String], line: UInt = #line) throws {
        XCTAssertEqual(result.status, 0, result.stderr, line: line)
        for file in files {
            let name = (file as NSString).lastPathComponent
            try s3.assertObject(
                bucket: "bucket-a", key: "in/\(name)", equals: file, parts: nil, downloadingInto: work, line: line)
        }
    }

    /// The S3 requests xfer sent: not those of boto3, which signs with the
    /// server's user to make the bucket and read objects back.
    private func xferRequests() throws -> [[String: Any]] {
        try s3.requests().filter { $0["service"] as? String == "s3" && $0["accessKey"] as? String != s3.adminCredentials?.key }
    }

    /// The access keys xfer's S3 requests were signed with, in order.
    private func s3Keys() throws -> [String] {
        try xferRequests().compactMap { $0["accessKey"] as? String }
    }

    private func stsRequests(_ action: String) throws -> [[String: Any]] {
        try s3.requests().filter { ($0["params"] as? [String: String])?["Action"] == action }
    }

    private func write(_ text: String, to path: String, mode: Int = 0o600) throws {
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: mode], ofItemAtPath: path)
    }

    // MARK: The sources

    func testCredentialProcessOfAProfile() throws {
        try startS3()
        let minted = try s3.assume(role: Self.role)
        let secret = try XCTUnwrap(minted["SecretAccessKey"]), token = try XCTUnwrap(minted["SessionToken"])
        let output = try JSONSerialization.data(withJSONObject: minted.merging(["Version": "1"]) { $1 })
        let document = String(decoding: output, as: UTF8.self).replacingOccurrences(of: "\"Version\":\"1\"", with: "\"Version\":1")
        // A script with a space in its path and an argument: the command is a shell's.
        let script = work.file("get creds.sh")
        try write("#!/bin/sh\n[ \"$1\" = --profile-name ] || exit 9\ncat <<'EOF'\n\(document)\nEOF\n", to: script, mode: 0o700)
        try write("[profile dev]\ncredential_process = \"\(script)\" --profile-name\n", to: configFile)

        let (result, files) = try push(environment: environment, options: ["--profile", "dev"], secrets: [secret, token])
        try assertPushed(result, files)
        XCTAssertEqual(Set(try s3Keys()), [minted["AccessKeyId"]!], "S3 requests were not signed with the process's credentials")
    }

    func testRoleChainOfSourceProfilesWithExternalID() throws {
        try startS3()
        let admin = try XCTUnwrap(s3.adminCredentials)
        try write("[base]\naws_access_key_id = \(admin.key)\naws_secret_access_key = \(admin.secret)\n", to: credentialsFile)
        try write(
            """
            [profile dev]
            role_arn = \(Self.role)
            source_profile = mid
            role_session_name = xfer-e2e
            duration_seconds = 900
            [profile mid]
            role_arn = \(Self.externalIDRole)
            source_profile = base
            external_id = xfer-external-id
            """, to: configFile)
        var environment = self.environment
        environment["AWS_PROFILE"] = "dev"

        let (result, files) = try push(environment: environment, secrets: [admin.secret])
        try assertPushed(result, files)
        // base's keys assume mid's role (with its external id); those credentials assume dev's.
        let assumed = try stsRequests("AssumeRole")
        XCTAssertEqual(assumed.count, 2, "\(assumed)")
        let first = try XCTUnwrap(assumed.first), second = try XCTUnwrap(assumed.last)
        let firstParameters = try XCTUnwrap(first["params"] as? [String: String])
        let secondParameters = try XCTUnwrap(second["params"] as? [String: String])
        XCTAssertEqual(first["accessKey"] as? String, admin.key)
        XCTAssertEqual(firstParameters["RoleArn"], Self.externalIDRole)
        XCTAssertEqual(firstParameters["ExternalId"], "xfer-external-id")
        XCTAssertEqual(secondParameters["RoleArn"], Self.role)
        XCTAssertEqual(secondParameters["RoleSessionName"], "xfer-e2e")
        XCTAssertEqual(secondParameters["DurationSeconds"], "900")
        let intermediate = try XCTUnwrap(second["accessKey"] as? String)
        XCTAssertTrue(intermediate.hasPrefix("ASIA"), intermediate)
        let keys = Set(try s3Keys())
        XCTAssertEqual(keys.count, 1, "\(keys)")
        XCTAssertTrue(keys.allSatisfy { $0.hasPrefix("ASIA") && $0 != intermediate }, "S3 was not signed with dev's role: \(keys)")
    }

    func testWebIdentityTokenFile() throws {
        try startS3()
        let token = "eyJhbGciOiJSUzI1NiJ9.xfer-test-web-identity-token.c2lnbmF0dXJl"
        let tokenFile = work.file("token")
        try write(token + "\n", to: tokenFile)
        var environment = self.environment
        environment["AWS_WEB_IDENTITY_TOKEN_FILE"] = tokenFile
        environment["AWS_ROLE_ARN"] = Self.role
        environment["AWS_ROLE_SESSION_NAME"] = "xfer-web"

        let (result, files) = try push(environment: environment, secrets: [token])
        try assertPushed(result, files)
        let asked = try XCTUnwrap(try stsRequests("AssumeRoleWithWebIdentity").first)
        XCTAssertNil(asked["accessKey"] as? String, "AssumeRoleWithWebIdentity is sent unsigned")
        XCTAssertEqual((asked["params"] as? [String: String])?["RoleSessionName"], "xfer-web")
        XCTAssertTrue(try s3Keys().allSatisfy { $0.hasPrefix("ASIA") })
    }

    func testContainerCredentialsWithAnAuthorizationTokenFile() throws {
        try startS3()
        let authorization = "xfer-container-authorization-token"
        let credentials = try CredentialServer(mode: "container", s3: s3, arguments: ["--authorization", authorization])
        let tokenFile = work.file("container-token")
        try write(authorization + "\n", to: tokenFile)
        var environment = self.environment
        environment["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = credentials.url + "/creds"
        environment["AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"] = tokenFile
        try assertPushSigned(with: credentials, environment: environment, secrets: [authorization], refusal: "without the authorization token")
    }

    func testInstanceMetadataWithASessionToken() throws {
        try startS3()
        let credentials = try CredentialServer(mode: "imds", s3: s3)
        var environment = self.environment
        environment["AWS_EC2_METADATA_DISABLED"] = ""
        environment["AWS_EC2_METADATA_SERVICE_ENDPOINT"] = credentials.url
        try assertPushSigned(with: credentials, environment: environment, secrets: [], refusal: "without the IMDSv2 session token")
    }

    /// A push whose credentials `server` handed out once, asked as it wants to be.
    private func assertPushSigned(
        with server: CredentialServer, environment: [String: String], secrets: [String], refusal: String, line: UInt = #line
    ) throws {
        let (result, files) = try push(environment: environment, secrets: secrets, line: line)
        try assertPushed(result, files, line: line)
        let stats = try server.stats()
        XCTAssertEqual(stats.refused, 0, "a request \(refusal)", line: line)
        XCTAssertEqual(stats.fetches.count, 1, line: line)
        XCTAssertEqual(Set(try s3Keys()), Set(stats.fetches.map(\.key)), line: line)
    }

    // MARK: Refresh

    /// Credentials that say they expire two seconds after they are handed
    /// out, over a push that the rate limit makes last at least five: each
    /// request is signed with credentials that had not expired, and those
    /// used after the first ones expired are new ones.
    func testTemporaryCredentialsAreFetchedAgainDuringALongPush() throws {
        try startS3()
        let lifetime = 2.0
        let credentials = try CredentialServer(mode: "container", s3: s3, arguments: ["--expires-in", String(lifetime)])
        var environment = self.environment
        environment["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = credentials.url + "/creds"
        let file = work.file("long.bin")
        // Three parts, one at a time, at 2 MiB/s: the third part and the
        // completion are signed at least 10 MiB / (2 MiB/s) ≈ 5 s after the
        // first credentials were fetched, long after they expired.
        try makeTestFile(at: file, size: 10 << 20 + 1, seed: 8)

        let (result, _) = try push(
            [file], environment: environment, options: ["--concurrency", "1", "--limit-rate", "2M"], secrets: [])
        XCTAssertEqual(result.status, 0, result.stderr)
        try s3.assertObject(bucket: "bucket-a", key: "in/long.bin", equals: file, parts: 3, downloadingInto: work)

        let fetches = try credentials.stats().fetches
        let first = try XCTUnwrap(fetches.first)
        let requests = try xferRequests()
        // A second of slack: a request signed just before its credentials'
        // last moments may reach the server a little after.
        let late = requests.filter { ($0["time"] as? Double ?? 0) > first.expires + 1 }
        XCTAssertFalse(late.isEmpty, "the push did not outlast its first credentials; nothing was tested")
        guard !late.isEmpty else { return }
        XCTAssertGreaterThanOrEqual(fetches.count, 2, "the credentials were never fetched again")
        for request in late {
            XCTAssertNotEqual(request["accessKey"] as? String, first.key, "signed with expired credentials: \(request)")
        }
        let expiry = Dictionary(fetches.map { ($0.key, $0.expires) }, uniquingKeysWith: max)
        for request in requests {
            let key = request["accessKey"] as? String ?? ""
            guard let expires = expiry[key] else { XCTFail("signed with credentials the stand-in never gave: \(request)"); continue }
            XCTAssertLessThanOrEqual(request["time"] as? Double ?? 0, expires + 1, "signed with expired credentials: \(request)")
        }
    }

    // MARK: Failures

    func testAFailingCredentialProcessIsExitTwoWithoutItsOutput() throws {
        let secret = "wJalrXUtnFEMI-printed-by-a-failing-process"
        let script = work.file("creds.sh")
        try write(
            "#!/bin/sh\necho '{\"Version\": 1, \"AccessKeyId\": \"AKIAFAIL\", \"SecretAccessKey\": \"\(secret)\"}'\nexit 3\n", to: script,
            mode: 0o700)
        let garbled = work.file("garbled.sh")
        try write("#!/bin/sh\necho 'SecretAccessKey=\(secret)'\n", to: garbled, mode: 0o700)
        try write("[profile broken]\ncredential_process = \(script)\n[profile garbled]\ncredential_process = \(garbled)\n", to: configFile)

        let failed = try runXfer(pushArguments(profile: "broken"), environment: environment)
        XCTAssertEqual(failed.status, 2, failed.stderr)
        XCTAssertTrue(failed.stderr.contains("credential_process of profile 'broken' exited with status 3"), failed.stderr)
        XCTAssertFalse(failed.stderr.contains(secret))
        let unreadable = try runXfer(pushArguments(profile: "garbled"), environment: environment)
        XCTAssertEqual(unreadable.status, 2, unreadable.stderr)
        XCTAssertTrue(unreadable.stderr.contains("credential_process of profile 'garbled' gave no JSON object"), unreadable.stderr)
        XCTAssertFalse(unreadable.stderr.contains(secret))
    }

    /// With nothing set up, and an instance metadata endpoint whose
    /// connections never complete (as where there is none), the push fails
    /// within about a second and says what it tried.
    func testNoCredentialsAnywhereFailsFastSayingWhatWasTried() throws {
        let closed = try RawListener(.blackHole)
        var environment = self.environment
        environment["AWS_EC2_METADATA_DISABLED"] = ""
        environment["AWS_EC2_METADATA_SERVICE_ENDPOINT"] = "http://127.0.0.1:\(closed.port)"
        let start = ContinuousClock.now
        let result = try runXfer(pushArguments(profile: nil), environment: environment)
        XCTAssertLessThan(ContinuousClock.now - start, .seconds(10))
        XCTAssertEqual(result.status, 2, result.stderr)
        for tried in [
            "no AWS credentials", "the environment", "profile 'default'", "AWS_WEB_IDENTITY_TOKEN_FILE", "container credentials",
            "EC2 instance metadata at http://127.0.0.1:\(closed.port)",
        ] {
            XCTAssertTrue(result.stderr.contains(tried), "\(tried): \(result.stderr)")
        }
        XCTAssertEqual(result.stderr.split(separator: "\n").count, 1, result.stderr)
    }

    private func pushArguments(profile: String?) throws -> [String] {
        let small = work.file("small.bin")
        try makeTestFile(at: small, size: 10)
        return ["push", small, "--backend", "s3", "--to", "s3://bucket-a/in", "--endpoint", "http://127.0.0.1:9", "--state", state]
            + (profile.map { ["--profile", $0] } ?? [])
    }
}

/// `credserver.py`: the container credentials endpoint or EC2's instance
/// metadata service, handing out credentials minted by the S3 server's STS.
final class CredentialServer {
    let child: ChildProcess
    let url: String

    init(mode: String, s3: S3Server, arguments: [String] = []) throws {
        (child, url) = try startServer(
            "credserver.py", executable: try pythonTool(venv: "venv-s3"),
            arguments: [packageRoot + "/Tests/Tools/credserver.py", mode, s3.url, S3CredentialTests.role] + arguments,
            environment: s3.toolEnvironment)
    }

    deinit {
        child.kill(SIGKILL)
        child.wait()
    }

    /// The credentials handed out (access key, when they said they expire), and requests refused.
    func stats() throws -> (fetches: [(key: String, expires: Double)], refused: Int) {
        let json = try getJSON(url + "/stats")
        let fetches = (json["fetches"] as? [[String: Any]] ?? []).map {
            (key: $0["AccessKeyId"] as? String ?? "", expires: $0["expires"] as? Double ?? 0)
        }
        return (fetches, int(json["refused"]))
    }
}
