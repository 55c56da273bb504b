import XferPrimitives
import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore

/// The `multipart` protocol (the fileSection API): a source of several files, each sent as
/// fragments in `multipart/form-data`, then a merge check that may name files to send again.
///
///     POST /fileSection/preLoad.do   form sourceId, fileCount       -> data {"fileIds": [...]}
///     POST /fileSection/upload.do    part sectionFile + file_block  -> code 200 once durable
///     POST /fileSection/isFinish.do  form sourceId, fileIds=a,b,c   -> data {"finishStatus":1,"fileUrls":{id:url}}
///                                                                    | data {"finishStatus":0,"failFileIds":"a,c"}
///     POST /fileSection/delete.do    form sourceId, fileIds         -> code 200, the source is gone
///
/// Answers are HTTP 200 with `{"code","msg","data"}`: code 200 success, 400 a refused request,
/// 404 an unknown source. Storage failures are HTTP 500 (and a file discarded mid-request 503),
/// which clients retry.
///
/// Each file of a source is an `Upload` of the shared store whose id is the file's fileId. The
/// file's first fragment creates it, because only fragments say what the file is (name, size,
/// fragment size); a fragment is one of its chunks; a merge is its completion, which publishes it
/// under `/downloads/{fileId}/{name}`; a failed merge deletes it, so every fragment must come again.
struct MultipartRoutes: Sendable {
    static let protocolName = "multipart"
    /// Keeps the fileIds of a whole source (35 bytes each, form-encoded) within a small form body.
    static let maximumFileCount = 1_000
    /// Bounds a file's received set, as for patch.
    static let maximumFragmentCount = 1 << 24
    static let maximumSourceIdLength = 256
    static let fileBlockField = HTTPField.Name("file_block")!

    let store: UploadStore
    let sources: MultipartSources
    let mergeFailures: MergeFailureInjector
    let baseURL: BaseURL
    let configuration: ReceiverConfiguration
    let logger: Logger

    init(store: UploadStore, baseURL: BaseURL, configuration: ReceiverConfiguration, logger: Logger) {
        self.store = store
        self.sources = MultipartSources(root: store.layout.root, io: store.io)
        self.mergeFailures = MergeFailureInjector(plan: configuration.failMerge)
        self.baseURL = baseURL
        self.configuration = configuration
        self.logger = logger
    }

    func register(on router: Router<BasicRequestContext>) {
        router.post("fileSection/preLoad.do") { request, _ in await self.guarded { try await self.preload(request) } }
        router.post("fileSection/upload.do") { request, _ in await self.guarded { try await self.upload(request) } }
        router.post("fileSection/isFinish.do") { request, _ in await self.guarded { try await self.isFinish(request) } }
        router.post("fileSection/delete.do") { request, _ in await self.guarded { try await self.delete(request) } }
    }

    // MARK: preLoad.do

    private struct PreloadData: Encodable {
        var fileIds: [String]
    }

    private func preload(_ request: Request) async throws -> Response {
        let form: [String: String]
        switch await Self.form(of: request) {
        case .success(let fields): form = fields
        case .failure(let refusal): return refusal.response
        }
        guard let sourceId = Self.sourceId(in: form) else { return Self.badSourceId }
        guard let count = form["fileCount"].flatMap({ Int($0) }), (1...Self.maximumFileCount).contains(count) else {
            return Answer.refuse(400, "fileCount must be an integer between 1 and \(Self.maximumFileCount)")
        }
        let record = try await sources.preload(sourceId: sourceId, fileCount: count)
        guard record.fileIds.count == count else {
            return Answer.refuse(400, "this sourceId was preloaded with \(record.fileIds.count) files, not \(count)")
        }
        return Answer.ok(PreloadData(fileIds: record.fileIds))
    }

    // MARK: upload.do

