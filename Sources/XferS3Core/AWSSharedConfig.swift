import FoundationEssentials
import XferPrimitives

/// `~/.aws/credentials` and `~/.aws/config` together, as the AWS CLI reads
/// them: a profile's settings are those of `[profile NAME]` (`[default]`)
/// in the config file, overlaid by `[NAME]` in the credentials file.
struct AWSSharedConfig {
    let credentialsPath: String
    let configPath: String
    private let credentialsFile: INIFile?
    private let configFile: INIFile?

    typealias Failure = AWSConfiguration.Failure

    /// Reads both files; a missing file is an empty one.
    init(credentialsPath: String, configPath: String) throws(Failure) {
        self.credentialsPath = credentialsPath
        self.configPath = configPath
        credentialsFile = try INIFile.read(credentialsPath)
        configFile = try INIFile.read(configPath)
    }

    /// For tests: the two files' text.
    init(credentials: String, config: String) {
        credentialsPath = "credentials"
        configPath = "config"
        credentialsFile = INIFile(parsing: credentials)
        configFile = INIFile(parsing: config)
    }

    /// The profile's settings (keys lowercased); nil when neither file has it.
    func profile(_ name: String) -> [String: String]? {
        let fromConfig = configFile?.sections["profile \(name)"] ?? (name == "default" ? configFile?.sections["default"] : nil)
        let fromCredentials = credentialsFile?.sections[name]
        guard fromConfig != nil || fromCredentials != nil else { return nil }
        // Keys may sit in either file; the credentials file wins, as in the AWS CLI.
        return (fromConfig ?? [:]).merging(fromCredentials ?? [:]) { $1 }
    }

    /// "in neither ~/.aws/credentials nor ~/.aws/config", for messages.
    var neitherFile: String { "in neither \(credentialsPath) nor \(configPath)" }

    // MARK: What a profile's credentials are

    /// The way to a profile's credentials, as its settings say, in the AWS
    /// CLI's order: a role to assume (`role_arn`, with `source_profile`,
    /// `credential_source` or `web_identity_token_file`), else keys, else
    /// `credential_process`. Nil when the profile has none of them (the
    /// sources after the profiles are then tried).
    func plan(forProfile name: String) throws(Failure) -> CredentialPlan? {
        guard let settings = profile(name) else { return nil }
        return try plan(name, settings, chain: [])
    }

    /// `chain`: the profiles that named this one as `source_profile`, first to last.
    private func plan(_ name: String, _ settings: [String: String], chain: [String]) throws(Failure) -> CredentialPlan? {
        let profile = "profile '\(name)'"
        if let roleARN = settings["role_arn"] {
            if settings["mfa_serial"] != nil {
                throw Failure(
                    "\(profile) asks for an MFA code (mfa_serial), which xfer cannot prompt for; give the profile a credential_process that does (e.g. aws-vault)")
            }
            let role = CredentialPlan.Role(
                arn: roleARN, sessionName: settings["role_session_name"], externalID: settings["external_id"],
                duration: try Self.duration(settings, profile))
            if let sourceName = settings["source_profile"] {
                return .assumeRole(role, profile: name, source: try sourcePlan(sourceName, of: name, settings, chain: chain))
            }
            if let tokenFile = settings["web_identity_token_file"] {
                return .webIdentity(
                    CredentialPlan.WebIdentity(role: role, tokenFile: tokenFile), origin: profile)
            }
            if let source = settings["credential_source"] {
                return .assumeRole(role, profile: name, source: try credentialSource(source, profile))
            }
            throw Failure(
                "\(profile) has role_arn but nothing to assume it with: add source_profile, credential_source or web_identity_token_file")
        }
        if let keys = try Self.keys(settings, profile) { return .keys(keys, source: profile) }
        if let command = settings["credential_process"] { return .process(command: command, profile: name) }
        if settings["sso_session"] != nil || settings["sso_start_url"] != nil {
            throw Failure(
                "\(profile) signs in through IAM Identity Center (SSO), which xfer does not read; add to it credential_process = aws configure export-credentials --profile \(name) --format process")
        }
        return nil
    }

    /// The credentials a role is assumed with: the source profile's keys
    /// when it has them (even beside a role of its own, as in the AWS CLI),
    /// else whatever its settings say.
    private func sourcePlan(
        _ sourceName: String, of name: String, _ settings: [String: String], chain: [String]
    ) throws(Failure) -> CredentialPlan {
        // A profile may name itself, to assume its role with its own keys.
        if sourceName == name {
            guard let keys = try Self.keys(settings, "profile '\(name)'") else {
                throw Failure("profile '\(name)' names itself as source_profile but has no aws_access_key_id and aws_secret_access_key")
            }
            return .keys(keys, source: "profile '\(name)'")
        }
        let path = chain + [name]
        if path.contains(sourceName) {
            let cycle = (path.drop(while: { $0 != sourceName }) + [sourceName]).map { "'\($0)'" }.joined(separator: " → ")
            throw Failure("the profiles \(cycle) name each other as source_profile in a cycle; give one of them keys of its own")
        }
        guard let sourceSettings = profile(sourceName) else {
            throw Failure("profile '\(name)' names source_profile '\(sourceName)', which is \(neitherFile)")
        }
        if let keys = try Self.keys(sourceSettings, "profile '\(sourceName)'") { return .keys(keys, source: "profile '\(sourceName)'") }
        guard let plan = try plan(sourceName, sourceSettings, chain: path) else {
            throw Failure("profile '\(name)' names source_profile '\(sourceName)', which holds no credentials")
        }
        return plan
    }

