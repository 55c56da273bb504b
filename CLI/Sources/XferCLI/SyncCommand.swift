import ArgumentParser
import FoundationEssentials
import Xfer
import XferS3

#if canImport(Glibc)
    import Glibc
#endif

/// `xfer sync SRC DST`: make DST hold what SRC holds (Docs/cli.md, "xfer sync").
struct SyncCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sync",
        abstract: "Make DST hold what SRC holds (a directory and an S3 prefix, either way): copy what is new or changed, optionally delete the rest.",
        discussion: """
            Both sides are listed into the state store, every key is decided (by size and modification time, \
            --checksum or --size-only), then the copies run as a push or a pull does and, with --delete, deletes \
            follow once every copy succeeded. Killed at any moment, the same command goes on from where it was. \
            Writes are conditional on what the listing saw: an object (or local file) changed by someone else since \
            is reported as a conflict, not overwritten.
            """)

    @Argument(help: ArgumentHelp("The source, then the destination: DIR s3://BUCKET/PREFIX, or s3://BUCKET/PREFIX DIR.", valueName: "SRC DST"))
    var arguments: [String] = []

    @Flag(help: "Decide by size and a full-object CRC-32C of both sides (local ones read once per file identity, cached).")
    var checksum = false

    @Flag(help: "Decide by size alone.")
    var sizeOnly = false

    @Flag(help: "Delete from the destination what the source does not hold, once every copy succeeded (none after an error).")
    var delete = false

    @Option(help: ArgumentHelp("With --delete: delete nothing when the plan would delete more than N keys.", valueName: "N"))
    var maxDelete: Int?

    @Option(help: ArgumentHelp("Keep what the sync replaces or deletes under PLACE, at the same relative path (into S3: s3://BUCKET/PREFIX of the same endpoint, copied server-side; into a directory: a directory on its file system, moved). Not inside the destination.", valueName: "PLACE"))
    var backupDir: String?

    @Flag(help: "Print every decision with its reason, change nothing.")
    var dryRun = false

    @Option(name: .customLong("include"), help: ArgumentHelp("Only files (and keys) matching GLOB (repeatable).", valueName: "GLOB"))
    var includes: [String] = []

    @Option(name: .customLong("exclude"), help: ArgumentHelp("Not files (and keys) matching GLOB; never deleted either (repeatable).", valueName: "GLOB"))
    var excludes: [String] = []

    @Flag(help: "Follow symbolic links inside the directory (loops are detected).")
    var followSymlinks = false

    @Option(help: ArgumentHelp("Only this share of the keys, K of N (0-based; e.g. $JOB_COMPLETION_INDEX/8): N machines running shares 0..N-1 sync every key exactly once, each with its own state.", valueName: "K/N"))
    var shard: String?

    @Option(help: ArgumentHelp("Only the paths FILE names, one per line, relative to the directory (no walk; cannot go with --delete).", valueName: "FILE"))
    var filesFrom: String?

    @Option(help: "Chunk size, e.g. 8MiB (default: the backend's); s3 to s3: the part size of a copy made part by part.")
    var chunkSize: ByteSize?

    @Option(help: "s3 to s3: objects above SIZE are copied part by part, each part resumable (default: 5GiB, the most S3 copies in one request).")
    var copyLimit: ByteSize?

    @Option(help: "Requests in flight at once (default: the backend's).")
    var concurrency: Int?

    @Option(help: "Attempts per request before the sync fails (the first included).")
    var maxAttempts: Int = RetryPolicy().maximumAttempts

    @OptionGroup var state: StateLocation

    @Flag(help: "Forget this sync's unfinished plan and plan anew.")
    var restart = false

    @Flag(help: "Print NDJSON events on stdout: every decision, the copies' events, each delete.")
    var json = false

    @OptionGroup var network: NetworkArguments

    @OptionGroup var rateLimit: RateLimitArguments

    @OptionGroup var output: OutputArguments

    @OptionGroup var s3: S3Arguments

    @OptionGroup var s3Object: S3ObjectArguments

    @OptionGroup var aws: AWSProfileArgument

    @Option(help: "How long completed syncs stay listed, e.g. 0, 30m, 24h, 7d (default: $XFER_KEEP_FINISHED or 24h).")
    var keepFinished: DurationArgument?

    mutating func validate() throws {
        guard arguments.count == 2 else { throw ValidationError("name a source and a destination: xfer sync DIR s3://BUCKET/PREFIX") }
        if checksum, sizeOnly { throw ValidationError("--checksum and --size-only are two ways to decide: pick one") }
        if maxDelete != nil, !delete { throw ValidationError("--max-delete bounds --delete; name --delete too") }
        if filesFrom != nil, delete { throw ValidationError("--files-from names what to copy, not what the destination should hold: it cannot go with --delete") }
        if let shard { _ = try SyncShard(parsing: shard) }
        if let maxDelete, maxDelete < 0 { throw ValidationError("--max-delete cannot be negative") }
        let kinds = (BuiltInSource.kind(of: arguments[0]), BuiltInSource.kind(of: arguments[1]))
        switch kinds {
        case (nil, .s3?), (.s3?, nil): break
        case (.s3?, .s3?): break
        default: throw ValidationError("sync goes between a directory and s3://BUCKET[/PREFIX], or from one S3 prefix to another")
        }
        if kinds.0 == .s3, filesFrom != nil { throw ValidationError("--files-from names local files: it is for a sync from a directory") }
        if let backupDir {
            let backupKind = BuiltInSource.kind(of: backupDir)
            if kinds.1 == .s3, backupKind != .s3 {
                throw ValidationError("--backup-dir keeps what an S3 destination loses in the same store: name s3://BUCKET/PREFIX")
            }
            if kinds.1 == nil, backupKind != nil {
                throw ValidationError("--backup-dir keeps what a directory loses on the same file system: name a local directory")
            }
        }
        if copyLimit != nil, kinds != (.s3, .s3) { throw ValidationError("--copy-limit is for a sync from s3:// to s3://") }
        // Said before credentials are looked for: a typo in the directory is the likelier mistake.
        var isDirectory = false
        if kinds.0 == nil, !FileManager.default.fileExists(atPath: arguments[0], isDirectory: &isDirectory) || !isDirectory {
            throw ValidationError("\(arguments[0]): not a directory (sync takes a directory and a destination)")
        }
        try TransferOptions(chunkSize: chunkSize?.bytes, concurrency: concurrency, retry: RetryPolicy(maximumAttempts: maxAttempts))
            .validate()
    }

    mutating func run() async throws {
        var sync = SyncOptions()
        sync.mode = checksum ? .checksum : sizeOnly ? .sizeOnly : .sizeAndTime
        sync.deletes = delete
        sync.maximumDeletes = maxDelete
        sync.selection = try FileSelection(includes: includes, excludes: excludes, followSymlinks: followSymlinks)
        sync.dryRun = dryRun
        sync.restart = restart
        sync.shard = try shard.map { text throws(XferError) in try SyncShard(parsing: text) }
        sync.filesFrom = filesFrom
        sync.backupDirectory = backupDir
        let printer = SyncPrinter(json: json, dryRun: dryRun, verbose: output.verbose)
        if json || dryRun { sync.decisions = { printer.decided($0) } }

        var options = TransferOptions()
        options.chunkSize = chunkSize?.bytes
        options.concurrency = concurrency
        options.retry = RetryPolicy(maximumAttempts: maxAttempts)
        output.apply(to: &options)
        var transport = try network.transportOptions()
        rateLimit.apply(to: &transport)
        let engine = try TransferEngine(
            stateDirectory: state.directory, transport: transport, finishedJobRetention: try DurationArgument.retention(keepFinished))
        let job: SyncJob
        if BuiltInSource.kind(of: arguments[0]) == .s3, BuiltInSource.kind(of: arguments[1]) == .s3 {
            guard let source = try BuiltInSource.make(.s3, server: s3.server, profile: aws, transport: transport) as? any ObjectListing else {
                throw ValidationError("the s3 source cannot list")
            }
            let configuration = try aws.configuration(transport: transport)
            let backend = S3Backend(
                configuration: configuration, endpoint: try s3.server.endpoint(region: s3.server.region ?? configuration.region),
                region: s3.server.region, objectOptions: try s3Object.options(),
                singleCopyLimit: Int64(copyLimit?.bytes ?? Int(S3Backend.maximumSingleCopy)))
            job = try await engine.sync(arguments[0], from: source, to: arguments[1], using: backend, options: options, sync: sync)
        } else if BuiltInSource.kind(of: arguments[0]) == .s3 {
            guard let source = try BuiltInSource.make(.s3, server: s3.server, profile: aws, transport: transport) as? any ObjectListing else {
                throw ValidationError("the s3 source cannot list")
            }
            job = try await engine.sync(arguments[0], from: source, to: arguments[1], options: options, sync: sync)
        } else {
            let backend = try BackendSettings(s3: .push(s3, s3Object), profile: aws, transport: transport).s3Backend()
            job = try await engine.sync(arguments[0], to: arguments[1], using: backend, options: options, sync: sync)
        }
        let report = try await SyncWatcher.follow(job, printer: printer, output: output).get()
        printer.summary(report, quiet: output.quiet)
    }
}