    private func upload(_ request: Request) async throws -> Response {
        guard let header = request.headers[Self.fileBlockField] else {
            return Answer.refuse(400, "the file_block header is missing")
        }
        guard let block = FileBlock(header: header) else {
            return Answer.refuse(400, "file_block must be a JSON array holding one object with \(FileBlock.fieldList)")
        }
        guard let expectedMD5 = FileBlock.digest(hex: block.fragmentMd5) else {
            return Answer.refuse(400, "fragmentMd5 must be 32 hex digits")
        }
        let geometry: FileGeometry
        switch FileGeometry.implied(by: block, maximumFragmentSize: configuration.maximumChunkSize) {
        case .success(let implied): geometry = implied
        case .failure(let refusal): return refusal.response
        }
        guard block.totalFileSize <= configuration.maximumUploadSize else {
            return Answer.refuse(413, "totalFileSize \(block.totalFileSize) is larger than this receiver accepts (\(configuration.maximumUploadSize) bytes)")
        }
        let path: RelativePath
        switch RelativePath.parse(block.fileName) {
        case .success(let parsed): path = parsed
        case .failure(let problem): return Answer.refuse(400, problem.message("fileName"))
        }
        guard let boundary = StreamingFormReader<RequestBody>.boundary(contentType: request.headers[.contentType]) else {
            return Answer.refuse(400, "Content-Type must be multipart/form-data with a boundary")
        }
        guard let source = try await sources.source(id: block.sourceId) else { return Self.unknownSource }
        guard source.fileIds.contains(block.fileId) else {
            return Answer.refuse(400, "fileId \(block.fileId.prefix(64)) is not part of this source")
        }

        let reader = StreamingFormReader(body: request.body, boundary: boundary)
        let part: FormPart
        do throws(FormFailure) {
            guard let found = try await Self.sectionFilePart(in: reader) else {
                return Answer.refuse(400, "the form has no sectionFile part")
            }
            part = found
        } catch {
            return Answer.refuse(400, error.description)
        }
        let expectedName = "\(block.fileId)-\(block.fragmentIndex)"
        guard let filename = part.filename, filename == expectedName || filename.hasPrefix(expectedName + ".") else {
            return Answer.refuse(400, "sectionFile's filename must be \(expectedName) or \(expectedName).<ext>")
        }

        if geometry.size == 0 {
            // Nothing to write: the upload's creation is the durable record that the file exists.
            do throws(FormFailure) {
                if try await reader.nextContent() != nil {
                    return Answer.refuse(400, "the fragment holds bytes, fragmentSize says 0")
                }
            } catch {
                return Answer.refuse(400, error.description)
            }
            guard expectedMD5 == Array(Insecure.MD5.hash(data: [UInt8]())) else {
                return Answer.refuse(400, "fragmentMd5 does not match the fragment's bytes")
            }
        }
        guard let upload = try await fileUpload(block.fileId, path: path, geometry: geometry) else {
            return Answer.refuse(400, "the fragment's file (name, size or fragment size) differs from the file's earlier fragments")
        }
        guard geometry.size > 0 else { return Answer.ok() }

        do {
            try await upload.writeChunk(block.fragmentIndex + 1, body: PartContent(reader: reader), expectedMD5: expectedMD5)
            return Answer.ok()
        } catch let error as UploadError {
            switch error {
            // A merged file keeps its bytes; the fragment is already in them.
            case .completed: return Answer.ok()
            case .deleted: return Answer.unavailable("the file was discarded while its fragment arrived; send it again")
            case .bodyTooLarge: return Answer.refuse(400, "the fragment has more bytes than fragmentSize (\(block.fragmentSize))")
            case .bodyTooShort(let received, _):
                return Answer.refuse(400, "the fragment has \(received) bytes, fragmentSize says \(block.fragmentSize)")
            case .digestMismatch: return Answer.refuse(400, "fragmentMd5 does not match the fragment's bytes")
            case .bodyInterrupted: return Answer.refuse(400, "the fragment's body was cut short or malformed")
            case .corrupt: return storageFailure(error)
            }
        }
    }

    /// The file's upload as this fragment describes it, created by the file's first fragment. Nil
    /// when earlier fragments, acknowledged ones, described the file otherwise.
    private func fileUpload(_ fileId: String, path: RelativePath, geometry: FileGeometry) async throws -> Upload? {
        func matches(_ meta: UploadMeta) -> Bool {
            meta.protocolName == Self.protocolName && meta.size == geometry.size && meta.chunkSize == geometry.fragmentSize
                && meta.fileName.utf8.elementsEqual(path.text.utf8)
        }
        let upload = try await store.upload(
            id: fileId, creatingIfAbsent: Self.protocolName, path: path, size: geometry.size, chunkSize: geometry.fragmentSize)
        if matches(upload.meta) { return upload }
        // A creator whose fragment was then refused (a wrong size, say) left its numbers but nothing
        // acknowledged; they bind no one. (A zero-byte file exists only once its fragment was accepted.)
        guard upload.meta.chunkCount > 0, try await upload.receivedChunks().isEmpty, try await upload.completionRecord() == nil else {
            return nil
        }
        _ = try await store.delete(id: fileId)
        let replaced = try await store.upload(
            id: fileId, creatingIfAbsent: Self.protocolName, path: path, size: geometry.size, chunkSize: geometry.fragmentSize)
        return matches(replaced.meta) ? replaced : nil
    }

