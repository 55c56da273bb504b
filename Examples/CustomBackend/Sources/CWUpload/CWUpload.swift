import CWBackend
import Foundation
import Xfer

/// A tiny program that embeds the engine as a library with a backend of its
/// own: `CWUpload FILE... --to URL [--state DIR] [--biz-id ID]
/// [--chunk-size BYTES] [--concurrency N]`.
///
/// Running the same command again after a crash (even `kill -9`) resumes the
/// upload: the engine finds the job by its files, backend and URL.
///
/// Prints one line per event for scripts and tests:
/// `started JOB DONE/TOTAL resumed|new`, `chunk DONE/TOTAL`,
/// `paused`, `url PATH URL`, and `failed MESSAGE` on stderr.
@main
struct UploadCommand {
    static func main() async {
        do throws(XferError) {
            let arguments = try Arguments(CommandLine.arguments.dropFirst())
            let engine = try TransferEngine(stateDirectory: arguments.state)
            let options = TransferOptions(chunkSize: arguments.chunkSize, concurrency: arguments.concurrency)
            let job = try await engine.push(
                arguments.files, to: arguments.target, using: CWBackend(bizID: arguments.bizID), options: options)
            for await event in job.events {
                switch event {
                case .started(let started):
                    say("started \(started.job) \(started.doneBytes)/\(started.totalBytes) \(started.resumed ? "resumed" : "new")")
                case .chunkStored(let stored):
                    say("chunk \(stored.doneBytes)/\(stored.totalBytes)")
                case .paused:
                    say("paused")
                case .completed(let report):
                    for file in report.files { say("url \(file.path) \(file.url)") }
                default:
                    break
                }
            }
            _ = try await job.report
            exit(0)
        } catch {
            FileHandle.standardError.write(Data("failed \(error.description)\n".utf8))
            // The library's conventional codes: 130 interrupted (its state
            // is saved), 2 bad input, 1 a failed transfer, ...
            exit(error.exitCode)
        }
    }

    /// One line, flushed at once: a test may kill this process right after.
    static func say(_ line: String) {
        FileHandle.standardOutput.write(Data((line + "\n").utf8))
    }
}

struct Arguments {
    var files: [String] = []
    var target = ""
    var state = FileManager.default.currentDirectoryPath + "/.cw-upload-state"
    var bizID = "example"
    var chunkSize: Int?
    var concurrency: Int?

    init(_ arguments: ArraySlice<String>) throws(XferError) {
        var iterator = arguments.makeIterator()
        while let argument = iterator.next() {
            func value() throws(XferError) -> String {
                guard let next = iterator.next() else { throw .invalidInput("\(argument) needs a value") }
                return next
            }
            switch argument {
            case "--to": target = try value()
            case "--state": state = try value()
            case "--biz-id": bizID = try value()
            case "--chunk-size": chunkSize = Int(try value())
            case "--concurrency": concurrency = Int(try value())
            default:
                guard !argument.hasPrefix("--") else { throw .invalidInput("unknown option \(argument)") }
                files.append(argument)
            }
        }
        guard !files.isEmpty, !target.isEmpty else {
            throw .invalidInput("usage: CWUpload FILE... --to URL [--state DIR] [--biz-id ID] [--chunk-size BYTES] [--concurrency N]")
        }
    }
}
