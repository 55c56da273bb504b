import ArgumentParser
import Dispatch
import FoundationEssentials
import Xfer
import XferIETF

#if canImport(Glibc)
    import Glibc
#endif

struct PushCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "push",
        abstract: "Upload files and directory trees, resuming the same push if it ran before.",
        discussion: """
            A directory is sent recursively, each file under its path relative to the directory. Re-running the \
            same push (same paths, backend and --to) resumes the unfinished job, and also sends files added to the \
            directories since; files changed since are sent again, files deleted since are reported. On success \
            prints one URL per file on stdout.
            """)

    @Argument(help: "Files and directories to upload; - for standard input (a stream: s3 and tus).")
    var files: [String] = []

    @Option(help: ArgumentHelp("The name a stream gets on the server (required for -; a FIFO's defaults to its own).", valueName: "NAME"))
    var name: String?

    @Option(help: "The length a stream must have, e.g. 10GiB: one that ends short of it (a producer that died) fails instead of completing.")
    var expectedSize: ByteSize?

    @Option(name: .customLong("include"), help: ArgumentHelp("Only send files matching GLOB (repeatable).", valueName: "GLOB"))
    var includes: [String] = []

    @Option(name: .customLong("exclude"), help: ArgumentHelp("Do not send files matching GLOB; wins over --include (repeatable).", valueName: "GLOB"))
    var excludes: [String] = []

    @Flag(help: "Follow symbolic links inside directories (loops are detected).")
    var followSymlinks = false

    @Flag(help: "Print what would be sent, send nothing.")
    var dryRun = false

    @Option(help: "Upload protocol: \(BuiltInBackend.names).")
    var backend: BuiltInBackend?

    @Option(name: .customLong("to"), help: "The server's root URL (s3: s3://BUCKET/PREFIX).")
    var target: String?

    @Option(help: "Chunk size, e.g. 512KiB, 8MiB or bytes (default: the backend's).")
    var chunkSize: ByteSize?

    @Option(help: "Requests in flight at once (default: the backend's); tus: named above 1, a file's chunks go as parallel partial uploads the server concatenates.")
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

    @OptionGroup var rateLimit: RateLimitArguments

    @OptionGroup var output: OutputArguments

    @OptionGroup var s3: S3Arguments

    @OptionGroup var s3Object: S3ObjectArguments

    @OptionGroup var aws: AWSProfileArgument

    @Option(help: "ietf: the resumable uploads draft's interop version to speak, 6 (drafts -04/-05, Apple's iOS 17+ stack) or 8 (drafts -09 to -12) (default: ask the server with OPTIONS).")
    var interopVersion: Int?

    @Option(help: "How long completed jobs stay listed, e.g. 0, 30m, 24h, 7d (default: $XFER_KEEP_FINISHED or 24h).")
    var keepFinished: DurationArgument?

    /// What can be told from the arguments alone. Sizes and counts are held to
    /// the engine's bounds, written once (`TransferOptions.validate()`).
    mutating func validate() throws {
        guard !files.isEmpty else { throw ValidationError("name at least one file or directory to push") }
        if dryRun, files.contains("-") { throw ValidationError("--dry-run is for files, not a stream: - would be read and lost") }
        if dryRun { return }
        guard let backend else { throw ValidationError("--backend is required (\(BuiltInBackend.names))") }
        if backend.name != "s3", !s3.isEmpty || !s3Object.isEmpty || aws.profile != nil {
            throw ValidationError("--endpoint, --region, --addressing, --part-checksum, --profile and the object options (--content-type, --metadata, --checksum-algorithm, …) are for --backend s3")
        }
        if let interopVersion {
            guard backend.name == "ietf" else { throw ValidationError("--interop-version is for --backend ietf") }
            guard IETFBackend.InteropVersion(rawValue: interopVersion) != nil else {
                throw ValidationError("--interop-version must be 6 or 8, not \(interopVersion)")
            }
        }
        guard target != nil else { throw ValidationError("--to URL is required") }
        let isStream = files == ["-"] || (files.count == 1 && StreamInput.isPipe(files[0]))
        if isStream || files.contains("-") || name != nil || expectedSize != nil {
            guard isStream else {
                throw ValidationError(
                    files.contains("-") ? "- (standard input) is pushed alone, not with other paths"
                        : "--name and --expected-size are for a stream: - (standard input) or one FIFO")
            }
            guard backend.takesStreams else {
                let what = files == ["-"] ? "standard input" : "\(files[0]) is a FIFO, a stream"
                throw ValidationError(
                    "\(what): --backend \(backend.name) cannot take a stream of unknown length; \(BuiltInBackend.streamNames) can")
            }
            if files == ["-"], name == nil { throw ValidationError("--name NAME is required with - (what the server calls the stream)") }
            if restart { throw ValidationError("--restart is for files: a stream is always sent from its start") }
        }
        try TransferOptions(chunkSize: chunkSize?.bytes, concurrency: concurrency, retry: RetryPolicy(maximumAttempts: maxAttempts))
            .validate()
    }

    mutating func run() async throws {
        let selection = try FileSelection(includes: includes, excludes: excludes, followSymlinks: followSymlinks)
        if dryRun {
            try DryRun.print(files, selection: selection, json: json, quiet: output.quiet)
            return
        }
        guard let builtIn = backend, let target else { throw ValidationError("--backend and --to are required") }
        var options = try credentials.transferOptions()
        options.chunkSize = chunkSize?.bytes
        options.concurrency = concurrency
        options.retry = RetryPolicy(maximumAttempts: maxAttempts)
        output.apply(to: &options)

        var transport = try network.transportOptions()
        rateLimit.apply(to: &transport)
        let backend = try builtIn.make(
            BackendSettings(
                s3: .push(s3, s3Object), profile: aws, transport: transport,
                interopVersion: interopVersion.flatMap(IETFBackend.InteropVersion.init(rawValue:)),
                tusPartialUploads: (concurrency ?? 1) > 1))

        let engine = try TransferEngine(
            stateDirectory: state.directory, transport: transport, finishedJobRetention: try DurationArgument.retention(keepFinished))
        let job: TransferJob
        if let stream = try StreamInput(files, name: name, expectedSize: expectedSize?.bytes) {
            job = try await engine.pushStream(stream.source, to: target, using: backend, options: options)
        } else {
            job = try await engine.push(files, to: target, using: backend, options: options, selection: selection, restart: restart)
        }

        _ = try await JobWatcher.follow(job, json: json, output: output).get()
    }
}

