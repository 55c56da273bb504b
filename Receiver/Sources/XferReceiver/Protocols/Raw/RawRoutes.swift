import FoundationEssentials
import Hummingbird
import Logging
import NIOCore
import XferPrimitives

/// `PUT /raw/{name}`: a whole file in one plain request, no chunking and no resume.
///
/// Not a protocol xfer speaks: it lets a tool that is not xfer (`curl -T FILE ROOT/raw/NAME`) measure
/// what this receiver takes in one stream, the bar the benchmarks hold xfer's protocols to. The
/// storage keeps it durably under its name (`WholeFileStoring`; on disk, `ROOT/raw/NAME`).
///
///     PUT /raw/{name}   body: the file   -> 201 {"name", "bytes"}
///                                          413 past --max-upload-size, 400 for a bad name
struct RawRoutes: ProtocolRoutes {
    let environment: RouteEnvironment
    let storage: any WholeFileStoring

    static var requiredCapabilities: Set<StorageComposer.Capability> { [.wholeFiles] }

    init?(_ environment: RouteEnvironment) {
        guard let storage = environment.storage.wholeFiles else { return nil }
        self.environment = environment
        self.storage = storage
    }

    func register<Context: ReceiverRequestContext>(on router: some RouterMethods<Context>) {
        let routes = router.group().add(middleware: RefusalMiddleware(form: .error, logger: logger))
        routes.put("raw/:name") { request, context in
            try await self.receive(request, encodedName: context.parameters.get("name"))
        }
    }

    private func receive(_ request: Request, encodedName: String?) async throws -> Response {
        guard let name = encodedName.flatMap { PercentEncoding.decode($0) }.flatMap(FileNames.lastComponent) else {
            throw Refusal.error(.badRequest, "the path must name the file: PUT /raw/NAME")
        }
        let limit = configuration.maximumUploadSize
        if let declared = request.headers[.contentLength].flatMap({ Int($0) }), declared > limit {
            throw Refusal.rawTooLarge(limit: limit)
        }
        let declared = request.headers[.contentLength].flatMap { Int($0) }
        // A chunked body has no size yet: the hook hears so (`sizeIsDeferred`) and the most it
        // may be (`maximumSize`), which the body is held to.
        try await hooks.preCreate("raw", path: name, size: declared, maximumSize: limit, form: .error)
        let written: Int
        do {
            written = try await storage.storeWhole(request.body, name: name, limit: limit, declaredLength: declared)
        } catch BodyWriter.Failure.tooLarge {
            throw Refusal.rawTooLarge(limit: limit)
        } catch WholeFileFailure.lengthRequired {
            throw Refusal.error(.lengthRequired, "this receiver needs the body's Content-Length")
        }
        // One request creates and completes the file. No `pre-finish`: a raw file is published
        // at no URL, and the request that would be refused is the one that replaced it.
        hooks.created("raw")
        hooks.stored("raw", id: name, path: name, size: written)
        return JSONResponse.make(.created, RawAnswer(name: name, bytes: written))
    }
}
