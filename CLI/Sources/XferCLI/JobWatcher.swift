import FoundationEssentials
import Xfer

#if canImport(Glibc)
    import Glibc
#endif

/// Follows one running job for the CLI: forwards SIGINT/SIGTERM to it,
/// shows its events (NDJSON on stdout; progress, notes and with --verbose
/// requests on stderr), and on success prints one URL per file.
enum JobWatcher {
    /// Waits for `job` to end. `tag` adds a `job` field to every NDJSON
    /// event (used when one command runs several jobs).
    static func follow(_ job: TransferJob, json: Bool, output: OutputArguments, tag: JobID? = nil) async -> Result<
        JobReport, XferError
    > {
        let signals = SignalTrap(signals: [SIGINT, SIGTERM]) { job.cancel() }
        let shown = ProgressOutput(output.resolvedProgress(json: json), interval: output.interval)
        let printer = Task {
            // A failed file gets a line of its own only among several: alone, the
            // job's one-line error already names it.
            var files = 0
            for await event in job.events {
                if case .started(let started) = event { files = started.files }
                if json {
                    if case .completed(let report) = event {
                        EventJSON.completed(report, job: tag) { Terminal.write($0) }
                        Terminal.write("\n")
                    } else if let line = EventJSON.line(for: event, job: tag) {
                        Terminal.out(line)
                    }
                }
                // One line each, also when stderr is a log: these are what a person must act on.
                let message: String?
                switch event {
                case .fileSkipped(let skipped) where !json && !output.quiet:
                    message = "skipping \(skipped.path): \(skipped.reason.line)"
                case .fileFailed(let failed) where !json && files > 1:
                    message = "failed \(failed.path): \(failed.reason)"
                case .requestFinished(let summary) where output.verbose:
                    message = ProgressText.request(summary)
                default:
                    message = nil
                }
                if let message {
                    shown.interrupt()
                    Terminal.error(message)
                }
                shown.show(event)
            }
            await shown.finish()
        }
        let result: Result<JobReport, XferError>
        do {
            result = .success(try await job.report)
        } catch {
            result = .failure(error)
        }
        await printer.value
        withExtendedLifetime(signals) {}
        if case .success(let report) = result, !json {
            for file in report.files { Terminal.out(file.url) }
        }
        return result
    }
}

/// The progress a command shows while a job runs: a bar on a terminal, or
/// lines at an interval (`--progress`), for push, pull, resume and sync alike.
struct ProgressOutput: Sendable {
    private let bar: ProgressDisplay?
    private let lines: ProgressLines?
    private let ticker: Task<Void, Never>?

    init(_ mode: OutputArguments.ProgressMode, interval: Duration) {
        bar = mode == .bar ? ProgressDisplay() : nil
        let lines: ProgressLines? = mode == .lines ? ProgressLines() : nil
        self.lines = lines
        ticker = lines.map { lines in
            Task {
                while (try? await Task.sleep(for: interval)) != nil { lines.tick() }
            }
        }
    }

    func show(_ event: TransferEvent) {
        bar?.show(event)
        lines?.show(event)
    }

    /// Clears the bar before a line of its own is written.
    func interrupt() { bar?.interrupt() }

    func finish() async {
        ticker?.cancel()
        await ticker?.value
        bar?.finish()
        lines?.finish()
    }
}
