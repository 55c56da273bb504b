import FoundationEssentials
import XferWire

/// The two calls of AWS STS that hand out a role's temporary credentials:
/// `AssumeRole` (signed, Signature V4 for service `sts`) and
/// `AssumeRoleWithWebIdentity` (unsigned: the token is the proof). Both are
/// form-encoded POSTs answered in XML.
struct STSClient: Sendable {
    /// `scheme://host[:port]`, or with a path, as `AWS_ENDPOINT_URL_STS` gives it.
    let endpoint: String
    /// The region requests are signed for.
    let signingRegion: String
    let http: CredentialHTTP
    let now: @Sendable () -> Date

    static let version = "2011-06-15"

    typealias Failure = AWSConfiguration.Failure

    /// STS where the SDKs would send: `AWS_ENDPOINT_URL_STS`, else
    /// `AWS_ENDPOINT_URL` (unless `AWS_IGNORE_CONFIGURED_ENDPOINT_URLS` is
    /// true), else the region's own endpoint, else the global one.
    init(environment: AWSEnvironment, region: String?, http: CredentialHTTP, now: @escaping @Sendable () -> Date) {
        endpoint = Self.endpoint(environment: environment, region: region)
        signingRegion = region ?? "us-east-1"
        self.http = http
        self.now = now
    }

    static func endpoint(environment: AWSEnvironment, region: String?) -> String {
        if !environment.isTrue("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"),
            let configured = environment["AWS_ENDPOINT_URL_STS"] ?? environment["AWS_ENDPOINT_URL"]
        {
            return configured
        }
        guard let region else { return "https://sts.amazonaws.com" }
        return "https://sts.\(region).amazonaws.com" + (region.hasPrefix("cn-") ? ".cn" : "")
    }

    /// `AssumeRole` with `credentials`. `source` names the role and what
    /// assumes it, for messages.
    func assumeRole(
        _ role: CredentialPlan.Role, sessionName: String, with credentials: AWSCredentials, source: String
    ) throws(Failure) -> AWSCredentials {
        var parameters = [("Action", "AssumeRole"), ("Version", Self.version), ("RoleArn", role.arn), ("RoleSessionName", sessionName)]
        if let externalID = role.externalID { parameters.append(("ExternalId", externalID)) }
        if let duration = role.duration { parameters.append(("DurationSeconds", String(duration))) }
        var request = Self.form(parameters, to: endpoint)
        SignatureV4(credentials: credentials, region: signingRegion, service: "sts")
            .sign(&request, payloadHash: SignatureV4.payloadHash(request.body), at: now())
        let secrets = [credentials.secretAccessKey, credentials.sessionToken].compactMap { $0 }
        return try send(request, action: "AssumeRole", source: source, secrets: secrets)
    }

    /// `AssumeRoleWithWebIdentity` with `token`, which no message shows.
    func assumeRoleWithWebIdentity(
        _ role: CredentialPlan.Role, sessionName: String, token: String, source: String
    ) throws(Failure) -> AWSCredentials {
        var parameters = [
            ("Action", "AssumeRoleWithWebIdentity"), ("Version", Self.version), ("RoleArn", role.arn),
            ("RoleSessionName", sessionName), ("WebIdentityToken", token),
        ]
        if let duration = role.duration { parameters.append(("DurationSeconds", String(duration))) }
        return try send(Self.form(parameters, to: endpoint), action: "AssumeRoleWithWebIdentity", source: source, secrets: [token])
    }

    /// A form-encoded POST of `parameters` to `endpoint`'s root.
    static func form(_ parameters: [(String, String)], to endpoint: String) -> AWSRequest {
        let body = parameters.map { "\(SignatureV4.uriEncode($0.0, keepSlash: false))=\(SignatureV4.uriEncode($0.1, keepSlash: false))" }
            .joined(separator: "&")
        let url = endpoint.hasSuffix("/") ? endpoint : endpoint + "/"
        return AWSRequest(
            method: "POST", url: url, headers: ["Content-Type": "application/x-www-form-urlencoded; charset=utf-8"],
            body: Array(body.utf8))
    }

    private func send(_ request: AWSRequest, action: String, source: String, secrets: [String]) throws(Failure) -> AWSCredentials {
        let shownEndpoint = ContainerCredentialSource.shown(endpoint)
        let response: AWSResponse
        do {
            response = try http.send(request)
        } catch {
            throw Failure("\(source): STS at \(shownEndpoint): \(error)")
        }
        return try Self.credentials(from: response, action: action, source: source, endpoint: shownEndpoint, secrets: secrets)
    }

    /// The credentials of an answer to `action`, or the error it reports
    /// (STS's code and message, with any of `secrets` cut out).
    static func credentials(
        from response: AWSResponse, action: String, source: String, endpoint: String, secrets: [String]
    ) throws(Failure) -> AWSCredentials {
        let document = S3XML(response.body)
        guard response.status == 200, let document, document.root == "\(action)Response" else {
            var detail = ""
            if let code = document?.leaves["Code"] {
                let message = (document?.leaves["Message"] ?? "").split(whereSeparator: \.isNewline).joined(separator: " ")
                detail = ": \(code)" + (message.isEmpty ? "" : " (\(message.prefix(300)))")
            }
            for secret in secrets where secret.count >= 8 { detail = detail.replacing(secret, with: "…") }
            throw Failure("\(source): STS at \(endpoint) refused \(action): HTTP \(response.status)\(detail)")
        }
        let fields = document.leaves
        guard let key = fields["AccessKeyId"], !key.isEmpty, let secret = fields["SecretAccessKey"], !secret.isEmpty,
            let token = fields["SessionToken"], !token.isEmpty
        else {
            throw Failure("\(source): STS at \(endpoint) answered \(action) without credentials")
        }
        guard let expiration = fields["Expiration"].flatMap(AWSTime.parse) else {
            throw Failure("\(source): STS at \(endpoint) answered \(action) without an Expiration time")
        }
        return AWSCredentials(accessKeyID: key, secretAccessKey: secret, sessionToken: token, expiration: expiration)
    }
}
