import Foundation
import XferTestSupport

/// Apple's resumable-upload server (swift-nio-extras' `NIOResumableUpload`,
/// IETF "Resumable Uploads for HTTP", interop versions 3, 5 and 6) on
/// 127.0.0.1, run as the `apple-resumable-server` child process
/// (Tests/Tools/AppleResumableServer): code no one here wrote, to push to.
/// A POST or PUT to `/PATH` ends as `directory/PATH` once the upload
/// completes.
///
/// Unfinished uploads live in the server's memory only: after a restart
/// (`stop()`, then a new server on the same `port`) their resumption URLs
/// answer 404, and the client must start those files over.
final class AppleResumableServer {
    let child: ChildProcess
    /// `http://127.0.0.1:PORT`, also the origin of its resumption URLs.
    let url: String
    let port: Int
    let directory: String
    // A second SIGKILL could hit another process that reused the pid.
    private var stopped = false

    /// Starts a server writing into `directory`, on `port` if given (it
    /// binds with SO_REUSEADDR, so a port just freed by `stop()` works).
    init(directory: String, port: Int? = nil) throws {
        self.directory = directory
        let executable = (productsDirectory as NSString).appendingPathComponent("apple-resumable-server")
        (child, url) = try startServer(
            "apple-resumable-server", executable: executable,
            arguments: [directory] + (port.map { ["--port", String($0)] } ?? []))
        self.port = Int(url.split(separator: ":").last ?? "") ?? 0
    }

    /// Kills the server as a crash would, forgetting its unfinished uploads.
    func stop() {
        guard !stopped else { return }
        stopped = true
        child.kill(SIGKILL)
        child.wait()
    }

    deinit {
        stop()
    }
}
