import Foundation
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
        if case .completed(let report) = event { return completed(report, job: job) }
        guard var members = members(for: event) else { return nil }
        if let job { members["job"] = .string(job.rawValue) }
        return object(members)
    }

    /// `completed` with every file, written file by file: a job of 100,000
    /// files would otherwise build a tree of 100,000 JSON objects first.
    /// Members in the same (sorted) order `JSONValue` writes them.
    static func completed(_ report: JobReport, job: JobID?) -> String {
        var out = "{\"bytesResumed\":\(report.bytesResumed),\"bytesSent\":\(report.bytesSent),\"event\":\"completed\",\"files\":["
        out.reserveCapacity(64 + report.files.count * 160)
        for (index, file) in report.files.enumerated() {
            if index > 0 { out += "," }
            out += String(decoding: JSONValue.object(["path": .string(file.path), "size": .int(file.size), "url": .string(file.url)]).encoded, as: UTF8.self)
        }
        out += "],\"job\":\"\(report.job.rawValue)\"}"
        return out
    }

    /// The line `--json` prints for a job that could not even start.
    static func failure(_ error: XferError, job: JobID?) -> String {
        var members: [String: JSONValue] = [
            "event": .string("failed"), "message": .string(error.description), "exitCode": .int(error.exitCode),
        ]
        if let job { members["job"] = .string(job.rawValue) }
        return object(members)
    }

    private static func members(for event: TransferEvent) -> [String: JSONValue]? {
        switch event {
        case .started(let job, let total, let done, let files, let doneFiles, let resumed):
            return ["event": .string("started"), "job": .string(job.rawValue), "totalBytes": .int(total),
                    "doneBytes": .int(done), "totalFiles": .int(files), "doneFiles": .int(doneFiles), "resumed": .bool(resumed)]
        case .fileSkipped(let path, let reason):
            return ["event": .string("fileSkipped"), "path": .string(path), "reason": .string(reason)]
        case .fileFailed(let file, let path, let reason):
            return ["event": .string("fileFailed"), "file": .int(file), "path": .string(path), "reason": .string(reason)]
        case .reconciled(let file, let chunks, let done):
            return ["event": .string("reconciled"), "file": .int(file), "chunksOnServer": .int(chunks), "doneBytes": .int(done)]
        case .chunkStored(let file, let chunk, let bytes, let done, let total):
            return ["event": .string("chunk"), "file": .int(file), "chunk": .int(chunk), "bytes": .int(bytes),
                    "doneBytes": .int(done), "totalBytes": .int(total)]
        case .retrying(let operation, let attempt, let delay, let reason):
            let seconds = Double(delay.components.seconds) + Double(delay.components.attoseconds) / 1e18
            return ["event": .string("retry"), "operation": .string(operation), "attempt": .int(attempt),
                    "delaySeconds": .number(seconds), "reason": .string(reason)]
        case .resending(let file, let chunks, let reason):
            return ["event": .string("resending"), "file": .int(file), "chunks": .int(chunks), "reason": .string(reason)]
        case .fileCompleted(let file, let path, let url):
            return ["event": .string("fileCompleted"), "file": .int(file), "path": .string(path), "url": .string(url)]
        case .paused(let job):
            return ["event": .string("paused"), "job": .string(job.rawValue)]
        case .completed(let report):
            let files: [JSONValue] = report.files.map { .object(["path": .string($0.path), "url": .string($0.url), "size": .int($0.size)]) }
            return ["event": .string("completed"), "job": .string(report.job.rawValue), "files": .array(files),
                    "bytesSent": .int(report.bytesSent), "bytesResumed": .int(report.bytesResumed)]
        case .failed(let error):
            return ["event": .string("failed"), "message": .string(error.description), "exitCode": .int(error.exitCode)]
        }
    }

    private static func object(_ members: [String: JSONValue]) -> String {
        String(decoding: JSONValue.object(members).encoded, as: UTF8.self)
    }
}
