import Foundation
import XCTest
import XferTestSupport

/// A real `xfer serve` child process on 127.0.0.1.
final class ServeProcess {
    let child: ChildProcess
    let url: String
    let root: String

    init(root: String, port: Int = 0, extraArguments: [String] = []) throws {
        self.root = root
        child = try ChildProcess(
            executable: xferExecutable,
            arguments: ["serve", "--port", String(port), "--root", root] + extraArguments)
        guard let line = child.readLine(), line.hasPrefix("listening on ") else {
            child.kill()
            child.wait()
            throw HarnessError("xfer serve did not start: \(child.standardError)")
        }
        url = String(line.dropFirst("listening on ".count))
    }

    var port: Int { Int(url.split(separator: ":").last ?? "0") ?? 0 }

    func stop() {
        child.kill(SIGTERM)
        child.wait()
    }

    deinit {
        child.kill(SIGKILL)
        child.wait()
    }
}

struct HarnessError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// The outcome of one `xfer` run.
struct RunResult {
    var status: Int32
    var stdout: [String]
    var stderr: String

    /// NDJSON events (for --json runs).
    var events: [[String: Any]] {
        stdout.compactMap { line in
            (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any]
        }
    }

    var lastEvent: [String: Any]? { events.last }
}

/// Runs `xfer` with `arguments` to the end.
func runXfer(_ arguments: [String], environment: [String: String] = [:]) throws -> RunResult {
    let child = try ChildProcess(executable: xferExecutable, arguments: arguments, environment: environment)
    let lines = child.readRemaining()
    let status = child.wait()
    return RunResult(status: status, stdout: lines, stderr: child.standardError)
}

/// Downloads `url` with the system's curl (independent of xfer) into a file
/// and returns that file's SHA-256.
func downloadSHA256(_ url: String, into directory: TemporaryDirectory) throws -> String {
    let target = directory.file("download-\(UUID().uuidString.prefix(6))")
    let child = try ChildProcess(executable: "/usr/bin/curl", arguments: ["-fsS", "-o", target, url])
    _ = child.readRemaining()
    guard child.wait() == 0 else { throw HarnessError("curl \(url) failed: \(child.standardError)") }
    return try sha256sum(target)
}

/// GET `url` with curl and parse the JSON answer.
func getJSON(_ url: String) throws -> [String: Any] {
    let child = try ChildProcess(executable: "/usr/bin/curl", arguments: ["-fsS", url])
    let body = child.readRemaining().joined(separator: "\n")
    guard child.wait() == 0 else { throw HarnessError("curl \(url) failed: \(child.standardError)") }
    return (try JSONSerialization.jsonObject(with: Data(body.utf8))) as? [String: Any] ?? [:]
}

func int(_ value: Any?) -> Int {
    (value as? NSNumber)?.intValue ?? (value as? Int) ?? 0
}
