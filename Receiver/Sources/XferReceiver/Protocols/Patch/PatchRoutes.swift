import FoundationEssentials
import Hummingbird
import XferWire
import XferPrimitives
import Logging

/// The `patch` protocol: create an upload, PATCH raw chunks at agreed offsets, reconcile, complete.
///
///     OPTIONS /uploads                     -> 204 Accept-Post, Upload-Limit, Want-Content-Digest
///     POST   /uploads                      {"fileName","size","chunkSize"} -> 201 {"uploadId","chunkSize"} + Location
///                                          (fileName: a relative path, `RelativePath`; 400 when unsafe)
///     POST   /uploads?fileName=PATH        the whole file (application/octet-stream), Content-Digest|Content-MD5
///                                          -> 201 {"uploadId","url","crc32c"} + Location: created complete
///     PATCH  /uploads/{id}/chunks/{n}      raw bytes, Content-Range, Content-MD5 -> 204
///     GET    /uploads/{id}                 -> 200 {"uploadId","fileName","size","chunkSize","received","receivedRanges"}
///     POST   /uploads/{id}/complete        -> 200 {"url","sha256"} | 409 {"missing","missingRanges","missingCount"}
///     DELETE /uploads/{id}                 -> 204
///
/// Refusals are `{"error": ...}` with their status (PatchWire.swift has the wire's shapes).
struct PatchRoutes: ProtocolRoutes {
    static let protocolName = "patch"
    /// Bounds the memory of a received set and the size of a status answer.
    static let maximumChunkCount = 1 << 24

    let environment: RouteEnvironment
    /// Where a file that comes whole with its creation goes: the storage's offset uploads (under
    /// this protocol's name), which store such a body with its creation in one step — one sync
    /// round on disk, one `PutObject` in an object store. Nil for a storage without them: its
    /// clients create with JSON, as discovery tells them.
    let wholeUploads: (any OffsetUploadStore)?

    init(_ environment: RouteEnvironment) {
        self.environment = environment
        wholeUploads = environment.testHooks.patchJSONOnly ? nil : environment.storage.offsetUploads?.offsetUploads(protocolName: Self.protocolName)
    }

    /// Discovery (OPTIONS) reveals only the limits, as tus's and the IETF draft's: no `--auth-token`.
    static let isDiscovery: @Sendable (Request) -> Bool = { request in
        request.method == .options && request.uri.path == "/uploads"
    }

    func register<Context: ReceiverRequestContext>(on router: some RouterMethods<Context>) {
        let routes = router.group().add(middleware: RefusalMiddleware(form: .error, logger: logger))
        routes.on("uploads", method: .options) { _, _ in self.discovery() }
        routes.post("uploads") { request, context in
            if PatchAnswer.bringsTheFile(request) { return try await self.createWhole(request, context: context) }
            return try await self.create(request)
        }
        routes.patch("uploads/:id/chunks/:chunk") { request, context in
            try await self.writeChunk(request, id: context.parameters.get("id"), chunk: context.parameters.get("chunk"))
        }
        routes.get("uploads/:id") { _, context in try await self.status(id: context.parameters.get("id")) }
        routes.post("uploads/:id/complete") { request, context in try await self.complete(request, id: context.parameters.get("id")) }
        routes.delete("uploads/:id") { _, context in try await self.delete(id: context.parameters.get("id")) }
    }

    private func create(_ request: Request) async throws -> Response {
        let create = try await PatchCreateRequest.read(request)
        let path = try RelativePath.parse(create.fileName, field: "fileName") { .error(.badRequest, $0) }
        guard create.size >= 0 else { throw Refusal.error(.badRequest, "size must be >= 0") }
        guard create.size <= configuration.maximumUploadSize else {
            throw Refusal.error(.contentTooLarge, "size \(create.size) is larger than this receiver accepts (\(configuration.maximumUploadSize) bytes)")
        }
        guard create.chunkSize >= 1, create.chunkSize <= configuration.maximumChunkSize else {
            throw Refusal.error(.badRequest, "chunkSize must be between 1 and \(configuration.maximumChunkSize)")
        }
        // The storage's floor where the file has more than one chunk (an object store's part minimum).
        let chunkSize = max(1, testHooks.patchChunkSize ?? max(create.chunkSize, min(environment.storage.preferredMinimumChunkSize, create.size)))
        let chunkCount = create.size == 0 ? 0 : (create.size - 1) / chunkSize + 1
        guard chunkCount <= Self.maximumChunkCount else {
            throw Refusal.error(.badRequest, "more than \(Self.maximumChunkCount) chunks: use a larger chunkSize")
        }

        try await hooks.preCreate(Self.protocolName, path: path.text, size: create.size, form: .error)
        let upload = try await store.create(NewUpload(protocolName: Self.protocolName, path: path, size: create.size, chunkSize: chunkSize))
        // The client's uploadId is the upload's handle: its download link shows the id alone.
        let handle = handles.handle(for: upload.meta.uploadId)
        hooks.created(Self.protocolName)
        return PatchAnswer.created(uploadId: handle, chunkSize: chunkSize, location: baseURL.links + "/uploads/" + handle)
    }

