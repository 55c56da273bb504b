import FoundationEssentials
import XferPrimitives
import XferWire

#if canImport(Glibc)
    import Glibc
#endif

/// Somewhere temporary credentials are fetched from, each time anew. A
/// fetch may block (it runs a process or asks a server); the provider
/// decides when to fetch.
protocol AWSCredentialSource: Sendable {
    /// The source in messages: "credential_process of profile 'dev'".
    var name: String { get }
    func fetch() throws(AWSConfiguration.Failure) -> AWSCredentials
}

typealias CredentialFailure = AWSConfiguration.Failure

// MARK: credential_process

/// A profile's `credential_process`: a command whose output is
/// `{"Version": 1, "AccessKeyId", "SecretAccessKey", "SessionToken", "Expiration"}`.
///
/// Run by `/bin/sh -c`, as the AWS SDK for Go runs it (the command may
/// quote its arguments). Its standard input and error are xfer's, so a
/// command may ask for an MFA code on the terminal; only its output is
/// read, and never shown: it holds the secret.
struct ProcessCredentialSource: AWSCredentialSource {
    let command: String
    let profile: String
    let now: @Sendable () -> Date

    /// A command still running after this is stopped (the AWS SDK for Go's bound).
    static let timeout: TimeInterval = 60
    /// More output than this is not credentials.
    static let outputLimit = 64 << 10

    var name: String { "credential_process of profile '\(profile)'" }

    func fetch() throws(CredentialFailure) -> AWSCredentials {
        let outcome: ExternalProgram.Outcome
        do {
            // Its own process group would make it a background job of the terminal, and a
            // command asking for an MFA code would stop there (SIGTTIN).
            outcome = try ExternalProgram.run(
                "/bin/sh", arguments: ["-c", command], input: .inherited, environment: nil, ownProcessGroup: false,
                timeout: .seconds(Self.timeout), outputLimit: Self.outputLimit)
        } catch {
            switch error {
            case .timedOut:
                throw CredentialFailure("\(name) did not finish within \(Int(Self.timeout)) seconds; run it yourself to see where it waits")
            case .cannotStart(let reason):
                throw CredentialFailure("\(name): cannot start /bin/sh (\(reason))")
            }
        }
        if outcome.exceededOutputLimit {
            throw CredentialFailure("\(name) printed more than \(Self.outputLimit / 1024) KiB; it must print one JSON object of credentials")
        }
        guard outcome.exitStatus == 0 else {
            let how = outcome.exitStatus.map { "exited with status \($0)" } ?? "was killed by signal \(outcome.signal ?? 0)"
            throw CredentialFailure("\(name) \(how); run it yourself to see why (xfer does not show its output: it may hold secrets)")
        }
        return try CredentialDocument.parse(outcome.output, source: name, tokenField: "SessionToken", requiresVersion: true, now: now())
    }
}

// MARK: STS roles

/// A profile's `role_arn`, assumed with the credentials of its
/// `source_profile` (or `credential_source`), which are themselves fetched
/// again when they expire.
struct AssumeRoleCredentialSource: AWSCredentialSource {
    let role: CredentialPlan.Role
    let profile: String
    let base: AWSCredentialProvider
    let sts: STSClient
    let now: @Sendable () -> Date

    var name: String { "role \(role.arn) of profile '\(profile)'" }

    func fetch() throws(CredentialFailure) -> AWSCredentials {
        let credentials: AWSCredentials
        do {
            credentials = try base.validCredentials()
        } catch {
            throw CredentialFailure("\(name): \(error.description)")
        }
        return try sts.assumeRole(
            role, sessionName: role.sessionName ?? defaultSessionName(now()), with: credentials,
            source: "\(name), assumed with the credentials from \(base.source)")
    }
}

