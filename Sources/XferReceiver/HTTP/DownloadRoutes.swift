import Hummingbird
import NIOPosix

/// `GET /downloads/{uploadId}/{fileName}`: serves completed files of any protocol, streamed from
/// disk in bounded pieces. (`/files/` is left free for tus.)
struct DownloadRoutes: Sendable {
    /// Large enough to keep loopback throughput up, small enough that a slow reader pins little memory.
    static let readChunkLength = 256 * 1024

    let store: UploadStore
    let fileIO: FileIO

    init(store: UploadStore, threadPool: NIOThreadPool) {
        self.store = store
        self.fileIO = FileIO(threadPool: threadPool)
    }

    static func url(base: String, upload meta: UploadMeta) -> String {
        base + "/downloads/" + meta.uploadId + "/" + PercentEncoding.encodePathSegment(meta.fileName)
    }

    func register(on router: Router<BasicRequestContext>) {
        router.get("downloads/:id/:name") { _, context in
            await self.download(id: context.parameters.get("id"), encodedName: context.parameters.get("name"), context: context)
        }
        // Download tools probe with HEAD for the size; the body closure is simply never run.
        router.head("downloads/:id/:name") { _, context in
            await self.download(id: context.parameters.get("id"), encodedName: context.parameters.get("name"), context: context)
                .createHeadResponse()
        }
    }

    private func download(id: String?, encodedName: String?, context: BasicRequestContext) async -> Response {
        let notFound = JSONResponse.error(.notFound, "no such file")
        // The router hands over the raw segment; decode it here, exactly once.
        guard let id, let name = encodedName.flatMap(PercentEncoding.decode),
            let upload = try? await store.upload(id: id),
            upload.meta.fileName == name,
            (try? await upload.completionRecord()) != nil
        else { return notFound }

        var headers = HTTPFields()
        headers[.contentType] = "application/octet-stream"
        headers[.contentDisposition] = "attachment; filename*=UTF-8''" + PercentEncoding.encodePathSegment(name)
        do {
            let body = try await fileIO.loadFile(path: upload.layout.downloadFile, context: context, chunkLength: Self.readChunkLength)
            return Response(status: .ok, headers: headers, body: body)
        } catch {
            return notFound
        }
    }
}