    /// Skips parts up to the one named `sectionFile`; nil when the form has none.
    private static func sectionFilePart<Body>(in reader: StreamingFormReader<Body>) async throws(FormFailure) -> FormPart? {
        while let part = try await reader.nextPart() {
            if part.name == "sectionFile" { return part }
        }
        return nil
    }

    // MARK: isFinish.do

    private struct FinishData: Encodable {
        var finishStatus: Int
        var fileUrls: [String: String]?
        var failFileIds: String?
    }

    private enum MergeOutcome {
        case merged(url: String)
        case failed(reason: String)
    }

    private func isFinish(_ request: Request) async throws -> Response {
        let form: [String: String]
        switch await Self.form(of: request) {
        case .success(let fields): form = fields
        case .failure(let refusal): return refusal.response
        }
        guard let sourceId = Self.sourceId(in: form) else { return Self.badSourceId }
        let fileIds = Self.idList(form["fileIds"])
        guard !fileIds.isEmpty else { return Answer.refuse(400, "fileIds must name the source's files, comma-separated") }
        guard let source = try await sources.source(id: sourceId) else { return Self.unknownSource }
        if let stranger = fileIds.first(where: { !source.fileIds.contains($0) }) {
            return Answer.refuse(400, "fileId \(stranger.prefix(64)) is not part of this source")
        }

        let base = baseURL.resolve(for: request)
        var urls: [String: String] = [:]
        var failed: [String] = []
        for fileId in fileIds {
            let index = source.fileIds.firstIndex(of: fileId) ?? 0
            switch try await merge(fileId, index: index, base: base) {
            case .merged(let url):
                urls[fileId] = url
            case .failed(let reason):
                logger.info("Merge failed", metadata: ["fileId": "\(fileId)", "reason": "\(reason)"])
                failed.append(fileId)
            }
        }
        if failed.isEmpty { return Answer.ok(FinishData(finishStatus: 1, fileUrls: urls)) }
        return Answer.ok(FinishData(finishStatus: 0, failFileIds: failed.joined(separator: ",")))
    }

    /// Assembles one file, or says why it cannot be. Merging a merged file answers its URL again,
    /// so a client killed during the check gets the same answer when it asks anew.
    private func merge(_ fileId: String, index: Int, base: String) async throws -> MergeOutcome {
        guard let upload = try await store.upload(id: fileId), upload.meta.protocolName == Self.protocolName else {
            return .failed(reason: "no fragment arrived")
        }
        let url = DownloadRoutes.url(base: base, upload: upload)
        do {
            if try await upload.completionRecord() != nil { return .merged(url: url) }
            let received = try await upload.receivedChunks()
            if received.count == upload.meta.chunkCount, await mergeFailures.shouldFail(fileId: fileId, index: index) {
                // Like a real failed merge: what was received is unusable, so all of it must come again.
                _ = try await store.delete(id: fileId)
                return .failed(reason: "failure injected by --fail-merge; fragments discarded")
            }
            switch try await upload.complete() {
            case .completed: return .merged(url: url)
            case .missing(let missing): return .failed(reason: "\(missing.count) fragments missing")
            }
        } catch UploadError.deleted {
            return .failed(reason: "discarded meanwhile")
        }
    }

    // MARK: delete.do

    private func delete(_ request: Request) async throws -> Response {
        let form: [String: String]
        switch await Self.form(of: request) {
        case .success(let fields): form = fields
        case .failure(let refusal): return refusal.response
        }
        guard let sourceId = Self.sourceId(in: form) else { return Self.badSourceId }
        // Dropping what is already gone succeeds: cancel is best-effort and may be repeated.
        guard let source = try await sources.source(id: sourceId) else { return Answer.ok() }
        // Files first: a crash in between leaves a source whose files are gone, which a repeat finishes.
        for fileId in source.fileIds {
            _ = try await store.delete(id: fileId)
        }
        _ = try await sources.remove(id: sourceId)
        return Answer.ok()
    }

    // MARK: Reading requests

    /// A refusal decided while reading a request, answered as is.
    struct Refusal: Error {
        let response: Response
    }