    /// The most a file brought whole may hold: one chunk's bytes (the chunk size a test forces
    /// on every creation, when it does).
    private var wholeLimit: Int {
        min(configuration.maximumUploadSize, configuration.maximumChunkSize, testHooks.patchChunkSize ?? .max)
    }

    /// What a client needs to know before its first creation: whether a file may come whole with
    /// it, and how large such a body may be.
    private func discovery() -> Response {
        var headers: HTTPFields = [.wantContentDigest: ContentDigest.wanted]
        if wholeUploads != nil {
            headers[.acceptPost] = PatchWholeCreation.acceptPost
            headers[.uploadLimit] = PatchWholeCreation.limit(maximumSize: configuration.maximumUploadSize, maximumBody: wholeLimit)
        } else {
            headers[.acceptPost] = "application/json"
        }
        return Response(status: .noContent, headers: headers)
    }

    /// A file in the request that creates its upload: created, stored and completed in one step,
    /// answered as a creation and a completion would be together. Its bounds are a chunk's (the
    /// body is one), its digest checked as a chunk's, its hooks a JSON creation's and completion's.
    /// A body that fails leaves nothing behind: the client never learned the upload.
    private func createWhole(_ request: Request, context: some ReceiverRequestContext) async throws -> Response {
        guard let uploads = wholeUploads else {
            throw Refusal.error(.unsupportedMediaType, "this receiver creates patch uploads from JSON only: \(PatchCreateRequest.shape)")
        }
        guard let name = request.uri.query.flatMap({ PatchWholeCreation.fileName(inQuery: $0) }) else {
            throw Refusal.error(.badRequest, "a creation that brings the file names it: POST /uploads?fileName=PATH (percent-encoded)")
        }
        let path = try RelativePath.parse(name, field: "fileName") { .error(.badRequest, $0) }
        guard let size = try TusHeaders.contentLength(request) else {
            throw Refusal.error(.lengthRequired, "a creation that brings the file needs its Content-Length: the file's size")
        }
        guard size <= configuration.maximumUploadSize else {
            throw Refusal.error(.contentTooLarge, "size \(size) is larger than this receiver accepts (\(configuration.maximumUploadSize) bytes)")
        }
        guard size <= wholeLimit else {
            throw Refusal.error(
                .contentTooLarge, "a file of \(size) bytes is more than one request may bring (\(wholeLimit)): create it with JSON and send chunks")
        }
        let check = try Self.digestCheck(request)

        try await hooks.preCreate(Self.protocolName, path: path.text, size: size, form: .error)
        let inFlight = BodyInFlight(arrivingOn: context.channel)
        let upload: any OffsetUpload
        let result: OffsetWriteResult
        do {
            (upload, result) = try await uploads.create(
                path: path, length: size, info: .defaultSingle, body: inFlight.watching(request.body), limit: size, declaredLength: size,
                check: check
            ) { upload in await upload.receiveInTurn(inFlight) }
        } catch let failure as OffsetCreationFailure {
            _ = try? await uploads.delete(id: failure.upload.id)
            throw failure.error
        }
        guard case .stored(let offset) = result, offset == size else {
            _ = try? await uploads.delete(id: upload.id)
            if case .failed(let failure) = result { throw Refusal.patchWhole(failure, size: size) }
            throw Refusal.error(.badRequest, "the body ended before the file's \(size) bytes")
        }
        hooks.created(Self.protocolName)
        // Nobody else knows the upload yet (its handle is in this answer): no turn to wait for.
        if try await upload.finish() {
            try await hooks.finish(Self.protocolName, id: upload.id, path: upload.path.text, size: size, form: .error) {
                try await uploads.delete(id: upload.id)
            }
        }
        // The digest the body was checked against is the file's; else what the storage kept.
        var crc32c: String?
        var sha256: String?
        switch check.map({ ($0.algorithm, $0.expected) }) {
        case (.crc32c, let expected)?: crc32c = Hex.lowercase(expected)
        case (.sha256, let expected)?: sha256 = Hex.lowercase(expected)
        default: crc32c = await upload.currentCRC.map(CRC32.hex)
        }
        let handle = handles.handle(for: upload.id)
        return PatchAnswer.createdWhole(
            uploadId: handle, completed: PatchCompleted(url: DownloadRoutes.url(base: baseURL.links, id: upload.id, path: upload.path), crc32c: crc32c, sha256: sha256),
            location: baseURL.links + "/uploads/" + handle)
    }

