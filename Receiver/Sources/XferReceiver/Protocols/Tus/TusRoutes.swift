import XferWire
import FoundationEssentials
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import NIOPosix
import XferPrimitives

/// tus 1.0.0 (https://tus.io/protocols/resumable-upload) at `/files/`: the core protocol with the
/// creation, creation-with-upload, termination, checksum and concatenation extensions.
///
///     OPTIONS /files/, /files/{id}  -> 204 Tus-Version, Tus-Extension, Tus-Max-Size, Tus-Checksum-Algorithm
///     POST    /files/               Upload-Length [Upload-Metadata] [Upload-Concat: partial]
///                                   [Content-Type: application/offset+octet-stream + body, Upload-Checksum]
///                                   -> 201 Location [Upload-Offset] | 400 | 413 | 415 | 460
///     POST    /files/               Upload-Concat: final;URL1 URL2 ... (no Upload-Length)
///                                   -> 201 Location | 404 unknown partial | 400 partial not finished
///     HEAD    /files/{id}           -> 200 Upload-Offset, Upload-Length [Upload-Metadata] [Upload-Concat],
///                                      Cache-Control: no-store | 404
///     PATCH   /files/{id}           Upload-Offset, Content-Type: application/offset+octet-stream
///                                   [Upload-Checksum: crc32c|sha1|sha256|md5 BASE64]
///                                   -> 204 Upload-Offset | 409 offset | 415 | 460 checksum | 413 | 403 final | 404
///     DELETE  /files/{id}           -> 204 | 404
///     GET     /files/{id}           -> 200 the file once Upload-Offset = Upload-Length | 409 before | 404
///     POST    /files/{id}           X-HTTP-Method-Override: PATCH | DELETE | HEAD, handled as that method
///
/// Every answer under `/files` carries `Tus-Resumable: 1.0.0` (`TusProtocolMiddleware`), which
/// also answers 412 + `Tus-Version` to a request carrying another version (or, for one that
/// changes state, none) before anything else looks at it. TusWire.swift has the headers' shapes.
///
/// A PATCH body goes straight to its place in the data file and is made durable before its new
/// offset is recorded (`offset.log`) and acknowledged. A body cut mid-way keeps what arrived,
/// durably, unless it carries `Upload-Checksum` (then nothing of it counts); a body past the
/// upload's end or `--max-chunk-size` is refused whole. See Docs/protocols.md.
struct TusRoutes: OffsetUploadRoutes {
    static let protocolName = "tus"

    /// Publishes a complete upload and reports it (`pre-finish`, then `post-finish` and the
    /// metrics), unless it is a partial one: a part of a file the final upload concatenates,
    /// which reports the file once. When the application refuses it (`pre-finish`), the upload
    /// is terminated and the refusal thrown: the request that completed it answers it.
    func finishUpload(_ upload: any OffsetUpload) async throws {
        // Asked and reported once, by the call that completed the upload (finish says so).
        if try await upload.finish(), upload.info.role != .partial {
            try await hooks.finish(
                Self.protocolName, id: upload.id, path: upload.path.text, size: upload.length, metadata: upload.info.metadataText, form: .error
            ) { try await uploads.delete(id: upload.id) }
        }
    }

    /// Counts the creation of an upload, partial uploads aside (see `finishUpload`).
    func countCreated(_ upload: any OffsetUpload) {
        if upload.info.role != .partial { hooks.created(Self.protocolName) }
    }
    let environment: RouteEnvironment
    let uploads: any OffsetUploadStore

