import Hummingbird
import NIOPosix

/// `GET /downloads/{uploadId}/{relative/path}`: serves completed files of any protocol, streamed
/// from disk in bounded pieces. (`/files/` is left free for tus.)
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
        base + "/downloads/" + upload.meta.uploadId + "/" + upload.path.encoded
    }

    /// A finished offset upload (tus's, the IETF's) at the URL its client already has: not part of
    /// those protocols, but where a client looks. `unknown` when it is gone, `incomplete` before
    /// its last byte.
    static func serve(
        _ upload: (any OffsetUpload)?, context: some RequestContext, unknown: Refusal, incomplete: (String) -> Refusal
    ) async throws -> Response {
        guard let upload, let offset = await upload.currentOffset else { throw unknown }
        guard offset == upload.length else { throw incomplete("upload is incomplete: \(offset) of \(upload.length) bytes received") }
        try await upload.finish()
        var headers = HTTPFields()
        headers[.contentType] = "application/octet-stream"
        headers[.contentDisposition] = "attachment; filename*=UTF-8''" + PercentEncoding.encodePathSegment(upload.path.name)
        let body: ResponseBody
        do {
            body = try await upload.finishedBody(context: context)
        } catch {
            throw unknown
        }
        return Response(status: .ok, headers: headers, body: body)
    }

    func register<Context: ReceiverRequestContext>(on router: some RouterMethods<Context>) {
        router.get("downloads/:id/**") { request, context in
            await self.download(id: context.parameters.get("id"), requestPath: request.uri.path, context: context)
        }
        // Download tools probe with HEAD for the size; the body closure is simply never run.
        router.head("downloads/:id/**") { request, context in
            await self.download(id: context.parameters.get("id"), requestPath: request.uri.path, context: context)
                .createHeadResponse()
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

    private func download(id: String?, requestPath: String, context: some RequestContext) async -> Response {
        let notFound = JSONResponse.error(.notFound, "no such file")
        // The router hands over the raw path; decode each component here, exactly once.
        guard let id, let components = Self.requestedComponents(requestPath),
            let upload = try? await store.upload(id: id),
            upload.path.components.elementsEqual(components, by: { $0.utf8.elementsEqual($1.utf8) }),
            (try? await upload.completionRecord()) != nil
        else { return notFound }

        var headers = HTTPFields()
        headers[.contentType] = "application/octet-stream"
        headers[.contentDisposition] = "attachment; filename*=UTF-8''" + PercentEncoding.encodePathSegment(upload.path.name)
        do {
            let body = try await store.publishedFile(of: upload, context: context)
            return Response(status: .ok, headers: headers, body: body)
        } catch {
            return notFound
        }
    }
}
