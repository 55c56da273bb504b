import FoundationEssentials
import HTTPTypes
import Hummingbird
import NIOPosix
import XferPrimitives

/// `GET /downloads/{uploadId}/{relative/path}`: serves completed files of any protocol, streamed
/// from the store in bounded pieces, whole or one byte range, with a strong `ETag` and the file's
/// `Repr-Digest` (RFC 9530), for download tools that resume and split (`RangeRequest`). (`/files/`
/// is left free for tus.)
///
/// The request's path only selects: it must equal, component by component once decoded, the path
/// the upload was published under, and the file is read from where the store put it. A component
/// that decodes to something no stored path can hold (`..`, `.`, an encoded '/', NUL) is 404.
struct DownloadRoutes: ProtocolRoutes {
    let environment: RouteEnvironment

    init(_ environment: RouteEnvironment) {
        self.environment = environment
    }

    /// `/downloads/<id>/` and the upload's relative path, each component percent-encoded.
    static func url(base: String, upload: any ChunkedUpload) -> String {
        url(base: base, id: upload.meta.uploadId, path: upload.path)
    }

    static func url(base: String, id: String, path: RelativePath) -> String {
        base + "/downloads/" + id + "/" + path.encoded
    }

    /// A finished offset upload (tus's, the IETF's) at the URL its client already has: not part of
    /// those protocols, but where a client looks. `unknown` when it is gone; `refusal` makes the
    /// protocol's own refusals (409 before its last byte, 412, 416); `finish` finishes it first, in
    /// its turn (a completion that failed is done now, and reported if this call did it).
    ///
    /// Its tag is the id and the length: an offset upload's CRC-32C is read from the store on
    /// each request and may be missing from one answer, and a tag must not change with that. The
    /// id alone would do (never reused, and the bytes below a complete offset never change); the
    /// length costs nothing.
    static func serve(
        _ upload: (any OffsetUpload)?, request: Request, context: some RequestContext, unknown: Refusal,
        refusal: (HTTPResponse.Status, String, HTTPFields) -> Refusal, finish: @escaping (any OffsetUpload) async throws -> Void
    ) async throws -> Response {
        guard let upload, let offset = await upload.currentOffset else { throw unknown }
        guard offset == upload.length else {
            throw refusal(.conflict, "upload is incomplete: \(offset) of \(upload.length) bytes received", [:])
        }
        try await upload.exclusively { try await finish(upload) }
        let file = StoredRepresentation(
            etag: EntityTag(upload.id + "-" + String(upload.length)), size: upload.length, sha256: nil,
            crc32c: await upload.currentCRC.map(CRC32.hex))
        do {
            return try await answer(
                request, file: file, name: upload.path.name, refuse: { refusal($0, $1, $2).response },
                body: { try await upload.finishedBody(range: $0, context: context) })
        } catch {
            throw unknown
        }
    }

    func register<Context: ReceiverRequestContext>(on router: some RouterMethods<Context>) {
        router.get("downloads/:id/**") { request, context in
            await self.download(id: context.parameters.get("id"), request: request, context: context)
        }
        // Download tools probe with HEAD for the size, ranges and tag; nothing of the file is read.
        router.head("downloads/:id/**") { request, context in
            await self.download(id: context.parameters.get("id"), request: request, context: context)
        }
    }