    func register<Context: ReceiverRequestContext>(on router: some RouterMethods<Context>) {
        // An upload terminated mid-request is the client's 404.
        let routes = router.group().add(
            middleware: RefusalMiddleware(form: .error, logger: logger) { error in
                if case UploadError.deleted? = error as? UploadError { return .unknownUpload }
                return nil
            })
        routes.on("files", method: .options) { _, _ in self.options() }
        routes.on("files/:id", method: .options) { _, _ in self.options() }
        routes.post("files") { request, _ in try await self.create(request) }
        routes.head("files/:id") { _, context in try await self.head(id: context.parameters.get("id")) }
        routes.patch("files/:id") { request, context in try await self.patch(request, id: context.parameters.get("id"), context: context) }
        routes.delete("files/:id") { _, context in try await self.terminate(id: context.parameters.get("id")) }
        routes.get("files/:id") { request, context in
            try await self.download(id: context.parameters.get("id"), request: request, context: context)
        }
        routes.post("files/:id") { request, context in
            try await self.overridden(request, id: context.parameters.get("id"), context: context)
        }
    }

    /// Paths the tus middleware and the auth exemption look at.
    static func isTusPath(_ path: String) -> Bool {
        path == "/files" || path.hasPrefix("/files/")
    }

    /// Discovery (OPTIONS) reveals only what the receiver supports, and browsers' CORS preflights
    /// cannot carry credentials: it needs no `--auth-token`.
    static let isDiscovery: @Sendable (Request) -> Bool = { request in
        request.method == .options && isTusPath(request.uri.path)
    }

    // MARK: Core

    private func options() -> Response {
        Response(
            status: .noContent,
            headers: [
                .tusVersion: TusHeaders.version,
                .tusExtension: advertisedExtensions,
                .tusMaxSize: String(configuration.maximumUploadSize),
                .tusChecksumAlgorithm: TusChecksum.advertised,
            ])
    }

    /// The extensions the storage's capabilities allow (`StorageComposer`): `concatenation` only
    /// with the storage's, `expiration` only when uploads expire.
    var advertisedExtensions: String {
        let all = TusHeaders.extensions(expiring: expireAfter != nil).split(separator: ",")
        return all.filter { $0 != "concatenation" || concatenation != nil }.joined(separator: ",")
    }

    /// tus's final uploads, when the storage declared them.
    var concatenation: (any OffsetUploadConcatenating)? { environment.storage.concatenation }

    private func head(id: String?) async throws -> Response {
        var headers: HTTPFields = [.cacheControl: "no-store"]
        // The acknowledged offset, out of turn: a PATCH in flight (or stalled) is not waited for.
        // A client that resumes from it takes over with its PATCH, which then finds the offset
        // the cut request settled on (409 when it moved, as tusd answers). An upload whose every
        // byte is in is finished first (settledOffset): no answer says complete before the file is.
        guard let upload = try await tusUpload(id), let offset = try await settledOffset(of: upload) else {
            return Response(status: .notFound, headers: headers)
        }
        // A final upload reports an offset only once its concatenation is done (always, unless
        // a crash cut its creation short).
        if upload.info.role != .final || offset == upload.length {
            headers[.uploadOffset] = String(offset)
        }
        headers[.uploadLength] = String(upload.length)
        if let metadata = upload.info.metadata { headers[.uploadMetadata] = metadata }
        if let concat = upload.info.concat { headers[.uploadConcat] = concat }
        return Response(status: .ok, headers: headers)
    }

