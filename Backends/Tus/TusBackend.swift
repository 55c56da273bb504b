import Crypto
import XferPrimitives
import FoundationEssentials
import Xfer
import XferWire

/// tus 1.0.0, the open protocol for resumable uploads (tusd, Vimeo,
/// Cloudflare Stream, Supabase...): core, creation, creation-with-upload,
/// termination, checksum (crc32c where the server offers it, else sha1),
/// concatenation and expiration.
///
/// The job starts with `OPTIONS` on the creation URL and keeps what the
/// server offers. A file of one chunk is one `POST` that creates its upload
/// with all its bytes, where the server offers `creation-with-upload`: one
/// round trip per small file. A larger file is one upload, PATCHed chunk
/// after chunk at the server's `Upload-Offset` (64 MiB appends from 512 MiB
/// up, as the IETF's); a resume asks that offset with `HEAD` and goes on from
/// there, mid-chunk if need be. Made with `partialUploads`, when the server
/// also offers `concatenation` and the job sends more than one request at a
/// time, a larger file goes as partial uploads instead, one per chunk,
/// created with their bytes up to the job's concurrency at once, and a final
/// upload concatenates them. See Docs/protocols.md.
public struct TusBackend: UploadBackend, TargetNormalizing, ChunkOrdering, JobStarting, FileOpening, FileReconciling,
    FileFinishing, UploadCancelling, FileUploadCancelling, StreamUploading
{
    public let name = "tus"

    public let traits = BackendTraits(
        defaultChunkSize: 8 << 20,
        defaultConcurrency: 4,
        authentication: .authorizationHeader,
        emptyFileHasOneChunk: false,
        smallRequestConcurrency: BackendTraits.wideSmallRequests,
        // One PATCH at a time per file, as the IETF's appends: long enough to keep the link busy
        // through each round trip (Docs/cli.md, "Far from the server").
        largeFileChunkSize: 64 << 20)

    static let version = TusField.version

    /// A file's upload URL (absent when its chunks go as partial uploads).
    public static let uploadURL = HandleKey("url")

    /// Whether a file of more than one chunk goes as parallel partial uploads, concatenated by a
    /// final upload, where the server offers `concatenation` and `creation-with-upload` and the
    /// job sends more than one request at a time; false: one upload per file, PATCHed in order.
    ///
    /// Off unless asked, as in tus-js-client (`parallelUploads: 1`): a server concatenates by
    /// copying the partials (tusd's file store, and `xfer serve` on a filesystem that shares no
    /// blocks), so every byte is written twice and the last answer waits for the copy — 0.39x
    /// `curl -T` into `xfer serve` against 0.95x in order (Docs/benchmarks.md, "tus in order").
    /// Worth it where one connection cannot fill the link (a server or proxy that caps each one).
    public let partialUploads: Bool

    /// In order: one upload per file, PATCHed chunk after chunk.
    public init() {
        self.init(partialUploads: false)
    }

    /// `partialUploads`: see the property.
    public init(partialUploads: Bool) {
        self.partialUploads = partialUploads
    }

    // MARK: Discovery

    /// The creation URL as given (http or https; a trailing slash kept, since
    /// servers route `/files/` and `/files` differently).
    public func normalizedTarget(_ target: String) throws(BackendError) -> String {
        _ = try HTTPTarget.normalized(target)
        return target.trimmingSpacesAndTabs()
    }

    /// In order within a file, unless the server offered what parallel
    /// partial uploads need (decided by `startJob`, kept with the job).
    public func chunkOrder(for job: JobContext) -> ChunkOrder {
        Features(job.handles).parallel ? .any : .sequentialWithinFile
    }

    public func startJob(_ job: JobContext) -> Step<JobStart> {
        let request = HTTPRequest(method: .options, url: job.target)
        // Read one at a time if the server names a maximum, never gathered (100,000 files).
        let files = job.files
        let parallelWanted = partialUploads && job.concurrency > 1
        return .send(request) { response throws(BackendError) in
            let operation = "ask the tus server what it supports"
            if response.status == 404 || response.status == 405 {
                // OPTIONS is optional for servers: assume core and creation only.
                return JobStart(handles: Features.handles(extensions: ["creation"], checksum: nil, maximumSize: nil, parallel: false))
            }
            guard response.isSuccess else { throw response.unexpectedStatus(operation) }
            let versions = Self.list(response.headers[TusField.tusVersion])
            if !versions.isEmpty, !versions.contains(Self.version) {
                throw .rejected("the server speaks tus \(versions.joined(separator: ", ")), not \(Self.version)")
            }
            let extensions = Self.list(response.headers[TusField.tusExtension])
            guard extensions.contains("creation") else {
                throw .rejected("the tus server does not offer the creation extension, which xfer needs to start uploads")
            }
            let algorithms = Self.list(response.headers[TusField.tusChecksumAlgorithm]).map { $0.lowercased() }
            // The cheapest check the server takes: CRC-32C (hardware-assisted, ~20 GB/s) where it
            // is offered (xfer serve offers it first), else SHA-1, the one tus names.
            let checksum = extensions.contains("checksum") ? Self.checksums.first(where: algorithms.contains) : nil
            let maximum = response.headers[TusField.tusMaxSize].flatMap(Self.number)
            if let maximum, let file = files.first(where: { $0.size > maximum }) {
                throw .rejected("\(file.name) is \(file.size) bytes; the tus server accepts at most \(maximum) (Tus-Max-Size)")
            }
            // Partial uploads cost the server a copy when it concatenates them:
            // worth it only with more than one in flight. Decided once, kept with the job.
            let parallel = parallelWanted && extensions.contains("concatenation") && extensions.contains("creation-with-upload")
            return JobStart(handles: Features.handles(extensions: extensions, checksum: checksum, maximumSize: maximum, parallel: parallel))
        }
    }

    // MARK: Files

    /// One upload of the whole file, unless its one request creates it
    /// (a file of one chunk, where the server offers
    /// `creation-with-upload`) or chunks go as partial uploads (then only an
    /// empty file gets one here: there is nothing to concatenate).
    public func openFile(_ file: FileContext, in job: JobContext) -> Step<OpenedFile> {
        let features = Features(job.handles)
        if file.size > 0, features.parallel || Self.goesWhole(file, features) { return .skip }
        return create(file, in: job, length: (TusField.uploadLength, String(file.size)))
    }

    /// Whether `file` goes as one request: created with all its bytes
    /// (`creation-with-upload`). A small file then costs one round trip, not
    /// two (a creation, then a PATCH) or two (a partial upload, then its
    /// concatenation).
    static func goesWhole(_ file: FileContext, _ features: Features) -> Bool {
        file.size > 0 && file.chunkCount == 1 && features.extensions.contains("creation-with-upload")
    }

    /// The creation `POST` of `file`'s upload, its length given by `length`
    /// (`Upload-Length`, or `Upload-Defer-Length: 1` for a stream).
    private func create(_ file: FileContext, in job: JobContext, length: (name: String, value: String)) -> Step<OpenedFile> {
        var request = HTTPRequest(method: .post, url: job.target)
        prepare(&request, job)
        request.headers.set(length.name, length.value)
        request.headers.set(TusField.uploadMetadata, Self.metadata(file))
        let target = job.target
        let operation = "create the tus upload of \(file.name)"
        return .send(request) { response throws(BackendError) in
            guard response.status == 201 else { throw Self.failure(response, operation) }
            guard let location = Self.location(response, relativeTo: target) else {
                throw .transient("\(operation): the answer has no Location")
            }
            return OpenedFile(handles: [Self.uploadURL: location])
        }
    }

    /// `HEAD` on the upload: the server's `Upload-Offset` is where to go on.
    /// (A file sent as partial uploads has no upload to ask about: a
    /// resume trusts the state, and the concatenation names what is missing.)
    public func reconcileFile(_ file: FileContext, in job: JobContext) -> Step<Reconciliation<Never>> {
        guard let url = file.handles[Self.uploadURL] else { return .skip }
        var request = HTTPRequest(method: .head, url: url)
        prepare(&request, job)
        let operation = "ask the tus server how much of \(file.name) it holds"
        return .send(request) { response throws(BackendError) in
            if [403, 404, 410].contains(response.status) {  // expired or terminated
                throw .uploadUnknown("\(operation): the server no longer knows the upload (\(response.status))")
            }
            guard response.isSuccess else { throw Self.failure(response, operation) }
            guard let offset = response.headers[TusField.uploadOffset].flatMap(Self.number) else {
                throw .transient("\(operation): the answer has no Upload-Offset")
            }
            if let length = response.headers[TusField.uploadLength].flatMap(Self.number),
                length != file.size
            {
                throw .uploadUnknown("\(operation): the server's upload is \(length) bytes long, the file \(file.size)")
            }
            if offset == file.size { return .complete(url: url) }
            return .serverHasPrefix(bytes: offset)
        }
    }

    public func uploadChunk(_ chunk: ChunkPayload, of file: FileContext, in job: JobContext) throws(BackendError) -> Exchange<ChunkOutcome> {
        let features = Features(job.handles)
        if file.handles[Self.uploadURL] == nil, Self.goesWhole(file, features) { return createWhole(chunk, of: file, in: job) }
        let operation = "send chunk \(chunk.number)/\(file.chunkCount) of \(file.name)"
        return features.parallel
            ? partialUpload(chunk, in: job, operation: operation) : try patch(chunk, of: file, in: job, operation: operation)
    }

    /// A file of one chunk: its upload created with all its bytes, which
    /// completes it. Killed before the answer, the next run sends it whole
    /// again (the state never held this upload's URL); the server's copy of
    /// the first try is left to its expiration, as an unfinished upload is.
    private func createWhole(_ chunk: ChunkPayload, of file: FileContext, in job: JobContext) -> Exchange<ChunkOutcome> {
        var request = HTTPRequest(method: .post, url: job.target, body: RequestBody(chunk: chunk))
        prepare(&request, job)
        request.headers.set(TusField.uploadLength, String(file.size))
        request.headers.set(TusField.uploadMetadata, Self.metadata(file))
        request.headers.set("Content-Type", "application/offset+octet-stream")
        addChecksum(&request, chunk, job)
        let target = job.target
        let size = file.size
        let operation = "send \(file.name)"
        return Exchange(request) { response throws(BackendError) in
            guard response.status == 201 else { throw Self.failure(response, operation) }
            guard let location = Self.location(response, relativeTo: target) else {
                throw .transient("\(operation): the answer has no Location")
            }
            // An upload the server did not take whole is abandoned: the retry makes a new one.
            guard response.headers[TusField.uploadOffset].flatMap(Self.number) == size else {
                throw .transient("\(operation): the server took only part of it")
            }
            return .stored(fileURL: location)
        }
    }

    /// A chunk as a partial upload created with its bytes; its URL is the receipt.
    private func partialUpload(_ chunk: ChunkPayload, in job: JobContext, operation: String) -> Exchange<ChunkOutcome> {
        var request = HTTPRequest(method: .post, url: job.target, body: RequestBody(chunk: chunk))
        prepare(&request, job)
        request.headers.set(TusField.uploadConcat, TusConcat.partial.header)
        request.headers.set(TusField.uploadLength, String(chunk.count))
        request.headers.set("Content-Type", "application/offset+octet-stream")
        addChecksum(&request, chunk, job)
        let target = job.target
        return Exchange(request) { response throws(BackendError) in
            guard response.status == 201 else { throw Self.failure(response, operation) }
            guard let location = Self.location(response, relativeTo: target) else {
                throw .transient("\(operation): the answer has no Location")
            }
            // A partial upload the server did not take whole is abandoned: the retry makes a new one.
            guard response.headers[TusField.uploadOffset].flatMap({ TusField.number($0) }) == chunk.count else {
                throw .transient("\(operation): the server took only part of it")
            }
            return .stored(receipt: location)
        }
    }

    /// A chunk PATCHed at its offset into the file's upload.
    private func patch(
        _ chunk: ChunkPayload, of file: FileContext, in job: JobContext, operation: String
    ) throws(BackendError) -> Exchange<ChunkOutcome> {
        var request = HTTPRequest(method: .patch, url: try file.handles.require(Self.uploadURL), body: RequestBody(chunk: chunk))
        prepare(&request, job)
        request.headers.set(TusField.uploadOffset, String(chunk.offset))
        request.headers.set("Content-Type", "application/offset+octet-stream")
        addChecksum(&request, chunk, job)
        let end = chunk.offset + Int64(chunk.count)
        return Exchange(request) { response throws(BackendError) in
            guard response.status == 204 || response.status == 200 else { throw Self.failure(response, operation) }
            let offset = response.headers[TusField.uploadOffset].flatMap(Self.number)
            guard offset == end else {
                throw .outOfSync("\(operation): the server's offset is \(offset.map(String.init) ?? "missing"), not \(end)")
            }
            return .stored()
        }
    }

    /// Concatenates the partial uploads, or checks that the upload is whole.
    public func finishFile(_ file: FileContext, in job: JobContext) -> Step<FileFinish> {
        if let url = file.handles[Self.uploadURL] { return confirm(url, file, job) }
        let all = Array(0..<file.chunkCount)
        let missing = all.filter { file.receipts[$0] == nil }
        // A chunk acknowledged without its partial upload's URL cannot be
        // concatenated: send it again.
        guard missing.isEmpty else { return .answer(.missing(missing)) }
        return concatenate(all.map { file.receipts[$0]! }, of: file, in: job)
    }

    /// The final upload of partial uploads `parts` (in order).
    private func concatenate(_ parts: [String], of file: FileContext, in job: JobContext) -> Step<FileFinish> {
        let all = Array(parts.indices)
        var request = HTTPRequest(method: .post, url: job.target)
        prepare(&request, job)
        let concat = TusConcat.final(parts).header
        request.headers.set(TusField.uploadConcat, concat)
        request.headers.set(TusField.uploadMetadata, Self.metadata(file))
        let target = job.target
        let operation = "concatenate the \(parts.count) parts of \(file.name)"
        return .send(request) { response throws(BackendError) in
            switch response.status {
            case 201:
                guard let location = Self.location(response, relativeTo: target) else {
                    throw .transient("\(operation): the answer has no Location")
                }
                return .completed(url: location)
            case 404, 410, 412:
                // A partial upload expired or was lost: send every part again.
                return .missing(all)
            case 400:
                // The parts are whole (a partial the server did not take whole was made again),
                // so a refusal is of the concatenation itself: too many parts (`xfer serve` takes
                // 1,000), or a header longer than the server's HTTP layer reads, which answers
                // without a reason. Sent again, the parts would be refused alike.
                guard response.serverMessage == nil else { throw response.unexpectedStatus(operation) }
                throw .rejected(
                    "\(operation): HTTP 400 with no reason given; the Upload-Concat header naming the \(parts.count) parts is "
                        + "\(concat.utf8.count >> 10) KiB, more than many servers read: send fewer, larger chunks")
            default:
                throw Self.failure(response, operation)
            }
        }
    }

    private func confirm(_ url: String, _ file: FileContext, _ job: JobContext) -> Step<FileFinish> {
        var request = HTTPRequest(method: .head, url: url)
        prepare(&request, job)
        let plan = file.plan
        let operation = "check the tus upload of \(file.name)"
        return .send(request) { response throws(BackendError) in
            if [403, 404, 410].contains(response.status) { throw .uploadUnknown("\(operation): the server no longer knows it") }
            guard response.isSuccess else { throw Self.failure(response, operation) }
            let offset = response.headers[TusField.uploadOffset].flatMap(Self.number) ?? -1
            if offset == file.size { return .completed(url: url) }
            // The server lacks the end of the file: the chunks from its offset on.
            let first = (0..<plan.count).first { plan.offset(of: $0) + Int64(plan.length(of: $0)) > offset } ?? 0
            return .missing(Array(first..<plan.count))
        }
    }

    /// Termination of every upload the job created (when the server offers it).
    public func cancelRequests(for job: JobContext) -> [HTTPRequest] {
        job.files.flatMap { cancelRequests(forFile: $0, in: job) }
    }

    /// `DELETE` of the file's upload, or of the partial uploads its chunks
    /// went as (when the engine knows them), if the server offers termination.
    public func cancelRequests(forFile file: FileContext, in job: JobContext) -> [HTTPRequest] {
        guard Features(job.handles).extensions.contains("termination") else { return [] }
        let urls = file.handles[Self.uploadURL].map { [$0] } ?? file.receipts.sorted { $0.key < $1.key }.map(\.value)
        return urls.map { url in
            var request = HTTPRequest(method: .delete, url: url)
            prepare(&request, job)
            return request
        }
    }

    // MARK: Streams

    /// A stream's parts double in size every `partsPerStreamTier` parts from
    /// the chunk size asked for, up to 1 GiB (the engine's largest chunk).
    /// Sent as partial uploads, a stream is concatenated by one request whose
    /// header names every part, and servers read a bounded header (`xfer
    /// serve` about 1,000 full URLs, a proxy often far fewer): a part count
    /// that grew with the stream's length failed long streams (8 GB at the
    /// default 8 MiB). Doubling, 800 parts carry 199 GiB from 8 MiB; the
    /// engine holds two parts in memory, 2 × 1 GiB at the longest.
    public func streamPartSize(ofPart number: Int, requested: Int) -> Int {
        let doublings = min(max(0, number - 1) / Self.partsPerStreamTier, 20)
        return max(requested, min(requested << doublings, Self.largestStreamPart))
    }

    /// Parts of one size before a stream's parts double.
    public static let partsPerStreamTier = 100
    /// The largest part a stream grows to.
    static let largestStreamPart = 1 << 30

    /// Partial uploads, each created with its bytes and concatenated at the
    /// end, when the server offers `concatenation` and
    /// `creation-with-upload`: every part is then a complete upload of a
    /// known length. Otherwise one upload created with
    /// `Upload-Defer-Length: 1` (`creation-defer-length`), its length given
    /// by the last request. A server with neither cannot take a stream.
    public func openStream(_ file: FileContext, in job: JobContext) throws(BackendError) -> Step<OpenedFile> {
        let features = Features(job.handles)
        if features.takesPartialUploads { return .skip }
        guard features.extensions.contains("creation-defer-length") else {
            throw .rejected(
                "the tus server offers neither concatenation with creation-with-upload nor creation-defer-length, so it cannot take a stream of unknown length")
        }
        return create(file, in: job, length: (TusField.uploadDeferLength, "1"))
    }

    public func uploadStreamPart(_ part: ChunkPayload, of file: FileContext, in job: JobContext) throws(BackendError)
        -> Exchange<ChunkOutcome>
    {
        let operation = "send part \(part.number) of \(file.name)"
        if file.handles[Self.uploadURL] == nil { return partialUpload(part, in: job, operation: operation) }
        return try patch(part, of: file, in: job, operation: operation)
    }

    /// The final upload of the parts, or the deferred length (an empty
    /// `PATCH` at the end with `Upload-Length`).
    public func finishStream(_ file: FileContext, receipts: [String?], in job: JobContext) throws(BackendError) -> Step<FileFinish> {
        guard let url = file.handles[Self.uploadURL] else {
            var parts: [String] = []
            for (index, receipt) in receipts.enumerated() {
                guard let receipt else { throw .rejected("part \(index + 1) of \(file.name) was acknowledged without its URL") }
                parts.append(receipt)
            }
            return concatenate(parts, of: file, in: job)
        }
        var request = HTTPRequest(method: .patch, url: url)
        prepare(&request, job)
        request.headers.set(TusField.uploadOffset, String(file.size))
        request.headers.set(TusField.uploadLength, String(file.size))
        request.headers.set("Content-Type", "application/offset+octet-stream")
        let operation = "end the tus upload of \(file.name) at \(file.size) bytes"
        return .send(request) { response throws(BackendError) in
            guard response.status == 204 || response.status == 200 else { throw Self.failure(response, operation) }
            let offset = response.headers[TusField.uploadOffset].flatMap(Self.number)
            guard offset == file.size else {
                throw .rejected("\(operation): the server's offset is \(offset.map(String.init) ?? "missing"), not \(file.size)")
            }
            return .completed(url: url)
        }
    }

    // MARK: Helpers

    /// What the server offered, kept in the job's handles.
    struct Features {
        static let extensionsKey = HandleKey("tus.extensions")
        static let checksumKey = HandleKey("tus.checksum")
        static let modeKey = HandleKey("tus.mode")
        static let maximumSizeKey = HandleKey("tus.maxSize")

        var extensions: Set<String>
        var checksum: String?
        /// Partial uploads created with their bytes, concatenated at the end.
        var parallel: Bool

        /// What a stream's parts need: each created with its bytes, then concatenated.
        var takesPartialUploads: Bool { extensions.contains("concatenation") && extensions.contains("creation-with-upload") }

        init(_ handles: ServerHandles) {
            extensions = Set((handles[Self.extensionsKey] ?? "").split(separator: ",").map(String.init))
            checksum = handles[Self.checksumKey]
            parallel = handles[Self.modeKey] == "parallel"
        }

        static func handles(extensions: [String], checksum: String?, maximumSize: Int64?, parallel: Bool) -> ServerHandles {
            var handles: ServerHandles = [
                extensionsKey: extensions.joined(separator: ","), modeKey: parallel ? "parallel" : "in order",
            ]
            if let checksum { handles.set(checksumKey, checksum) }
            if let maximumSize { handles.set(maximumSizeKey, String(maximumSize)) }
            return handles
        }
    }

    private func prepare(_ request: inout HTTPRequest, _ job: JobContext) {
        request.headers.set(TusField.tusResumable, Self.version)
    }

    /// The `Upload-Checksum` algorithms the backend sends, cheapest first.
    static let checksums = ["crc32c", "sha1"]

    private func addChecksum(_ request: inout HTTPRequest, _ chunk: ChunkPayload, _ job: JobContext) {
        switch Features(job.handles).checksum {
        case "crc32c": request.headers.set(TusField.uploadChecksum, TusChecksum.crc32c(chunk.crc32c).header)
        case "sha1": request.headers.set(TusField.uploadChecksum, TusChecksum(algorithm: .sha1, digest: chunk.sha1).header)
        default: return
        }
    }

    /// `filename`, and `relativePath` when the file was found in a directory
    /// (the key Uppy sends, so servers that keep trees already read it).
    static func metadata(_ file: FileContext) -> String {
        var pairs = [(key: "filename", value: Array(file.name.utf8))]
        if file.relativePath != file.name { pairs.append((key: "relativePath", value: Array(file.relativePath.utf8))) }
        // The keys are fixed and valid: the header is always written.
        return TusMetadata.header(pairs) ?? ""
    }

    static func list(_ header: String?) -> [String] { TusField.list(header) }

    /// A tus number header (`Upload-Offset`, `Upload-Length`, `Tus-Max-Size`), as the wire reads it.
    static func number(_ text: String) -> Int64? { TusField.number(text).map(Int64.init) }

    /// `Location`, made absolute against the creation URL.
    static func location(_ response: HTTPResponse, relativeTo target: String) -> String? {
        guard let value = response.headers["Location"]?.trimmingSpacesAndTabs(), !value.isEmpty else { return nil }
        guard let base = URL(string: target), let resolved = URL(string: value, relativeTo: base) else { return value }
        return resolved.absoluteString
    }

    /// tus's statuses first, then the engine's usual reading.
    static func failure(_ response: HTTPResponse, _ operation: String) -> BackendError {
        switch response.status {
        case 409: return .outOfSync("\(operation): the server's Upload-Offset differs (409)")
        case 412: return .rejected("\(operation): the server does not speak tus \(version) (412)")
        case 413: return .rejected("\(operation): the server refuses a file or chunk this large (413)")
        case 423: return .transient("\(operation): the upload is locked by another request (423)", retryAfter: response.retryAfter)
        case 460: return .transient("\(operation): the server computed another checksum (460)")
        case 404, 410: return .uploadUnknown("\(operation): the server no longer knows the upload (\(response.status))")
        default: return response.unexpectedStatus(operation)
        }
    }
}
