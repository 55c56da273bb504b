import ArgumentParser
import Xfer

/// What a command that runs jobs (push, resume) says on stderr: progress,
/// one line per request, or errors only. stdout — URLs, or NDJSON with
/// `--json` — is the command's result and does not change with these.
struct OutputArguments: ParsableArguments {
    /// How progress is shown.
    enum ProgressMode: String, ExpressibleByArgument, CaseIterable {
        /// A bar when stderr is a terminal, lines otherwise; nothing with --json.
        case auto
        /// A live bar redrawn in place.
        case bar
        /// A line every interval and one at the end, for logs.
        case lines
        case none
    }

    @Option(help: "Progress on stderr: auto (a bar on a terminal, else a line every 10 s and one at the end), bar, lines or none.")
    var progress: ProgressMode = .auto

    @Flag(help: "Print only errors on stderr (no progress, no notes); stdout is unchanged.")
    var quiet = false

    @Flag(help: "Print one line per request on stderr: method, URL (secrets redacted), status, body bytes, time.")
    var verbose = false

    /// Seconds between progress lines; hidden, so tests need not wait 10 s.
    @Option(help: ArgumentHelp(visibility: .private))
    var progressInterval: Double?

    /// Seconds between lines with `--progress lines`.
    static let defaultProgressInterval: Duration = .seconds(10)

    func validate() throws {
        if quiet && verbose { throw ValidationError("--quiet and --verbose cannot be used together") }
        if let progressInterval, !(progressInterval.isFinite && progressInterval >= 0.01) {
            throw ValidationError("--progress-interval must be at least 0.01 seconds")
        }
    }

    /// The progress actually shown: `--quiet` shows none, and `auto` none
    /// with `--json` (stdout is for the script then; stderr stays quiet
    /// unless progress is asked for by name).
    func resolvedProgress(json: Bool, stderrIsTerminal: Bool = Terminal.stderrIsTerminal) -> ProgressMode {
        if quiet { return .none }
        guard progress == .auto else { return progress }
        if json { return .none }
        return stderrIsTerminal ? .bar : .lines
    }

    var interval: Duration {
        progressInterval.map { .milliseconds(Int64($0 * 1000)) } ?? Self.defaultProgressInterval
    }

    /// Asks the engine for the per-request events `--verbose` prints.
    func apply(to options: inout TransferOptions) {
        options.reportsRequests = verbose
    }
}