    private func patch(_ request: Request, id: String?, context: some ReceiverRequestContext) async throws -> Response {
        guard TusHeaders.isOffsetStream(request.headers[.contentType]) else {
            throw Refusal.error(.unsupportedMediaType, "a PATCH body must be Content-Type: \(TusHeaders.offsetStream)")
        }
        guard let offsetText = request.headers[.uploadOffset], let requested = TusHeaders.number(offsetText) else {
            throw Refusal.error(.badRequest, "Upload-Offset must be a non-negative integer")
        }
        let check = try TusChecksum.check(of: request)
        let declared = try TusHeaders.contentLength(request)
        guard let upload = try await tusUpload(id) else { throw Refusal.unknownUpload }
        guard upload.info.role != .final else {
            throw Refusal.error(.forbidden, "a final upload is made by concatenation and takes no PATCH")
        }
        if let declared, declared > configuration.maximumChunkSize {
            throw Refusal.error(.contentTooLarge, "a PATCH body may carry at most \(configuration.maximumChunkSize) bytes; send smaller chunks")
        }
        // A PATCH is how a tus client resumes: it takes over from a request still receiving its
        // body (one whose client gave up on it), instead of waiting for that body to end.
        let inFlight = BodyInFlight(arrivingOn: context.channel)
        return try await upload.takingOver(receiving: inFlight) {
            guard let current = try await settledOffset(of: upload, inTurn: true) else { throw Refusal.unknownUpload }
            guard requested == current else {
                throw Refusal.error(
                    .conflict, "Upload-Offset \(requested) is not the upload's offset \(current)", headers: [.uploadOffset: String(current)])
            }
            if let declared, declared > upload.length - current {
                throw Refusal.error(.contentTooLarge, "the body (\(declared) bytes) goes past Upload-Length: \(upload.length - current) bytes are left")
            }
            switch try await upload.write(
                inFlight.watching(request.body), at: current, limit: configuration.maximumChunkSize, declaredLength: declared, check: check)
            {
            case .stored(let offset):
                if offset == upload.length { try await finishUpload(upload) }
                progressed(upload, to: offset)
                var headers: HTTPFields = [.uploadOffset: String(offset)]
                if offset < upload.length { headers[.uploadExpires] = TusHeaders.expires(after: expireAfter) }
                return Response(status: .noContent, headers: headers)
            case .failed(let failure):
                // What arrived of a cut body is kept: if that was the rest of the upload, it is finished all the same.
                if case .interrupted(let offset) = failure, offset == upload.length { try await finishUpload(upload) }
                throw Refusal.tusWrite(failure, maximumChunkSize: configuration.maximumChunkSize)
            }
        }
    }

    // MARK: Creation