    /// The form-urlencoded fields of a small body (`+` is a space, `%XX` a UTF-8 byte); the first of
    /// repeated names wins.
    private static func form(of request: Request) async -> Result<[String: String], Refusal> {
        let body: ByteBuffer
        do {
            body = try await SmallBody.collect(request)
        } catch .tooLarge {
            return .failure(Refusal(response: Answer.refuse(400, "the form is larger than \(SmallBody.limit) bytes")))
        } catch {
            return .failure(Refusal(response: Answer.refuse(400, "the request body could not be read")))
        }
        var fields: [String: String] = [:]
        let text = String(decoding: body.readableBytesView, as: UTF8.self)
        for pair in text.split(separator: "&") {
            let halves = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard let name = decodeFormComponent(halves[0]),
                let value = decodeFormComponent(halves.count > 1 ? halves[1] : "")
            else {
                return .failure(Refusal(response: Answer.refuse(400, "the body is not valid application/x-www-form-urlencoded")))
            }
            if fields[name] == nil { fields[name] = value }
        }
        return .success(fields)
    }

    private static func decodeFormComponent(_ text: Substring) -> String? {
        PercentEncoding.decode(text.replacingOccurrences(of: "+", with: " "))
    }

    private static func sourceId(in form: [String: String]) -> String? {
        guard let id = form["sourceId"], !id.isEmpty, id.utf8.count <= maximumSourceIdLength,
            !id.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7f })
        else { return nil }
        return id
    }

    private static func idList(_ text: String?) -> [String] {
        var seen = Set<String>()
        return (text ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { !$0.isEmpty && seen.insert($0).inserted }
    }

    private static var badSourceId: Response {
        Answer.refuse(400, "sourceId must be 1 to \(maximumSourceIdLength) bytes without control characters")
    }

    private static var unknownSource: Response { Answer.refuse(404, "unknown sourceId: call preLoad.do first") }

    // MARK: Failures

    private func storageFailure(_ error: any Error) -> Response {
        XferReceiver.storageFailure(error, logger: logger, answer: Answer.storageError)
    }

    private func guarded(_ handler: () async throws -> Response) async -> Response {
        do {
            return try await handler()
        } catch {
            return storageFailure(error)
        }
    }
}

// MARK: - Answers

extension MultipartRoutes {
    /// The protocol's envelope, `{"code","msg","data"}`.
    enum Answer {
        private struct Envelope<Payload: Encodable>: Encodable {
            var code: Int
            var msg: String
            var data: Payload
        }

        private struct Empty: Encodable {}

        static func ok(_ data: some Encodable) -> Response {
            JSONResponse.make(.ok, Envelope(code: 200, msg: "ok", data: data))
        }

        static func ok() -> Response { ok(Empty()) }

        /// A refusal travels as HTTP 200: the JSON code carries it, as the contract says.
        static func refuse(_ code: Int, _ message: String) -> Response {
            JSONResponse.make(.ok, Envelope(code: code, msg: message, data: Empty()))
        }

        /// Worth retrying: HTTP 503 makes any client try again.
        static func unavailable(_ message: String) -> Response {
            JSONResponse.make(.serviceUnavailable, Envelope(code: 503, msg: message, data: Empty()))
        }

        static var storageError: Response {
            JSONResponse.make(.internalServerError, Envelope(code: 500, msg: "storage error", data: Empty()))
        }
    }
}

// MARK: - Fragments

extension MultipartRoutes {
    /// The `file_block` header: a JSON array holding one object.
    struct FileBlock: Decodable {
        var sourceId: String
        var fileId: String
        var fragmentIndex: Int
        var fragmentOffset: Int
        var fragmentSize: Int
        var totalFileFragment: Int
        var totalFileSize: Int
        var fileName: String
        var fragmentMd5: String

        static let fieldList =
            "sourceId, fileId, fragmentIndex, fragmentOffset, fragmentSize, totalFileFragment, totalFileSize, fileName, fragmentMd5"

        init?(header: String) {
            guard let blocks = try? JSONDecoder().decode([FileBlock].self, from: Data(header.utf8)), blocks.count == 1 else {
                return nil
            }
            self = blocks[0]
        }

        /// The 16 bytes of an MD5 written in hex (either case).
        static func digest(hex: String) -> [UInt8]? {
            guard hex.utf8.count == 32 else { return nil }
            return Hex.bytes(hex)
        }
    }

    /// How a file is cut, as one fragment's numbers imply it. Every fragment of a file must imply
    /// the same: fragments may arrive in any order, so whichever comes first creates the file.
    struct FileGeometry: Equatable {
        var size: Int
        /// The size of every fragment but the last; for a one-fragment file, its size (at least 1).
        var fragmentSize: Int

