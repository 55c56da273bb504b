import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import NIOPosix

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
///                                   [Upload-Checksum: sha1|sha256|md5 BASE64]
///                                   -> 204 Upload-Offset | 409 offset | 415 | 460 checksum | 413 | 403 final | 404
///     DELETE  /files/{id}           -> 204 | 404
///     GET     /files/{id}           -> 200 the file once Upload-Offset = Upload-Length | 409 before | 404
///     POST    /files/{id}           X-HTTP-Method-Override: PATCH | DELETE | HEAD, handled as that method
///
/// Every answer under `/files` carries `Tus-Resumable: 1.0.0` (`TusProtocolMiddleware`), which
/// also answers 412 + `Tus-Version` to a request carrying another version (or, for one that
/// changes state, none) before anything else looks at it.
///
/// A PATCH body goes straight to its place in the data file and is fdatasync'd before its new
/// offset is recorded (`offset.log`) and acknowledged. A body cut mid-way keeps what arrived,
/// durably, unless it carries `Upload-Checksum` (then nothing of it counts); a body past the
/// upload's end or `--max-chunk-size` is refused whole. See Docs/protocols.md.
struct TusRoutes: Sendable {
    static let version = "1.0.0"
    static let extensions = "creation,creation-with-upload,termination,checksum,concatenation"
    static let offsetStream = "application/offset+octet-stream"
    /// `Upload-Metadata` is stored and echoed; a larger one is refused, not kept.
    static let metadataLimit = 16 * 1024
    static let checksumMismatch = HTTPResponse.Status(code: 460, reasonPhrase: "Checksum Mismatch")

    let uploads: TusUploads
    let fileIO: FileIO
    let baseURL: BaseURL
    let configuration: ReceiverConfiguration
    let logger: Logger

    init(store: UploadStore, threadPool: NIOThreadPool, baseURL: BaseURL, configuration: ReceiverConfiguration, logger: Logger) {
        uploads = TusUploads(store: store, logger: logger)
        fileIO = FileIO(threadPool: threadPool)
        self.baseURL = baseURL
        self.configuration = configuration
        self.logger = logger
    }