/// What `xfer sync` prints: decisions (with --dry-run or --json), the
/// copies' progress as a push shows it, deletes, and a summary.
final class SyncPrinter: Sendable {
    let json: Bool
    let dryRun: Bool
    let verbose: Bool

    init(json: Bool, dryRun: Bool, verbose: Bool) {
        self.json = json
        self.dryRun = dryRun
        self.verbose = verbose
    }

    func decided(_ decision: SyncDecision) {
        if json {
            var members: [String: JSONValue] = [
                "event": .string("decision"), "key": .string(decision.key), "action": .string(decision.action.rawValue),
                "reason": .string(decision.reason.rawValue),
            ]
            if let size = decision.sourceSize { members["sourceSize"] = .int(size) }
            if let size = decision.destinationSize { members["destinationSize"] = .int(size) }
            Terminal.out(JSONValue.object(members).text())
            return
        }
        guard dryRun, decision.action == .copy || decision.action == .delete || verbose else { return }
        Terminal.out("\(decision.action.rawValue)  \(decision.key)  (\(decision.reason.rawValue))")
    }

    func summary(_ report: SyncReport, quiet: Bool) {
        let tally = report.tally
        if json {
            Terminal.out(JSONValue.object([
                "event": .string("synced"), "job": .string(report.job.rawValue), "dryRun": .bool(report.dryRun),
                "copies": .int(Int64(tally.copies)), "copyBytes": .int(tally.copyBytes), "unchanged": .int(Int64(tally.skips)),
                "deletes": .int(Int64(tally.deletes)), "kept": .int(Int64(tally.kept)), "deleted": .int(Int64(report.deleted)),
                "backedUp": .int(Int64(report.backedUp)),
            ]).text())
            return
        }
        guard !quiet else { return }
        let verb = report.dryRun ? "would copy" : "copied"
        var line = "\(verb) \(tally.copies) file\(tally.copies == 1 ? "" : "s") (\(JobText.bytes(tally.copyBytes))), \(tally.skips) unchanged"
        if tally.deletes > 0 { line += report.dryRun ? ", would delete \(tally.deletes)" : ", deleted \(report.deleted)" }
        if report.backedUp > 0 { line += " (\(report.backedUp) replaced or deleted kept under --backup-dir)" }
        if tally.kept > 0 { line += ", \(tally.kept) only on the destination (kept; --delete removes them)" }
        Terminal.error(line)
    }
}

