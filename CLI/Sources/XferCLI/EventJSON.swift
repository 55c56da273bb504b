import FoundationEssentials
import Xfer

/// NDJSON lines for `--json`. Built by hand from fields that can never hold
/// a secret (paths, URLs, counts, messages the engine already redacted).
enum EventJSON {
    static func line(for event: TransferEvent) -> String? {
        line(for: event, job: nil)
    }

    /// The line with a `job` member on every event, for commands that run
    /// several jobs in one stream (`xfer resume`).
    static func line(for event: TransferEvent, job: JobID?) -> String? {
        switch event {
        case .completed(let report):
            return completed(report, job: job)
        case .chunkStored(let stored) where job == nil:
            // The two lines of every small file, written directly (the member
            // order `JSONValue` sorts into): through a dictionary they were
            // 3 % of a small-file push's CPU.
            return "{\"bytes\":\(stored.bytes),\"chunk\":\(stored.chunk),\"doneBytes\":\(stored.doneBytes),\"event\":\"chunk\",\"file\":\(stored.file),\"totalBytes\":\(stored.totalBytes)}"
        case .fileCompleted(let completed) where job == nil:
            var out = "{\"event\":\"fileCompleted\",\"file\":\(completed.file),\"path\":"
            JSONValue.writeString(completed.path, into: &out)
            out += ",\"url\":"
            JSONValue.writeString(completed.url, into: &out)
            out += "}"
            return out
        default:
            break
        }
        guard var members = members(for: event) else { return nil }
        if let job { members["job"] = .string(job.rawValue) }
        return object(members)
    }

    /// `completed` with every file, handed to `write` in pieces of about
    /// `pieceSize` bytes as the files are read: a job of 100,000 files is a
    /// line of ~16 MB, which would otherwise be built whole (with a tree of
    /// 100,000 JSON objects before that). Members in the same (sorted) order
    /// `JSONValue` writes them.
    static func completed(_ report: JobReport, job: JobID?, pieceSize: Int = 64 << 10, write: (String) -> Void) {
        var out = "{\"bytesResumed\":\(report.bytesResumed),\"bytesSent\":\(report.bytesSent),\"event\":\"completed\",\"files\":["
        var first = true
        for file in report.files {
            if !first { out += "," }
            first = false
            out += "{\"path\":"
            JSONValue.writeString(file.path, into: &out)
            out += ",\"size\":\(file.size),\"url\":"
            JSONValue.writeString(file.url, into: &out)
            out += "}"
            if out.utf8.count >= pieceSize {
                write(out)
                out = ""
            }
        }
        out += "],\"job\":\"\(report.job.rawValue)\"}"
        write(out)
    }

    static func completed(_ report: JobReport, job: JobID?) -> String {
        var line = ""
        completed(report, job: job) { line += $0 }
        return line
    }

    /// The line `--json` prints for a job that could not even start.
    static func failure(_ error: XferError, job: JobID?) -> String {
        var members: [String: JSONValue] = [
            "event": .string("failed"), "message": .string(error.line), "exitCode": .int(error.exitCode),
        ]
        if let job { members["job"] = .string(job.rawValue) }
        return object(members)
    }

    private static func members(for event: TransferEvent) -> [String: JSONValue]? {
        switch event {
        case .started(let started):
            return ["event": .string("started"), "job": .string(started.job.rawValue), "totalBytes": .int(started.totalBytes),
                    "doneBytes": .int(started.doneBytes), "totalFiles": .int(started.files), "doneFiles": .int(started.doneFiles),
                    "resumed": .bool(started.resumed)]
        case .fileSkipped(let skipped):
            return ["event": .string("fileSkipped"), "path": .string(skipped.path), "reason": .string(skipped.reason.line)]
        case .fileFailed(let failed):
            return ["event": .string("fileFailed"), "file": .int(failed.file), "path": .string(failed.path), "reason": .string(failed.reason)]
        case .reconciled(let reconciled):
            return ["event": .string("reconciled"), "file": .int(reconciled.file), "chunksOnServer": .int(reconciled.chunksOnServer),
                    "doneBytes": .int(reconciled.doneBytes)]
        case .chunkStored(let stored):
            return ["event": .string("chunk"), "file": .int(stored.file), "chunk": .int(stored.chunk), "bytes": .int(stored.bytes),
                    "doneBytes": .int(stored.doneBytes), "totalBytes": .int(stored.totalBytes)]
        case .retrying(let retry):
            let seconds = Double(retry.delay.components.seconds) + Double(retry.delay.components.attoseconds) / 1e18
            return ["event": .string("retry"), "operation": .string(retry.operation), "attempt": .int(retry.attempt),
                    "delaySeconds": .number(seconds), "reason": .string(retry.reason)]
        case .resending(let resend):
            return ["event": .string("resending"), "file": .int(resend.file), "chunks": .int(resend.chunks), "reason": .string(resend.reason)]
        case .fileCompleted(let completed):
            return ["event": .string("fileCompleted"), "file": .int(completed.file), "path": .string(completed.path),
                    "url": .string(completed.url)]
        case .paused(let paused):
            return ["event": .string("paused"), "job": .string(paused.job.rawValue)]
        case .requestFinished:
            // Not part of the NDJSON stream: a line per request would double
            // it for every script that reads it; --verbose prints them on stderr.
            return nil
        case .completed(let report):
            let files: [JSONValue] = report.files.map { .object(["path": .string($0.path), "url": .string($0.url), "size": .int($0.size)]) }
            return ["event": .string("completed"), "job": .string(report.job.rawValue), "files": .array(files),
                    "bytesSent": .int(report.bytesSent), "bytesResumed": .int(report.bytesResumed)]
        case .failed(let error):
            return ["event": .string("failed"), "message": .string(error.line), "exitCode": .int(error.exitCode)]
        }
    }

    private static func object(_ members: [String: JSONValue]) -> String {
        String(decoding: JSONValue.object(members).encoded, as: UTF8.self)
    }
}