    func register(on router: Router<BasicRequestContext>) {
        router.on("files", method: .options) { _, _ in self.options() }
        router.on("files/:id", method: .options) { _, _ in self.options() }
        router.post("files") { request, _ in
            await self.guarded { try await self.create(request) }
        }
        router.head("files/:id") { _, context in
            await self.guarded(head: true) { try await self.head(id: context.parameters.get("id")) }
        }
        router.patch("files/:id") { request, context in
            await self.guarded { try await self.patch(request, id: context.parameters.get("id")) }
        }
        router.delete("files/:id") { _, context in
            await self.guarded { try await self.terminate(id: context.parameters.get("id")) }
        }
        router.get("files/:id") { _, context in
            await self.guarded { try await self.download(id: context.parameters.get("id"), context: context) }
        }
        router.post("files/:id") { request, context in
            await self.guarded { try await self.overridden(request, id: context.parameters.get("id")) }
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
                .tusVersion: Self.version,
                .tusExtension: Self.extensions,
                .tusMaxSize: String(configuration.maximumUploadSize),
                .tusChecksumAlgorithm: TusChecksum.advertised,
            ])
    }

    private func head(id: String?) async throws -> Response {
        var headers: HTTPFields = [.cacheControl: "no-store"]
        guard let upload = try await tusUpload(id), let offset = await upload.currentOffset else {
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

    private func patch(_ request: Request, id: String?) async throws -> Response {
        guard Self.isOffsetStream(request.headers[.contentType]) else {
            return Self.refusal(.unsupportedMediaType, "a PATCH body must be Content-Type: \(Self.offsetStream)")
        }
        guard let offsetText = request.headers[.uploadOffset], let requested = Self.number(offsetText) else {
            return Self.refusal(.badRequest, "Upload-Offset must be a non-negative integer")
        }
        let checksum = try Self.checksum(request)
        let declared = try Self.contentLength(request)
        guard let upload = try await tusUpload(id) else { return Self.unknownUpload }
        guard upload.info.role != .final else {
            return Self.refusal(.forbidden, "a final upload is made by concatenation and takes no PATCH")
        }
        if let declared, declared > configuration.maximumChunkSize {
            return Self.refusal(.contentTooLarge, "a PATCH body may carry at most \(configuration.maximumChunkSize) bytes; send smaller chunks")
        }
        return try await upload.exclusively {
            guard let current = await upload.currentOffset else { return Self.unknownUpload }
            guard requested == current else {
                return Self.refusal(.conflict, "Upload-Offset \(requested) is not the upload's offset \(current)", headers: [.uploadOffset: String(current)])
            }
            if let declared, declared > upload.length - current {
                return Self.refusal(.contentTooLarge, "the body (\(declared) bytes) goes past Upload-Length: \(upload.length - current) bytes are left")
            }
            let result = try await upload.write(request.body, at: current, limit: configuration.maximumChunkSize, checksum: checksum)
            switch result {
            case .stored(let offset):
                if offset == upload.length { try await upload.finish() }
                return Response(status: .noContent, headers: [.uploadOffset: String(offset)])
            case .interrupted(let offset):
                if offset == upload.length { try await upload.finish() }
                return writeFailure(result)
            case .checksumMismatch, .tooLarge:
                return writeFailure(result)
            }
        }
    }

    // MARK: Creation

    private func create(_ request: Request) async throws -> Response {
        let headers = request.headers
        if headers[.uploadDeferLength] != nil {
            return Self.refusal(.badRequest, "Upload-Defer-Length is not supported (no creation-defer-length): send Upload-Length")
        }
        var metadata: String?
        var path = RelativePath.validated("file")!
        if let raw = headers[.uploadMetadata], !raw.trimmingCharacters(in: .whitespaces).isEmpty {
            // An empty header (tuspy sends one when there is no metadata) means none.
            guard raw.utf8.count <= Self.metadataLimit, let pairs = TusMetadata.parse(raw) else {
                return Self.refusal(.badRequest, "Upload-Metadata must be 'key base64value' pairs separated by commas, unique keys, at most \(Self.metadataLimit) bytes")
            }
            metadata = raw
            switch Self.destination(pairs) {
            case .success(let named?): path = named
            case .success(nil): break
            case .failure(let refusal): return refusal.response
            }
        }
        let concat = try headers[.uploadConcat].map(TusConcat.parse)
        let withData = Self.isOffsetStream(headers[.contentType])
        let declared = try Self.contentLength(request)

        if case .final(let ids) = concat {
            guard headers[.uploadLength] == nil else {
                return Self.refusal(.badRequest, "a final upload must not carry Upload-Length: its length is the sum of its partials'")
            }
            guard !withData, (declared ?? 0) == 0 else {
                return Self.refusal(.forbidden, "a final upload is made by concatenation and takes no data")
            }
            return try await createFinal(request, concat: headers[.uploadConcat] ?? "", partials: ids, metadata: metadata, path: path)
        }

        guard let lengthText = headers[.uploadLength], let length = Self.number(lengthText) else {
            return Self.refusal(.badRequest, "Upload-Length must be a non-negative integer")
        }
        guard length <= configuration.maximumUploadSize else {
            return Self.refusal(.contentTooLarge, "Upload-Length \(length) is larger than this receiver accepts (Tus-Max-Size \(configuration.maximumUploadSize))")
        }
        var checksum: TusChecksum?
        if withData {
            checksum = try Self.checksum(request)
            if let declared, declared > min(length, configuration.maximumChunkSize) {
                return Self.refusal(.contentTooLarge, "the body (\(declared) bytes) is larger than Upload-Length or the \(configuration.maximumChunkSize) bytes a request may carry")
            }
        } else {
            // Bytes not declared as upload data are refused, never silently dropped.
            if let declared, declared > 0 {
                return Self.refusal(.unsupportedMediaType, "upload data in a POST must be Content-Type: \(Self.offsetStream)")
            }
            do {
                _ = try await request.body.collect(upTo: 0)
            } catch {
                return Self.refusal(.unsupportedMediaType, "upload data in a POST must be Content-Type: \(Self.offsetStream)")
            }
        }

        let info = TusInfo(role: concat == nil ? .single : .partial, metadata: metadata, concat: headers[.uploadConcat], partials: [])
        let upload = try await uploads.create(path: path, length: length, info: info)
        let location = url(of: upload.id, for: request)
        guard withData else {
            if length == 0 { try await upload.finish() }
            return Response(status: .created, headers: [.location: location])
        }
        // creation-with-upload: the body is written as a PATCH at offset 0 would be. Until this
        // answer the client cannot know the upload, so a body that fails leaves nothing behind.
        do {
            let result = try await upload.exclusively {
                try await upload.write(request.body, at: 0, limit: configuration.maximumChunkSize, checksum: checksum)
            }
            guard case .stored(let offset) = result else {
                _ = try? await uploads.delete(id: upload.id)
                return writeFailure(result)
            }
            if offset == length { try await upload.finish() }
            return Response(status: .created, headers: [.location: location, .uploadOffset: String(offset)])
        } catch {
            _ = try? await uploads.delete(id: upload.id)
            throw error
        }
    }

    /// `Upload-Concat: final;...`: the final upload is built from its complete partials before the answer.
    private func createFinal(_ request: Request, concat: String, partials ids: [String], metadata: String?, path: RelativePath) async throws -> Response {
        var partials: [TusUpload] = []
        var total = 0
        for id in ids {
            guard let partial = try await uploads.upload(id: id), let offset = await partial.currentOffset else {
                return Self.refusal(.notFound, "partial upload \(id) is unknown")
            }
            guard partial.info.role == .partial else {
                return Self.refusal(.badRequest, "upload \(id) was not created with Upload-Concat: partial")
            }
            guard offset == partial.length else {
                return Self.refusal(.badRequest, "partial upload \(id) is not finished (\(offset) of \(partial.length) bytes)")
            }
            guard partial.length <= configuration.maximumUploadSize - total else {
                return Self.refusal(.contentTooLarge, "the partial uploads add up to more than this receiver accepts (Tus-Max-Size \(configuration.maximumUploadSize))")
            }
            total += partial.length
            partials.append(partial)
        }
        // Finished partials are immutable: no PATCH can write past an upload's length.
        let sources = partials.map(\.finishedFile)
        let info = TusInfo(role: .final, metadata: metadata, concat: concat, partials: ids)
        let final = try await uploads.create(path: path, length: total, info: info)
        do {
            try await final.exclusively {
                try await final.concatenate(sources)
                try await final.finish()
            }
        } catch let error as IOError where error.code == ENOENT {
            _ = try? await uploads.delete(id: final.id)
            return Self.refusal(.notFound, "a partial upload was terminated during the concatenation")
        } catch {
            _ = try? await uploads.delete(id: final.id)
            throw error
        }
        return Response(status: .created, headers: [.location: url(of: final.id, for: request)])
    }

    /// Where the file lands, from `Upload-Metadata`: `relativePath` when present (validated like
    /// every protocol's path: an unsafe one is 400), else `filename`'s last component (as before;
    /// unusable ones are ignored), else nil (the default name "file").
    ///
    /// `relativePath` "null" counts as absent: Uppy sends `String(null)` for a file that was not
    /// found in a folder.
    static func destination(_ pairs: [String: [UInt8]]) -> Result<RelativePath?, Refusal> {
        if let bytes = pairs["relativePath"], bytes != Array("null".utf8) {
            guard let text = String(validating: bytes, as: UTF8.self) else {
                return .failure(Refusal(.badRequest, "relativePath must be UTF-8 (base64-encoded in Upload-Metadata)"))
            }
            return RelativePath.parse(text).map { $0 }.mapError { Refusal(.badRequest, $0.message("relativePath")) }
        }
        if let bytes = pairs["filename"], let name = String(validating: bytes, as: UTF8.self).flatMap(FileNames.lastComponent) {
            return .success(RelativePath.validated(name))
        }
        return .success(nil)
    }

    // MARK: Termination, download, method override

    private func terminate(id: String?) async throws -> Response {
        guard let id, try await tusUpload(id) != nil else { return Self.unknownUpload }
        return try await uploads.delete(id: id) ? Response(status: .noContent) : Self.unknownUpload
    }

    /// Not part of tus: the finished file, streamed from disk, at the URL the client already has.
    private func download(id: String?, context: BasicRequestContext) async throws -> Response {
        guard let upload = try await tusUpload(id), let offset = await upload.currentOffset else { return Self.unknownUpload }
        guard offset == upload.length else {
            return Self.refusal(.conflict, "upload is incomplete: \(offset) of \(upload.length) bytes received")
        }
        try await upload.finish()
        var headers = HTTPFields()
        headers[.contentType] = "application/octet-stream"
        headers[.contentDisposition] = "attachment; filename*=UTF-8''" + PercentEncoding.encodePathSegment(upload.upload.layout.path.name)
        do {
            let body = try await fileIO.loadFile(path: upload.finishedFile, context: context, chunkLength: DownloadRoutes.readChunkLength)
            return Response(status: .ok, headers: headers, body: body)
        } catch {
            return Self.unknownUpload
        }
    }

    /// `X-HTTP-Method-Override`, for clients that cannot send PATCH or DELETE.
    private func overridden(_ request: Request, id: String?) async throws -> Response {
        switch request.headers[.xHTTPMethodOverride]?.uppercased() {
        case "PATCH": return try await patch(request, id: id)
        case "DELETE": return try await terminate(id: id)
        case "HEAD": return try await head(id: id)
        default:
            return Self.refusal(.methodNotAllowed, "POST to an upload needs X-HTTP-Method-Override: PATCH, DELETE or HEAD", headers: [.allow: "HEAD, PATCH, DELETE, GET, OPTIONS"])
        }
    }

    // MARK: Helpers

    /// The refusal for a write that did not store its whole body.
    private func writeFailure(_ result: TusWriteResult) -> Response {
        switch result {
        case .stored(let offset):
            return Response(status: .noContent, headers: [.uploadOffset: String(offset)])
        case .interrupted(let offset):
            // Nobody is left to read this: the client went away.
            return Self.refusal(.badRequest, "the request body was cut; the upload's offset is \(offset)", headers: [.uploadOffset: String(offset)])
        case .checksumMismatch:
            return Self.refusal(Self.checksumMismatch, "the body does not match its Upload-Checksum; nothing of it was kept")
        case .tooLarge(let limit):
            return Self.refusal(.contentTooLarge, "the body is larger than the \(limit) bytes this request may carry (what is left of Upload-Length, at most \(configuration.maximumChunkSize)); nothing of it was kept")
        }
    }

    private func tusUpload(_ id: String?) async throws -> TusUpload? {
        guard let id else { return nil }
        return try await uploads.upload(id: id)
    }

    private func url(of id: String, for request: Request) -> String {
        baseURL.resolve(for: request) + "/files/" + id
    }

    static func isOffsetStream(_ contentType: String?) -> Bool {
        guard let contentType else { return false }
        let mediaType = contentType.split(separator: ";", maxSplits: 1).first ?? ""
        return mediaType.trimmingCharacters(in: .whitespaces).lowercased() == offsetStream
    }

    /// A non-negative decimal integer as tus headers carry them; nil for anything else.
    static func number(_ text: String) -> Int? {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        guard (1...18).contains(trimmed.utf8.count), trimmed.utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }) else {
            return nil
        }
        return Int(trimmed)
    }

    private static func checksum(_ request: Request) throws(Refusal) -> TusChecksum? {
        guard let header = request.headers[.uploadChecksum] else { return nil }
        switch TusChecksum.parse(header) {
        case .success(let checksum):
            return checksum
        case .failure(.unsupportedAlgorithm):
            throw Refusal(.badRequest, "Upload-Checksum algorithm not supported; Tus-Checksum-Algorithm: \(TusChecksum.advertised)")
        case .failure(.malformed):
            throw Refusal(.badRequest, "Upload-Checksum must be 'ALGORITHM BASE64' with the digest's full length")
        }
    }

    private static func contentLength(_ request: Request) throws(Refusal) -> Int? {
        guard let text = request.headers[.contentLength] else { return nil }
        guard let length = number(text) else { throw Refusal(.badRequest, "Content-Length is not a number") }
        return length
    }

    /// A request refused while its headers are read; `guarded` answers it.
    struct Refusal: Error {
        let response: Response
        init(_ status: HTTPResponse.Status, _ message: String) { response = TusRoutes.refusal(status, message) }
    }

    static func refusal(_ status: HTTPResponse.Status, _ message: String, headers: HTTPFields = [:]) -> Response {
        var response = JSONResponse.error(status, message)
        for field in headers { response.headers[field.name] = field.value }
        return response
    }

    private static var unknownUpload: Response { refusal(.notFound, "unknown upload") }

    /// Lookups and writes can fail on storage; those are 500s with the details in the operator's
    /// log, never the client's answer. An upload terminated mid-request is the client's 404.
    private func guarded(head: Bool = false, _ handler: () async throws -> Response) async -> Response {
        let response: Response
        do {
            response = try await handler()
        } catch let refusal as Refusal {
            response = refusal.response
        } catch UploadError.deleted {
            response = Self.unknownUpload
        } catch {
            response = storageFailure(error, logger: logger, answer: Self.refusal(.internalServerError, "storage error"))
        }
        // A HEAD answer has no body.
        return head ? Response(status: response.status, headers: response.headers) : response
    }
}

