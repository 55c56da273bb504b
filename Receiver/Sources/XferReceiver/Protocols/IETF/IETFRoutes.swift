import XferWire
import FoundationEssentials
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import NIOHTTPTypes
import NIOPosix
import XferPrimitives

/// The IETF's Resumable Uploads for HTTP (draft-ietf-httpbis-resumable-upload), interop versions 6
/// and 8: what Apple's `URLSession` speaks since iOS 17, so an app's uploads resume with no code
/// of its own. Creation under `/resumable/`, the upload resources under `/resumable-uploads/`.
///
///     OPTIONS /resumable[/...]        -> 204 Upload-Limit, Want-Content-Digest
///     POST|PUT /resumable/{path}      Upload-Complete: ?1|?0 [Upload-Length] [Content-Digest] + the first
///                                     bytes, or all of them
///                                     -> 104 Location, Upload-Limit (when the request names its interop
///                                        version), then
///                                        201 Location, Upload-Complete: ?0, Upload-Offset (more to come) |
///                                        201 Location, Upload-Complete: ?1 (the file is complete) |
///                                        400 length unknown or inconsistent | 413 past --max-upload-size
///     HEAD    /resumable-uploads/{id} -> 204 Upload-Offset, Upload-Complete, Upload-Length, Upload-Limit,
///                                        Cache-Control: no-store | 404
///     PATCH   /resumable-uploads/{id} Content-Type: application/partial-upload, Upload-Offset,
///                                     Upload-Complete [Upload-Length] [Content-Digest]
///                                     -> 204 Upload-Offset, Upload-Complete: ?0 | 201 (completed, as the
///                                        creation would have answered) | 409 mismatching-upload-offset
///                                        with Upload-Offset | 400 inconsistent-upload-length | 404
///     DELETE  /resumable-uploads/{id} -> 204 | 404
///     GET     /resumable-uploads/{id} -> 200 the file once complete | 409 before | 404
///
/// The file is named by the creation path (`/resumable/photos/a.jpg`), else by
/// `Content-Disposition`'s filename, else "file". Its length must be known at creation:
/// `Upload-Length`, or a `Content-Length` with `Upload-Complete: ?1`.
///
/// Durability is tus's (both are `OffsetUploads`): bytes are synced before their offset is
/// recorded, and the offset is recorded before it is reported. A body cut mid-way keeps what
/// arrived, as the draft asks, unless it carries a `Content-Digest` (then nothing of it counts:
/// it cannot be checked). The receiver asks for digests (`Want-Content-Digest`); a client that
/// sends none, as `URLSession`, keeps the bytes of a cut request.
///
/// Apple's `NIOResumableUpload` implements the draft as a channel handler that owns the HTTP
/// pipeline below the application and keeps uploads in memory (a restart forgets them, offsets
/// count bytes received, not stored); it cannot sit in Hummingbird's pipeline nor give these
/// guarantees, so the draft is implemented here, beside tus, on the same storage.
struct IETFRoutes: OffsetUploadRoutes {
    static let protocolName = "ietf"

    /// Publishes a complete upload and reports it (`pre-finish`, then `post-finish` and the
    /// metrics), once: by the call that completed it (`finish` says so). When the application
    /// refuses it (`pre-finish`), the upload is cancelled and the refusal thrown: the request that
    /// completed it answers it.
    func finishUpload(_ upload: any OffsetUpload) async throws {
        guard try await upload.finish() else { return }
        try await hooks.finish(
            Self.protocolName, id: upload.id, path: upload.path.text, size: upload.length, metadata: upload.info.metadataText, form: .problem
        ) { try await uploads.delete(id: upload.id) }
    }
    static let creationPath = "resumable"
    static let resourcePath = "resumable-uploads"

    let environment: RouteEnvironment
    let uploads: any OffsetUploadStore

