// A test server: Apple's NIOResumableUpload (IETF "Resumable Uploads for
// HTTP", interop versions 3, 5 and 6) in front of a plain file writer, so
// end-to-end tests push to a resumable-upload implementation written
// outside this project. All of the resumable protocol is Apple's; below it
// the writer sees one ordinary request per upload.
//
//     apple-resumable-server DIRECTORY [--port N]

import Foundation
import HTTPTypes
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOHTTPTypes
import NIOHTTPTypesHTTP1
import NIOPosix
import NIOResumableUpload

/// Writes a POST or PUT body to DIRECTORY/PATH. Apple's handler feeds it an
/// upload's bytes in order across however many requests the client used.
final class FileWriter: ChannelInboundHandler {
    typealias InboundIn = HTTPRequestPart
    typealias OutboundOut = HTTPResponsePart

    private let directory: String
    private var file: FileHandle?
    private var status: HTTPResponse.Status = .notImplemented

    init(directory: String) { self.directory = directory }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let request):
            guard request.method == .post || request.method == .put else { status = .notImplemented; return }
            guard let path = target(of: request.path ?? "") else { status = .badRequest; return }
            let parent = (path as NSString).deletingLastPathComponent
            try? FileManager.default.createDirectory(atPath: parent, withIntermediateDirectories: true)
            if FileManager.default.createFile(atPath: path, contents: nil), let handle = FileHandle(forWritingAtPath: path) {
                file = handle
                status = .created
            } else {
                status = .internalServerError
            }
        case .body(let buffer):
            guard let file else { return }
            do {
                try buffer.withUnsafeReadableBytes { try file.write(contentsOf: $0) }
            } catch {
                try? file.close()
                self.file = nil
                status = .internalServerError
            }
        case .end:
            // Only here: for an upload the client sends in several requests,
            // an answer before the end would cross Apple's own answers to the
            // requests in between.
            if let file, (try? file.close()) == nil { status = .internalServerError }
            file = nil
            context.write(wrapOutboundOut(.head(HTTPResponse(status: status))), promise: nil)
            context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        }
    }

    /// The file a request path names, or nil if it names none inside the
    /// directory.
    private func target(of requestPath: String) -> String? {
        let raw = requestPath.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
        guard let decoded = String(raw).removingPercentEncoding, !decoded.contains("\0") else { return nil }
        let parts = decoded.split(separator: "/").filter { $0 != "." }
        guard !parts.isEmpty, !parts.contains("..") else { return nil }
        return ([directory] + parts.map(String.init)).joined(separator: "/")
    }
}

var arguments = Array(CommandLine.arguments.dropFirst())
var port = 0
if let flag = arguments.firstIndex(of: "--port") {
    guard flag + 1 < arguments.count, let value = Int(arguments[flag + 1]), (0...65535).contains(value) else {
        FileHandle.standardError.write(Data("--port needs a number from 0 to 65535\n".utf8))
        exit(2)
    }
    port = value
    arguments.removeSubrange(flag...flag + 1)
}
guard arguments.count == 1 else {
    FileHandle.standardError.write(Data("usage: apple-resumable-server DIRECTORY [--port N]\n".utf8))
    exit(2)
}
let directory = URL(fileURLWithPath: arguments[0]).standardizedFileURL.path

// The origin names the bound port, known only after the bind. A connection
// in the moment between the bind and the "listening" line is dropped.
let uploads = NIOLockedValueBox<HTTPResumableUploadContext?>(nil)

let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
let server = try ServerBootstrap(group: group)
    .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
    .childChannelInitializer { channel in
        channel.eventLoop.makeCompletedFuture {
            guard let context = uploads.withLockedValue({ $0 }) else { throw ChannelError.ioOnClosedChannel }
            let sync = channel.pipeline.syncOperations
            try sync.configureHTTPServerPipeline()
            try sync.addHandler(HTTP1ToHTTPServerCodec(secure: false))
            // A writer per upload, not one per connection as with
            // `handlers:`: an unfinished upload keeps its writer while the
            // same connection starts the next upload.
            try sync.addHandler(
                HTTPResumableUploadHandler(context: context) { upload in
                    try? upload.pipeline.syncOperations.addHandler(FileWriter(directory: directory))
                })
        }
    }
    .bind(host: "127.0.0.1", port: port)
    .wait()

let origin = "http://127.0.0.1:\(server.localAddress?.port ?? port)"
uploads.withLockedValue { $0 = HTTPResumableUploadContext(origin: origin) }
print("listening on \(origin)")
fflush(nil)  // all streams: Swift 6 refuses to read the global `stdout`
try server.closeFuture.wait()
