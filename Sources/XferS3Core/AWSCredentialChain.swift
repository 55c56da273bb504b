import FoundationEssentials

/// Finds credentials where the AWS SDKs look, in this order; the first
/// source that is set up wins, and one that is set up but fails is an
/// error (not a reason to look further):
///
/// 1. the environment: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
///    `AWS_SESSION_TOKEN` (passed over when a profile is named);
/// 2. the profile (named, else `AWS_PROFILE`, else `default`) of the shared
///    files: keys, `credential_process`, or a role (`AWSSharedConfig.plan`);
/// 3. a web identity: `AWS_WEB_IDENTITY_TOKEN_FILE` and `AWS_ROLE_ARN`;
/// 4. the container credentials endpoint: `AWS_CONTAINER_CREDENTIALS_RELATIVE_URI`
///    or `AWS_CONTAINER_CREDENTIALS_FULL_URI`;
/// 5. the EC2 instance metadata service, unless `AWS_EC2_METADATA_DISABLED`
///    is true; on a machine without one it fails within about a second.
///
/// When none gives credentials, the error lists what was tried.
struct AWSCredentialChain {
    let environment: AWSEnvironment
    let home: String
    /// Sends the chain's requests (STS, the container and instance metadata endpoints).
    let fetcher: any AWSHTTPFetcher
    let now: @Sendable () -> Date

    typealias Failure = AWSConfiguration.Failure

    func configuration(profile explicitProfile: String?) throws(Failure) -> AWSConfiguration {
        let files = try AWSSharedConfig(
            credentialsPath: environment["AWS_SHARED_CREDENTIALS_FILE"] ?? home + "/.aws/credentials",
            configPath: environment["AWS_CONFIG_FILE"] ?? home + "/.aws/config")
        let namedProfile = explicitProfile ?? environment["AWS_PROFILE"]
        let profile = namedProfile ?? "default"
        let settings = files.profile(profile)
        let region = environment["AWS_REGION"] ?? environment["AWS_DEFAULT_REGION"] ?? settings?["region"]
        func configured(_ plan: CredentialPlan) throws(Failure) -> AWSConfiguration {
            AWSConfiguration(credentialProvider: try provider(for: plan, region: region), region: region)
        }

        var tried: [String] = []
        if explicitProfile == nil {
            if environment["AWS_ACCESS_KEY_ID"] != nil { return try configured(.environment) }
            tried.append("the environment (AWS_ACCESS_KEY_ID is not set)")
        }
        if settings == nil, let namedProfile {
            throw Failure("profile '\(namedProfile)' is \(files.neitherFile)")
        }
        if let plan = try files.plan(forProfile: profile) { return try configured(plan) }
        tried.append("profile '\(profile)' (" + (settings == nil ? files.neitherFile : "no credentials in it") + ")")

        if let tokenFile = environment["AWS_WEB_IDENTITY_TOKEN_FILE"] {
            guard let roleARN = environment["AWS_ROLE_ARN"] else {
                throw Failure("AWS_WEB_IDENTITY_TOKEN_FILE is set but AWS_ROLE_ARN is not; set the role to assume with the token")
            }
            let role = CredentialPlan.Role(arn: roleARN, sessionName: environment["AWS_ROLE_SESSION_NAME"])
            return try configured(.webIdentity(.init(role: role, tokenFile: tokenFile), origin: "AWS_WEB_IDENTITY_TOKEN_FILE"))
        }
        tried.append("a web identity (AWS_WEB_IDENTITY_TOKEN_FILE is not set)")

        if try ContainerCredentialSource(environment: environment, http: metadataClient, now: now) != nil {
            return try configured(.container)
        }
        tried.append("container credentials (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI and _FULL_URI are not set)")

        if environment.isTrue("AWS_EC2_METADATA_DISABLED") {
            tried.append("EC2 instance metadata (AWS_EC2_METADATA_DISABLED is true)")
        } else {
            // Tried like the others, but its failure is not an error: most
            // machines have no instance metadata service.
            do {
                return try configured(.instanceMetadata)
            } catch {
                tried.append(error.description)
            }
        }
        throw Failure(
            "no AWS credentials; tried \(tried.joined(separator: "; ")). Set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or name a profile of \(files.credentialsPath) or \(files.configPath)")
    }

    /// A provider for `plan`, holding its first credentials.
    func provider(for plan: CredentialPlan, region: String?) throws(Failure) -> AWSCredentialProvider {
        let source: any AWSCredentialSource
        switch plan {
        case .keys(let credentials, let name):
            return AWSCredentialProvider(fixed: credentials, source: name)
        case .environment:
            guard let key = environment["AWS_ACCESS_KEY_ID"], let secret = environment["AWS_SECRET_ACCESS_KEY"] else {
                throw Failure(
                    environment["AWS_ACCESS_KEY_ID"] == nil
                        ? "no AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment"
                        : "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not; set both, or name a profile")
            }
            let credentials = AWSCredentials(accessKeyID: key, secretAccessKey: secret, sessionToken: environment["AWS_SESSION_TOKEN"])
            return AWSCredentialProvider(fixed: credentials, source: "environment")
        case .process(let command, let profile):
            source = ProcessCredentialSource(command: command, profile: profile, now: now)
        case .assumeRole(let role, let profile, let base):
            source = AssumeRoleCredentialSource(
                role: role, profile: profile, base: try provider(for: base, region: region), sts: sts(region: region), now: now)
        case .webIdentity(let identity, let origin):
            source = WebIdentityCredentialSource(identity: identity, origin: origin, sts: sts(region: region), now: now)
        case .container:
            guard let container = try ContainerCredentialSource(environment: environment, http: metadataClient, now: now) else {
                throw Failure(
                    "credential_source EcsContainer needs AWS_CONTAINER_CREDENTIALS_RELATIVE_URI or AWS_CONTAINER_CREDENTIALS_FULL_URI")
            }
            source = container
        case .instanceMetadata:
            source = InstanceMetadataCredentialSource(environment: environment, http: metadataClient, now: now)
        }
        return try AWSCredentialProvider(source: source.name, now: now, fetch: source.fetch)
    }

    private func sts(region: String?) -> STSClient {
        STSClient(
            environment: environment, region: region, http: CredentialHTTP(fetcher: fetcher, destination: .securityTokenService),
            now: now)
    }

    /// The container and instance metadata endpoints (`AWSHTTPDestination.metadataEndpoint`).
    private var metadataClient: CredentialHTTP { CredentialHTTP(fetcher: fetcher, destination: .metadataEndpoint) }
}
