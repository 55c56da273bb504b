import Xfer

/// The upload API of the "CW" write-up (an iOS client's chunked video
/// upload), written as an xfer backend from the engine's public API alone:
/// the example of Docs/backend-guide.md.
///
/// The contract:
///
/// 1. `POST /upload/checkFileChunk`, form `bizId`, `fileName`, `saveName`
///    (the MD5 of the whole file, lowercase hex) and `chunks` (how many) →
///    `{"code":"200","data":{...}}`. Every chunk upload must echo the
///    parameters in `data`.
/// 2. Each chunk: `POST /upload/file`, `multipart/form-data` with those
///    parameters as fields, a field `chunk` (the 1-based chunk number) and
///    a file part `file`. HTTP 200 means stored; re-sending a chunk is
///    harmless. The answer to the chunk that completes the file names the
///    file's URL in `data.url`.
///
/// Every request carries the header `api_version: v1`, as in the write-up.
/// The protocol has no call to ask which chunks the server holds, nor one
/// to drop an upload, so the backend adopts only `FileOpening`: a resumed
/// job re-sends what the state store does not call done, and cancelling
/// only forgets the job locally.
public struct CWBackend: UploadBackend, FileOpening {
    /// Stored with each job; resuming a job needs a backend of this name.
    public let name = "cw"

    /// Chunks in any order, three at a time; the whole file's MD5 up front.
    public let traits = BackendTraits(
        defaultChunkSize: 1 << 20,
        defaultConcurrency: 3,
        // The engine sends `--token` as `Authorization: Bearer …`.
        authentication: .authorizationHeader,
        // `chunks` must be at least 1, so an empty file is one empty chunk.
        emptyFileHasOneChunk: true,
        // `saveName` is the whole file's MD5, needed by the first request.
        digestsBeforeOpen: [.md5])

    /// The business id the server files uploads under.
    public let bizID: String

    /// Creates the backend for uploads filed under `bizID`.
    public init(bizID: String) {
        self.bizID = bizID
    }

    /// Server parameters are kept as handles under this prefix, apart from
    /// anything else a later version might store.
    static let parameterPrefix = "param."

    /// `checkFileChunk`: registers the file and keeps the parameters the
    /// server hands out, to echo them with every chunk.
    public func openFile(_ file: FileContext, in job: JobContext) -> Step<OpenedFile> {
        let fields = [
            ("bizId", bizID),
            ("fileName", file.name),
            ("saveName", file.digests[.md5] ?? ""),
            ("chunks", String(file.chunkCount)),
        ]
        var request = HTTPRequest(
            method: .post, url: job.url("/upload/checkFileChunk"), headers: Self.headers, body: .form(fields))
        request.headers.set("Content-Type", "application/x-www-form-urlencoded")
        let operation = "register \(file.name) with the server (checkFileChunk)"
        return .send(request) { response throws(BackendError) in
            let data = try Self.data(of: response, for: operation)
            // The engine commits these before the first chunk is sent, so a
            // client killed at any moment still echoes the right parameters.
            var handles = ServerHandles()
            for (key, value) in data {
                if value == .null { continue }
                guard let text = value.stringValue else {
                    throw .mismatch("\(operation): parameter '\(key)' is not a plain value")
                }
                handles.set(HandleKey(Self.parameterPrefix + key, secret: Self.looksSecret(key)), text)
            }
            return OpenedFile(handles: handles)
        }
    }

    /// `upload/file`: one chunk with the stored parameters and its 1-based number.
    public func uploadChunk(_ chunk: ChunkPayload, of file: FileContext, in job: JobContext) -> Exchange<ChunkOutcome> {
        var form = MultipartForm()
        for (key, value) in Self.parameters(in: file.handles) where key != "chunk" {
            form.addField(key, value)
        }
        form.addField("chunk", String(chunk.number))
        // The form names the chunk; the engine supplies its bytes.
        form.addFile("file", filename: file.name, chunk: chunk)
        var request = HTTPRequest(method: .post, url: job.url("/upload/file"), headers: Self.headers, body: form.body)
        request.headers.set("Content-Type", form.contentType)
        let operation = "send chunk \(chunk.number)/\(file.chunkCount) of \(file.name)"
        return Exchange(request) { response throws(BackendError) in
            if response.status == 404 {
                // The server forgot the upload: the engine registers the file afresh.
                throw .uploadUnknown("\(operation): the server no longer knows the upload")
            }
            try response.require(200, for: operation)
            let url = (try? JSONValue.parse(response.body))?["data"]?["url"]?.stringValue
            return .stored(fileURL: url)
        }
    }

    // MARK: Helpers

    /// The `data` of a `{"code":"200","data":{...}}` answer.
    static func data(of response: HTTPResponse, for operation: String) throws(BackendError) -> [String: JSONValue] {
        try response.require(200, for: operation)
        let json = try response.json(for: operation)
        guard let code = json["code"]?.stringValue else {
            throw .transient("\(operation): the answer has no code")
        }
        guard code == "200" else {
            let reason = json["desc"]?.stringValue ?? json["msg"]?.stringValue ?? "code \(code)"
            throw .rejected("\(operation): \(reason)")
        }
        guard let data = json["data"]?.objectValue else {
            throw .transient("\(operation): the answer has no data")
        }
        return data
    }

    /// The server's parameters, sorted by name so requests are reproducible.
    static func parameters(in handles: ServerHandles) -> [(String, String)] {
        handles.values
            .filter { $0.key.hasPrefix(parameterPrefix) }
            .map { (String($0.key.dropFirst(parameterPrefix.count)), $0.value) }
            .sorted { $0.0 < $1.0 }
    }

    /// Parameters that authorise uploads are shown redacted by `xfer status`.
    static func looksSecret(_ name: String) -> Bool {
        let lowered = name.lowercased()
        return ["token", "secret", "sign", "password"].contains { lowered.contains($0) }
    }

    private static let headers: HTTPHeaders = ["api_version": "v1"]
}