/// Adds `Tus-Resumable` to every answer under `/files` (refusals of other middleware included)
/// and refuses requests of another protocol version before anything processes them.
///
/// The version check: OPTIONS is exempt (the spec has the server ignore the header there); GET
/// and HEAD without the header pass (browsers, curl); any other request must carry exactly
/// `Tus-Resumable: 1.0.0`, else 412 with `Tus-Version`.
struct TusProtocolMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard TusRoutes.isTusPath(request.uri.path) else { return try await next(request, context) }
        if request.method != .options, request.headers[.tusResumable] != TusRoutes.version {
            let tolerated = request.headers[.tusResumable] == nil && (request.method == .get || request.method == .head)
            if !tolerated {
                let headers: HTTPFields = [.tusResumable: TusRoutes.version, .tusVersion: TusRoutes.version]
                if request.method == .head { return Response(status: .preconditionFailed, headers: headers) }
                return TusRoutes.refusal(.preconditionFailed, "this server speaks tus \(TusRoutes.version): send Tus-Resumable: \(TusRoutes.version)", headers: headers)
            }
        }
        var response = try await next(request, context)
        response.headers[.tusResumable] = TusRoutes.version
        return response
    }
}

/// `Upload-Metadata`: `key base64,key base64,key` (the value may be left out).
enum TusMetadata {
    /// Keys and decoded values; nil when malformed (empty or repeated key, a space or comma in a
    /// key, a value that is not base64).
    static func parse(_ header: String) -> [String: [UInt8]]? {
        var pairs: [String: [UInt8]] = [:]
        for item in header.split(separator: ",", omittingEmptySubsequences: false) {
            let parts = item.trimmingCharacters(in: .whitespaces).split(separator: " ", omittingEmptySubsequences: false)
            guard parts.count == 1 || parts.count == 2 else { return nil }
            let key = String(parts[0])
            guard !key.isEmpty, pairs[key] == nil, key.utf8.allSatisfy({ $0 > 0x20 && $0 != 0x7F && $0 != UInt8(ascii: ",") }) else {
                return nil
            }
            var value: [UInt8] = []
            if parts.count == 2 {
                guard let decoded = Data(base64Encoded: String(parts[1])) else { return nil }
                value = Array(decoded)
            }
            pairs[key] = value
        }
        return pairs
    }
}

