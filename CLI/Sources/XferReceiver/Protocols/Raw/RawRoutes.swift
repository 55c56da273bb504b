import Foundation
import Hummingbird
import Logging
import NIOCore

/// `PUT /raw/{name}`: a whole file in one plain request, no chunking and no resume.
///
/// Not a protocol xfer speaks: it lets a tool that is not xfer (`curl -T FILE ROOT/raw/NAME`) measure
/// what this receiver takes in one stream, the bar the benchmarks hold xfer's protocols to. The body
/// is streamed to disk as chunk bodies are (`BodyWriter`: pwrite into the page cache), synced with
/// one fdatasync at the end, then renamed into place under `ROOT/raw/`.
///
///     PUT /raw/{name}   body: the file   -> 201 {"name", "bytes"}
///                                          413 past --max-upload-size, 400 for a bad name
struct RawRoutes: Sendable {
    let store: UploadStore
    let configuration: ReceiverConfiguration
    let logger: Logger

    func register(on router: Router<ReceiverContext>) {
        let routes = router.group().add(middleware: RefusalMiddleware(form: .error, logger: logger))
        routes.put("raw/:name") { request, context in
            try await self.receive(request, encodedName: context.parameters.get("name"))
        }
    }

    private func receive(_ request: Request, encodedName: String?) async throws -> Response {
        guard let name = encodedName.flatMap(PercentEncoding.decode).flatMap(FileNames.lastComponent) else {
            throw Refusal.error(.badRequest, "the path must name the file: PUT /raw/NAME")
        }
        let limit = configuration.maximumUploadSize
        if let declared = request.headers[.contentLength].flatMap({ Int($0) }), declared > limit {
            throw Refusal.rawTooLarge(limit: limit)
        }
        let directory = store.layout.root + "/raw"
        let partial = directory + "/.partial-" + UploadID.generate()
        try await store.io.run { try FileSystemOps.makeDirectory(directory) }
        let file = try POSIXFile.open(partial, O_WRONLY | O_CREAT | O_EXCL, mode: 0o644)
        let statistics = store.statistics
        let writer = BodyWriter(
            limit: limit, sync: .fileData(store.io),
            counted: { statistics.payloadBytesReceived.add($0, ordering: .relaxed) })
        let written: Int
        do {
            defer { file.close() }
            written = try await writer.write(request.body, to: .file(file), at: 0).count
        } catch {
            try? FileManager.default.removeItem(atPath: partial)
            if case BodyWriter.Failure.tooLarge = error { throw Refusal.rawTooLarge(limit: limit) }
            throw error
        }
        try await store.io.run {
            try FileSystemOps.rename(partial, to: directory + "/" + name)
            try FileSystemOps.syncDirectory(directory)
        }
        return JSONResponse.make(.created, RawAnswer(name: name, bytes: written))
    }
}
