import FoundationEssentials
import XferPrimitives
import Xfer
import XferWire

/// The IETF's Resumable Uploads for HTTP (draft-ietf-httpbis-resumable-upload):
/// what Apple's `URLSession` speaks since iOS 17, and `xfer serve` at `/resumable/`.
///
/// Each file is one upload resource. A file of one chunk goes in one request,
/// created with all its bytes (`Upload-Complete: ?1`). A larger one is
/// created empty (`Upload-Complete: ?0`, `Upload-Length`), which hands out
/// its URL before any byte is at stake, then appended to chunk after chunk
/// (`PATCH`, `Upload-Offset`, `application/partial-upload`), the last with
/// `Upload-Complete: ?1`. A resume asks the offset with `HEAD` and goes on
/// from there, mid-chunk if need be; a server that forgot the upload gets
/// the file anew. `xfer cancel` sends `DELETE`.
///
/// Drafts are told apart by `Upload-Draft-Interop-Version`; this backend
/// speaks 6 (drafts -04 and -05: Apple's stack, tusd) and 8 (drafts -09 to
/// -12). Unless told which, the job asks the server with `OPTIONS` and keeps
/// the answer: 8 when the server accepts it, else the version it names, else
/// 6. A server asking for digests (`Want-Content-Digest`) gets
/// `Content-Digest` with every request's bytes. See Docs/protocols.md.
public struct IETFBackend: UploadBackend, TargetNormalizing, JobHandleInventing, ChunkOrdering, JobStarting, FileOpening,
    FileReconciling, FileFinishing, FileUploadCancelling
{
    /// The drafts' interop versions this backend speaks.
    public enum InteropVersion: Int, Sendable, CaseIterable {
        /// Drafts -04 and -05.
        case v6 = 6
        /// Drafts -09 to -12.
        case v8 = 8

        public static let newest = InteropVersion.v8
    }

    public let name = "ietf"

    public let traits = BackendTraits(
        defaultChunkSize: 8 << 20,
        defaultConcurrency: 4,
        authentication: .authorizationHeader,
        emptyFileHasOneChunk: true,
        smallRequestConcurrency: BackendTraits.wideSmallRequests,
        // One append at a time per file, as the draft orders: each waits a round trip for its
        // answer, so a large file's appends must be long enough to keep the link busy through
        // it (64 MiB: 0.94 of a 200 Mbit/s link at 50 ms; 8 MiB reached 0.8). A kill loses
        // none of an append: the resume asks the server's offset.
        largeFileChunkSize: 64 << 20)

    /// The upload resource of a file created empty (a file of one chunk has none).
    public static let uploadURL = HandleKey("url")
    static let versionKey = HandleKey("ietf.version")
    static let digestKey = HandleKey("ietf.digest")
    static let maximumSizeKey = HandleKey("ietf.maxSize")
    /// Set when the target names the one file a push named (no trailing `/`).
    static let namedFileKey = HandleKey("ietf.namedFile")

    /// nil: ask the server (`startJob`).
    public let interopVersion: InteropVersion?

    public init(interopVersion: InteropVersion? = nil) {
        self.interopVersion = interopVersion
    }

    // MARK: Discovery

    /// The URL as given: a trailing `/` makes it a place where files are
    /// created by their relative path, as `curl -T FILE URL/` does.
    public func normalizedTarget(_ target: String) throws(BackendError) -> String {
        _ = try HTTPTarget.normalized(target)
        return target.trimmingSpacesAndTabs()
    }

    /// As `curl -T`: one file named, and a target whose path does not end
    /// in `/`, is created at the target itself. Kept with the job, so its
    /// later runs create it at the same URL.
    public func makeJobHandles(for job: JobContext) -> ServerHandles {
        var handles = ServerHandles()
        if let name = job.namedFile, !Self.path(of: job.target).hasSuffix("/") { handles.set(Self.namedFileKey, name) }
        return handles
    }

    /// Appends to one upload are sequential by the draft; files go in parallel.
    public func chunkOrder(for job: JobContext) -> ChunkOrder { .sequentialWithinFile }

    /// `OPTIONS` on the target: the interop version, the limits
    /// (`Upload-Limit`) and the digest the server wants.
    public func startJob(_ job: JobContext) -> Step<JobStart> {
        var request = HTTPRequest(method: .options, url: job.target)
        let asked = interopVersion ?? .newest
        request.headers.set(IETFField.uploadDraftInteropVersion, String(asked.rawValue))
        // The files are read one at a time if a limit is named, never gathered:
        // a job of 100,000 files would hold them all for a check most servers skip.
        let files = job.files
        let chosen = interopVersion
        return .send(request) { response throws(BackendError) in
            let operation = "ask the server about resumable uploads"
            if [401, 403].contains(response.status) || response.status >= 500 { throw response.unexpectedStatus(operation) }
            let named = response.headers[IETFField.uploadDraftInteropVersion].flatMap { Int($0.trimmingSpacesAndTabs()) }
                .flatMap(InteropVersion.init(rawValue:))
            let version: InteropVersion
            if let chosen {
                if !response.isSuccess, let named, named != chosen {
                    throw .rejected("the server speaks the resumable uploads draft's interop version \(named.rawValue), not \(chosen.rawValue)")
                }
                version = chosen
            } else if response.isSuccess {
                version = named ?? asked
            } else {
                // A server that does not take the newest draft names the one it speaks, or
                // (one without OPTIONS) names none: then the version deployed servers speak.
                version = named ?? .v6
            }
            var handles: ServerHandles = [Self.versionKey: String(version.rawValue)]
            if response.isSuccess {
                let limits = Self.limits(response.headers[IETFField.uploadLimit])
                let maximumSize = limits["max-size"], maximumAppend = limits["max-append-size"]
                if maximumSize != nil || maximumAppend != nil {
                    // One pass for both limits: each file is a record read from the state store.
                    for file in files {
                        if let maximum = maximumSize, file.size > maximum {
                            throw .rejected("\(file.name) is \(file.size) bytes; the server takes uploads of at most \(maximum) (Upload-Limit max-size)")
                        }
                        if let maximum = maximumAppend, file.chunkSize > maximum {
                            throw .rejected(
                                "the server takes at most \(maximum) bytes per request (Upload-Limit max-append-size); \(file.name) has chunks of \(file.chunkSize): send smaller chunks")
                        }
                    }
                }
                if let maximum = maximumSize { handles.set(Self.maximumSizeKey, String(maximum)) }
                if let wanted = response.headers["Want-Content-Digest"], let digest = ContentDigest.preferred(in: wanted) {
                    handles.set(Self.digestKey, digest.rawValue)
                }
            }
            return JobStart(handles: handles)
        }
    }

    // MARK: Files

    /// A file of more than one chunk is created empty, which gives its URL
    /// before any byte is at stake. A file of one chunk is created with its
    /// bytes by `uploadChunk`: one request, and a kill re-sends at most that chunk.
    public func openFile(_ file: FileContext, in job: JobContext) -> Step<OpenedFile> {
        guard file.chunkCount > 1 else { return .skip }
        var request = HTTPRequest(method: .post, url: Self.creationURL(of: file, in: job))
        prepare(&request, job)
        request.headers.set(IETFField.uploadComplete, IETFField.boolean(false))
        request.headers.set(IETFField.uploadLength, String(file.size))
        let target = job.target
        let operation = "create the upload of \(file.name)"
        return .send(request) { response throws(BackendError) in
            guard response.isSuccess else { throw Self.failure(response, operation) }
            guard let location = Self.location(response, relativeTo: target) else {
                throw .rejected("\(operation): the server's answer has no Location: it does not take resumable uploads there")
            }
            return OpenedFile(handles: [Self.uploadURL: location])
        }
    }

    /// `HEAD` on the upload: its offset, and whether it is complete.
    public func reconcileFile(_ file: FileContext, in job: JobContext) -> Step<Reconciliation<Never>> {
        guard let url = file.handles[Self.uploadURL] else { return .skip }
        var request = HTTPRequest(method: .head, url: url)
        prepare(&request, job)
        let operation = "ask the server how much of \(file.name) it holds"
        return .send(request) { response throws(BackendError) in
            if [404, 410].contains(response.status) {
                throw .uploadUnknown("\(operation): the server no longer knows the upload (\(response.status))")
            }
            guard response.isSuccess else { throw Self.failure(response, operation) }
            guard let offset = Self.integer(response.headers[IETFField.uploadOffset]) else {
                throw .transient("\(operation): the answer has no Upload-Offset")
            }
            if let length = Self.integer(response.headers[IETFField.uploadLength]), length != file.size {
                throw .uploadUnknown("\(operation): the server's upload is \(length) bytes long, the file \(file.size)")
            }
            if Self.isComplete(response) {
                guard offset == file.size else {
                    throw .uploadUnknown("\(operation): the server completed the upload at \(offset) of \(file.size) bytes")
                }
                return .complete(url: url)
            }
            return .serverHasPrefix(bytes: offset)
        }
    }

    public func uploadChunk(_ chunk: ChunkPayload, of file: FileContext, in job: JobContext) throws(BackendError) -> Exchange<ChunkOutcome> {
        guard let url = file.handles[Self.uploadURL] else { return createWhole(chunk, of: file, in: job) }
        let operation = "send chunk \(chunk.number)/\(file.chunkCount) of \(file.name)"
        let end = chunk.offset + Int64(chunk.count)
        let last = end == file.size
        var request = HTTPRequest(method: .patch, url: url, body: RequestBody(chunk: chunk))
        prepare(&request, job)
        request.headers.set(IETFField.uploadOffset, String(chunk.offset))
        request.headers.set(IETFField.uploadComplete, IETFField.boolean(last))
        request.headers.set("Content-Type", "application/partial-upload")
        addDigest(&request, chunk, job)
        let digested = request.headers.contains("Content-Digest")
        return Exchange(request) { response throws(BackendError) in
            if response.status == 400, Self.isComplete(response) || response.text.contains("completed-upload") {
                // The upload was already complete (the answer to an earlier last chunk was lost).
                if last { return .stored(fileURL: url) }
                throw .outOfSync("\(operation): the server says the upload is complete")
            }
            guard response.isSuccess else { throw Self.failure(response, operation, digested: digested) }
            if last { return .stored(fileURL: Self.location(response, relativeTo: url) ?? url) }
            // Draft -04 servers report the offset; later ones may leave it out.
            if let offset = Self.integer(response.headers[IETFField.uploadOffset]), offset != end {
                throw .outOfSync("\(operation): the server's offset is \(offset), not \(end)")
            }
            return .stored()
        }
    }

    /// A file of one chunk: created with all its bytes.
    private func createWhole(_ chunk: ChunkPayload, of file: FileContext, in job: JobContext) -> Exchange<ChunkOutcome> {
        let creation = Self.creationURL(of: file, in: job)
        var request = HTTPRequest(method: .post, url: creation, body: RequestBody(chunk: chunk))
        prepare(&request, job)
        request.headers.set(IETFField.uploadComplete, IETFField.boolean(true))
        request.headers.set(IETFField.uploadLength, String(file.size))
        request.headers.set("Content-Type", "application/octet-stream")
        addDigest(&request, chunk, job)
        let digested = request.headers.contains("Content-Digest")
        let operation = "send \(file.name)"
        return Exchange(request) { response throws(BackendError) in
            guard response.isSuccess else { throw Self.failure(response, operation, digested: digested) }
            if response.headers[IETFField.uploadComplete].map(Self.boolean) == false {
                throw .transient("\(operation): the server did not take the whole file")
            }
            return .stored(fileURL: Self.location(response, relativeTo: creation) ?? creation)
        }
    }

    /// Every byte is on the server but the upload was never told it is
    /// complete (a resume found it so): an empty append that completes it.
    public func finishFile(_ file: FileContext, in job: JobContext) -> Step<FileFinish> {
        guard let url = file.handles[Self.uploadURL] else { return .answer(.missing(Array(0..<file.chunkCount))) }
        var request = HTTPRequest(method: .patch, url: url)
        prepare(&request, job)
        request.headers.set(IETFField.uploadOffset, String(file.size))
        request.headers.set(IETFField.uploadComplete, IETFField.boolean(true))
        request.headers.set("Content-Type", "application/partial-upload")
        let plan = file.plan
        let operation = "complete the upload of \(file.name)"
        return .send(request) { response throws(BackendError) in
            if response.isSuccess { return .completed(url: Self.location(response, relativeTo: url) ?? url) }
            if response.status == 400, Self.isComplete(response) || response.text.contains("completed-upload") { return .completed(url: url) }
            guard response.status == 409, let offset = Self.integer(response.headers[IETFField.uploadOffset]) else {
                throw Self.failure(response, operation)
            }
            if offset >= file.size, Self.isComplete(response) { return .completed(url: url) }
            // The server lacks the end of the file: the chunks from its offset on.
            let first = (0..<plan.count).first { plan.offset(of: $0) + Int64(plan.length(of: $0)) > offset } ?? 0
            return .missing(Array(first..<plan.count))
        }
    }

    /// `DELETE` of every upload resource the job created.
    public func cancelRequests(for job: JobContext) -> [HTTPRequest] {
        job.files.flatMap { cancelRequests(forFile: $0, in: job) }
    }

    public func cancelRequests(forFile file: FileContext, in job: JobContext) -> [HTTPRequest] {
        guard let url = file.handles[Self.uploadURL] else { return [] }
        var request = HTTPRequest(method: .delete, url: url)
        prepare(&request, job)
        return [request]
    }

    // MARK: Helpers

    /// Where `file` is created: the target itself for the one file it names,
    /// else the target as a directory plus the file's relative path (each
    /// segment percent-encoded), the query kept last.
    static func creationURL(of file: FileContext, in job: JobContext) -> String {
        if job.handles[namedFileKey] == file.relativePath, job.files.count <= 1 { return job.target }
        let (url, query) = splitQuery(job.target)
        let base = url.hasSuffix("/") ? url : url + "/"
        return base + encodedPath(file.relativePath) + query
    }

    /// `relativePath` with each segment percent-encoded (empty ones dropped). Most paths need
    /// nothing (letters, digits, `-._~`, single slashes between segments) and are taken as
    /// they are: this runs once per file, and a tree's files are many.
    static func encodedPath(_ relativePath: String) -> String {
        var previous = UInt8(ascii: "/")
        let plain = relativePath.utf8.allSatisfy { byte in
            defer { previous = byte }
            return byte == UInt8(ascii: "/") ? previous != UInt8(ascii: "/") : PercentEncoding.isUnreserved(byte)
        }
        if plain, previous != UInt8(ascii: "/") { return relativePath }
        return relativePath.split(separator: "/").map { String($0).percentEncodedPathSegment }.joined(separator: "/")
    }

    /// `target` cut before its query (`?...`, kept whole in `query`).
    static func splitQuery(_ target: String) -> (url: String, query: String) {
        // Searched as bytes: a search of the characters cost ~12,000 instructions a file.
        guard let mark = target.utf8.firstIndex(of: UInt8(ascii: "?")) else { return (target, "") }
        return (String(target[..<mark]), String(target[mark...]))
    }

    /// The path of an http(s) URL (without its query).
    static func path(of target: String) -> String {
        let url = splitQuery(target).url
        guard let scheme = url.firstRange(of: "://") else { return url }
        let rest = url[scheme.upperBound...]
        return rest.firstIndex(of: "/").map { String(rest[$0...]) } ?? ""
    }

    private func prepare(_ request: inout HTTPRequest, _ job: JobContext) {
        let version = job.handles[Self.versionKey] ?? String((interopVersion ?? .newest).rawValue)
        request.headers.set(IETFField.uploadDraftInteropVersion, version)
    }

    private func addDigest(_ request: inout HTTPRequest, _ chunk: ChunkPayload, _ job: JobContext) {
        guard let digest = job.handles[Self.digestKey].flatMap(ContentDigest.init(rawValue:)) else { return }
        request.headers.set("Content-Digest", digest.header(for: chunk))
    }

    /// `Upload-Complete: ?1`, or interop version 3's `Upload-Incomplete: ?0`
    /// (servers meet mixtures of both).
    static func isComplete(_ response: HTTPResponse) -> Bool {
        if let complete = response.headers[IETFField.uploadComplete] { return boolean(complete) }
        if let incomplete = response.headers[IETFField.uploadIncomplete] { return !boolean(incomplete) }
        return false
    }

    /// An sf-boolean as the wire reads it; anything but `?1` is not "true".
    static func boolean(_ text: String) -> Bool { IETFField.boolean(text) == true }

    /// A non-negative sf-integer as the wire reads it.
    static func integer(_ text: String?) -> Int64? {
        text.flatMap { IETFField.integer($0) }.map(Int64.init)
    }

    /// Without surrounding spaces and tabs (HTTP's OWS). Foundation's
    /// `trimmingCharacters(in:)` bridged through NSString: with `location`'s
    /// URL parsing it was 4 % of a small file's client CPU.
    static func trimmed(_ text: String) -> Substring {
        var slice = Substring(text)
        while let first = slice.first, first == " " || first == "\t" { slice.removeFirst() }
        while let last = slice.last, last == " " || last == "\t" { slice.removeLast() }
        return slice
    }

    /// `Upload-Limit`'s integer members (`max-size=N, min-size=0, ...`), as the wire reads them.
    static func limits(_ header: String?) -> [String: Int64] {
        IETFField.limits(header).mapValues(Int64.init)
    }

    /// `Location`, made absolute against the URL the request went to.
    static func location(_ response: HTTPResponse, relativeTo base: String) -> String? {
        guard let value = response.headers["Location"].map({ String(trimmed($0)) }), !value.isEmpty else { return nil }
        // An absolute URL (what servers send) needs no resolving.
        if value.hasPrefix("http://") || value.hasPrefix("https://") { return value }
        guard let baseURL = URL(string: base), let resolved = URL(string: value, relativeTo: baseURL) else { return value }
        return resolved.absoluteString
    }

    /// The draft's statuses first, then the engine's usual reading. A
    /// problem's title (RFC 9457) says what the server objected to.
    /// `digested`: the request carried a `Content-Digest`, and a 400 that
    /// names it means the bytes were damaged on the way (the draft gives
    /// no status of its own): sent again.
    static func failure(_ response: HTTPResponse, _ operation: String, digested: Bool = false) -> BackendError {
        let detail = response.serverMessage.map { ": \($0)" } ?? ""
        if digested, response.status == 400, detail.lowercased().contains("digest") {
            return .transient("\(operation): the server computed another digest of the bytes\(detail)")
        }
        switch response.status {
        case 409: return .outOfSync("\(operation): the server's Upload-Offset differs (409)\(detail)")
        case 404, 410: return .uploadUnknown("\(operation): the server does not know the upload (\(response.status))\(detail)")
        case 413:
            let limit = limits(response.headers[IETFField.uploadLimit])["max-size"].map { " (it takes at most \($0) bytes)" } ?? ""
            return .rejected("\(operation): the server refuses an upload this large (413)\(limit)")
        case 400, 415: return .rejected("\(operation): the server refused the request (\(response.status))\(detail)")
        default: return response.unexpectedStatus(operation)
        }
    }
}
