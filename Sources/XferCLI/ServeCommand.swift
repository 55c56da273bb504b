import ArgumentParser
import Foundation
import Xfer
import XferReceiver

struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Run the reference receiver, speaking every built-in protocol.",
        discussion: "The first line on stdout is `listening on http://HOST:PORT`.")

    @Option(help: "Port to listen on; 0 picks a free one.")
    var port: Int = 0

    @Option(help: "Directory for received state and files.")
    var root: String

    @Option(help: "Address to bind (loopback unless told otherwise).")
    var host: String = "127.0.0.1"

    @Option(help: "Answer this chunk size to patch clients instead of theirs (for testing).")
    var patchChunkSize: ByteSize?

    mutating func run() async throws {
        guard (0...65535).contains(port) else { throw XferError.invalidInput("--port must be between 0 and 65535") }
        var configuration = ReceiverConfiguration(root: root)
        configuration.host = host
        configuration.port = port
        if let patchChunkSize {
            guard patchChunkSize.bytes > 0 else { throw XferError.invalidInput("--patch-chunk-size must be positive") }
            configuration.forcedPatchChunkSize = patchChunkSize.bytes
        }
        do {
            try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        } catch {
            throw XferError.invalidInput("cannot create --root \(root): \((error as NSError).localizedDescription)")
        }
        let receiver = Receiver(configuration: configuration)
        do {
            try await receiver.run { url in
                Terminal.out("listening on \(url)")
                Terminal.flush()
            }
        } catch {
            throw XferError.invalidInput("cannot serve on \(host):\(port): \(error)")
        }
    }
}