    private func create(_ request: Request) async throws -> Response {
        let headers = request.headers
        if headers[.uploadDeferLength] != nil {
            throw Refusal.error(.badRequest, "Upload-Defer-Length is not supported (no creation-defer-length): send Upload-Length")
        }
        var metadata: String?
        var path = RelativePath.validated("file")!
        if let raw = headers[.uploadMetadata], !raw.trimmingSpacesAndTabs().isEmpty {
            // An empty header (tuspy sends one when there is no metadata) means none.
            guard raw.utf8.count <= TusHeaders.metadataLimit, let pairs = TusMetadata.parse(raw) else {
                throw Refusal.error(
                    .badRequest,
                    "Upload-Metadata must be 'key base64value' pairs separated by commas, unique keys, at most \(TusHeaders.metadataLimit) bytes")
            }
            metadata = raw
            if let named = try TusMetadata.destination(pairs) { path = named }
        }
        let concat = try headers[.uploadConcat].map(TusConcat.read)
        if concat != nil, concatenation == nil {
            throw Refusal.error(.badRequest, "this receiver's storage does not concatenate uploads (no concatenation in Tus-Extension)")
        }
        let withData = TusHeaders.isOffsetStream(headers[.contentType])
        let declared = try TusHeaders.contentLength(request)

        if case .final(let ids) = concat {
            guard headers[.uploadLength] == nil else {
                throw Refusal.error(.badRequest, "a final upload must not carry Upload-Length: its length is the sum of its partials'")
            }
            guard !withData, (declared ?? 0) == 0 else {
                throw Refusal.error(.forbidden, "a final upload is made by concatenation and takes no data")
            }
            return try await createFinal(request, concat: headers[.uploadConcat] ?? "", partials: ids, metadata: metadata, path: path)
        }

        guard let lengthText = headers[.uploadLength], let length = TusHeaders.number(lengthText) else {
            throw Refusal.error(.badRequest, "Upload-Length must be a non-negative integer")
        }
        guard length <= configuration.maximumUploadSize else {
            throw Refusal.error(
                .contentTooLarge, "Upload-Length \(length) is larger than this receiver accepts (Tus-Max-Size \(configuration.maximumUploadSize))")
        }
        var check: BodyWriter.Check?
        if withData {
            check = try TusChecksum.check(of: request)
            if let declared, declared > min(length, configuration.maximumChunkSize) {
                throw Refusal.error(
                    .contentTooLarge,
                    "the body (\(declared) bytes) is larger than Upload-Length or the \(configuration.maximumChunkSize) bytes a request may carry")
            }
        } else {
            // Bytes not declared as upload data are refused, never silently dropped.
            let notData = Refusal.error(.unsupportedMediaType, "upload data in a POST must be Content-Type: \(TusHeaders.offsetStream)")
            if let declared, declared > 0 { throw notData }
            do {
                _ = try await request.body.collect(upTo: 0)
            } catch {
                throw notData
            }
        }

        var info = OffsetUploadInfo(role: concat == nil ? .single : .partial, metadata: metadata, concat: headers[.uploadConcat], partials: [])
        // The application decides (its hook), before anything is stored, and may give the
        // upload other metadata; partial uploads are asked about too, as tusd asks: each is an
        // upload the client makes.
        try await hooks.preCreate(Self.protocolName, info: &info, path: path.text, size: length, form: .error)
        guard withData else {
            let upload = try await uploads.create(path: path, length: length, info: info)
            countCreated(upload)
            if length == 0 { try await finishUpload(upload) }
            var headers: HTTPFields = [.location: url(of: upload.id, for: request)]
            if length > 0 { headers[.uploadExpires] = TusHeaders.expires(after: expireAfter) }
            return Response(status: .created, headers: headers)
        }
        // creation-with-upload: the body is written as a PATCH at offset 0 would be. Until this
        // answer the client cannot know the upload, so a body that fails leaves nothing behind.
        let upload: any OffsetUpload
        let result: OffsetWriteResult
        do {
            (upload, result) = try await uploads.create(
                path: path, length: length, info: info, body: request.body, limit: configuration.maximumChunkSize,
                declaredLength: declared, check: check, announce: { _ in })
        } catch let failure as OffsetCreationFailure {
            _ = try? await uploads.delete(id: failure.upload.id)
            throw failure.error
        }
        do {
            if case .stored(let offset) = result, offset == length { try await finishUpload(upload) }
        } catch {
            // A completion the application refused (pre-finish, which counted the refusal): the
            // upload was created, then discarded.
            if error is Refusal { countCreated(upload) }
            _ = try? await uploads.delete(id: upload.id)
            throw error
        }
        let location = url(of: upload.id, for: request)
        switch result {
        case .stored(let offset):
            countCreated(upload)
            progressed(upload, to: offset)
            var headers: HTTPFields = [.location: location, .uploadOffset: String(offset)]
            if offset < length { headers[.uploadExpires] = TusHeaders.expires(after: expireAfter) }
            return Response(status: .created, headers: headers)
        case .failed(let failure):
            _ = try? await uploads.delete(id: upload.id)
            throw Refusal.tusWrite(failure, maximumChunkSize: configuration.maximumChunkSize)
        }
    }