    func register<Context: ReceiverRequestContext>(on router: some RouterMethods<Context>) {
        let routes = router.group().add(
            middleware: RefusalMiddleware(form: .problem, logger: logger) { error in
                if case UploadError.deleted? = error as? UploadError { return Self.unknownUpload }
                return nil
            })
        for path in [Self.creationPath, Self.creationPath + "/**", Self.resourcePath + "/:id"] {
            routes.on(RouterPath(path), method: .options) { _, _ in self.options() }
        }
        for method in [HTTPRequest.Method.post, .put] {
            routes.on(RouterPath(Self.creationPath), method: method) { request, context in try await self.create(request, context: context) }
            routes.on(RouterPath(Self.creationPath + "/**"), method: method) { request, context in
                try await self.create(request, context: context)
            }
        }
        routes.head(RouterPath(Self.resourcePath + "/:id")) { _, context in try await self.head(id: context.parameters.get("id")) }
        routes.patch(RouterPath(Self.resourcePath + "/:id")) { request, context in
            try await self.append(request, id: context.parameters.get("id"), context: context)
        }
        routes.delete(RouterPath(Self.resourcePath + "/:id")) { _, context in try await self.cancel(id: context.parameters.get("id")) }
        routes.get(RouterPath(Self.resourcePath + "/:id")) { request, context in
            try await self.download(id: context.parameters.get("id"), request: request, context: context)
        }
    }

    static func isIETFPath(_ path: String) -> Bool {
        for prefix in ["/" + creationPath, "/" + resourcePath] where path == prefix || path.hasPrefix(prefix + "/") { return true }
        return false
    }

    /// Discovery (OPTIONS) reveals only the limits; it needs no `--auth-token` (as tus's).
    static let isDiscovery: @Sendable (Request) -> Bool = { request in
        request.method == .options && isIETFPath(request.uri.path)
    }

    static let unknownUpload = Refusal.problem(.notFound, "unknown upload")

    // MARK: Discovery and offset retrieval

    private var limit: String { IETFField.limit(maximumSize: configuration.maximumUploadSize) }

    /// The limits of an unfinished upload a request just changed: with the draft's `expires`, the
    /// seconds it has left (all of `expireAfter`, counted from this change) when uploads expire.
    private var limitJustTouched: String {
        IETFField.limit(maximumSize: configuration.maximumUploadSize, expiresAfterSeconds: expireAfter?.components.seconds)
    }

    private func options() -> Response {
        Response(status: .noContent, headers: [.uploadLimit: limit, .wantContentDigest: ContentDigest.wanted])
    }

    private func head(id: String?) async throws -> Response {
        var headers: HTTPFields = [.cacheControl: "no-store"]
        // The draft has the offset reported here accepted by the next append, and a client asks
        // for it only once it has given up on its request in flight (it must not ask while one
        // runs). So an append still receiving its body (a client that died mid-body, say, whose
        // connection says nothing more) is cut, as the draft lets a server end such a transfer,
        // and settles what arrived first: the answer waits for the storage, never for a client.
        // An upload whose every byte is in is finished first: no answer says complete before the
        // file is.
        guard let upload = try await upload(id),
            let offset = try await upload.takingOver(receiving: nil, { try await settledOffset(of: upload, inTurn: true) })
        else {
            return Response(status: .notFound, headers: headers)
        }
        headers[.uploadOffset] = String(offset)
        headers[.uploadComplete] = IETFFields.boolean(offset == upload.length)
        headers[.uploadLength] = String(upload.length)
        headers[.uploadLimit] = limit
        return Response(status: .noContent, headers: headers)
    }

    // MARK: Creation

