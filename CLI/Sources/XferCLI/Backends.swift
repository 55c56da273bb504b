import ArgumentParser
import Xfer
import XferIETF
import XferMultipart
import XferPatch
import XferS3
import XferSequence
import XferTus

/// The backends `--backend` can name; any other value is a usage error
/// from ArgumentParser, which lists these.
enum BuiltInBackend: String, CaseIterable, ExpressibleByArgument {
    case patch
    case multipart
    case sequence
    case s3
    case tus
    case ietf

    static var names: String { allCases.map(\.rawValue).joined(separator: ", ") }

    /// Whether the protocol takes a stream of unknown length (its backend adopts `StreamUploading`).
    var takesStreams: Bool {
        switch self {
        case .s3, .tus: return true
        case .patch, .multipart, .sequence, .ietf: return false
        }
    }

    static var streamNames: String { allCases.filter(\.takesStreams).map(\.rawValue).joined(separator: " and ") }

    /// The backend, configured for a new push (`s3` from `S3Arguments` and
    /// the AWS environment, its credentials fetched through `transport`;
    /// the others need nothing).
    func makeBackend(
        s3 arguments: S3Arguments, profile: AWSProfileArgument, object: S3ObjectArguments = S3ObjectArguments(),
        transport: TransportOptions = TransportOptions(), interopVersion: IETFBackend.InteropVersion? = nil
    ) throws(XferError) -> any UploadBackend {
        switch self {
        case .ietf: return IETFBackend(interopVersion: interopVersion)
        case .patch: return PatchBackend()
        case .multipart: return MultipartBackend()
        case .sequence: return SequenceBackend()
        case .tus: return TusBackend()
        case .s3:
            return try arguments.server.backend(
                profile: profile, transport: transport, partChecksum: try arguments.checksum(), objectOptions: try object.options())
        }
    }

    /// Every built-in backend, unconfigured: enough to read how a job's files are cut (`status`),
    /// never to send (no credentials).
    static var describingJobs: [any UploadBackend] {
        let none = AWSConfiguration(credentials: AWSCredentials(accessKeyID: "", secretAccessKey: ""), region: nil, source: "none")
        return [PatchBackend(), MultipartBackend(), SequenceBackend(), TusBackend(), IETFBackend(), S3Backend(configuration: none)]
    }

    /// The backends an existing job may name: its endpoint and region come
    /// from the job, credentials from the environment or `--profile`.
    /// Credentials are resolved only for a job that needs them.
    static func backends(
        forJobUsing name: String, profile: AWSProfileArgument, transport: TransportOptions = TransportOptions()
    ) throws(XferError) -> [any UploadBackend] {
        var backends: [any UploadBackend] = [PatchBackend(), MultipartBackend(), SequenceBackend(), TusBackend(), IETFBackend()]
        if name == BuiltInBackend.s3.rawValue {
            backends.append(S3Backend(configuration: try profile.configuration(transport: transport)))
        }
        return backends
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