/// Follows a sync to its end: the copies' progress as a push shows it, the
/// one-line messages a person must act on, SIGINT/SIGTERM to stop it.
enum SyncWatcher {
    static func follow(_ job: SyncJob, printer: SyncPrinter, output: OutputArguments) async -> Result<SyncReport, XferError> {
        let signals = SignalTrap(signals: [SIGINT, SIGTERM]) { job.cancel() }
        let json = printer.json
        let shown = ProgressOutput(output.resolvedProgress(json: json), interval: output.interval)
        let events = Task {
            for await event in job.events {
                switch event {
                case .transfer(let transfer):
                    if json, case .completed = transfer {
                        // The sync's own summary follows; the copies' file list is not repeated.
                    } else if json, let line = EventJSON.line(for: transfer) {
                        Terminal.out(line)
                    }
                    if case .fileFailed(let failed) = transfer, !json {
                        shown.interrupt()
                        Terminal.error("failed \(failed.path): \(failed.reason)")
                    }
                    shown.show(transfer)
                case .planned(let planned) where json:
                    Terminal.out(JSONValue.object([
                        "event": .string("planned"), "job": .string(planned.job.rawValue), "resumed": .bool(planned.resumed),
                        "copies": .int(Int64(planned.tally.copies)), "copyBytes": .int(planned.tally.copyBytes),
                        "unchanged": .int(Int64(planned.tally.skips)), "deletes": .int(Int64(planned.tally.deletes)),
                        "described": .int(Int64(planned.described)),
                    ]).text())
                case .deleted(let deleted) where json:
                    Terminal.out(JSONValue.object(["event": .string("deleted"), "key": .string(deleted.key)]).text())
                case .deleted(let deleted) where output.verbose:
                    Terminal.error("deleted \(deleted.key)")
                default:
                    break
                }
            }
            await shown.finish()
        }
        let result: Result<SyncReport, XferError>
        do {
            result = .success(try await job.report)
        } catch {
            result = .failure(error)
        }
        await events.value
        withExtendedLifetime(signals) {}
        return result
    }
}