    /// `Upload-Concat: final;...`: the final upload is built from its complete partials before the answer.
    private func createFinal(_ request: Request, concat: String, partials ids: [String], metadata: String?, path: RelativePath) async throws -> Response {
        guard let concatenation else { throw Refusal.error(.badRequest, "this receiver's storage does not concatenate uploads") }
        // Each partial once, and a bounded number of them: a final upload copies every partial it
        // names, so a list that repeats one would make a short request cost the receiver many
        // copies of it.
        guard ids.count <= configuration.limits.concatenatedPartials else {
            throw Refusal.error(.badRequest, "a final upload may concatenate at most \(configuration.limits.concatenatedPartials) partial uploads")
        }
        guard Set(ids).count == ids.count else {
            throw Refusal.error(.badRequest, "Upload-Concat names a partial upload more than once")
        }
        var partials: [any OffsetUpload] = []
        var total = 0
        for id in ids {
            guard let partial = try await tusUpload(id), let offset = try await settledOffset(of: partial) else {
                throw Refusal.error(.notFound, "partial upload \(id) is unknown")
            }
            guard partial.info.role == .partial else {
                throw Refusal.error(.badRequest, "upload \(id) was not created with Upload-Concat: partial")
            }
            guard offset == partial.length else {
                throw Refusal.error(.badRequest, "partial upload \(id) is not finished (\(offset) of \(partial.length) bytes)")
            }
            guard partial.length <= configuration.maximumUploadSize - total else {
                throw Refusal.error(
                    .contentTooLarge,
                    "the partial uploads add up to more than this receiver accepts (Tus-Max-Size \(configuration.maximumUploadSize))")
            }
            total += partial.length
            partials.append(partial)
        }
        // The final upload's CRC-32C from its partials', so that finishing it reads nothing back.
        var crc: UInt32? = 0
        for partial in partials {
            let part = await partial.currentCRC
            crc = crc.flatMap { crc in part.map { CRC32C.combine(crc, $0, lengthOfSecond: Int64(partial.length)) } }
        }
        var info = OffsetUploadInfo(role: .final, metadata: metadata, concat: concat, partials: ids)
        try await hooks.preCreate(Self.protocolName, info: &info, path: path.text, size: total, form: .error)
        let final = try await uploads.create(path: path, length: total, info: info)
        countCreated(final)
        do {
            try await final.exclusively {
                // Finished partials are immutable: no PATCH can write past an upload's length.
                try await concatenation.concatenate(partials, into: final, crc: crc)
                try await finishUpload(final)
            }
        } catch let error as IOError where error.code == ENOENT {
            _ = try? await uploads.delete(id: final.id)
            throw Refusal.error(.notFound, "a partial upload was terminated during the concatenation")
        } catch {
            _ = try? await uploads.delete(id: final.id)
            throw error
        }
        return Response(status: .created, headers: [.location: url(of: final.id, for: request)])
    }

    // MARK: Termination, download, method override

    private func terminate(id: String?) async throws -> Response {
        guard let upload = try await tusUpload(id), try await uploads.delete(id: upload.id) else { throw Refusal.unknownUpload }
        if upload.info.role != .partial { hooks.terminated(Self.protocolName, id: upload.id) }
        return Response(status: .noContent)
    }

    /// Not part of tus: the finished file, streamed from disk, at the URL the client already has.
    private func download(id: String?, request: Request, context: some RequestContext) async throws -> Response {
        try await DownloadRoutes.serve(
            try await tusUpload(id), request: request, context: context, unknown: Refusal.unknownUpload,
            refusal: { Refusal.error($0, $1, headers: $2) }, finish: finishUpload)
    }

    /// `X-HTTP-Method-Override`, for clients that cannot send PATCH or DELETE.
    private func overridden(_ request: Request, id: String?, context: some ReceiverRequestContext) async throws -> Response {
        switch request.headers[.xHTTPMethodOverride]?.uppercased() {
        case "PATCH": return try await patch(request, id: id, context: context)
        case "DELETE": return try await terminate(id: id)
        case "HEAD": return try await head(id: id)
        default:
            throw Refusal.error(
                .methodNotAllowed, "POST to an upload needs X-HTTP-Method-Override: PATCH, DELETE or HEAD",
                headers: [.allow: "HEAD, PATCH, DELETE, GET, OPTIONS"])
        }
    }

    // MARK: Helpers

    /// The upload a URL's last segment names: a handle (`UploadHandles`), never the bare id a
    /// download link shows.
    private func tusUpload(_ handle: String?) async throws -> (any OffsetUpload)? {
        guard let id = handles.id(of: handle) else { return nil }
        return try await uploads.upload(id: id)
    }

    private func url(of id: String, for request: Request) -> String {
        baseURL.links + "/files/" + handles.handle(for: id)
    }
}
