import Foundation
import Synchronization
import XCTest
import Xfer
import XferBackendTesting
import XferPrimitives
@testable import XferS3
@testable import XferS3Core

/// Where the s3 backend's credentials come from, and when temporary ones
/// are fetched again: the documents, the profile chain, the order of the
/// sources and the refresh timings, with a scripted clock and no servers.
/// (End to end against moto's STS and stand-ins: S3CredentialTests.)
final class AWSCredentialTests: XCTestCase {
    private let now = Date(timeIntervalSince1970: 1_900_000_000)

    // MARK: Documents

    func testCredentialProcessOutputIsRead() throws {
        let full = #"{"Version": 1, "AccessKeyId": "ASIAPROC", "SecretAccessKey": "s3cr3t", "SessionToken": "tok", "Expiration": "2030-03-01T10:20:30Z"}"#
        let credentials = try parse(full, tokenField: "SessionToken", requiresVersion: true)
        XCTAssertEqual(
            credentials,
            AWSCredentials(
                accessKeyID: "ASIAPROC", secretAccessKey: "s3cr3t", sessionToken: "tok", expiration: AWSTime.parse("2030-03-01T10:20:30Z")))
        // Without an Expiration: long-term keys, never fetched again.
        let lasting = try parse(#"{"Version": 1, "AccessKeyId": "AKIA", "SecretAccessKey": "s"}"#, tokenField: "SessionToken", requiresVersion: true)
        XCTAssertNil(lasting.expiration)
        XCTAssertNil(lasting.sessionToken)

        let secret = "do-not-echo-this-secret"
        for (text, expected) in [
            (#"{"Version": 2, "AccessKeyId": "A", "SecretAccessKey": "\#(secret)"}"#, "without \"Version\": 1"),
            (#"{"Version": 1, "AccessKeyId": "A"}"#, "no AccessKeyId and SecretAccessKey"),
            (#"{"Version": 1, "AccessKeyId": "A", "SecretAccessKey": 5}"#, "no AccessKeyId and SecretAccessKey"),
            ("AccessKeyId=A SecretAccessKey=\(secret)", "no JSON object"),
            (#"["\#(secret)"]"#, "no JSON object"),
            (#"{"Version": 1, "AccessKeyId": "A", "SecretAccessKey": "\#(secret)", "Expiration": "tomorrow"}"#, "not an ISO 8601 time"),
        ] {
            XCTAssertThrowsError(try parse(text, tokenField: "SessionToken", requiresVersion: true)) { error in
                XCTAssertTrue("\(error)".hasPrefix("credential_process of profile 'p' "), "\(error)")
                XCTAssertTrue("\(error)".contains(expected), "\(error)")
                XCTAssertFalse("\(error)".contains(secret), "\(error)")
            }
        }
    }

    func testContainerAndInstanceMetadataAnswersAreRead() throws {
        // The container endpoint's answer, and IMDS's (with its Code and Type).
        let container = #"{"AccessKeyId": "ASIAC", "SecretAccessKey": "sc", "Token": "tc", "Expiration": "2030-01-01T00:00:00Z", "RoleArn": "arn"}"#
        XCTAssertEqual(try parse(container, tokenField: "Token").sessionToken, "tc")
        let imds = #"{"Code": "Success", "LastUpdated": "2030-01-01T00:00:00Z", "Type": "AWS-HMAC", "AccessKeyId": "ASIAI", "SecretAccessKey": "si", "Token": "ti", "Expiration": "2030-01-01T06:00:00Z"}"#
        let credentials = try parse(imds, tokenField: "Token")
        XCTAssertEqual(credentials.accessKeyID, "ASIAI")
        XCTAssertEqual(credentials.expiration, Date(timeIntervalSince1970: 1_893_477_600))
        // An error answer, summed up on one line.
        XCTAssertEqual(
            CredentialDocument.errorDetail(Array(#"{"code": "ClientException", "message": "Unable to\nfind"}"#.utf8)),
            ": ClientException (Unable to find)")
        XCTAssertEqual(CredentialDocument.errorDetail(Array("<html>".utf8)), "")
    }

    func testISO8601TimesAsAWSWritesThem() {
        let whole = Date(timeIntervalSince1970: 1_893_456_000)  // 2030-01-01T00:00:00Z
        XCTAssertEqual(AWSTime.parse("2030-01-01T00:00:00Z"), whole)
        XCTAssertEqual(AWSTime.parse("2030-01-01T00:00:00.250Z"), whole.addingTimeInterval(0.25))
        XCTAssertEqual(AWSTime.parse("2030-01-01T00:00:00.443992Z")!.timeIntervalSince1970, whole.timeIntervalSince1970 + 0.443992, accuracy: 1e-6)
        XCTAssertEqual(AWSTime.parse("2030-01-01T02:00:00+02:00"), whole)
        XCTAssertEqual(AWSTime.parse("2029-12-31T19:00:00-0500"), whole)
        for bad in ["2030-01-01", "2030-01-01T00:00:00", "2030-13-01T00:00:00Z", "2030-01-01T00:00:00Zjunk", "soon"] {
            XCTAssertNil(AWSTime.parse(bad), bad)
        }
        XCTAssertEqual(AWSTime.format(whole), "2030-01-01T00:00:00Z")
    }

    private func parse(_ text: String, tokenField: String, requiresVersion: Bool = false) throws -> AWSCredentials {
        try CredentialDocument.parse(
            Array(text.utf8), source: "credential_process of profile 'p'", tokenField: tokenField, requiresVersion: requiresVersion, now: now)
    }

    // MARK: Profiles

    func testWhatAProfileSays() throws {
        let files = AWSSharedConfig(
            credentials: """
                [base]
                aws_access_key_id = AKBASE
                aws_secret_access_key = sbase
                [half]
                aws_access_key_id = AKHALF
                """,
            config: """
                [default]
                credential_process = /usr/bin/get-creds --json
                [profile dev]
                role_arn = arn:aws:iam::1:role/dev
                source_profile = mid
                role_session_name = s
                duration_seconds = 900
                [profile mid]
                role_arn = arn:aws:iam::1:role/mid
                source_profile = base
                external_id = ext
                [profile base]
                region = eu-west-1
                role_arn = arn:aws:iam::1:role/ignored
                [profile self]
                role_arn = arn:aws:iam::1:role/self
                source_profile = self
                aws_access_key_id = AKSELF
                aws_secret_access_key = sself
                [profile web]
                role_arn = arn:aws:iam::1:role/web
                web_identity_token_file = /var/run/token
                [profile ec2]
                role_arn = arn:aws:iam::1:role/ec2
                credential_source = Ec2InstanceMetadata
                [profile empty]
                region = us-west-2
                """)
        XCTAssertEqual(try files.plan(forProfile: "default"), .process(command: "/usr/bin/get-creds --json", profile: "default"))
        // dev's role is assumed with mid's, mid's with base's keys (base's own role_arn is passed over, as by the AWS CLI).
        let base = CredentialPlan.keys(AWSCredentials(accessKeyID: "AKBASE", secretAccessKey: "sbase"), source: "profile 'base'")
        let mid = CredentialPlan.assumeRole(.init(arn: "arn:aws:iam::1:role/mid", externalID: "ext"), profile: "mid", source: base)
        XCTAssertEqual(
            try files.plan(forProfile: "dev"),
            .assumeRole(.init(arn: "arn:aws:iam::1:role/dev", sessionName: "s", duration: 900), profile: "dev", source: mid))
        XCTAssertEqual(
            try files.plan(forProfile: "self"),
            .assumeRole(
                .init(arn: "arn:aws:iam::1:role/self"), profile: "self",
                source: .keys(AWSCredentials(accessKeyID: "AKSELF", secretAccessKey: "sself"), source: "profile 'self'")))
        XCTAssertEqual(
            try files.plan(forProfile: "web"),
            .webIdentity(.init(role: .init(arn: "arn:aws:iam::1:role/web"), tokenFile: "/var/run/token"), origin: "profile 'web'"))
        XCTAssertEqual(
            try files.plan(forProfile: "ec2"), .assumeRole(.init(arn: "arn:aws:iam::1:role/ec2"), profile: "ec2", source: .instanceMetadata))
        XCTAssertNil(try files.plan(forProfile: "empty"), "no credentials: the sources after the profile are tried")
        XCTAssertNil(try files.plan(forProfile: "missing"))
        XCTAssertThrowsError(try files.plan(forProfile: "half")) { error in
            XCTAssertTrue("\(error)".contains("one of aws_access_key_id and aws_secret_access_key"), "\(error)")
        }
    }

    func testSourceProfilesInACycleAreRefused() {
        let files = AWSSharedConfig(
            credentials: "",
            config: """
                [profile a]
                role_arn = arn:aws:iam::1:role/a
                source_profile = b
                [profile b]
                role_arn = arn:aws:iam::1:role/b
                source_profile = c
                [profile c]
                role_arn = arn:aws:iam::1:role/c
                source_profile = a
                [profile lonely]
                role_arn = arn:aws:iam::1:role/x
                source_profile = lonely
                [profile dangling]
                role_arn = arn:aws:iam::1:role/x
                source_profile = nowhere
                """)
        XCTAssertThrowsError(try files.plan(forProfile: "a")) { error in
            XCTAssertEqual("\(error)", "the profiles 'a' → 'b' → 'c' → 'a' name each other as source_profile in a cycle; give one of them keys of its own")
        }
        XCTAssertThrowsError(try files.plan(forProfile: "b")) { error in
            XCTAssertTrue("\(error)".contains("'b' → 'c' → 'a' → 'b'"), "\(error)")
        }
        XCTAssertThrowsError(try files.plan(forProfile: "lonely")) { error in
            XCTAssertTrue("\(error)".contains("names itself as source_profile but has no aws_access_key_id"), "\(error)")
        }
        XCTAssertThrowsError(try files.plan(forProfile: "dangling")) { error in
            XCTAssertTrue("\(error)".contains("names source_profile 'nowhere', which is in neither"), "\(error)")
        }
    }

    func testProfilesXferCannotUseSaySo() {
        for (settings, expected) in [
            ("role_arn = r\nsource_profile = b\nmfa_serial = arn:aws:iam::1:mfa/me", "asks for an MFA code"),
            ("role_arn = r", "has role_arn but nothing to assume it with"),
            ("role_arn = r\nsource_profile = b\nduration_seconds = 60", "duration_seconds '60'"),
            ("role_arn = r\ncredential_source = Somewhere", "credential_source 'Somewhere'"),
            ("sso_session = corp\nsso_account_id = 1", "IAM Identity Center (SSO)"),
        ] {
            let files = AWSSharedConfig(credentials: "[b]\naws_access_key_id = A\naws_secret_access_key = S\n", config: "[profile p]\n\(settings)\n")
            XCTAssertThrowsError(try files.plan(forProfile: "p"), settings) { error in
                XCTAssertTrue("\(error)".contains(expected), "\(error)")
            }
        }
    }

    // MARK: The order of the sources

    /// `~/.aws` is `$HOME/.aws`, as for the AWS CLI (containers, CI runners and
    /// `sudo -E` point HOME away from the password entry); an unset or empty
    /// HOME falls back to the password entry's home.
    func testTheProfilesAreFoundUnderHOME() throws {
        let home = FileManager.default.temporaryDirectory.appendingPathComponent("xfer-home-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: home) }
        try FileManager.default.createDirectory(atPath: home + "/.aws", withIntermediateDirectories: true)
        try "[p1]\naws_access_key_id = AKHOME\naws_secret_access_key = shome\n".write(
            toFile: home + "/.aws/credentials", atomically: true, encoding: .utf8)
        let configuration = try AWSConfiguration.resolve(environment: ["HOME": home, "AWS_PROFILE": "p1", "AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"])
        XCTAssertEqual(configuration.credentials.accessKeyID, "AKHOME")
        XCTAssertEqual(configuration.source, "profile 'p1'")

        XCTAssertEqual(HomeDirectory.path(environment: ["HOME": home]), home)
        let entry = try XCTUnwrap(getpwuid(getuid())).pointee.pw_dir.map { String(cString: $0) }
        XCTAssertEqual(HomeDirectory.path(environment: ["HOME": ""]), entry)
        XCTAssertEqual(HomeDirectory.path(environment: [:]), entry)
    }

    func testTheSourcesAreTriedInTheSDKsOrder() throws {
        let home = try temporaryHome(
            credentials: "[default]\naws_access_key_id = AKDEF\naws_secret_access_key = sdef\n[bare]\n",
            config: "[profile bare]\nregion = ap-south-1\n")
        defer { try? FileManager.default.removeItem(atPath: home) }
        let off = ["AWS_EC2_METADATA_DISABLED": "true"]
        func resolve(_ environment: [String: String], profile: String? = nil) throws -> AWSConfiguration {
            try AWSConfiguration.resolve(profile: profile, environment: environment.merging(off) { $1 }, home: home)
        }
        // The environment's keys first; a named profile passes them over.
        XCTAssertEqual(try resolve(["AWS_ACCESS_KEY_ID": "AKENV", "AWS_SECRET_ACCESS_KEY": "senv"]).source, "environment")
        XCTAssertEqual(try resolve(["AWS_ACCESS_KEY_ID": "AKENV", "AWS_SECRET_ACCESS_KEY": "senv"], profile: "default").source, "profile 'default'")
        XCTAssertEqual(try resolve(["AWS_ACCESS_KEY_ID": " ", "AWS_SECRET_ACCESS_KEY": "senv"]).credentials.accessKeyID, "AKDEF", "blank is unset")
        // A profile without credentials goes on to the other sources, which say what they need.
        XCTAssertThrowsError(try resolve(["AWS_PROFILE": "bare", "AWS_WEB_IDENTITY_TOKEN_FILE": "/t"])) { error in
            XCTAssertTrue("\(error)".contains("AWS_ROLE_ARN is not"), "\(error)")
        }
        XCTAssertThrowsError(try resolve(["AWS_PROFILE": "bare", "AWS_CONTAINER_CREDENTIALS_FULL_URI": "http://192.0.2.1/creds?secret=x"])) {
            error in
            XCTAssertTrue("\(error)".contains("it must be https, or http to a loopback address"), "\(error)")
            XCTAssertFalse("\(error)".contains("secret=x"), "\(error)")
        }
        XCTAssertThrowsError(try resolve(["AWS_PROFILE": "bare"])) { error in
            let message = "\(error)"
            for tried in [
                "no AWS credentials; tried the environment (AWS_ACCESS_KEY_ID is not set)", "profile 'bare' (no credentials in it)",
                "a web identity (AWS_WEB_IDENTITY_TOKEN_FILE is not set)", "container credentials (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                "EC2 instance metadata (AWS_EC2_METADATA_DISABLED is true)",
            ] {
                XCTAssertTrue(message.contains(tried), "\(tried): \(message)")
            }
        }
        // A profile asked for by name must exist.
        XCTAssertThrowsError(try resolve([:], profile: "nope")) { error in
            XCTAssertTrue("\(error)".hasPrefix("profile 'nope' is in neither"), "\(error)")
        }
        XCTAssertThrowsError(try resolve(["AWS_PROFILE": "nope"]))
    }

    func testCredentialProcessIsRunAndItsFailuresSaySoWithoutItsOutput() throws {
        let now = self.now
        let source = { (command: String) in ProcessCredentialSource(command: command, profile: "dev", now: { now }) }
        let printed = #"printf '%s' '{"Version": 1, "AccessKeyId": "AKPROC", "SecretAccessKey": "sproc"}'"#
        XCTAssertEqual(try source(printed).fetch(), AWSCredentials(accessKeyID: "AKPROC", secretAccessKey: "sproc"))
        XCTAssertThrowsError(try source("echo the-secret-output; exit 4").fetch()) { error in
            XCTAssertEqual(
                "\(error)",
                "credential_process of profile 'dev' exited with status 4; run it yourself to see why (xfer does not show its output: it may hold secrets)")
        }
        XCTAssertThrowsError(try source("echo the-secret-output").fetch()) { error in
            XCTAssertTrue("\(error)".contains("gave no JSON object"), "\(error)")
            XCTAssertFalse("\(error)".contains("the-secret-output"), "\(error)")
        }
    }

    func testContainerEndpointsAsTheSDKsAllowThem() throws {
        func url(_ environment: [String: String]) throws -> String? {
            try ContainerCredentialSource(environment: AWSEnvironment(environment), http: CredentialHTTP(fetcher: CurlCredentialFetcher(transport: TransportOptions()), destination: .metadataEndpoint), now: { Date() })?.url
        }
        XCTAssertNil(try url([:]))
        XCTAssertEqual(try url(["AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "/v2/credentials/abc"]), "http://169.254.170.2/v2/credentials/abc")
        XCTAssertEqual(
            try url(["AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "/v2/x", "AWS_CONTAINER_CREDENTIALS_FULL_URI": "http://127.0.0.1/y"]),
            "http://169.254.170.2/v2/x", "the relative URI wins, as in the SDKs")
        for allowed in ["http://127.0.0.1:9/c", "http://localhost/c", "http://169.254.170.23/v1/credentials", "https://creds.example.com/c"] {
            XCTAssertEqual(try url(["AWS_CONTAINER_CREDENTIALS_FULL_URI": allowed]), allowed)
        }
        XCTAssertThrowsError(try url(["AWS_CONTAINER_CREDENTIALS_FULL_URI": "http://creds.example.com/c"]))
        XCTAssertThrowsError(try url(["AWS_CONTAINER_CREDENTIALS_FULL_URI": "ftp://127.0.0.1/c"]))
    }

    // MARK: STS

    func testSTSEndpointsRequestsAndAnswers() throws {
        func endpoint(_ environment: [String: String], region: String?) -> String {
            STSClient.endpoint(environment: AWSEnvironment(environment), region: region)
        }
        XCTAssertEqual(endpoint([:], region: nil), "https://sts.amazonaws.com")
        XCTAssertEqual(endpoint([:], region: "eu-west-1"), "https://sts.eu-west-1.amazonaws.com")
        XCTAssertEqual(endpoint([:], region: "cn-north-1"), "https://sts.cn-north-1.amazonaws.com.cn")
        XCTAssertEqual(endpoint(["AWS_ENDPOINT_URL": "http://a:1", "AWS_ENDPOINT_URL_STS": "http://b:2"], region: nil), "http://b:2")
        XCTAssertEqual(endpoint(["AWS_ENDPOINT_URL": "http://a:1"], region: "eu-west-1"), "http://a:1")
        XCTAssertEqual(
            endpoint(["AWS_ENDPOINT_URL": "http://a:1", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "true"], region: nil), "https://sts.amazonaws.com")

        let request = STSClient.form([("Action", "AssumeRole"), ("RoleArn", "arn:aws:iam::1:role/a b"), ("RoleSessionName", "x=y&z")], to: "http://h:1")
        XCTAssertEqual(request.method, "POST")
        XCTAssertEqual(request.url, "http://h:1/")
        XCTAssertEqual(String(decoding: request.body, as: UTF8.self), "Action=AssumeRole&RoleArn=arn%3Aaws%3Aiam%3A%3A1%3Arole%2Fa%20b&RoleSessionName=x%3Dy%26z")

        let answer = """
            <AssumeRoleResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><AssumeRoleResult><Credentials>\
            <AccessKeyId>ASIASTS</AccessKeyId><SecretAccessKey>ssts</SecretAccessKey><SessionToken>tsts</SessionToken>\
            <Expiration>2030-01-01T00:00:00.5Z</Expiration></Credentials><AssumedRoleUser><Arn>arn</Arn></AssumedRoleUser>\
            </AssumeRoleResult></AssumeRoleResponse>
            """
        XCTAssertEqual(
            try STSClient.credentials(from: AWSResponse(status: 200, body: Array(answer.utf8)), action: "AssumeRole", source: "role r", endpoint: "e", secrets: []),
            AWSCredentials(
                accessKeyID: "ASIASTS", secretAccessKey: "ssts", sessionToken: "tsts",
                expiration: Date(timeIntervalSince1970: 1_893_456_000.5)))
        let refusal = """
            <ErrorResponse><Error><Type>Sender</Type><Code>InvalidIdentityToken</Code>\
            <Message>token eyJ-the-token-itself is not valid</Message></Error><RequestId>1</RequestId></ErrorResponse>
            """
        XCTAssertThrowsError(
            try STSClient.credentials(
                from: AWSResponse(status: 400, body: Array(refusal.utf8)), action: "AssumeRoleWithWebIdentity", source: "web identity role r",
                endpoint: "http://h:1", secrets: ["eyJ-the-token-itself"])
        ) { error in
            XCTAssertEqual(
                "\(error)", "web identity role r: STS at http://h:1 refused AssumeRoleWithWebIdentity: HTTP 400: InvalidIdentityToken (token … is not valid)")
        }
    }

    // MARK: Refresh

    /// A clock the test moves, and fetches the test runs when it chooses.
    private final class Script: Sendable {
        let time: Mutex<Date>
        let fetches = Mutex(0)
        let lifetime: TimeInterval
        let failing = Mutex(false)
        let background = Mutex<[@Sendable () -> Void]>([])

        init(start: Date, lifetime: TimeInterval) {
            time = Mutex(start)
            self.lifetime = lifetime
        }

        func advance(to seconds: TimeInterval, from start: Date) { time.withLock { $0 = start.addingTimeInterval(seconds) } }

        func fetch() throws(AWSConfiguration.Failure) -> AWSCredentials {
            if failing.withLock({ $0 }) { throw AWSConfiguration.Failure("the source is down") }
            let number = fetches.withLock { count in
                count += 1
                return count
            }
            return AWSCredentials(
                accessKeyID: "ASIA\(number)", secretAccessKey: "s", sessionToken: "t",
                expiration: time.withLock { $0 }.addingTimeInterval(lifetime))
        }

        /// Runs the fetches started in the background so far.
        func runBackground() {
            for work in background.withLock({ queued in defer { queued = [] }; return queued }) { work() }
        }
    }

    private func provider(_ script: Script) throws -> AWSCredentialProvider {
        try AWSCredentialProvider(
            source: "test source", now: { script.time.withLock { $0 } },
            startInBackground: { work in script.background.withLock { $0.append(work) } }, fetch: script.fetch)
    }

    func testRefreshTimings() {
        let hour = RefreshTimes(fetched: now, expiration: now.addingTimeInterval(3600))
        XCTAssertEqual(hour.advisory, now.addingTimeInterval(3300), "five minutes ahead")
        XCTAssertEqual(hour.mandatory, now.addingTimeInterval(3540), "the last minute")
        let short = RefreshTimes(fetched: now, expiration: now.addingTimeInterval(20))
        XCTAssertEqual(short.advisory, now.addingTimeInterval(10), "half a short life")
        XCTAssertEqual(short.mandatory, now.addingTimeInterval(18), "its last tenth")
    }

    func testTemporaryCredentialsAreFetchedAheadOfTheirExpiry() throws {
        let script = Script(start: now, lifetime: 3600)
        let provider = try provider(script)
        XCTAssertEqual(script.fetches.withLock { $0 }, 1, "the first credentials are fetched at once")
        script.advance(to: 3000, from: now)
        XCTAssertEqual(provider.credentials().accessKeyID, "ASIA1")
        XCTAssertTrue(script.background.withLock { $0.isEmpty }, "nothing is due yet")

        // Within five minutes of expiry: the current ones sign, a fetch starts on the side (once).
        script.advance(to: 3400, from: now)
        XCTAssertEqual(provider.credentials().accessKeyID, "ASIA1")
        XCTAssertEqual(provider.credentials().accessKeyID, "ASIA1")
        XCTAssertEqual(script.background.withLock { $0.count }, 1)
        script.runBackground()
        XCTAssertEqual(provider.credentials().accessKeyID, "ASIA2")
        XCTAssertEqual(script.fetches.withLock { $0 }, 2)

        // The new ones, from 3400 s, are due at 3400 + 3540: the signer waits for a fetch of its own.
        script.advance(to: 3400 + 3550, from: now)
        XCTAssertEqual(provider.credentials().accessKeyID, "ASIA3")
        XCTAssertTrue(script.background.withLock { $0.isEmpty })
    }

    func testAFailedFetchIsTriedAgainAndReportedOnceTheCredentialsExpire() throws {
        let script = Script(start: now, lifetime: 600)
        let provider = try provider(script)
        script.failing.withLock { $0 = true }
        script.advance(to: 400, from: now)  // advisory: from 300
        XCTAssertEqual(provider.credentials().accessKeyID, "ASIA1")
        script.runBackground()
        XCTAssertEqual(provider.refreshFailure, "the source is down")
        // Not tried again at once…
        XCTAssertEqual(provider.credentials().accessKeyID, "ASIA1")
        XCTAssertTrue(script.background.withLock { $0.isEmpty })
        // …but after a pause.
        script.advance(to: 410, from: now)
        _ = provider.credentials()
        XCTAssertEqual(script.background.withLock { $0.count }, 1)
        script.runBackground()
        // Expired, and the source still down: the caller hears why; signing goes on with what there is.
        script.advance(to: 700, from: now)
        XCTAssertThrowsError(try provider.validCredentials()) { error in
            XCTAssertEqual("\(error)", "the source is down")
        }
        XCTAssertEqual(provider.credentials().accessKeyID, "ASIA1")
        script.failing.withLock { $0 = false }
        script.advance(to: 720, from: now)
        XCTAssertEqual(try provider.validCredentials().accessKeyID, "ASIA2")
        XCTAssertNil(provider.refreshFailure)
    }

    func testS3SayingTheCredentialsExpiredFetchesNewOnesOnce() throws {
        let script = Script(start: now, lifetime: 3600)
        let provider = try provider(script)
        let generation = provider.generation
        provider.markExpired(generation: generation)
        XCTAssertEqual(provider.credentials().accessKeyID, "ASIA2", "fetched at once, though the clock says they are good")
        // A late refusal of the old ones leaves the new ones be.
        provider.markExpired(generation: generation)
        XCTAssertEqual(provider.credentials().accessKeyID, "ASIA2")
        XCTAssertEqual(script.fetches.withLock { $0 }, 2)
    }

    func testCredentialsThatArriveExpiredAreAFailureOfTheirSource() {
        let script = Script(start: now, lifetime: -1)
        XCTAssertThrowsError(try provider(script)) { error in
            XCTAssertTrue("\(error)".hasPrefix("test source gave credentials that expired at 2030-03-17T17:46:39Z"), "\(error)")
        }
    }

    func testS3sExpiredTokenIsRetriedWithNewCredentialsOnlyWhenThereCanBeAny() throws {
        let script = Script(start: now, lifetime: 3600)
        let refreshable = try provider(script)
        let expired = HTTPResponse(
            status: 400, body: Array("<Error><Code>ExpiredToken</Code><Message>The provided token has expired.</Message></Error>".utf8))
        let file = BackendTesting.file(name: "a.bin", size: 10, chunkSize: 10)
        let job = BackendTesting.job(target: "s3://bkt/in", files: [file])
        func outcome(_ provider: AWSCredentialProvider) -> BackendError? {
            let backend = S3Backend(
                configuration: AWSConfiguration(credentialProvider: provider, region: "us-east-1"),
                endpoint: S3Endpoint(base: "http://127.0.0.1:9000", addressing: .path))
            do {
                _ = try backend.uploadChunk(BackendTesting.chunk(0, of: file), of: file, in: job).interpret(expired)
                return nil
            } catch {
                return error
            }
        }
        guard case .transient(let message, _)? = outcome(refreshable) else { return XCTFail("not retried") }
        XCTAssertTrue(message.contains("S3 says the credentials from test source expired; fetching new ones"), message)
        XCTAssertEqual(refreshable.credentials().accessKeyID, "ASIA2")
        let fixed = AWSCredentialProvider(fixed: AWSCredentials(accessKeyID: "AK", secretAccessKey: "s", sessionToken: "t"), source: "environment")
        guard case .rejected(let refusal, _)? = outcome(fixed) else { return XCTFail("fixed credentials cannot get better") }
        XCTAssertTrue(refusal.contains("S3 refused the credentials from environment: ExpiredToken"), refusal)
    }

    // MARK: Helpers

    private func temporaryHome(credentials: String, config: String) throws -> String {
        let home = FileManager.default.temporaryDirectory.appendingPathComponent("xfer-aws-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: home + "/.aws", withIntermediateDirectories: true)
        try credentials.write(toFile: home + "/.aws/credentials", atomically: true, encoding: .utf8)
        try config.write(toFile: home + "/.aws/config", atomically: true, encoding: .utf8)
        return home
    }
}
