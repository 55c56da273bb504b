import FoundationEssentials
import Hummingbird
import XferWire
import Logging

/// The `patch` protocol: create an upload, PATCH raw chunks at agreed offsets, reconcile, complete.
///
///     POST   /uploads                      {"fileName","size","chunkSize"} -> 201 {"uploadId","chunkSize"} + Location
///                                          (fileName: a relative path, `RelativePath`; 400 when unsafe)
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

    init(_ environment: RouteEnvironment) {
        self.environment = environment
    }

    func register<Context: ReceiverRequestContext>(on router: some RouterMethods<Context>) {
        let routes = router.group().add(middleware: RefusalMiddleware(form: .error, logger: logger))
        routes.post("uploads") { request, _ in try await self.create(request) }
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
        // A digest is optional so a plain curl can drive the protocol; when present it is enforced:
        // Content-Digest (negotiated by the create answer's Want-Content-Digest) or Content-MD5.
        var check: BodyWriter.Check?
        if let header = request.headers[.contentDigest] {
            check = try ContentDigest.check(header)
        }
        if check == nil, let header = request.headers[.contentMD5] {
            guard let digest = ContentMD5.parse(header) else {
                throw Refusal.error(.badRequest, "Content-MD5 must be the base64 of a 16-byte MD5 digest")
            }
            check = BodyWriter.Check(algorithm: .md5, expected: digest)
        }
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

    /// Uploads created by another protocol are unknown here: their chunk rules may differ. So is
    /// an id that is not a handle (`UploadHandles`): a download link opens no upload.
    private func patchUpload(_ handle: String?) async throws -> any ChunkedUpload {
        guard let id = handles.id(of: handle), let upload = try await store.upload(id: id), upload.meta.protocolName == Self.protocolName else {
            throw Refusal.unknownUpload
        }
        return upload
    }
}
