import XferWire
import FoundationEssentials
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
/// which clients retry. MultipartWire.swift has the wire's shapes.
///
/// Each file of a source is an `Upload` of the shared store whose id is the file's fileId. The
/// file's first fragment creates it, because only fragments say what the file is (name, size,
/// fragment size); a fragment is one of its chunks; a merge is its completion, which publishes it
/// under `/downloads/{fileId}/{name}`; a failed merge deletes it, so every fragment must come again.
struct MultipartRoutes: ProtocolRoutes {
    static let protocolName = "multipart"
    /// Keeps the fileIds of a whole source (35 bytes each, form-encoded) within a small form body.
    static let maximumFileCount = 1_000
    /// Bounds a file's received set, as for patch.
    static let maximumFragmentCount = 1 << 24

    let environment: RouteEnvironment
    let sources: any MultipartSourceStore

    static var requiredCapabilities: Set<StorageComposer.Capability> { [.multipartSources] }

    init?(_ environment: RouteEnvironment) {
        guard let storage = environment.storage.multipartSources else { return nil }
        self.environment = environment
        sources = storage.multipartSources
    }

    func register<Context: ReceiverRequestContext>(on router: some RouterMethods<Context>) {
        let routes = router.group().add(middleware: RefusalMiddleware(form: .envelope, logger: logger, refusing: Refusal.unreadableForm))
        routes.post("fileSection/preLoad.do") { request, _ in try await self.preload(request) }
        routes.post("fileSection/upload.do") { request, _ in try await self.upload(request) }
        routes.post("fileSection/isFinish.do") { request, _ in try await self.isFinish(request) }
        routes.post("fileSection/delete.do") { request, _ in try await self.delete(request) }
    }

    // MARK: preLoad.do

    private func preload(_ request: Request) async throws -> Response {
        let form = try await MultipartForm.read(request)
        let sourceId = try form.sourceId()
        let count = try form.fileCount(maximum: Self.maximumFileCount)
        // A preload asked again (its answer lost) answers the same files: they count once.
        let isNew = try await sources.source(id: sourceId) == nil
        if isNew { try await hooks.preCreate(Self.protocolName, path: nil, size: nil, fileCount: count, form: .envelope) }
        let record = try await sources.preload(sourceId: sourceId, fileCount: count)
        guard record.fileIds.count == count else {
            throw Refusal.envelope(400, "this sourceId was preloaded with \(record.fileIds.count) files, not \(count)")
        }
        if isNew { for _ in record.fileIds { hooks.created(Self.protocolName) } }
        return MultipartAnswer.ok(MultipartPreload(fileIds: record.fileIds).data)
    }

    // MARK: upload.do

    private func upload(_ request: Request) async throws -> Response {
        let block = try FileBlock(headers: request.headers)
        let check = BodyWriter.Check(algorithm: .md5, expected: try block.md5())
        let geometry = try FileGeometry(
            implied: block, maximumFragmentSize: configuration.maximumChunkSize, maximumFragmentCount: Self.maximumFragmentCount)
        guard block.totalFileSize <= configuration.maximumUploadSize else {
            throw Refusal.envelope(413, "totalFileSize \(block.totalFileSize) is larger than this receiver accepts (\(configuration.maximumUploadSize) bytes)")
        }
        let path = try RelativePath.parse(block.fileName, field: "fileName") { .envelope(400, $0) }
        guard let boundary = StreamingFormReader<RequestBody>.boundary(contentType: request.headers[.contentType]) else {
            throw Refusal.envelope(400, "Content-Type must be multipart/form-data with a boundary")
        }
        guard let source = try await sources.source(id: block.sourceId) else { throw Refusal.unknownSource }
        guard source.contains(block.fileId) else { throw Refusal.notInSource(block.fileId) }

        let reader = StreamingFormReader(body: request.body, boundary: boundary)
        guard let part = try await Self.sectionFilePart(in: reader) else {
            throw Refusal.envelope(400, "the form has no sectionFile part")
        }
        let expectedName = "\(block.fileId)-\(block.fragmentIndex)"
        guard let filename = part.filename, filename == expectedName || filename.hasPrefix(expectedName + ".") else {
            throw Refusal.envelope(400, "sectionFile's filename must be \(expectedName) or \(expectedName).<ext>")
        }

        if geometry.size == 0 {
            // Nothing to write: the upload's creation is the durable record that the file exists.
            do {
                _ = try await BodyWriter(limit: 0, check: check, sync: .byCaller, counted: { _ in }).write(reader.content, to: nil, at: 0)
            } catch let failure as BodyWriter.Failure {
                throw Refusal.emptyFragment(failure)
            }
        }
        guard let upload = try await fileUpload(block, path: path, geometry: geometry) else {
            throw Refusal.envelope(400, "the fragment's file (name, size or fragment size) differs from the file's earlier fragments")
        }
        guard geometry.size > 0 else { return MultipartAnswer.ok() }

        do {
            let length = upload.meta.byteRange(ofChunk: block.fragmentIndex + 1).count
            try await upload.writeChunk(block.fragmentIndex + 1, body: reader.content(length: length), check: check)
        } catch let failure as BodyWriter.Failure {
            throw Refusal.fragment(failure, size: block.fragmentSize)
        } catch UploadError.completed {
            // A merged file keeps its bytes; the fragment is already in them.
        } catch UploadError.deleted {
            throw Refusal.fragmentDiscarded
        }
        hooks.received(Self.protocolName, upload: upload)
        return MultipartAnswer.ok()
    }

