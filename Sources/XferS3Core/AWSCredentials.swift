import FoundationEssentials
import XferPrimitives

/// The keys requests are signed with. Never printed: `description` shows
/// only the last four characters of the access key id.
public struct AWSCredentials: Sendable, Hashable, CustomStringConvertible {
    public var accessKeyID: String
    public var secretAccessKey: String
    /// Set for temporary credentials; sent as `x-amz-security-token`.
    public var sessionToken: String?
    /// When temporary credentials stop working; nil for long-term keys,
    /// which are never fetched again.
    public var expiration: Date?

    public init(accessKeyID: String, secretAccessKey: String, sessionToken: String? = nil, expiration: Date? = nil) {
        self.accessKeyID = accessKeyID
        self.secretAccessKey = secretAccessKey
        self.sessionToken = sessionToken
        self.expiration = expiration
    }

    public var description: String { "AWS credentials (access key …\(accessKeyID.suffix(4)))" }
}

/// Where the S3 backend's credentials and region come from.
///
/// `resolve` looks where the AWS SDKs and CLI look, in their order (see
/// `AWSCredentialChain`): the `AWS_*` environment variables, the profile of
/// `~/.aws/credentials` and `~/.aws/config` (keys, `credential_process`, a
/// role assumed with `source_profile`, `credential_source` or
/// `web_identity_token_file`), a web identity token file, the container
/// credentials endpoint, then the EC2 instance metadata service.
public struct AWSConfiguration: Sendable {
    /// Hands out the credentials each request is signed with, fetching
    /// temporary ones again before they expire.
    public var credentialProvider: AWSCredentialProvider
    /// `AWS_REGION`, `AWS_DEFAULT_REGION`, the profile's `region`, or nil.
    public var region: String?

    /// What the credentials come from, for messages ("environment",
    /// "profile 'dev'", "credential_process of profile 'dev'"…).
    public var source: String { credentialProvider.source }

    /// The credentials to sign with now (fetched again first when due).
    public var credentials: AWSCredentials { credentialProvider.credentials() }

    /// Fixed credentials, never fetched again.
    public init(credentials: AWSCredentials, region: String?, source: String) {
        self.init(credentialProvider: AWSCredentialProvider(fixed: credentials, source: source), region: region)
    }

    public init(credentialProvider: AWSCredentialProvider, region: String?) {
        self.credentialProvider = credentialProvider
        self.region = region
    }

    /// Why no credentials could be had, in a user's words: one line that
    /// names the source and says what to do, never a key, a token, or what
    /// a process printed.
    public struct Failure: Error, Sendable, Hashable, CustomStringConvertible {
        public var description: String
        public init(_ description: String) { self.description = description }
    }

    /// Resolves credentials and region, fetching the first temporary
    /// credentials now (so a source that cannot give any fails here).
    ///
    /// - Parameters:
    ///   - profile: The profile asked for by name; the environment's keys
    ///     are then passed over, as by the AWS CLI's `--profile`.
    ///   - environment: The `AWS_*` variables (a parameter, so tests need no real ones).
    ///   - home: Where `.aws/credentials` and `.aws/config` are, unless
    ///     `AWS_SHARED_CREDENTIALS_FILE` and `AWS_CONFIG_FILE` say; by default
    ///     `environment`'s `HOME`, else the password entry's (`HomeDirectory`),
    ///     as the AWS CLI finds it.
    ///   - fetcher: Sends the chain's HTTP requests: to STS as the user reaches AWS, to the
    ///     container and instance metadata endpoints directly, with timeouts of a second or
    ///     two (`AWSHTTPDestination`). XferS3 offers the engine's curl client
    ///     (`resolve(profile:environment:home:transport:)`); the receiver passes AsyncHTTPClient.
    public static func resolve(
        profile: String? = nil,
        environment: [String: String] = ProcessInfo.processInfo.environment,
        home: String? = nil,
        fetcher: any AWSHTTPFetcher
    ) throws(Failure) -> AWSConfiguration {
        let chain = AWSCredentialChain(
            environment: AWSEnvironment(environment), home: home ?? HomeDirectory.path(environment: environment), fetcher: fetcher,
            now: { Date() })
        return try chain.configuration(profile: profile)
    }
}

/// The `AWS_*` variables, a blank one counting as unset (a wrapper script
/// may blank a variable rather than unset it).
struct AWSEnvironment: Sendable {
    let variables: [String: String]

    init(_ variables: [String: String]) { self.variables = variables }

    subscript(name: String) -> String? {
        guard let value = variables[name]?.trimmingSpacesAndTabs(), !value.isEmpty else { return nil }
        return value
    }

    /// A Boolean variable: only `true` (any case) is true.
    func isTrue(_ name: String) -> Bool { self[name]?.lowercased() == "true" }
}