    /// `credential_source`: where the keys to assume a role with are, outside the files.
    private func credentialSource(_ value: String, _ profile: String) throws(Failure) -> CredentialPlan {
        switch value.lowercased() {
        case "environment": return .environment
        case "ec2instancemetadata": return .instanceMetadata
        case "ecscontainer": return .container
        default:
            throw Failure("\(profile) has credential_source '\(value.prefix(40))'; it must be Environment, Ec2InstanceMetadata or EcsContainer")
        }
    }

    /// `aws_access_key_id` and `aws_secret_access_key` (and `aws_session_token`), both or neither.
    private static func keys(_ settings: [String: String], _ profile: String) throws(Failure) -> AWSCredentials? {
        let key = settings["aws_access_key_id"].flatMap { $0.isEmpty ? nil : $0 }
        let secret = settings["aws_secret_access_key"].flatMap { $0.isEmpty ? nil : $0 }
        switch (key, secret) {
        case (let key?, let secret?):
            return AWSCredentials(accessKeyID: key, secretAccessKey: secret, sessionToken: settings["aws_session_token"])
        case (nil, nil):
            return nil
        default:
            throw Failure("\(profile) has one of aws_access_key_id and aws_secret_access_key but not the other; set both")
        }
    }

    /// `duration_seconds`: STS takes 900 (15 minutes) to 43,200 (12 hours).
    private static func duration(_ settings: [String: String], _ profile: String) throws(Failure) -> Int? {
        guard let text = settings["duration_seconds"] else { return nil }
        guard let seconds = Int(text), (900...43_200).contains(seconds) else {
            throw Failure("\(profile) has duration_seconds '\(text.prefix(20))'; STS takes 900 to 43200")
        }
        return seconds
    }
}

/// How credentials are had: what a profile or the environment says, before
/// anything is run or asked. Pure, so the profile chain is tested without
/// processes or servers.
indirect enum CredentialPlan: Sendable, Hashable {
    /// Long-term keys (or a session that someone else refreshes), from `source`.
    case keys(AWSCredentials, source: String)
    /// `credential_process` of a profile.
    case process(command: String, profile: String)
    /// STS `AssumeRole` of `profile`'s role, signed with `source`'s credentials.
    case assumeRole(Role, profile: String, source: CredentialPlan)
    /// STS `AssumeRoleWithWebIdentity` with a token file; `origin` says who
    /// asked for it ("profile 'x'", "AWS_WEB_IDENTITY_TOKEN_FILE").
    case webIdentity(WebIdentity, origin: String)
    /// `AWS_ACCESS_KEY_ID`… (a profile's `credential_source = Environment`).
    case environment
    /// The container credentials endpoint.
    case container
    /// The EC2 instance metadata service.
    case instanceMetadata

    struct Role: Sendable, Hashable {
        var arn: String
        var sessionName: String?
        var externalID: String?
        /// Seconds; nil for STS's default (an hour).
        var duration: Int?
    }

    struct WebIdentity: Sendable, Hashable {
        var role: Role
        var tokenFile: String
    }
}

/// The INI dialect of `~/.aws/credentials` and `~/.aws/config`: `[section]`,
/// `key = value`, comments after `#` or `;` at the start of a line.
struct INIFile {
    var sections: [String: [String: String]] = [:]

    /// Nil when the file does not exist.
    static func read(_ path: String) throws(AWSConfiguration.Failure) -> INIFile? {
        guard FileManager.default.fileExists(atPath: path) else { return nil }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw AWSConfiguration.Failure("cannot read \(path); check its permissions")
        }
        return INIFile(parsing: String(decoding: data, as: UTF8.self))
    }

    init(parsing text: String) {
        var current: String?
        for rawLine in text.split(whereSeparator: \.isNewline) {
            let line = rawLine.trimmingSpacesAndTabs()
            if line.isEmpty || line.hasPrefix("#") || line.hasPrefix(";") { continue }
            if line.hasPrefix("["), line.hasSuffix("]") {
                let name = line.dropFirst().dropLast().trimmingSpacesAndTabs()
                current = name.split(separator: " ", omittingEmptySubsequences: true).joined(separator: " ")
                if let current, sections[current] == nil { sections[current] = [:] }
                continue
            }
            guard let current, let equals = line.firstIndex(of: "=") else { continue }
            let key = line[..<equals].trimmingSpacesAndTabs().lowercased()
            let value = line[line.index(after: equals)...].trimmingSpacesAndTabs()
            sections[current, default: [:]][key] = value
        }
    }
}
