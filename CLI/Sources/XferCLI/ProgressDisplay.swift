import FoundationEssentials
import Synchronization
import Xfer

/// Where a job stands, as the progress displays follow it from its events.
struct ProgressTally: Sendable {
    var total: Int64 = 0
    var done: Int64 = 0
    /// What was done before this run sent anything: the rate counts only this run's bytes.
    var startDone: Int64 = 0
    var files = 0
    var doneFiles = 0
    var failedFiles = 0
    /// The job ended with `.completed`.
    var completed = false

    /// Takes in `event`; false when it changes nothing shown.
    mutating func apply(_ event: TransferEvent) -> Bool {
        switch event {
        case .started(let started):
            total = started.totalBytes
            done = started.doneBytes
            startDone = started.doneBytes
            files = started.files
            doneFiles = started.doneFiles
        case .fileCompleted:
            doneFiles += 1
        case .fileFailed:
            failedFiles += 1
        case .reconciled(let reconciled):
            done = reconciled.doneBytes
            startDone = reconciled.doneBytes
        case .chunkStored(let stored):
            // A file that changed since the last run is sent anew: the engine's total takes its
            // new size, and what it had done of the old bytes is no longer done, nor part of
            // what this run sent (the done bytes before this chunk are then below those shown).
            let before = stored.doneBytes - Int64(stored.bytes)
            if before < done { startDone = max(0, startDone - (done - before)) }
            done = stored.doneBytes
            total = stored.totalBytes
        case .completed(let report):
            completed = true
            // A stream's length is known once it ended.
            if total == 0 { total = report.files.reduce(0) { $0 + $1.size } }
            done = total
        default:
            return false
        }
        return true
    }

    /// A stream whose length is not known (its events say 0 bytes in all)
    /// has bytes done but no share of a total, and no time left.
    var lengthUnknown: Bool { total == 0 && done > 0 && !completed }

    /// The figures after `elapsed` of this run.
    func figures(after elapsed: Duration) -> ProgressFigures {
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        let rate = seconds > 0 ? Double(max(0, done - startDone)) / seconds : 0
        return ProgressFigures(
            fraction: total > 0 ? min(1, Double(done) / Double(total)) : (lengthUnknown ? 0 : 1), rate: rate,
            secondsLeft: rate > 0 && !lengthUnknown ? Double(max(0, total - done)) / rate : nil, elapsedSeconds: seconds)
    }
}

/// What the displays compute from a tally: the share done, this run's
/// average rate and the time left at that rate.
struct ProgressFigures: Equatable {
    var fraction: Double
    /// Bytes a second, averaged over this run.
    var rate: Double
    /// Nil while nothing was sent.
    var secondsLeft: Double?
    var elapsedSeconds: Double
}

/// A one-line progress bar on stderr: acknowledged bytes, rate and ETA,
/// redrawn at most ten times a second.
final class ProgressDisplay: @unchecked Sendable {
    // @unchecked: used from the single task that drains the event stream.
    private var tally = ProgressTally()
    private let start = ContinuousClock.now
    private var lastDraw = ContinuousClock.now - .seconds(1)
    private var drawn = false

    func show(_ event: TransferEvent) {
        guard tally.apply(event) else { return }
        let now = ContinuousClock.now
        guard now - lastDraw >= .milliseconds(100) else { return }
        lastDraw = now
        draw(now)
    }

    /// Ends the bar's line so a message can take a line of its own.
    func interrupt() {
        if drawn {
            Terminal.writeError("\n")
            drawn = false
        }
    }

    func finish() {
        if drawn {
            draw(ContinuousClock.now)
            Terminal.writeError("\n")
        }
    }

    private func draw(_ now: ContinuousClock.Instant) {
        let figures = tally.figures(after: now - start)
        let width = 24
        let filled = Int(figures.fraction * Double(width))
        let bar = String(repeating: "█", count: filled) + String(repeating: "·", count: width - filled)
        var eta = "--:--"
        if let left = figures.secondsLeft.map({ Int($0) }) {
            eta = "\(String(left / 60).leftPadded(to: 2, with: "0")):\(String(left % 60).leftPadded(to: 2, with: "0"))"
        }
        // Files only when there is more than one: a single file's bar stays as it was.
        var counts = tally.files > 1 ? "  \(min(tally.doneFiles, tally.files))/\(tally.files) files" : ""
        if tally.failedFiles > 0 { counts += " (\(tally.failedFiles) failed)" }
        let percent = ByteSize.oneDecimal(figures.fraction * 100).leftPadded(to: 5, with: " ")
        let line =
            "\r\(bar) \(percent)%  \(ByteSize.format(tally.done)) / \(ByteSize.format(tally.total))\(counts)  "
            + "\(ByteSize.format(Int64(figures.rate)))/s  ETA \(eta) "
        Terminal.writeError(line)
        drawn = true
    }
}

/// Progress for logs: a line every interval, and one when the job ends.
///
/// Events arrive on the task draining the job's stream while a timer task
/// asks for the periodic lines, hence the lock.
final class ProgressLines: Sendable {
    private let tally = Mutex(ProgressTally())
    private let start = ContinuousClock.now

    func show(_ event: TransferEvent) {
        tally.withLock { _ = $0.apply(event) }
    }

    /// The periodic line.
    func tick() {
        Terminal.error(line(final: false))
    }

    /// The last line, when the job completed. A job that failed ends with
    /// its error instead: one line that says what to do, as without progress.
    func finish() {
        guard tally.withLock({ $0.completed }) else { return }
        Terminal.error(line(final: true))
    }

    private func line(final: Bool) -> String {
        let tally = tally.withLock { $0 }
        return ProgressText.line(tally, tally.figures(after: .now - start), final: final)
    }
}

extension String {
    /// `self` with `pad` in front up to `width` characters (`%5.1f`'s and `%02d`'s padding).
    func leftPadded(to width: Int, with pad: Character) -> String {
        count >= width ? self : String(repeating: pad, count: width - count) + self
    }
}
