import Foundation
import Hummingbird
import Logging

/// The `patch` protocol: create an upload, PATCH raw chunks at agreed offsets, reconcile, complete.
///
///     POST   /uploads                      {"fileName","size","chunkSize"} -> 201 {"uploadId","chunkSize"} + Location
///                                          (fileName: a relative path, `RelativePath`; 400 when unsafe)
///     PATCH  /uploads/{id}/chunks/{n}      raw bytes, Content-Range, Content-MD5 -> 204
///     GET    /uploads/{id}                 -> 200 {"uploadId","fileName","size","chunkSize","received"}
///     POST   /uploads/{id}/complete        -> 200 {"url","sha256"} | 409 {"missing"}
///     DELETE /uploads/{id}                 -> 204
struct PatchRoutes: Sendable {
    static let protocolName = "patch"
    /// Bounds the memory of a received set and the size of a status answer.
    static let maximumChunkCount = 1 << 24

    let store: UploadStore
    let baseURL: BaseURL
    let configuration: ReceiverConfiguration
    let logger: Logger

    func register(on router: Router<BasicRequestContext>) {
        router.post("uploads") { request, _ in await self.create(request) }
        router.patch("uploads/:id/chunks/:chunk") { request, context in
            await self.guarded { try await self.writeChunk(request, id: context.parameters.get("id"), chunk: context.parameters.get("chunk")) }
        }
        router.get("uploads/:id") { _, context in
            await self.guarded { try await self.status(id: context.parameters.get("id")) }
        }
        router.post("uploads/:id/complete") { request, context in
            await self.guarded { try await self.complete(request, id: context.parameters.get("id")) }
        }
        router.delete("uploads/:id") { _, context in
            await self.guarded { try await self.delete(id: context.parameters.get("id")) }
        }
    }

    // MARK: Handlers

    private struct CreateRequest: Decodable {
        var fileName: String
        var size: Int
        var chunkSize: Int

        /// Without `JSONDecoder`, for the plain bodies clients send; nil for anything else, which
        /// then goes through `JSONDecoder`.
        init?(fast body: ByteBuffer) {
            guard let object = FlatJSONObject(body), let fileName = object.string("fileName"), let size = object.integer("size"),
                let chunkSize = object.integer("chunkSize")
            else { return nil }
            self.fileName = fileName
            self.size = size
            self.chunkSize = chunkSize
        }
    }

    private func create(_ request: Request) async -> Response {
        let body: ByteBuffer
        do {
            body = try await SmallBody.collect(request)
        } catch .tooLarge {
            return JSONResponse.error(.contentTooLarge, "request body is larger than \(SmallBody.limit) bytes")
        } catch {
            return JSONResponse.error(.badRequest, "request body could not be read")
        }
        guard let create = CreateRequest(fast: body) ?? (try? JSONResponse.decode(CreateRequest.self, from: body)) else {
            return JSONResponse.error(.badRequest, "body must be JSON {\"fileName\": string, \"size\": integer, \"chunkSize\": integer}")
        }
        let path: RelativePath
        switch RelativePath.parse(create.fileName) {
        case .success(let parsed): path = parsed
        case .failure(let problem): return JSONResponse.error(.badRequest, problem.message("fileName"))
        }
        guard create.size >= 0 else { return JSONResponse.error(.badRequest, "size must be >= 0") }
        guard create.size <= configuration.maximumUploadSize else {
            return JSONResponse.error(.contentTooLarge, "size \(create.size) is larger than this receiver accepts (\(configuration.maximumUploadSize) bytes)")
        }
        guard create.chunkSize >= 1, create.chunkSize <= configuration.maximumChunkSize else {
            return JSONResponse.error(.badRequest, "chunkSize must be between 1 and \(configuration.maximumChunkSize)")
        }
        let chunkSize = max(1, configuration.forcedPatchChunkSize ?? create.chunkSize)
        let chunkCount = create.size == 0 ? 0 : (create.size - 1) / chunkSize + 1
        guard chunkCount <= Self.maximumChunkCount else {
            return JSONResponse.error(.badRequest, "more than \(Self.maximumChunkCount) chunks: use a larger chunkSize")
        }

        do {
            let upload = try await store.create(protocolName: Self.protocolName, path: path, size: create.size, chunkSize: chunkSize)
            let id = upload.meta.uploadId
            var headers = HTTPFields()
            headers[.location] = baseURL.resolve(for: request) + "/uploads/" + id
            // {"chunkSize","uploadId"}, as JSONResponse.make would write it, without JSONEncoder.
            var answer = JSONText()
            answer.raw("{\"chunkSize\":" + String(chunkSize) + ",\"uploadId\":")
            answer.string(id)
            answer.raw("}")
            return answer.response(.created, headers: headers)
        } catch {
            return storageFailure(error)
        }
    }

