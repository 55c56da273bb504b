import Xfer

/// The `patch` protocol (from the JJUploadFile write-up): create an upload,
/// PATCH raw octet-stream chunks with `Content-Range` and `Content-MD5`,
/// ask which chunks the server holds on resume, then complete and check the
/// server's SHA-256 of the assembled file. See Docs/protocols.md.
public struct PatchBackend: UploadBackend, FileOpening, FileReconciling, FileFinishing, UploadCancelling {
    public let name = "patch"

    public let traits = BackendTraits(
        defaultChunkSize: 1 << 20,
        defaultConcurrency: 5,
        authentication: .authorizationHeader,
        emptyFileHasOneChunk: false,
        reportsWholeFileSHA256: true)

    /// The id `POST /uploads` hands out, in every later URL.
    public static let uploadID = HandleKey("uploadId")

    public init() {}

    public func openFile(_ file: FileContext, in job: JobContext) -> Step<OpenedFile> {
        let body: JSONValue = [
            "fileName": .string(file.relativePath),
            "size": .int(file.size),
            "chunkSize": .int(file.chunkSize),
        ]
        var request = HTTPRequest(method: .post, url: job.url("/uploads"), body: .json(body))
        request.headers.set("Content-Type", "application/json")
        return .send(request) { response throws(BackendError) in
            try response.require(201, 200, for: "create the upload of \(file.name)")
            let json = try response.json(for: "create the upload of \(file.name)")
            guard let id = json["uploadId"]?.stringValue, !id.isEmpty else {
                throw .transient("create the upload of \(file.name): the answer has no uploadId")
            }
            return OpenedFile(handles: [Self.uploadID: id], chunkSize: json["chunkSize"]?.intValue)
        }
    }

    /// `GET /uploads/{id}`: what reconciling needs of the answer.
    private struct UploadStatus: Decodable {
        var chunkSize: Int?
    }

    private struct UploadList: Decodable {
        var received: [Int]
    }

    public func reconcileFile(_ file: FileContext, in job: JobContext) throws(BackendError) -> Step<Reconciliation<Never>> {
        let request = HTTPRequest(method: .get, url: try uploadURL(job, file))
        let operation = "ask what the server holds of \(file.name)"
        return .send(request) { response throws(BackendError) in
            if response.status == 404 { throw .uploadUnknown("\(operation): the server no longer knows the upload") }
            try response.require(200, for: operation)
            // The list can hold a million chunk numbers: read it straight from the bytes, and decode
            // only the rest (JSONDecoder skips an array it is not asked for cheaply).
            let status = try response.decode(UploadStatus.self, for: operation)
            if let size = status.chunkSize, size != file.chunkSize {
                throw .rejected("the server's chunk size for \(file.name) is \(size), the job's is \(file.chunkSize)", remedy: .startOver)
            }
            var received = response.integers(inArrayNamed: "received")
            if received == nil { received = try response.decode(UploadList.self, for: operation).received }
            return .serverHas(chunks: Set(file.chunkIndexes(fromNumbers: received ?? [])))
        }
    }

    public func uploadChunk(_ chunk: ChunkPayload, of file: FileContext, in job: JobContext) throws(BackendError) -> Exchange<ChunkOutcome> {
        var request = HTTPRequest(
            method: .patch, url: try uploadURL(job, file) + "/chunks/\(chunk.number)", body: RequestBody(chunk: chunk))
        request.headers.set("Content-Type", "application/octet-stream")
        request.headers.set("Content-Range", "bytes \(chunk.offset)-\(chunk.lastOffset)/\(file.size)")
        request.headers.set("Content-MD5", Checksums.base64(chunk.md5))
        let operation = "send chunk \(chunk.number) of \(file.name)"
        return Exchange(request) { response throws(BackendError) in
            if response.status == 404 { throw .uploadUnknown("\(operation): the server no longer knows the upload") }
            try response.require(204, 200, for: operation)
            return .stored()
        }
    }

    public func finishFile(_ file: FileContext, in job: JobContext) throws(BackendError) -> Step<FileFinish> {
        let request = HTTPRequest(method: .post, url: try uploadURL(job, file) + "/complete")
        let operation = "complete the upload of \(file.name)"
        return .send(request) { response throws(BackendError) in
            switch response.status {
            case 404:
                throw .uploadUnknown("\(operation): the server no longer knows the upload")
            case 409:
                let json = try response.json(for: operation)
                let numbers = json["missing"]?.arrayValue?.compactMap(\.intValue) ?? []
                return .missing(file.chunkIndexes(fromNumbers: numbers))
            default:
                try response.require(200, for: operation)
                let json = try response.json(for: operation)
                guard let url = json["url"]?.stringValue, !url.isEmpty else {
                    throw .transient("\(operation): the answer has no url")
                }
                return .completed(url: url, sha256: json["sha256"]?.stringValue)
            }
        }
    }

    public func cancelRequests(for job: JobContext) -> [HTTPRequest] {
        job.files.compactMap { file in
            (try? uploadURL(job, file)).map { HTTPRequest(method: .delete, url: $0) }
        }
    }

    private func uploadURL(_ job: JobContext, _ file: FileContext) throws(BackendError) -> String {
        job.url("/uploads/\(try file.handles.require(Self.uploadID).percentEncodedPathSegment)")
    }
}