    private func create(_ request: Request, context: some ReceiverRequestContext) async throws -> Response {
        let version = try IETFFields.version(of: request)
        let headers = request.headers
        guard let completeText = headers[.uploadComplete] else {
            throw Refusal.problem(
                .badRequest,
                "this is the resumable upload endpoint: send Upload-Complete (?1: the request holds the whole file; ?0: more follows)")
        }
        guard let complete = IETFFields.boolean(completeText) else { throw Refusal.problem(.badRequest, "Upload-Complete must be ?1 or ?0") }
        if let offset = headers[.uploadOffset], IETFFields.integer(offset) != 0 {
            throw Refusal.problem(.badRequest, "a creation starts at Upload-Offset 0")
        }
        let declared = try TusHeaders.contentLength(request)
        var length = try headers[.uploadLength].map { text throws(Refusal) in
            guard let value = IETFFields.integer(text) else { throw Refusal.problem(.badRequest, "Upload-Length must be a non-negative integer") }
            return value
        }
        if complete, let declared {
            // The whole file is in this request: its length is the body's.
            if let length, length != declared { throw inconsistent("Upload-Length \(length) differs from the whole body's \(declared) bytes") }
            length = declared
        }
        guard let length else {
            throw Refusal.problem(
                .badRequest,
                "the upload's length must be known at creation: send Upload-Length, or the whole file with Upload-Complete: ?1 and a Content-Length")
        }
        if let declared, declared > length { throw inconsistent("the body (\(declared) bytes) is longer than Upload-Length \(length)") }
        guard length <= configuration.maximumUploadSize else {
            throw Refusal.problem(
                .contentTooLarge, "the upload (\(length) bytes) is larger than this receiver accepts (\(configuration.maximumUploadSize))",
                headers: [.uploadLimit: limit])
        }
        let path = try destination(request)
        let check = try digestCheck(request)
        let inFlight = BodyInFlight(arrivingOn: context.channel)
        let announced = announcesCreation(version: version, complete: complete, declared: declared)

        // The draft carries no metadata; the application's hook may give the upload some.
        var info = OffsetUploadInfo(role: .single, metadata: nil, concat: nil, partials: [])
        try await hooks.preCreate(Self.protocolName, info: &info, path: path.text, size: length, form: .problem)
        let upload: any OffsetUpload
        let result: OffsetWriteResult
        do {
            (upload, result) = try await uploads.create(
                path: path, length: length, info: info, body: inFlight.watching(request.body), limit: length, declaredLength: declared,
                check: check
            ) { upload in
                // The upload exists: from here the client may resume it, so it learns where
                // before any byte is read, and its resumption may cut this body. Only a client
                // that named its version gets the 104 (the draft's rule), and not for a small
                // whole file (`announcesCreation`).
                await upload.receiveInTurn(inFlight)
                guard announced, let version else { return }
                var head = HTTPResponse(status: .init(code: 104, reasonPhrase: "Upload Resumption Supported"))
                head.headerFields[.location] = url(of: upload.id, for: request)
                head.headerFields[.uploadLimit] = limitJustTouched
                head.headerFields[.uploadDraftInteropVersion] = String(version)
                head.headerFields[.wantContentDigest] = ContentDigest.wanted
                try await context.channel.writeAndFlush(HTTPResponsePart.head(head))
            }
        } catch let failure as OffsetCreationFailure {
            // A client that got the 104 learned the upload's URL and resumes it: it exists, cut
            // body and all. Any other never learned it, so it is dropped.
            if !announced { _ = try? await uploads.delete(id: failure.upload.id) } else { hooks.created(Self.protocolName) }
            throw failure.error
        }
        hooks.created(Self.protocolName)
        let location = url(of: upload.id, for: request)
        switch result {
        case .stored(let offset):
            if offset == length { try await finishUpload(upload) }
            if complete, offset != length {
                throw inconsistent("the request said it completes the upload, but its body ended at \(offset) of \(length) bytes")
            }
            progressed(upload, to: offset)
            return answer(upload: upload, offset: offset, location: location, creation: true)
        case .failed(let failure):
            // Without a 104 the client cannot know the upload: a failed body leaves nothing behind.
            if !announced { _ = try? await uploads.delete(id: upload.id) }
            throw refusal(failure, length: length)
        }
    }

    /// The largest whole file a creation carries without a 104 first.
    static let unannouncedWholeFile = 64 << 10

    /// Whether a creation is answered with a 104 naming the upload before its body is read: for a
    /// client that named its interop version (the draft's rule), unless the request holds the
    /// whole file and it is at most `unannouncedWholeFile` bytes. Such a body arrives with its
    /// head or close behind it; cut, it costs less to send again than a resumption's HEAD, and so
    /// a client resumes it by sending it again whether or not it learned the URL. Its 104 would
    /// cost each side a write, a read and a wake-up a file (a tree of 4 KiB files, one 104 a
    /// file: Docs/benchmarks.md). Without the 104 a cut body is dropped, as for a client that
    /// named no version.
    private func announcesCreation(version: Int?, complete: Bool, declared: Int?) -> Bool {
        guard version != nil else { return false }
        guard complete, let declared else { return true }
        return declared > Self.unannouncedWholeFile
    }

