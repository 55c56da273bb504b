import Foundation

/// The keys requests are signed with. Never printed: `description` shows
/// only the last four characters of the access key id.
public struct AWSCredentials: Sendable, Hashable, CustomStringConvertible {
    public var accessKeyID: String
    public var secretAccessKey: String
    /// Set for temporary credentials (`AWS_SESSION_TOKEN`); sent as `x-amz-security-token`.
    public var sessionToken: String?

    public init(accessKeyID: String, secretAccessKey: String, sessionToken: String? = nil) {
        self.accessKeyID = accessKeyID
        self.secretAccessKey = secretAccessKey
        self.sessionToken = sessionToken
    }

    public var description: String { "AWS credentials (access key …\(accessKeyID.suffix(4)))" }
}

/// Where the S3 backend's settings come from, in the order the AWS SDKs and
/// CLI use: an explicit profile, else the `AWS_*` environment variables,
/// else `AWS_PROFILE` (or `default`) in `~/.aws/credentials` and `~/.aws/config`.
public struct AWSConfiguration: Sendable, Hashable {
    public var credentials: AWSCredentials
    /// `AWS_REGION`, `AWS_DEFAULT_REGION`, the profile's `region`, or nil.
    public var region: String?
    /// What the credentials were read from, for messages ("environment", "profile 'dev'").
    public var source: String

    public init(credentials: AWSCredentials, region: String?, source: String) {
        self.credentials = credentials
        self.region = region
        self.source = source
    }

    /// Why no configuration could be resolved, in a user's words.
    public struct Failure: Error, Sendable, Hashable, CustomStringConvertible {
        public var description: String
        public init(_ description: String) { self.description = description }
    }

    /// Resolves credentials and region. `profile` is `--profile`; `home` and
    /// `environment` are parameters so tests need no real home directory.
    public static func resolve(
        profile explicitProfile: String? = nil,
        environment: [String: String] = ProcessInfo.processInfo.environment,
        home: String = NSHomeDirectory()
    ) throws(Failure) -> AWSConfiguration {
        func variable(_ name: String) -> String? {
            guard let value = environment[name]?.trimmingCharacters(in: .whitespaces), !value.isEmpty else { return nil }
            return value
        }
        let credentialsPath = variable("AWS_SHARED_CREDENTIALS_FILE") ?? home + "/.aws/credentials"
        let configPath = variable("AWS_CONFIG_FILE") ?? home + "/.aws/config"
        let environmentRegion = variable("AWS_REGION") ?? variable("AWS_DEFAULT_REGION")

        if explicitProfile == nil, let key = variable("AWS_ACCESS_KEY_ID") {
            guard let secret = variable("AWS_SECRET_ACCESS_KEY") else {
                throw Failure("AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not; set both, or name a profile")
            }
            let region = environmentRegion ?? (try? profileSection(variable("AWS_PROFILE") ?? "default", inConfig: configPath))?["region"]
            return AWSConfiguration(
                credentials: AWSCredentials(accessKeyID: key, secretAccessKey: secret, sessionToken: variable("AWS_SESSION_TOKEN")),
                region: region, source: "environment")
        }

        let profile = explicitProfile ?? variable("AWS_PROFILE") ?? "default"
        let credentialsSection = try INIFile.read(credentialsPath)?.sections[profile]
        let configSection = try profileSection(profile, inConfig: configPath)
        // Keys may sit in either file; the credentials file wins, as in the AWS CLI.
        let merged = (configSection ?? [:]).merging(credentialsSection ?? [:]) { $1 }
        guard let key = merged["aws_access_key_id"], let secret = merged["aws_secret_access_key"] else {
            if explicitProfile != nil || credentialsSection != nil || configSection != nil {
                throw Failure("profile '\(profile)' has no aws_access_key_id and aws_secret_access_key in \(credentialsPath) or \(configPath)")
            }
            throw Failure(
                "no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or name a profile of \(credentialsPath)")
        }
        return AWSConfiguration(
            credentials: AWSCredentials(accessKeyID: key, secretAccessKey: secret, sessionToken: merged["aws_session_token"]),
            region: environmentRegion ?? merged["region"], source: "profile '\(profile)'")
    }

    /// `[profile NAME]` in the config file (`[default]` for the default profile).
    private static func profileSection(_ profile: String, inConfig path: String) throws(Failure) -> [String: String]? {
        guard let file = try INIFile.read(path) else { return nil }
        return file.sections["profile \(profile)"] ?? (profile == "default" ? file.sections["default"] : nil)
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
            let line = rawLine.trimmingCharacters(in: .whitespaces)
            if line.isEmpty || line.hasPrefix("#") || line.hasPrefix(";") { continue }
            if line.hasPrefix("["), line.hasSuffix("]") {
                let name = line.dropFirst().dropLast().trimmingCharacters(in: .whitespaces)
                current = name.split(separator: " ", omittingEmptySubsequences: true).joined(separator: " ")
                if let current, sections[current] == nil { sections[current] = [:] }
                continue
            }
            guard let current, let equals = line.firstIndex(of: "=") else { continue }
            let key = line[..<equals].trimmingCharacters(in: .whitespaces).lowercased()
            let value = line[line.index(after: equals)...].trimmingCharacters(in: .whitespaces)
            sections[current, default: [:]][key] = value
        }
    }
}
