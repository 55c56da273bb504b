import ArgumentParser
import Dispatch
import Foundation
import Xfer

struct PushCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "push",
        abstract: "Upload files, resuming the same push if it ran before.",
        discussion: """
            Re-running the same push (same files, backend and --to) resumes the unfinished job. \
            On success prints one URL per file on stdout.
            """)

    @Argument(help: "Files to upload.")
    var files: [String] = []

    @Option(help: "Upload protocol: \(BuiltInBackend.names).")
    var backend: String?

    @Option(name: .customLong("to"), help: "The server's root URL (s3: s3://BUCKET/PREFIX).")
    var target: String?

    @Option(help: "Chunk size, e.g. 512KiB, 8MiB or bytes (default: the backend's).")
    var chunkSize: ByteSize?

    @Option(help: "Requests in flight at once (default: the backend's).")
    var concurrency: Int?

    @Option(help: "Attempts per request before the job fails (the first included).")
    var maxAttempts: Int = RetryPolicy().maximumAttempts

    @OptionGroup var state: StateLocation

    @Flag(help: "Discard this push's saved progress and start over.")
    var restart = false

    @Flag(help: "Print NDJSON events on stdout instead of URLs.")
    var json = false

    @OptionGroup var credentials: CredentialArguments

    @OptionGroup var network: NetworkArguments

    @OptionGroup var s3: S3Arguments

    @OptionGroup var aws: AWSProfileArgument

    @Option(help: "How long completed jobs stay listed, e.g. 0, 30m, 24h, 7d (default: $XFER_KEEP_FINISHED or 24h).")
    var keepFinished: RetentionArgument?

    mutating func run() async throws {
        guard !files.isEmpty else { throw XferError.invalidInput("name at least one file to push") }
        guard let backendName = backend else {
            throw XferError.invalidInput("--backend is required (\(BuiltInBackend.names))")
        }
        guard let builtIn = BuiltInBackend(rawValue: backendName) else {
            throw XferError.invalidInput(
                "unknown backend '\(backendName)'; choose one of \(BuiltInBackend.names)")
        }
        if builtIn != .s3, !s3.isEmpty || aws.profile != nil {
            throw XferError.invalidInput("--endpoint, --region, --addressing, --part-checksum and --profile are for --backend s3")
        }
        guard let target else { throw XferError.invalidInput("--to URL is required") }
        if let chunkSize, chunkSize.bytes < 1 || chunkSize.bytes > TransferOptions.maximumChunkSize {
            throw XferError.invalidInput("--chunk-size must be between 1 byte and 1 GiB")
        }
        if let concurrency, !(1...TransferOptions.maximumConcurrency).contains(concurrency) {
            throw XferError.invalidInput("--concurrency must be between 1 and \(TransferOptions.maximumConcurrency)")
        }
        guard (1...100).contains(maxAttempts) else {
            throw XferError.invalidInput("--max-attempts must be between 1 and 100")
        }
        var options = try credentials.transferOptions()
        options.chunkSize = chunkSize?.bytes
        options.concurrency = concurrency
        options.retry = RetryPolicy(maximumAttempts: maxAttempts)

        let transport = try network.transportOptions()
        let backend = try builtIn.makeBackend(s3: s3, profile: aws)

        let engine = try TransferEngine(
            stateDirectory: state.directory, transport: transport, finishedJobRetention: try RetentionArgument.resolve(keepFinished))
        let job = try await engine.push(files, to: target, using: backend, options: options, restart: restart)

        _ = try await JobWatcher.follow(job, json: json).get()
    }
}

/// Runs `handler` on SIGINT/SIGTERM instead of dying, so the job can stop
/// scheduling and commit its state.
final class SignalTrap: @unchecked Sendable {
    // @unchecked: the sources are set once in init and only cancelled in deinit.
    private let sources: [any DispatchSourceSignal]

    init(signals: [Int32], handler: @escaping @Sendable () -> Void) {
        sources = signals.map { number in
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler(handler: handler)
            source.resume()
            return source
        }
    }

    deinit {
        for source in sources { source.cancel() }
    }
}