/// `Upload-Concat`: `partial`, or `final;` and the partial uploads' URLs (absolute or paths),
/// separated by spaces.
enum TusConcat: Equatable {
    case partial
    case final([String])

    static func parse(_ header: String) throws(TusRoutes.Refusal) -> TusConcat {
        let trimmed = header.trimmingCharacters(in: .whitespaces)
        if trimmed == "partial" { return .partial }
        guard trimmed.hasPrefix("final;") else {
            throw TusRoutes.Refusal(.badRequest, "Upload-Concat must be 'partial' or 'final;URL URL ...'")
        }
        let urls = trimmed.dropFirst("final;".count).split(separator: " ", omittingEmptySubsequences: true)
        guard !urls.isEmpty else { throw TusRoutes.Refusal(.badRequest, "Upload-Concat: final; must list the partial uploads' URLs") }
        var ids: [String] = []
        for url in urls {
            guard let id = uploadID(fromURL: String(url)) else {
                throw TusRoutes.Refusal(.badRequest, "'\(url.prefix(200))' is not an upload URL of this server (/files/ID)")
            }
            ids.append(id)
        }
        return .final(ids)
    }

    /// `http://host/files/ID` or `/files/ID` → ID (not checked for existence).
    static func uploadID(fromURL url: String) -> String? {
        var path = Substring(url)
        if let scheme = path.range(of: "://") {
            let afterScheme = path[scheme.upperBound...]
            guard let slash = afterScheme.firstIndex(of: "/") else { return nil }
            path = afterScheme[slash...]
        }
        guard path.hasPrefix("/files/") else { return nil }
        var id = path.dropFirst("/files/".count)
        if id.hasSuffix("/") { id = id.dropLast() }
        guard !id.isEmpty, !id.contains("/"), !id.contains("?"), !id.contains("#") else { return nil }
        return String(id)
    }
}

extension HTTPField.Name {
    static let tusResumable = HTTPField.Name("Tus-Resumable")!
    static let tusVersion = HTTPField.Name("Tus-Version")!
    static let tusExtension = HTTPField.Name("Tus-Extension")!
    static let tusMaxSize = HTTPField.Name("Tus-Max-Size")!
    static let tusChecksumAlgorithm = HTTPField.Name("Tus-Checksum-Algorithm")!
    static let uploadOffset = HTTPField.Name("Upload-Offset")!
    static let uploadLength = HTTPField.Name("Upload-Length")!
    static let uploadDeferLength = HTTPField.Name("Upload-Defer-Length")!
    static let uploadMetadata = HTTPField.Name("Upload-Metadata")!
    static let uploadConcat = HTTPField.Name("Upload-Concat")!
    static let uploadChecksum = HTTPField.Name("Upload-Checksum")!
    static let xHTTPMethodOverride = HTTPField.Name("X-HTTP-Method-Override")!
}