    /// The file's upload as this fragment describes it, created by the file's first fragment. Nil
    /// when earlier fragments, acknowledged ones, described the file otherwise.
    ///
    /// The application's `pre-create` hook is asked before the file is created, with its name and
    /// size — each time it would be created (again), never for a fragment of a file that exists:
    /// that file was authorised as it is. A refused file's other fragments are refused with the
    /// same answer (`UploadHooks.preCreateFile`).
    private func fileUpload(_ block: FileBlock, path: RelativePath, geometry: FileGeometry) async throws -> (any ChunkedUpload)? {
        let fileId = block.fileId
        let new = NewUpload(protocolName: Self.protocolName, path: path, size: geometry.size, chunkSize: geometry.fragmentSize)
        func matches(_ meta: UploadMeta) -> Bool {
            meta.protocolName == Self.protocolName && meta.size == geometry.size && meta.chunkSize == geometry.fragmentSize
                && meta.fileName.utf8.elementsEqual(path.text.utf8)
        }
        func authorise() async throws {
            try await hooks.preCreateFile(
                Self.protocolName, id: fileId, sourceId: block.sourceId, path: path.text, size: geometry.size, form: .envelope)
        }
        // Only with hooks: the look costs a lookup per fragment (a store request on an object store).
        if hooks.asksBeforeCreating, try await store.upload(id: fileId) == nil { try await authorise() }
        let upload = try await store.upload(id: fileId, creatingIfAbsent: new)
        if matches(upload.meta) { return upload }
        // A creator whose fragment was then refused (a wrong size, say) left its numbers but nothing
        // acknowledged; they bind no one. (A zero-byte file exists only once its fragment was accepted.)
        guard upload.meta.chunkCount > 0, try await upload.receivedChunks().isEmpty, try await upload.completionRecord() == nil else {
            return nil
        }
        _ = try await store.delete(id: fileId)
        // Another name or size than the one the hook allowed: asked anew.
        if hooks.asksBeforeCreating { try await authorise() }
        let replaced = try await store.upload(id: fileId, creatingIfAbsent: new)
        return matches(replaced.meta) ? replaced : nil
    }

    /// Skips parts up to the one named `sectionFile`; nil when the form has none.
    private static func sectionFilePart<Body>(in reader: StreamingFormReader<Body>) async throws(FormFailure) -> FormPart? {
        while let part = try await reader.nextPart() {
            if part.name == FileSectionForm.sectionFile { return part }
        }
        return nil
    }

    // MARK: isFinish.do

    /// How many files of one check merge at once.
    private static let mergesAtOnce = 16

    private enum MergeOutcome: Sendable {
        case merged(url: String)
        case failed(reason: String)
        /// The application's `pre-finish` refused the file: it is gone.
        case refused(Refusal)
    }

