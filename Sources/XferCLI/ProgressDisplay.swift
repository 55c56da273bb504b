import Foundation
import Xfer

/// A one-line progress bar on stderr (only when stderr is a terminal):
/// acknowledged bytes, rate and ETA, redrawn at most ten times a second.
final class ProgressDisplay: @unchecked Sendable {
    // @unchecked: used from the single task that drains the event stream.
    private var total: Int64 = 0
    private var done: Int64 = 0
    private var startDone: Int64 = 0
    private var files = 0
    private var doneFiles = 0
    private var failedFiles = 0
    private let start = ContinuousClock.now
    private var lastDraw = ContinuousClock.now - .seconds(1)
    private var drawn = false

    func show(_ event: TransferEvent) {
        switch event {
        case .started(_, let totalBytes, let doneBytes, let fileCount, let filesDone, _):
            total = totalBytes
            done = doneBytes
            startDone = doneBytes
            files = fileCount
            doneFiles = filesDone
        case .fileCompleted:
            doneFiles += 1
        case .fileFailed:
            failedFiles += 1
        case .reconciled(_, _, let doneBytes):
            done = doneBytes
            startDone = doneBytes
        case .chunkStored(_, _, _, let doneBytes, _):
            done = doneBytes
        default:
            return
        }
        let now = ContinuousClock.now
        guard now - lastDraw >= .milliseconds(100) else { return }
        lastDraw = now
        draw(now)
    }

    /// Ends the bar's line so a message can take a line of its own.
    func interrupt() {
        if drawn {
            FileHandle.standardError.write(Data("\n".utf8))
            drawn = false
        }
    }

    func finish() {
        if drawn {
            draw(ContinuousClock.now)
            FileHandle.standardError.write(Data("\n".utf8))
        }
    }

    private func draw(_ now: ContinuousClock.Instant) {
        let elapsed = now - start
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        let rate = seconds > 0 ? Double(done - startDone) / seconds : 0
        let fraction = total > 0 ? Double(done) / Double(total) : 1
        let width = 24
        let filled = Int(fraction * Double(width))
        let bar = String(repeating: "█", count: filled) + String(repeating: "·", count: width - filled)
        var eta = "--:--"
        if rate > 0 {
            let left = Int(Double(total - done) / rate)
            eta = String(format: "%02d:%02d", left / 60, left % 60)
        }
        // Files only when there is more than one: a single file's bar stays as it was.
        var counts = files > 1 ? "  \(min(doneFiles, files))/\(files) files" : ""
        if failedFiles > 0 { counts += " (\(failedFiles) failed)" }
        let line = String(
            format: "\r%@ %5.1f%%  %@ / %@%@  %@/s  ETA %@ ", bar, fraction * 100,
            ByteSize.format(done), ByteSize.format(total), counts, ByteSize.format(Int64(rate)), eta)
        FileHandle.standardError.write(Data(line.utf8))
        drawn = true
    }
}