    // MARK: Append

    private func append(_ request: Request, id: String?, context: some ReceiverRequestContext) async throws -> Response {
        _ = try IETFFields.version(of: request)
        let headers = request.headers
        guard headers[.contentType]?.split(separator: ";").first?.trimmingSpacesAndTabs().lowercased() == IETFFields.partialUpload
        else {
            throw Refusal.problem(.unsupportedMediaType, "an append's body must be Content-Type: \(IETFFields.partialUpload)")
        }
        guard let offsetText = headers[.uploadOffset], let requested = IETFFields.integer(offsetText) else {
            throw Refusal.problem(.badRequest, "Upload-Offset must be a non-negative integer")
        }
        guard let completeText = headers[.uploadComplete], let complete = IETFFields.boolean(completeText) else {
            throw Refusal.problem(.badRequest, "an append carries Upload-Complete: ?1 (it ends the file) or ?0")
        }
        let declared = try TusHeaders.contentLength(request)
        let check = try digestCheck(request)
        guard let upload = try await upload(id) else { throw Self.unknownUpload }
        if let text = headers[.uploadLength], IETFFields.integer(text) != upload.length {
            throw inconsistent("Upload-Length \(text.prefix(20)) differs from the upload's \(upload.length)")
        }
        let length = upload.length
        let location = url(of: upload.id, for: request)
        // An append is a resumption too: it takes over from a request still receiving its body.
        let inFlight = BodyInFlight(arrivingOn: context.channel)
        return try await upload.takingOver(receiving: inFlight) {
            guard let current = try await settledOffset(of: upload, inTurn: true) else { throw Self.unknownUpload }
            if current == length, requested == length, complete, (declared ?? 0) == 0 {
                // The client lost the final answer and asks again: the same answer.
                return answer(upload: upload, offset: current, location: location, creation: false)
            }
            guard requested == current else {
                throw Refusal.problem(
                    .conflict, "Upload-Offset \(requested) is not the upload's offset \(current)",
                    type: .mismatchingOffset(expected: current, provided: requested),
                    headers: [.uploadOffset: String(current), .uploadComplete: IETFFields.boolean(current == length)])
            }
            if current == length, (declared ?? 0) > 0 {
                throw Refusal.problem(.badRequest, "the upload is complete", type: .completedUpload, headers: [.uploadComplete: "?1"])
            }
            if let declared, declared > length - current {
                throw inconsistent("the body (\(declared) bytes) goes past the upload's length: \(length - current) bytes are left")
            }
            if complete, let declared, current + declared != length {
                throw inconsistent("the request says it completes the upload, but \(current) + \(declared) bytes is not \(length)")
            }
            switch try await upload.write(inFlight.watching(request.body), at: current, limit: length, declaredLength: declared, check: check) {
            case .stored(let offset):
                if offset == length { try await finishUpload(upload) }
                if complete, offset != length {
                    throw inconsistent("the request said it completes the upload, but its body ended at \(offset) of \(length) bytes")
                }
                progressed(upload, to: offset)
                return answer(upload: upload, offset: offset, location: location, creation: false)
            case .failed(let failure):
                // What arrived of a cut body is kept: if that was the rest of the upload, it is finished all the same.
                if case .interrupted(let offset) = failure, offset == length { try await finishUpload(upload) }
                throw refusal(failure, length: length)
            }
        }
    }

    /// A complete upload answers as the resource would for the whole file (201 and where it is);
    /// an incomplete one with its offset (201 with Location for a creation, else 204).
    private func answer(upload: any OffsetUpload, offset: Int, location: String, creation: Bool) -> Response {
        var headers: HTTPFields = [.uploadOffset: String(offset), .uploadComplete: IETFFields.boolean(offset == upload.length)]
        if offset == upload.length {
            headers[.location] = location
            return Response(status: .created, headers: headers)
        }
        headers[.uploadLimit] = limitJustTouched
        guard creation else { return Response(status: .noContent, headers: headers) }
        headers[.location] = location
        headers[.wantContentDigest] = ContentDigest.wanted
        return Response(status: .created, headers: headers)
    }

    // MARK: Cancellation, download