/// `AssumeRoleWithWebIdentity` with the token in a file (Kubernetes service
/// accounts, GitHub Actions…), read anew for each fetch: the token rotates.
struct WebIdentityCredentialSource: AWSCredentialSource {
    let identity: CredentialPlan.WebIdentity
    /// "AWS_WEB_IDENTITY_TOKEN_FILE" or "profile 'x'".
    let origin: String
    let sts: STSClient
    let now: @Sendable () -> Date

    var name: String { "web identity role \(identity.role.arn) (\(origin))" }

    func fetch() throws(CredentialFailure) -> AWSCredentials {
        let path = identity.tokenFile
        guard let data = FileManager.default.contents(atPath: path) else {
            throw CredentialFailure("\(name): cannot read the token file \(path); check that it exists and is readable")
        }
        let token = String(decoding: data, as: UTF8.self).trimmingWhitespace()
        guard !token.isEmpty else { throw CredentialFailure("\(name): the token file \(path) is empty") }
        return try sts.assumeRoleWithWebIdentity(
            identity.role, sessionName: identity.role.sessionName ?? defaultSessionName(now()), token: token, source: name)
    }
}

/// The role session name when none is set: "xfer-" and the time, as the
/// AWS CLI uses "botocore-session-" and the time.
func defaultSessionName(_ date: Date) -> String { "xfer-\(Int(date.timeIntervalSince1970))" }

// MARK: Container credentials

/// The container credentials endpoint of ECS tasks and EKS Pod Identity:
/// a GET answered with `{"AccessKeyId", "SecretAccessKey", "Token", "Expiration"}`.
struct ContainerCredentialSource: AWSCredentialSource {
    /// Where `AWS_CONTAINER_CREDENTIALS_RELATIVE_URI` points (ECS).
    static let relativeHost = "http://169.254.170.2"
    /// Hosts the SDKs let `AWS_CONTAINER_CREDENTIALS_FULL_URI` name over
    /// plain HTTP, besides loopback: ECS's and EKS Pod Identity's addresses.
    static let plainHTTPHosts: Set<String> = ["169.254.170.2", "169.254.170.23", "fd00:ec2::23", "[fd00:ec2::23]"]

    let url: String
    let authorizationTokenFile: String?
    let authorizationToken: String?
    let http: CredentialHTTP
    let now: @Sendable () -> Date

    var name: String { "container credentials at \(Self.shown(url))" }

    /// Nil when neither variable is set.
    init?(environment: AWSEnvironment, http: CredentialHTTP, now: @escaping @Sendable () -> Date) throws(CredentialFailure) {
        if let relative = environment["AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"] {
            url = Self.relativeHost + (relative.hasPrefix("/") ? relative : "/" + relative)
        } else if let full = environment["AWS_CONTAINER_CREDENTIALS_FULL_URI"] {
            guard let components = URLComponents(string: full), let scheme = components.scheme?.lowercased(),
                let host = components.host?.lowercased(), !host.isEmpty, scheme == "http" || scheme == "https"
            else {
                throw CredentialFailure("AWS_CONTAINER_CREDENTIALS_FULL_URI is not an http(s) URL: \(Self.shown(full))")
            }
            // Plain HTTP only where nobody else is on the path, as the SDKs require.
            guard scheme == "https" || Self.plainHTTPHosts.contains(host) || Self.isLoopback(host) else {
                throw CredentialFailure(
                    "AWS_CONTAINER_CREDENTIALS_FULL_URI \(Self.shown(full)) is plain http to \(host); it must be https, or http to a loopback address or the container credentials address")
            }
            url = full
        } else {
            return nil
        }
        authorizationTokenFile = environment["AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"]
        authorizationToken = environment["AWS_CONTAINER_AUTHORIZATION_TOKEN"]
        self.http = http
        self.now = now
    }

