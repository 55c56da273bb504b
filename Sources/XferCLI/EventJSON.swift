import Foundation
import Xfer

/// NDJSON lines for `--json`. Built by hand from fields that can never hold
/// a secret (paths, URLs, counts, messages the engine already redacted).
enum EventJSON {
    static func line(for event: TransferEvent) -> String? {
        switch event {
        case .started(let job, let total, let done, let resumed):
            return object(["event": .string("started"), "job": .string(job.rawValue), "totalBytes": .int(total),
                           "doneBytes": .int(done), "resumed": .bool(resumed)])
        case .reconciled(let file, let chunks, let done):
            return object(["event": .string("reconciled"), "file": .int(file), "chunksOnServer": .int(chunks), "doneBytes": .int(done)])
        case .chunkStored(let file, let chunk, let bytes, let done, let total):
            return object(["event": .string("chunk"), "file": .int(file), "chunk": .int(chunk), "bytes": .int(bytes),
                           "doneBytes": .int(done), "totalBytes": .int(total)])
        case .retrying(let operation, let attempt, let delay, let reason):
            let seconds = Double(delay.components.seconds) + Double(delay.components.attoseconds) / 1e18
            return object(["event": .string("retry"), "operation": .string(operation), "attempt": .int(attempt),
                           "delaySeconds": .number(seconds), "reason": .string(reason)])
        case .resending(let file, let chunks, let reason):
            return object(["event": .string("resending"), "file": .int(file), "chunks": .int(chunks), "reason": .string(reason)])
        case .fileCompleted(let file, let path, let url):
            return object(["event": .string("fileCompleted"), "file": .int(file), "path": .string(path), "url": .string(url)])
        case .completed(let report):
            let files: [JSONValue] = report.files.map { .object(["path": .string($0.path), "url": .string($0.url), "size": .int($0.size)]) }
            return object(["event": .string("completed"), "job": .string(report.job.rawValue), "files": .array(files),
                           "bytesSent": .int(report.bytesSent), "bytesResumed": .int(report.bytesResumed)])
        case .failed(let error):
            return object(["event": .string("failed"), "message": .string(error.description), "exitCode": .int(error.exitCode)])
        }
    }

    private static func object(_ members: [String: JSONValue]) -> String {
        String(decoding: JSONValue.object(members).encoded, as: UTF8.self)
    }
}
