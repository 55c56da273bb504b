import Xfer

/// The lines `--progress lines` and `--verbose` print, as pure functions.
enum ProgressText {
    /// `progress 12.0 MiB / 64.0 MiB (18%), 1/3 files, 3.0 MiB/s, ETA 17s`;
    /// the final line starts `done` and gives the time taken instead of
    /// the time left.
    static func line(_ tally: ProgressTally, _ figures: ProgressFigures, final: Bool) -> String {
        let percent = Int((figures.fraction * 100).rounded(.down))
        var files = "\(min(tally.doneFiles, tally.files))/\(tally.files) file\(tally.files == 1 ? "" : "s")"
        if tally.failedFiles > 0 { files += " (\(tally.failedFiles) failed)" }
        let sent = tally.lengthUnknown
            ? "\(JobText.bytes(tally.done)) of a stream of unknown length"
            : "\(JobText.bytes(tally.done)) / \(JobText.bytes(tally.total)) (\(percent)%)"
        let amounts = "\(sent), \(files), \(rate(figures.rate))"
        guard final else {
            return "progress \(amounts), ETA \(figures.secondsLeft.map(duration) ?? "unknown")"
        }
        return "done \(amounts), took \(duration(figures.elapsedSeconds))"
    }

    /// `3.0 MiB/s`, `512 B/s`.
    static func rate(_ bytesPerSecond: Double) -> String {
        "\(JobText.bytes(Int64(max(0, bytesPerSecond).rounded(.down))))/s"
    }

    /// `0.4s`, `9.9s`, `17s`, `4m05s`, `2h03m`: tenths only where they
    /// matter, and never more than two units.
    static func duration(_ seconds: Double) -> String {
        guard seconds.isFinite else { return "unknown" }
        let seconds = max(0, seconds)
        if seconds < 10 {
            let tenths = Int((seconds * 10).rounded())
            if tenths < 100 { return "\(tenths / 10).\(tenths % 10)s" }
        }
        let whole = Int(min(seconds, 1e9).rounded())
        if whole < 60 { return "\(whole)s" }
        if whole < 3600 { return "\(whole / 60)m\(twoDigits(whole % 60))s" }
        return "\(whole / 3600)h\(twoDigits(whole % 3600 / 60))m"
    }

    /// `PATCH http://host:8080/uploads/ab12 204 (1048576 bytes, 35 ms)`, or
    /// `... failed: timed out: ... (...)` when no response came.
    static func request(_ summary: RequestSummary) -> String {
        let outcome = summary.status.map(String.init) ?? "failed: \(summary.failure ?? "no response")"
        let milliseconds = summary.duration.components.seconds * 1000 + summary.duration.components.attoseconds / 1_000_000_000_000_000
        return "\(summary.method) \(summary.url) \(outcome) (\(summary.bodyBytes) bytes, \(milliseconds) ms)"
    }

    private static func twoDigits(_ value: Int) -> String {
        value < 10 ? "0\(value)" : "\(value)"
    }
}
