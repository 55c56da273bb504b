import Foundation
import Hummingbird
import Logging
import NIOCore

/// `PUT /raw/{name}`: a whole file in one plain request, no chunking and no resume.
///
/// Not a protocol xfer speaks: it lets a tool that is not xfer (`curl -T FILE ROOT/raw/NAME`) measure
/// what this receiver takes in one stream, the bar the benchmarks hold xfer's protocols to. The body
/// is streamed to disk exactly as chunk bodies are (pwrite into the page cache, one fdatasync at the
/// end), then renamed into place under `ROOT/raw/`.
///
///     PUT /raw/{name}   body: the file   -> 201 {"name", "bytes"}
///                                          413 past --max-upload-size, 400 for a bad name
struct RawRoutes: Sendable {
    let store: UploadStore
    let configuration: ReceiverConfiguration
    let logger: Logger

    private struct Answer: Encodable {
        var name: String
        var bytes: Int
    }

    func register(on router: Router<BasicRequestContext>) {
        router.put("raw/:name") { request, context in
            await self.receive(request, encodedName: context.parameters.get("name"))
        }
    }

    private func receive(_ request: Request, encodedName: String?) async -> Response {
        guard let name = encodedName.flatMap(PercentEncoding.decode).flatMap(FileNames.lastComponent) else {
            return JSONResponse.error(.badRequest, "the path must name the file: PUT /raw/NAME")
        }
        if let declared = request.headers[.contentLength].flatMap({ Int($0) }), declared > configuration.maximumUploadSize {
            return JSONResponse.error(.contentTooLarge, "the body is larger than this receiver accepts (\(configuration.maximumUploadSize) bytes)")
        }
        let directory = store.layout.root + "/raw"
        let partial = directory + "/.partial-" + UploadID.generate()
        do {
            try await store.io.run { try FileSystemOps.makeDirectory(directory) }
            let file = try POSIXFile.open(partial, O_WRONLY | O_CREAT | O_EXCL, mode: 0o644)
            var written = 0
            do {
                defer { file.close() }
                for try await buffer in request.body {
                    store.statistics.payloadBytesReceived.add(buffer.readableBytes, ordering: .relaxed)
                    guard buffer.readableBytes <= configuration.maximumUploadSize - written else {
                        throw RawRefusal.tooLarge
                    }
                    try buffer.withUnsafeReadableBytes { try file.pwriteAll($0, at: written) }
                    written += buffer.readableBytes
                }
                try await store.io.run { try file.syncData() }
            } catch {
                try? FileManager.default.removeItem(atPath: partial)
                throw error
            }
            try await store.io.run {
                try FileSystemOps.rename(partial, to: directory + "/" + name)
                try FileSystemOps.syncDirectory(directory)
            }
            return JSONResponse.make(.created, Answer(name: name, bytes: written))
        } catch RawRefusal.tooLarge {
            return JSONResponse.error(.contentTooLarge, "the body is larger than this receiver accepts (\(configuration.maximumUploadSize) bytes)")
        } catch {
            return storageFailure(error, logger: logger, answer: JSONResponse.error(.internalServerError, "storage error"))
        }
    }

    private enum RawRefusal: Error { case tooLarge }
}