/// `xfer push -` or `xfer push FIFO`: a stream, opened for the engine.
struct StreamInput {
    let source: StreamSource

    /// Nil for files and directories.
    init?(_ paths: [String], name: String?, expectedSize: Int?) throws(XferError) {
        guard paths.count == 1 else { return nil }
        let path = paths[0]
        if path == "-" {
            source = StreamSource(
                fileDescriptor: STDIN_FILENO, description: "standard input", name: name ?? "", expectedSize: expectedSize.map(Int64.init))
            return
        }
        guard Self.isPipe(path) else { return nil }
        // Opened blocking: the open waits for a writer, as `cat FIFO` does.
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            throw .fileUnreadable(path: path, reason: String(cString: strerror(errno)))
        }
        source = StreamSource(
            fileDescriptor: descriptor, description: path, name: name ?? URL(fileURLWithPath: path).lastPathComponent,
            expectedSize: expectedSize.map(Int64.init))
    }

    /// A FIFO (or another pipe, e.g. /dev/fd/N of a process substitution).
    static func isPipe(_ path: String) -> Bool {
        var info = stat()
        return stat(path, &info) == 0 && info.st_mode & S_IFMT == S_IFIFO
    }
}

/// `xfer push --dry-run`: the walk a push would make, sending nothing and
/// touching no state.
enum DryRun {
    static func print(_ paths: [String], selection: FileSelection, json: Bool, quiet: Bool) throws(XferError) {
        var files = 0
        var bytes: Int64 = 0
        var skipped = 0
        var failed = 0
        for entry in try FileTree.entries(of: paths, selection: selection) {
            switch entry {
            case .file(let file):
                files += 1
                bytes += file.size
                if json {
                    Terminal.out(JSONValue.object([
                        "event": .string("wouldSend"), "path": .string(file.path),
                        "relativePath": .string(file.relativePath), "size": .int(file.size),
                    ]).text())
                } else {
                    Terminal.out("\(file.relativePath)  \(JobText.bytes(file.size))")
                }
            case .skipped(let path, let reason):
                skipped += 1
                if json {
                    Terminal.out(JSONValue.object(["event": .string("fileSkipped"), "path": .string(path), "reason": .string(reason.line)]).text())
                } else if !quiet {
                    Terminal.error("skipping \(path): \(reason.line)")
                }
            case .failed(let path, _, _, let reason):
                failed += 1
                if json {
                    Terminal.out(JSONValue.object(["event": .string("fileFailed"), "path": .string(path), "reason": .string(reason)]).text())
                } else {
                    Terminal.error("cannot send \(path): \(reason)")
                }
            }
        }
        let summary = "would send \(files) file\(files == 1 ? "" : "s") (\(JobText.bytes(bytes)))"
            + (skipped > 0 ? ", \(skipped) skipped" : "") + (failed > 0 ? ", \(failed) unreadable" : "")
        if json {
            Terminal.out(JSONValue.object([
                "event": .string("dryRun"), "files": .int(files), "bytes": .int(bytes), "skipped": .int(skipped),
                "failed": .int(failed),
            ]).text())
        } else if !quiet {
            Terminal.error(summary)
        }
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