    /// The decoded components after `/downloads/{id}/` of a raw request path; nil when one of
    /// them is empty, malformed, or decodes to `.`, `..` or something holding '/' or a control character.
    static func requestedComponents(_ rawPath: String) -> [String]? {
        let segments = rawPath.utf8.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false)
        // "", "downloads", id, then at least one component.
        guard segments.count >= 4 else { return nil }
        var components: [String] = []
        for segment in segments.dropFirst(3) {
            guard let decoded = PercentEncoding.decode(Substring(segment)), RelativePath.isValidComponent(decoded) else { return nil }
            components.append(decoded)
        }
        return components
    }

    private func download(id: String?, request: Request, context: some RequestContext) async -> Response {
        let notFound = JSONResponse.error(.notFound, "no such file")
        // The router hands over the raw path; decode each component here, exactly once.
        guard let id, let components = Self.requestedComponents(request.uri.path),
            let upload = try? await store.upload(id: id),
            upload.path.components.elementsEqual(components, by: { $0.utf8.elementsEqual($1.utf8) }),
            let record = try? await upload.completionRecord()
        else { return notFound }
        let ranges = environment.storage.rangeReads
        do {
            return try await Self.answer(
                request, file: StoredRepresentation(uploadId: upload.meta.uploadId, record: record), name: upload.path.name,
                servesRanges: ranges != nil, refuse: { Refusal.error($0, $1, headers: $2).response },
                body: { range in
                    guard let range, let ranges else { return try await self.store.publishedFile(of: upload, context: context) }
                    return try await ranges.publishedFile(of: upload, range: range, context: context)
                })
        } catch {
            return notFound
        }
    }

    /// The answer to a GET or HEAD of `file`, whose bytes (all of them, or a range) `body` opens:
    /// the whole file, a part of it, or a refusal of the request's conditions (`RangeRequest`).
    /// A HEAD answers what a GET without a range would, and opens nothing. Without
    /// `servesRanges` (a storage that reads no ranges) a `Range` is ignored, as RFC 9110 lets a
    /// server, and no `Accept-Ranges` is said.
    static func answer(
        _ request: Request, file: StoredRepresentation, name: String, servesRanges: Bool = true,
        refuse: (HTTPResponse.Status, String, HTTPFields) -> Response, body: (ClosedRange<Int>?) async throws -> ResponseBody
    ) async throws -> Response {
        var conditions = RangeRequest(method: request.method, headers: request.headers)
        if !servesRanges { conditions.range = nil }
        switch conditions.answer(etag: file.etag, size: file.size) {
        case .notModified:
            return Response(status: .notModified, headers: [.eTag: file.etag.field])
        case .preconditionFailed:
            return refuse(.preconditionFailed, "the file is not the version If-Match names", [.eTag: file.etag.field])
        case .unsatisfiable:
            return refuse(
                .rangeNotSatisfiable, "the range starts at or past the end of the file (\(file.size) bytes)",
                [.contentRange: "bytes */" + String(file.size), .acceptRanges: "bytes"])
        case .whole:
            var headers = Self.fileHeaders(file, name: name, servesRanges: servesRanges)
            // Hummingbird would take the length of the empty body a HEAD answer carries.
            guard request.method != .head else {
                headers[.contentLength] = String(file.size)
                return Response(status: .ok, headers: headers)
            }
            return Response(status: .ok, headers: headers, body: try await body(nil))
        case .partial(let bytes):
            var headers = Self.fileHeaders(file, name: name, servesRanges: servesRanges)
            headers[.contentRange] = "bytes \(bytes.lowerBound)-\(bytes.upperBound)/\(file.size)"
            return Response(status: .partialContent, headers: headers, body: try await body(bytes))
        }
    }

    /// Never a `Content-Encoding`: the bytes are sent as stored, so a range and `Repr-Digest`
    /// name the same bytes a client keeps.
    private static func fileHeaders(_ file: StoredRepresentation, name: String, servesRanges: Bool) -> HTTPFields {
        var headers = HTTPFields()
        headers[.eTag] = file.etag.field
        headers[.contentType] = "application/octet-stream"
        headers[.contentDisposition] = "attachment; filename*=UTF-8''" + PercentEncoding.encode(name)
        if servesRanges { headers[.acceptRanges] = "bytes" }
        if let digest = file.reprDigest { headers[.reprDigest] = digest }
        return headers
    }
}

/// What is said of a published file as a whole: its size, its tag, its digests. Derived only from
/// what is stored with it, so every receiver sharing the store, restarted or not, says the same.
struct StoredRepresentation: Equatable, Sendable {
    let etag: EntityTag
    let size: Int
    /// RFC 9530's `Repr-Digest` (`sha-256=:…:, crc32c=:…:`); nil when nothing vouches for the bytes.
    let reprDigest: String?

    /// `sha256`, `crc32c`: lowercase hex, as a `CompletionRecord` keeps them.
    init(etag: EntityTag, size: Int, sha256: String?, crc32c: String?) {
        self.etag = etag
        self.size = size
        var members: [String] = []
        if let sha256, let bytes = Hex.bytes(sha256), bytes.count == 32 {
            members.append("sha-256=:" + Data(bytes).base64EncodedString() + ":")
        }
        // The hex is the CRC's bytes most significant first: RFC 9530's big-endian encoding.
        if let crc32c, let bytes = Hex.bytes(crc32c), bytes.count == 4 {
            members.append("crc32c=:" + Data(bytes).base64EncodedString() + ":")
        }
        reprDigest = members.isEmpty ? nil : members.joined(separator: ", ")
    }

    /// Tagged `"<id>-<crc32c hex>"`, else `"<id>-<first 16 hex digits of the SHA-256>"`, else
    /// `"<id>-<size>"`: ids are random and a completed upload never changes, so the id alone would
    /// be a strong tag; the digest makes a tag a client kept from elsewhere fail rather than
    /// match by chance.
    init(uploadId: String, record: CompletionRecord) {
        let version = record.crc32c ?? record.sha256.map { String($0.prefix(16)) } ?? String(record.size)
        self.init(etag: EntityTag(uploadId + "-" + version), size: record.size, sha256: record.sha256, crc32c: record.crc32c)
    }
}

extension HTTPField.Name {
    static let reprDigest = HTTPField.Name("Repr-Digest")!
}