        static func implied(by block: FileBlock, maximumFragmentSize: Int) -> Result<FileGeometry, Refusal> {
            func refuse(_ message: String) -> Result<FileGeometry, Refusal> {
                .failure(Refusal(response: Answer.refuse(400, message)))
            }
            let count = block.totalFileFragment
            let index = block.fragmentIndex
            let size = block.totalFileSize
            guard size >= 0, block.fragmentOffset >= 0, block.fragmentSize >= 0, count >= 1, index >= 0, index < count else {
                return refuse("fragment numbers out of range (sizes and offsets >= 0, 0 <= fragmentIndex < totalFileFragment)")
            }
            guard count <= MultipartRoutes.maximumFragmentCount else {
                return refuse("more than \(MultipartRoutes.maximumFragmentCount) fragments: use larger fragments")
            }
            let fragmentSize: Int
            if count == 1 {
                fragmentSize = max(size, 1)
            } else if index < count - 1 {
                fragmentSize = block.fragmentSize
            } else {
                // The last fragment may be short; its offset still tells the others' size.
                guard block.fragmentOffset % index == 0 else { return refuse("fragmentOffset is not a multiple of the fragment size") }
                fragmentSize = block.fragmentOffset / index
            }
            guard fragmentSize >= 1, fragmentSize <= maximumFragmentSize else {
                return refuse("fragments must hold between 1 and \(maximumFragmentSize) bytes")
            }
            let expectedCount = size == 0 ? 1 : (size - 1) / fragmentSize + 1
            let offset = index * fragmentSize
            guard expectedCount == count, block.fragmentOffset == offset,
                block.fragmentSize == min(fragmentSize, size - offset)
            else {
                return refuse(
                    "fragmentIndex, fragmentOffset, fragmentSize, totalFileFragment and totalFileSize do not describe one file cut in equal fragments")
            }
            return .success(FileGeometry(size: size, fragmentSize: fragmentSize))
        }
    }

    /// One form part's content as the byte stream `Upload.writeChunk` consumes.
    struct PartContent<Body: AsyncSequence>: AsyncSequence where Body.Element == ByteBuffer {
        typealias Element = ByteBuffer

        let reader: StreamingFormReader<Body>

        struct AsyncIterator: AsyncIteratorProtocol {
            let reader: StreamingFormReader<Body>

            mutating func next() async throws -> ByteBuffer? {
                try await reader.nextContent()
            }
        }

        func makeAsyncIterator() -> AsyncIterator { AsyncIterator(reader: reader) }
    }
}

// MARK: - Failing merges on demand

/// `xfer serve --fail-merge N[@INDEX]`: the first N merge checks (`isFinish.do`) of each file fail
/// as if the server could not assemble it, for every file or only for the file at INDEX (0-based,
/// in its source). Only complete files count: a file still missing fragments fails on its own.
/// The failed file's fragments are discarded, so the client must truly send them again.
/// Counts live in memory and start over when the receiver restarts.
public struct MergeFailurePlan: Sendable, Hashable {
    /// How many checks of each file fail, at least 1.
    public var count: Int
    /// The file's position in its source; nil for every file.
    public var fileIndex: Int?

    public init(count: Int, fileIndex: Int? = nil) {
        precondition(count >= 1 && (fileIndex ?? 0) >= 0, "a merge failure plan needs count >= 1 and index >= 0")
        self.count = count
        self.fileIndex = fileIndex
    }

    /// Parses `N` or `N@INDEX`; nil for anything else.
    public init?(_ text: String) {
        let parts = text.split(separator: "@", maxSplits: 1, omittingEmptySubsequences: false)
        guard let count = Int(parts[0]), count >= 1 else { return nil }
        var index: Int?
        if parts.count == 2 {
            guard let parsed = Int(parts[1]), parsed >= 0 else { return nil }
            index = parsed
        }
        self.init(count: count, fileIndex: index)
    }
}

/// Decides which merge checks fail under a `MergeFailurePlan`, counting per file.
actor MergeFailureInjector {
    private let plan: MergeFailurePlan?
    private var failures: [String: Int] = [:]

    init(plan: MergeFailurePlan?) {
        self.plan = plan
    }

    /// Whether this check of the file must fail; counts it when so.
    func shouldFail(fileId: String, index: Int) -> Bool {
        guard let plan, plan.fileIndex == nil || plan.fileIndex == index else { return false }
        let done = failures[fileId, default: 0]
        guard done < plan.count else { return false }
        failures[fileId] = done + 1
        return true
    }
}