    private func writeChunk(_ request: Request, id: String?, chunk chunkText: String?) async throws -> Response {
        guard let upload = try await patchUpload(id) else { return Self.unknownUpload }
        let meta = upload.meta
        guard let chunk = chunkText.flatMap({ Int($0) }), chunk >= 1, chunk <= meta.chunkCount else {
            return JSONResponse.error(.badRequest, "chunk number must be between 1 and \(meta.chunkCount)")
        }
        let range = meta.byteRange(ofChunk: chunk)
        let expected = ContentRange(first: range.lowerBound, last: range.upperBound - 1, total: meta.size)
        guard let header = request.headers[.contentRange], let contentRange = ContentRange(header: header) else {
            return JSONResponse.error(.badRequest, "Content-Range must be \"bytes \(expected.first)-\(expected.last)/\(expected.total)\"")
        }
        guard contentRange == expected else {
            return JSONResponse.error(.badRequest, "Content-Range of chunk \(chunk) must be \"bytes \(expected.first)-\(expected.last)/\(expected.total)\"")
        }
        // Content-MD5 is optional so a plain curl can drive the protocol; when present it is enforced.
        var expectedMD5: [UInt8]?
        if let header = request.headers[.contentMD5] {
            guard let digest = decodeContentMD5(header) else {
                return JSONResponse.error(.badRequest, "Content-MD5 must be the base64 of a 16-byte MD5 digest")
            }
            expectedMD5 = digest
        }
        // Refusing on the declared length avoids touching the chunk's bytes at all.
        if let declared = request.headers[.contentLength] {
            guard let length = Int(declared) else { return JSONResponse.error(.badRequest, "Content-Length is not a number") }
            if length > range.count {
                return JSONResponse.error(.contentTooLarge, "chunk \(chunk) has \(range.count) bytes, the body declares \(length)")
            }
            if length < range.count {
                return JSONResponse.error(.badRequest, "chunk \(chunk) has \(range.count) bytes, the body declares \(length)")
            }
        }

        do {
            try await upload.writeChunk(chunk, body: request.body, expectedMD5: expectedMD5)
            return Response(status: .noContent)
        } catch let error as UploadError {
            switch error {
            case .deleted: return Self.unknownUpload
            case .completed: return JSONResponse.error(.conflict, error.description)
            case .bodyTooLarge: return JSONResponse.error(.contentTooLarge, error.description)
            case .bodyTooShort, .digestMismatch, .bodyInterrupted: return JSONResponse.error(.badRequest, error.description)
            case .corrupt: return storageFailure(error)
            }
        } catch {
            return storageFailure(error)
        }
    }

    private struct StatusAnswer: Encodable {
        var uploadId: String
        var fileName: String
        var size: Int
        var chunkSize: Int
        var received: [Int]
        var bytesReceived: Int
    }

    private func status(id: String?) async throws -> Response {
        guard let upload = try await patchUpload(id) else { return Self.unknownUpload }
        guard let received = try? await upload.receivedChunks() else { return Self.unknownUpload }
        let meta = upload.meta
        return JSONResponse.make(
            .ok,
            StatusAnswer(
                uploadId: meta.uploadId, fileName: meta.fileName, size: meta.size, chunkSize: meta.chunkSize, received: [],
                bytesReceived: upload.bytesReceived.load(ordering: .relaxed)),
            filling: "received", with: received)
    }

    private struct MissingAnswer: Encodable {
        var missing: [Int]
    }

    private func complete(_ request: Request, id: String?) async throws -> Response {
        guard let upload = try await patchUpload(id) else { return Self.unknownUpload }
        do {
            switch try await upload.complete() {
            case .completed(let record):
                let url = DownloadRoutes.url(base: baseURL.resolve(for: request), upload: upload)
                var answer = JSONText()
                answer.raw("{\"sha256\":")
                answer.string(record.sha256)
                answer.raw(",\"url\":")
                answer.string(url)
                answer.raw("}")
                return answer.response(.ok)
            case .missing(let missing):
                return JSONResponse.make(.conflict, MissingAnswer(missing: missing))
            }
        } catch UploadError.deleted {
            return Self.unknownUpload
        } catch {
            return storageFailure(error)
        }
    }

    private func delete(id: String?) async throws -> Response {
        guard let id, try await patchUpload(id) != nil else { return Self.unknownUpload }
        do {
            return try await store.delete(id: id) ? Response(status: .noContent) : Self.unknownUpload
        } catch {
            return storageFailure(error)
        }
    }

    // MARK: Helpers

    /// Uploads created by another protocol answer 404 here: their chunk rules may differ.
    private func patchUpload(_ id: String?) async throws -> Upload? {
        guard let id, let upload = try await store.upload(id: id), upload.meta.protocolName == Self.protocolName else { return nil }
        return upload
    }

    private static var unknownUpload: Response { JSONResponse.error(.notFound, "unknown upload") }

    private func storageFailure(_ error: any Error) -> Response {
        XferReceiver.storageFailure(error, logger: logger, answer: JSONResponse.error(.internalServerError, "storage error"))
    }

    /// Lookups can fail on unreadable state; answer those as JSON 500s like every other failure.
    private func guarded(_ handler: () async throws -> Response) async -> Response {
        do {
            return try await handler()
        } catch {
            return storageFailure(error)
        }
    }
}