    func fetch() throws(CredentialFailure) -> AWSCredentials {
        var request = AWSRequest(method: "GET", url: url, headers: ["Accept": "application/json"])
        if let authorization = try authorization() { request.headers.set("Authorization", authorization) }
        let response: AWSResponse
        do {
            response = try http.send(request)
        } catch {
            throw CredentialFailure("\(name): \(error)")
        }
        guard response.status == 200 else {
            throw CredentialFailure("\(name) answered HTTP \(response.status)\(CredentialDocument.errorDetail(response.body))")
        }
        return try CredentialDocument.parse(response.body, source: name, tokenField: "Token", requiresVersion: false, now: now())
    }

    /// The token file (read anew each time: EKS rotates it) wins over the variable.
    private func authorization() throws(CredentialFailure) -> String? {
        var token = authorizationToken
        if let path = authorizationTokenFile {
            guard let data = FileManager.default.contents(atPath: path) else {
                throw CredentialFailure(
                    "\(name): cannot read AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE \(path); check that it exists and is readable")
            }
            token = String(decoding: data, as: UTF8.self).trimmingWhitespace()
        }
        guard let token else { return nil }
        guard !token.contains(where: \.isNewline) else {
            throw CredentialFailure("\(name): the authorization token has a line break inside; it must be one line")
        }
        return token
    }

    static func isLoopback(_ host: String) -> Bool {
        host == "localhost" || host == "::1" || host == "[::1]" || host.hasPrefix("127.")
    }

    /// A URL in messages: scheme, host, port and path, without userinfo or query.
    static func shown(_ url: String) -> String {
        guard let components = URLComponents(string: url), let scheme = components.scheme, let host = components.host else {
            return "(an unreadable URL)"
        }
        return "\(scheme)://\(host)" + (components.port.map { ":\($0)" } ?? "") + components.path
    }
}

// MARK: EC2 instance metadata

/// The EC2 instance metadata service, IMDSv2: a session token from
/// `PUT /latest/api/token`, then the role attached to the instance and its
/// credentials. Falls back to IMDSv1 (no token) only where the service does
/// not offer tokens, unless `AWS_EC2_METADATA_V1_DISABLED` is true, as the SDKs do.
struct InstanceMetadataCredentialSource: AWSCredentialSource {
    let endpoint: String
    let allowsVersion1: Bool
    let http: CredentialHTTP
    let now: @Sendable () -> Date

    static let tokenLifetime = 21_600
    static let credentialsPath = "/latest/meta-data/iam/security-credentials/"

    init(environment: AWSEnvironment, http: CredentialHTTP, now: @escaping @Sendable () -> Date) {
        var endpoint =
            environment["AWS_EC2_METADATA_SERVICE_ENDPOINT"]
            ?? (environment["AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE"]?.lowercased() == "ipv6"
                ? "http://[fd00:ec2::254]" : "http://169.254.169.254")
        while endpoint.hasSuffix("/") { endpoint.removeLast() }
        self.endpoint = endpoint
        allowsVersion1 = !environment.isTrue("AWS_EC2_METADATA_V1_DISABLED")
        self.http = http
        self.now = now
    }

    var name: String { "EC2 instance metadata at \(ContainerCredentialSource.shown(endpoint))" }