    private func cancel(id: String?) async throws -> Response {
        guard let upload = try await upload(id), try await uploads.delete(id: upload.id) else { throw Self.unknownUpload }
        hooks.terminated(Self.protocolName, id: upload.id)
        return Response(status: .noContent)
    }

    /// Not part of the draft: the finished file, streamed from disk, at the URL the client has.
    private func download(id: String?, request: Request, context: some RequestContext) async throws -> Response {
        try await DownloadRoutes.serve(
            try await upload(id), request: request, context: context, unknown: Self.unknownUpload,
            refusal: { Refusal.problem($0, $1, headers: $2) }, finish: finishUpload)
    }

    // MARK: Helpers

    /// The upload a URL's last segment names: a handle (`UploadHandles`), never the bare id a
    /// download link shows.
    private func upload(_ handle: String?) async throws -> (any OffsetUpload)? {
        guard let id = handles.id(of: handle) else { return nil }
        return try await uploads.upload(id: id)
    }

    private func url(of id: String, for request: Request) -> String {
        baseURL.links + "/" + Self.resourcePath + "/" + handles.handle(for: id)
    }

    private func inconsistent(_ message: String) -> Refusal {
        Refusal.problem(.badRequest, message, type: .inconsistentLength)
    }

    /// The path after `/resumable/`, each segment percent-decoded; else `Content-Disposition`'s
    /// file name; else "file".
    private func destination(_ request: Request) throws(Refusal) -> RelativePath {
        let prefix = "/" + Self.creationPath
        let rest = request.uri.path.dropFirst(prefix.count).drop { $0 == "/" }
        let refusing = { (message: String) in Refusal.problem(.badRequest, message) }
        guard !rest.isEmpty else {
            guard let name = IETFFields.dispositionFileName(request.headers[.contentDisposition]) else { return RelativePath.validated("file")! }
            return try RelativePath.parse(name, field: "Content-Disposition's filename", refusing: refusing)
        }
        var segments: [String] = []
        for segment in rest.split(separator: "/", omittingEmptySubsequences: false) {
            guard let decoded = PercentEncoding.decode(String(segment)), !decoded.contains("/") else {
                throw refusing("the path after /\(Self.creationPath)/ must be percent-encoded segments naming the file")
            }
            segments.append(decoded)
        }
        return try RelativePath.parse(segments.joined(separator: "/"), field: "the path after /\(Self.creationPath)/", refusing: refusing)
    }

    private func digestCheck(_ request: Request) throws(Refusal) -> BodyWriter.Check? {
        guard let header = request.headers[.contentDigest] else { return nil }
        do {
            return try ContentDigest.check(header)
        } catch {
            throw Refusal.problem(.badRequest, error.message)
        }
    }

    private func refusal(_ failure: OffsetWriteFailure, length: Int) -> Refusal {
        switch failure {
        case .interrupted(let offset):
            .problem(.badRequest, "the request body was cut; the upload's offset is \(offset)", headers: [.uploadOffset: String(offset)])
        case .checksumMismatch:
            .problem(.badRequest, "the body does not match its Content-Digest; nothing of it was kept")
        case .tooLarge:
            inconsistent("the body goes past the upload's length (\(length) bytes); nothing of it was kept")
        case .offsetMoved(let offset):
            .problem(
                .conflict, "another request appended at this offset first; the upload's offset is \(offset)",
                type: .mismatchingOffset(expected: offset, provided: offset),
                headers: [.uploadOffset: String(offset), .uploadComplete: IETFFields.boolean(offset == length)])
        case .lengthRequired:
            .problem(.lengthRequired, "this receiver needs the body's Content-Length")
        }
    }
}

/// Echoes `Upload-Draft-Interop-Version` on every answer under the IETF paths to a request that
/// named one (refusals of other middleware included), as the draft's interop rules ask.
struct IETFVersionMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard IETFRoutes.isIETFPath(request.uri.path), let version = request.headers[.uploadDraftInteropVersion] else {
            return try await next(request, context)
        }
        var response = try await next(request, context)
        if response.headers[.uploadDraftInteropVersion] == nil { response.headers[.uploadDraftInteropVersion] = version }
        return response
    }
}
