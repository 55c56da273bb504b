import ArgumentParser
import Xfer
import XferIETF
import XferMultipart
import XferPatch
import XferS3
import XferSequence
import XferTus

/// A backend `--backend` can name; any other value is a usage error from ArgumentParser, which
/// lists these.
///
/// The built-in backends are one list (`makers`): `push`, `resume`, `cancel` and `status` all
/// read it, their names are the backends' own (`UploadBackend.name`), and whether one takes a
/// stream is whether its backend adopts `StreamUploading`. A new backend is its own folder under
/// Backends/ and one line there.
struct BuiltInBackend: Hashable, Sendable, ExpressibleByArgument, CustomStringConvertible {
    /// Every built-in backend, made from what a command has (`BackendSettings`).
    /// (Untyped throws: this compiler crashes on a typed-throws closure in an array literal; they
    /// throw only `XferError`.)
    private static var makers: [(BackendSettings) throws -> any UploadBackend] {
        [
            { _ in PatchBackend() },
            { _ in MultipartBackend() },
            { _ in SequenceBackend() },
            { settings in try settings.s3Backend() },
            { settings in TusBackend(partialUploads: settings.tusPartialUploads) },
            { settings in IETFBackend(interopVersion: settings.interopVersion) },
        ]
    }

    /// The backend's `name`.
    let name: String
    private let maker: Int

    static var all: [BuiltInBackend] {
        makers.indices.map { BuiltInBackend(name: (try? makers[$0](.describing))?.name ?? "", maker: $0) }
    }

    static func == (a: Self, b: Self) -> Bool { a.name == b.name }
    func hash(into hasher: inout Hasher) { hasher.combine(name) }

    init?(argument: String) {
        guard let found = Self.all.first(where: { $0.name == argument }) else { return nil }
        self = found
    }

    private init(name: String, maker: Int) {
        self.name = name
        self.maker = maker
    }

    static var allValueStrings: [String] { all.map(\.name) }
    var description: String { name }
    static var names: String { allValueStrings.joined(separator: ", ") }

    /// Its backend, made from `settings`.
    func make(_ settings: BackendSettings) throws(XferError) -> any UploadBackend {
        do {
            return try Self.makers[maker](settings)
        } catch let error as XferError {
            throw error
        } catch {
            throw .invalidInput("\(name): \(error)")
        }
    }

    /// Whether the protocol takes a stream of unknown length (its backend adopts `StreamUploading`).
    var takesStreams: Bool { (try? make(.describing)) is any StreamUploading }

    static var streamNames: String { all.filter(\.takesStreams).map(\.name).joined(separator: " and ") }

    /// Whether a job's backend is built in: one pushed by another program may not be.
    static func isBuiltIn(_ name: String) -> Bool { all.contains { $0.name == name } }

    /// The backends an existing job may name: its endpoint and region come from the job,
    /// credentials from the environment or `--profile`, resolved only for the job's own backend.
    static func backends(
        forJobUsing name: String, profile: AWSProfileArgument, transport: TransportOptions = TransportOptions()
    ) throws(XferError) -> [any UploadBackend] {
        let job = BackendSettings(s3: .job, profile: profile, transport: transport)
        var backends: [any UploadBackend] = []
        for backend in all { backends.append(try backend.make(backend.name == name ? job : .describing)) }
        return backends
    }

    /// Every built-in backend, unconfigured: enough to read how a job's files are cut (`status`),
    /// never to send (no credentials).
    static var describingJobs: [any UploadBackend] {
        all.compactMap { try? $0.make(.describing) }
    }
}

/// What a backend is made from: a new push's options, what resuming or cancelling a job needs
/// (credentials only), or nothing (to read a backend's name and traits).
struct BackendSettings {
    enum S3Source {
        /// A new push: the server and object options, from the command line.
        case push(S3Arguments, S3ObjectArguments)
        /// A job's: its endpoint and region are in the job; credentials from the profile.
        case job
        /// No credentials at all.
        case none
    }

    var s3: S3Source
    var profile = AWSProfileArgument()
    var transport = TransportOptions()
    var interopVersion: IETFBackend.InteropVersion?
    /// tus: a large file's chunks as parallel partial uploads, concatenated by the server. A push
    /// that names `--concurrency` above 1 asks for requests in parallel, which tus gives one file
    /// only this way; at the defaults each file is one upload PATCHed in order (`TusBackend.partialUploads`).
    var tusPartialUploads = false

    static var describing: BackendSettings { BackendSettings(s3: .none) }