    func fetch() throws(CredentialFailure) -> AWSCredentials {
        var tokenRequest = AWSRequest(method: "PUT", url: endpoint + "/latest/api/token")
        tokenRequest.headers.set("X-aws-ec2-metadata-token-ttl-seconds", String(Self.tokenLifetime))
        let tokenAnswer = try send(tokenRequest)
        var headers: AWSHeaders = [:]
        switch tokenAnswer.status {
        case 200:
            let token = String(decoding: tokenAnswer.body, as: UTF8.self).trimmingWhitespace()
            guard !token.isEmpty, !token.contains(where: \.isNewline) else {
                throw CredentialFailure("\(name) answered the session token request without a token")
            }
            headers.set("X-aws-ec2-metadata-token", token)
        case 403, 404, 405:
            // A service without IMDSv2 (or something in front of it that refuses PUT).
            guard allowsVersion1 else {
                throw CredentialFailure(
                    "\(name) answered the session token request with HTTP \(tokenAnswer.status), and AWS_EC2_METADATA_V1_DISABLED forbids going on without a token")
            }
        default:
            throw CredentialFailure("\(name) answered the session token request with HTTP \(tokenAnswer.status)")
        }
        let roles = try send(AWSRequest(method: "GET", url: endpoint + Self.credentialsPath, headers: headers))
        guard roles.status == 200 else {
            if roles.status == 404 { throw CredentialFailure("\(name): the instance has no IAM role attached") }
            throw CredentialFailure("\(name) answered HTTP \(roles.status) when asked for the instance's role")
        }
        guard
            let role = String(decoding: roles.body, as: UTF8.self).split(whereSeparator: \.isNewline).first
                .map({ $0.trimmingSpacesAndTabs() }), !role.isEmpty
        else {
            throw CredentialFailure("\(name): the instance has no IAM role attached")
        }
        let answer = try send(
            AWSRequest(method: "GET", url: endpoint + Self.credentialsPath + SignatureV4.uriEncode(role, keepSlash: false), headers: headers))
        guard answer.status == 200 else {
            throw CredentialFailure("\(name) answered HTTP \(answer.status) when asked for the credentials of role \(role.prefix(64))")
        }
        if let code = CredentialDocument.object(answer.body)?["Code"] as? String, code != "Success" {
            throw CredentialFailure("\(name) has no credentials for role \(role.prefix(64)): \(code.prefix(64))")
        }
        return try CredentialDocument.parse(answer.body, source: name, tokenField: "Token", requiresVersion: false, now: now())
    }

    private func send(_ request: AWSRequest) throws(CredentialFailure) -> AWSResponse {
        do {
            return try http.send(request)
        } catch {
            throw CredentialFailure("\(name): \(error)")
        }
    }
}

// MARK: The credentials documents

/// The JSON documents credentials come in: `credential_process`'s output,
/// the container endpoint's and the instance metadata service's answers.
enum CredentialDocument {
    /// A JSON object's members, by the project's one JSON reader; nil for anything else.
    static func object(_ bytes: [UInt8]) -> [String: JSONValue]? {
        guard case .object(let members)? = try? JSONValue.parse(bytes) else { return nil }
        return members
    }

    /// Whether a member is the number 1 (a JSON `1` or `1.0`; not `true`, not `"1"`).
    static func isOne(_ value: JSONValue?) -> Bool {
        if case .number(1)? = value { return true }
        return false
    }

    /// A member that is a JSON string (not a number or a boolean spelled as one).
    static func string(_ value: JSONValue?) -> String? {
        if case .string(let text)? = value { return text }
        return nil
    }

    /// - Parameters:
    ///   - tokenField: `SessionToken` (credential_process) or `Token` (the endpoints).
    ///   - requiresVersion: credential_process must say `"Version": 1`.
    static func parse(
        _ bytes: [UInt8], source: String, tokenField: String, requiresVersion: Bool, now: Date
    ) throws(CredentialFailure) -> AWSCredentials {
        let shape = "{\"AccessKeyId\": …, \"SecretAccessKey\": …, \"\(tokenField)\": …, \"Expiration\": …}"
        guard let document = object(bytes) else {
            throw CredentialFailure("\(source) gave no JSON object of credentials; expected \(requiresVersion ? "Version 1, " : "")\(shape)")
        }
        if requiresVersion, !Self.isOne(document["Version"]) {
            throw CredentialFailure("\(source) gave credentials without \"Version\": 1, the only version there is")
        }
        guard let key = string(document["AccessKeyId"]), !key.isEmpty,
            let secret = string(document["SecretAccessKey"]), !secret.isEmpty
        else {
            throw CredentialFailure("\(source) gave no AccessKeyId and SecretAccessKey; expected \(shape)")
        }
        var token: String?
        if let value = string(document[tokenField]), !value.isEmpty { token = value }
        var expiration: Date?
        switch document["Expiration"] {
        case nil, .null?:
            break
        case .string(let text)? where AWSTime.parse(text) != nil:
            expiration = AWSTime.parse(text)
        default:
            throw CredentialFailure("\(source) gave an Expiration that is not an ISO 8601 time (e.g. 2030-01-31T12:00:00Z)")
        }
        return AWSCredentials(accessKeyID: key, secretAccessKey: secret, sessionToken: token, expiration: expiration)
    }

