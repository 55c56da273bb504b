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
            var batches = EventBatches(job.events)
            while let event = await batches.next() {
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
            Terminal.out(lines: report.files.lazy.map(\.url))
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

/// A job's events, read in batches: when the reader had to wait for an
/// event (none was buffered), it pauses `pause` before taking it, so the ones
/// that come meanwhile are read at once, without a wait each. An event a
/// reader waits for wakes its thread, and on two cores that thread took the
/// transport's (a wake-up, often a preemption, per 64 KiB chunk or small
/// file: about a tenth of the client's context switches); now two per pause
/// at most. Nothing is dropped (the stream keeps 4,096 events; in 2 ms a
/// push makes a dozen or so), and the job's last event is not held back.
/// The pause is short because `--json` readers act on events as they come
/// (a script, or a test, that kills a push after its tenth chunk).
struct EventBatches {
    private var iterator: AsyncStream<TransferEvent>.Iterator
    private let pause: Duration

    init(_ events: AsyncStream<TransferEvent>, pause: Duration = .milliseconds(2)) {
        iterator = events.makeAsyncIterator()
        self.pause = pause
    }

    /// A read that took this long waited for the event (a buffered one takes ~1 µs).
    private static let waited = Duration.microseconds(20)

    mutating func next() async -> TransferEvent? {
        let start = ContinuousClock.now
        guard let event = await iterator.next() else { return nil }
        switch event {
        case .completed, .failed:
            return event
        default:
            if ContinuousClock.now - start > Self.waited { try? await Task.sleep(for: pause) }
            return event
        }
    }
}