    func s3Backend() throws(XferError) -> S3Backend {
        switch s3 {
        case .push(let arguments, let object):
            let options = try object.options()
            let partChecksum = try arguments.checksum()
            // A full-object checksum decides what the parts carry (their CRCs).
            if options.checksum != nil, partChecksum != .auto {
                throw .invalidInput("--checksum-algorithm has each part carry its CRC, so --part-checksum \(partChecksum.rawValue) cannot be kept: name one of them")
            }
            return try arguments.server.backend(
                profile: profile, transport: transport, partChecksum: partChecksum, objectOptions: options)
        case .job:
            return S3Backend(configuration: try profile.configuration(transport: transport))
        case .none:
            return S3Backend(
                configuration: AWSConfiguration(credentials: AWSCredentials(accessKeyID: "", secretAccessKey: ""), region: nil, source: "none"))
        }
    }
}

/// `--profile`: where S3 credentials come from, for every command that sends requests.
struct AWSProfileArgument: ParsableArguments {
    @Option(help: "s3: the profile of ~/.aws/credentials and ~/.aws/config to take credentials from: keys, credential_process, or a role_arn with source_profile or web_identity_token_file (default: $AWS_ACCESS_KEY_ID/$AWS_SECRET_ACCESS_KEY, else $AWS_PROFILE or 'default', else a web identity token, container credentials or EC2 instance metadata, as the AWS CLI).")
    var profile: String?

    /// Credentials as the AWS CLI finds them; STS is reached through `transport`.
    func configuration(transport: TransportOptions = TransportOptions()) throws(XferError) -> AWSConfiguration {
        do {
            return try AWSConfiguration.resolve(profile: profile, transport: transport)
        } catch {
            throw .invalidInput(error.description)
        }
    }
}

/// Where a new S3 push goes; a resumed job keeps what it started with.
struct S3Arguments: ParsableArguments {
    @OptionGroup var server: S3ServerArguments

    @Option(help: "s3: the checksum each part carries: auto (Content-MD5 over https; over http the signed SHA-256 of the body alone), md5 (Content-MD5 always), crc32 or crc32c (x-amz-checksum-crc32[c]) (default: auto).")
    var partChecksum: String?

    var isEmpty: Bool { server.isEmpty && partChecksum == nil }

    func checksum() throws(XferError) -> S3PartChecksum {
        guard let partChecksum else { return .auto }
        guard let parsed = S3PartChecksum(rawValue: partChecksum) else {
            throw .invalidInput("--part-checksum must be auto, md5, crc32 or crc32c, not '\(partChecksum.prefix(40))'")
        }
        return parsed
    }
}

/// Which S3 server requests go to and how they are signed: a new push's,
/// and `xfer uploads`'.
struct S3ServerArguments: ParsableArguments {
    @Option(name: .customLong("endpoint"), help: "s3: the server, http(s)://HOST[:PORT] (default: AWS for the region).")
    var endpointURL: String?

    @Option(help: "s3: the region to sign for (default: $AWS_REGION, the profile's region, else us-east-1).")
    var region: String?

    @Option(help: "s3: bucket addressing, path or virtual (default: virtual on AWS, path on --endpoint).")
    var addressing: String?

    var isEmpty: Bool { endpointURL == nil && region == nil && addressing == nil }

    /// An s3 backend for this server, signing with the credentials `profile`
    /// finds (fetched through `transport` where they come from a service).
    func backend(
        profile: AWSProfileArgument, transport: TransportOptions = TransportOptions(), partChecksum: S3PartChecksum = .auto,
        objectOptions: S3ObjectOptions = S3ObjectOptions()
    ) throws(XferError) -> S3Backend {
        let configuration = try profile.configuration(transport: transport)
        return S3Backend(
            configuration: configuration, endpoint: try endpoint(region: region ?? configuration.region), region: region,
            partChecksum: partChecksum, objectOptions: objectOptions)
    }

    /// nil for AWS's own endpoint in the region.
    func endpoint(region: String?) throws(XferError) -> S3Endpoint? {
        var style: S3Endpoint.Addressing?
        if let addressing {
            guard let parsed = S3Endpoint.Addressing(rawValue: addressing) else {
                throw .invalidInput("--addressing must be path or virtual, not '\(addressing.prefix(40))'")
            }
            style = parsed
        }
        if let region, region.isEmpty || !region.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" }) {
            throw .invalidInput("--region '\(region.prefix(40))' is not a region name (e.g. us-east-1)")
        }
        guard let endpointURL else {
            guard let style else { return nil }
            var aws = S3Endpoint.aws(region: region ?? "us-east-1")
            aws.addressing = style
            return aws
        }
        do {
            return try S3Endpoint.parse(endpointURL, addressing: style ?? .path)
        } catch {
            throw .invalidInput(error.description)
        }
    }
}