    /// ": code (message)" of a JSON error answer (`{"code", "message"}`, any
    /// case), short and on one line; empty when there is none.
    static func errorDetail(_ body: [UInt8]) -> String {
        guard let members = object(body) else { return "" }
        let byName = Dictionary(members.map { ($0.key.lowercased(), $0.value) }, uniquingKeysWith: { first, _ in first })
        let parts = [string(byName["code"]), string(byName["message"])].compactMap { $0 }
            .map { String($0.split(whereSeparator: \.isNewline).joined(separator: " ").prefix(200)) }
        guard let first = parts.first else { return "" }
        return ": \(first)" + (parts.count > 1 ? " (\(parts[1]))" : "")
    }
}

/// ISO 8601 times as AWS writes them: `2030-01-31T12:00:00Z`, with or
/// without fractions of a second, `Z` or an offset.
enum AWSTime {
    static func parse(_ text: String) -> Date? {
        let scalars = Array(text.trimmingSpacesAndTabs().utf8)
        var index = 0
        func number(_ digits: Int) -> Int? {
            guard index + digits <= scalars.count else { return nil }
            var value = 0
            for byte in scalars[index..<(index + digits)] {
                guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) else { return nil }
                value = value * 10 + Int(byte - UInt8(ascii: "0"))
            }
            index += digits
            return value
        }
        func skip(_ character: Character) -> Bool {
            guard index < scalars.count, scalars[index] == character.asciiValue else { return false }
            index += 1
            return true
        }
        guard let year = number(4), skip("-"), let month = number(2), skip("-"), let day = number(2),
            skip("T") || skip("t") || skip(" "), let hour = number(2), skip(":"), let minute = number(2), skip(":"),
            let second = number(2), (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second <= 60
        else { return nil }
        var fraction = 0.0
        if skip(".") {
            var scale = 0.1
            let start = index
            while index < scalars.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(scalars[index]) {
                fraction += Double(scalars[index] - UInt8(ascii: "0")) * scale
                scale /= 10
                index += 1
            }
            guard index > start else { return nil }
        }
        var offset = 0
        if skip("Z") || skip("z") {
        } else if index < scalars.count, scalars[index] == UInt8(ascii: "+") || scalars[index] == UInt8(ascii: "-") {
            let sign = scalars[index] == UInt8(ascii: "-") ? -1 : 1
            index += 1
            guard let hours = number(2) else { return nil }
            _ = skip(":")
            guard let minutes = number(2) else { return nil }
            offset = sign * (hours * 3600 + minutes * 60)
        } else {
            return nil
        }
        guard index == scalars.count,
            let seconds = UTCCalendar.seconds(year: year, month: month, day: day, hour: hour, minute: minute, second: second)
        else { return nil }
        return Date(timeIntervalSince1970: Double(seconds - offset) + fraction)
    }

    /// `2030-01-31T12:00:00Z`.
    static func format(_ date: Date) -> String {
        let stamp = SignatureV4.timestamp(date)  // yyyyMMddTHHmmssZ
        let c = Array(stamp)
        return "\(String(c[0..<4]))-\(String(c[4..<6]))-\(String(c[6..<8]))T\(String(c[9..<11])):\(String(c[11..<13])):\(String(c[13..<15]))Z"
    }
}
