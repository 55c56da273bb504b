import ArgumentParser
import FoundationEssentials
import Xfer
import XferS3

/// `xfer pull SOURCE... DEST`: downloads as jobs of the engine (Docs/cli.md).
struct PullCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pull",
        abstract: "Download URLs, S3 objects and S3 prefixes; resumable after a kill, checked, in parallel ranges.",
        discussion: """
            Each file is written to NAME.xfer-partial beside its destination and renamed into place only \
            complete and checked against the digest the server offers. Running the same pull again resumes it. \
            One object goes to DEST (a file path, or into DEST when it is a directory or ends with /); several \
            objects or a prefix (s3://BUCKET/PREFIX/) go into the directory DEST.
            """)

    @Argument(help: ArgumentHelp("http(s) URLs, s3://BUCKET/KEY objects or s3://BUCKET/PREFIX/ prefixes, then DEST.", valueName: "SOURCE... DEST"))
    var arguments: [String] = []

    @Option(name: .customLong("include"), help: ArgumentHelp("Of a prefix, only objects matching GLOB (repeatable).", valueName: "GLOB"))
    var includes: [String] = []

    @Option(name: .customLong("exclude"), help: ArgumentHelp("Of a prefix, not objects matching GLOB; wins over --include (repeatable).", valueName: "GLOB"))
    var excludes: [String] = []

    @Option(help: "Bytes per ranged request, e.g. 8MiB (default: the source's).")
    var chunkSize: ByteSize?

    @Option(help: "Requests in flight at once (default: the source's).")
    var concurrency: Int?

    @Option(help: "Attempts per request before the job fails (the first included).")
    var maxAttempts: Int = RetryPolicy().maximumAttempts

    @Flag(help: "Replace destination files that are not this pull's (default: such a file fails, untouched).")
    var force = false

    @OptionGroup var state: StateLocation

    @Flag(help: "Discard this pull's saved progress (and its partial files) and start over.")
    var restart = false

    @Flag(help: "Print NDJSON events on stdout instead of the paths written.")
    var json = false

    @OptionGroup var credentials: CredentialArguments

    @OptionGroup var network: NetworkArguments

    @OptionGroup var rateLimit: RateLimitArguments

    @OptionGroup var output: OutputArguments

    @OptionGroup var s3: S3ServerArguments

    @OptionGroup var aws: AWSProfileArgument

    @Option(help: "How long completed jobs stay listed, e.g. 0, 30m, 24h, 7d (default: $XFER_KEEP_FINISHED or 24h).")
    var keepFinished: DurationArgument?

    mutating func validate() throws {
        guard arguments.count >= 2 else { throw ValidationError("name what to pull and where: xfer pull SOURCE... DEST") }
        let kinds = Set(sources.map(BuiltInSource.kind(of:)))
        guard !kinds.contains(nil) else {
            let bad = sources.first { BuiltInSource.kind(of: $0) == nil } ?? ""
            throw ValidationError("'\(bad.prefix(80))' is neither an http(s) URL nor s3://BUCKET/KEY")
        }
        guard kinds.count == 1 else { throw ValidationError("pull from one kind of source at a time: http(s) URLs or s3:// objects") }
        if kinds.first == .http, !s3.isEmpty || aws.profile != nil {
            throw ValidationError("--endpoint, --region, --addressing and --profile are for s3:// sources")
        }
        try TransferOptions(chunkSize: chunkSize?.bytes, concurrency: concurrency, retry: RetryPolicy(maximumAttempts: maxAttempts))
            .validate()
    }

    var sources: [String] { Array(arguments.dropLast()) }
    var destination: String { arguments.last ?? "" }

    mutating func run() async throws {
        let selection = try FileSelection(includes: includes, excludes: excludes)
        var options = try credentials.transferOptions()
        options.chunkSize = chunkSize?.bytes
        options.concurrency = concurrency
        options.retry = RetryPolicy(maximumAttempts: maxAttempts)
        output.apply(to: &options)
        var transport = try network.transportOptions()
        rateLimit.apply(to: &transport)
        guard let kind = sources.first.flatMap(BuiltInSource.kind(of:)) else { throw ValidationError("name a source") }
        let source = try BuiltInSource.make(kind, server: s3, profile: aws, transport: transport)
        let engine = try TransferEngine(
            stateDirectory: state.directory, transport: transport, finishedJobRetention: try DurationArgument.retention(keepFinished))
        let job = try await engine.pull(
            sources, to: destination, from: source, options: options,
            pull: PullOptions(replacesExisting: force, selection: selection), restart: restart)
        _ = try await JobWatcher.follow(job, json: json, output: output).get()
    }
}

/// The download sources built into the command.
enum BuiltInSource: String, Hashable {
    case http
    case s3

    static func kind(of location: String) -> BuiltInSource? {
        let lowered = location.lowercased()
        if lowered.hasPrefix("http://") || lowered.hasPrefix("https://") { return .http }
        if lowered.hasPrefix("s3://") { return .s3 }
        return nil
    }

    static func make(
        _ kind: BuiltInSource, server: S3ServerArguments = S3ServerArguments(), profile: AWSProfileArgument,
        transport: TransportOptions
    ) throws(XferError) -> any DownloadSource {
        switch kind {
        case .http:
            return HTTPSource()
        case .s3:
            let configuration = try profile.configuration(transport: transport)
            return S3DownloadSource(
                configuration: configuration, endpoint: try server.endpoint(region: server.region ?? configuration.region),
                region: server.region)
        }
    }

    /// The sources a resumed pull may need: the one it was made with, set up
    /// to sign as a new pull would (its endpoint is kept in its locations).
    static func sources(forJobUsing name: String, profile: AWSProfileArgument, transport: TransportOptions) throws(XferError)
        -> [any DownloadSource]
    {
        guard let kind = BuiltInSource(rawValue: name) else { return [] }
        return [try make(kind, profile: profile, transport: transport)]
    }
}