    private func isFinish(_ request: Request) async throws -> Response {
        let form = try await MultipartForm.read(request)
        let sourceId = try form.sourceId()
        let fileIds = try form.fileIds()
        guard let source = try await sources.source(id: sourceId) else { throw Refusal.unknownSource }
        if let stranger = fileIds.first(where: { !source.contains($0) }) { throw Refusal.notInSource(stranger) }

        let base = baseURL.links
        // Files merge side by side, a bounded number at a time: a source of a thousand small files
        // is answered in the time of its slowest few, not of the thousand one after another (on an
        // object store each merge is a few round trips to the store).
        let indices = Dictionary(source.fileIds.enumerated().map { ($1, $0) }, uniquingKeysWith: { first, _ in first })
        var outcomes = [MergeOutcome?](repeating: nil, count: fileIds.count)
        try await withThrowingTaskGroup(of: (Int, MergeOutcome).self) { group in
            var next = fileIds.indices.makeIterator()
            func start() {
                guard let position = next.next() else { return }
                let fileId = fileIds[position]
                let index = indices[fileId] ?? 0
                group.addTask { (position, try await self.merge(fileId, index: index, base: base)) }
            }
            for _ in 0..<Self.mergesAtOnce { start() }
            while let (position, outcome) = try await group.next() {
                outcomes[position] = outcome
                start()
            }
        }
        // A file the application refused ends the check with its refusal (the files confirmed
        // beside it stay): sending it again would not change the application's mind.
        for case .refused(let refusal)? in outcomes { throw refusal }
        var urls: [String: String] = [:]
        var failed: [String] = []
        for (fileId, outcome) in zip(fileIds, outcomes) {
            switch outcome {
            case .refused?:
                break
            case .merged(let url)?:
                urls[fileId] = url
            case .failed(let reason)?:
                logger.info("Merge failed", metadata: ["fileId": "\(fileId)", "reason": "\(reason)"])
                failed.append(fileId)
            case nil:
                failed.append(fileId)
            }
        }
        if failed.isEmpty { return MultipartAnswer.ok(MultipartFinish(finishStatus: 1, fileUrls: urls).data) }
        return MultipartAnswer.ok(MultipartFinish(finishStatus: 0, failFileIds: failed.joined(separator: ",")).data)
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
            if let failsMerge = testHooks.failsMerge, try await upload.receivedChunks().count == upload.meta.chunkCount,
                await failsMerge(upload.meta.uploadId, index)
            {
                // As a real failed merge leaves them: unusable, so the client must truly send them again.
                _ = try await store.delete(id: upload.meta.uploadId)
                return .failed(reason: "failure injected by --fail-merge; fragments discarded")
            }
            switch try await upload.complete() {
            case .completed:
                do {
                    try await hooks.finish(Self.protocolName, id: fileId, path: upload.meta.fileName, size: upload.meta.size, form: .envelope) {
                        try await store.delete(id: fileId)
                    }
                } catch let refused as Refusal {
                    let words = "fileId \(fileId): \(refused.message)"
                    return .refused(Refusal(form: refused.form, status: refused.status, code: refused.code, message: words, headers: refused.headers))
                }
                return .merged(url: url)
            case .missing(let missing): return .failed(reason: "\(missing.count) fragments missing")
            }
        } catch UploadError.deleted {
            return .failed(reason: "discarded meanwhile")
        }
    }

    // MARK: delete.do

    private func delete(_ request: Request) async throws -> Response {
        let form = try await MultipartForm.read(request)
        let sourceId = try form.sourceId()
        // Dropping what is already gone succeeds: cancel is best-effort and may be repeated.
        guard let source = try await sources.source(id: sourceId) else { return MultipartAnswer.ok() }
        // Files first: a crash in between leaves a source whose files are gone, which a repeat finishes.
        for fileId in source.fileIds where try await store.delete(id: fileId) {
            hooks.terminated(Self.protocolName, id: fileId)
        }
        _ = try await sources.remove(id: sourceId)
        return MultipartAnswer.ok()
    }
}