    private func writeChunk(_ request: Request, id: String?, chunk chunkText: String?) async throws -> Response {
        let upload = try await patchUpload(id)
        let meta = upload.meta
        guard let chunk = chunkText.flatMap({ Int($0) }), chunk >= 1, chunk <= meta.chunkCount else {
            throw Refusal.error(.badRequest, "chunk number must be between 1 and \(meta.chunkCount)")
        }
        let range = meta.byteRange(ofChunk: chunk)
        let expected = ContentRange(first: Int64(range.lowerBound), last: Int64(range.upperBound - 1), size: Int64(meta.size))
        // The complete form only: an unknown size (`*`) has no meaning for a chunk.
        guard let header = request.headers[.contentRange], let contentRange = ContentRange(header), contentRange.size != nil else {
            throw Refusal.error(.badRequest, "Content-Range must be \"\(expected.header)\"")
        }
        guard contentRange == expected else {
            throw Refusal.error(.badRequest, "Content-Range of chunk \(chunk) must be \"\(expected.header)\"")
        }
        let check = try Self.digestCheck(request)
        // Refusing on the declared length avoids touching the chunk's bytes at all.
        if let declared = request.headers[.contentLength] {
            guard let length = Int(declared) else { throw Refusal.error(.badRequest, "Content-Length is not a number") }
            if length > range.count {
                throw Refusal.error(.contentTooLarge, "chunk \(chunk) has \(range.count) bytes, the body declares \(length)")
            }
            if length < range.count {
                throw Refusal.error(.badRequest, "chunk \(chunk) has \(range.count) bytes, the body declares \(length)")
            }
        }

        do {
            try await upload.writeChunk(chunk, body: request.body, check: check)
        } catch let failure as BodyWriter.Failure {
            throw Refusal.patchChunk(failure)
        } catch UploadError.deleted {
            throw Refusal.unknownUpload
        } catch UploadError.completed {
            throw Refusal.error(.conflict, UploadError.completed.description)
        }
        hooks.received(Self.protocolName, upload: upload)
        return Response(status: .noContent)
    }

    private func status(id: String?) async throws -> Response {
        let upload = try await patchUpload(id)
        guard let received = try? await upload.receivedChunks() else { throw Refusal.unknownUpload }
        return PatchAnswer.status(
            upload.meta, handle: handles.handle(for: upload.meta.uploadId), received: received, bytesReceived: upload.bytesReceivedSoFar)
    }

    private func complete(_ request: Request, id: String?) async throws -> Response {
        let upload = try await patchUpload(id)
        let outcome: CompletionOutcome
        let wasComplete: Bool
        do {
            // A completion asked again (its answer lost) answers the same and counts once.
            wasComplete = try await upload.completionRecord() != nil
            outcome = try await upload.complete()
        } catch UploadError.deleted {
            throw Refusal.unknownUpload
        }
        switch outcome {
        case .completed(let record):
            if !wasComplete {
                // The application may refuse the file now (a scan, say): then it is gone, and the client told why.
                let id = upload.meta.uploadId
                try await hooks.finish(Self.protocolName, id: id, path: upload.meta.fileName, size: upload.meta.size, form: .error) {
                    try await store.delete(id: id)
                }
            }
            return PatchAnswer.completed(
                sha256: record.sha256, crc32c: record.crc32c, url: DownloadRoutes.url(base: baseURL.links, upload: upload))
        case .missing(let missing):
            return PatchAnswer.missing(missing)
        }
    }

    private func delete(id: String?) async throws -> Response {
        let upload = try await patchUpload(id)
        guard try await store.delete(id: upload.meta.uploadId) else { throw Refusal.unknownUpload }
        hooks.terminated(Self.protocolName, id: upload.meta.uploadId)
        return Response(status: .noContent)
    }

    /// A chunk's (or a whole file's) digest check. A digest is optional so a plain curl can drive
    /// the protocol; when present it is enforced: Content-Digest (negotiated by the create
    /// answer's Want-Content-Digest) or Content-MD5.
    private static func digestCheck(_ request: Request) throws(Refusal) -> BodyWriter.Check? {
        if let header = request.headers[.contentDigest], let check = try ContentDigest.check(header) {
            return check
        }
        guard let header = request.headers[.contentMD5] else { return nil }
        guard let digest = ContentMD5.parse(header) else {
            throw Refusal.error(.badRequest, "Content-MD5 must be the base64 of a 16-byte MD5 digest")
        }
        return BodyWriter.Check(algorithm: .md5, expected: digest)
    }

    /// Uploads created by another protocol are unknown here: their chunk rules may differ. So is
    /// an id that is not a handle (`UploadHandles`): a download link opens no upload.
    private func patchUpload(_ handle: String?) async throws -> any ChunkedUpload {
        guard let id = handles.id(of: handle), let upload = try await store.upload(id: id), upload.meta.protocolName == Self.protocolName else {
            throw Refusal.unknownUpload
        }
        return upload
    }
}
