import Synchronization
import Xfer
import XferWire

/// The `multipart` protocol (the fileSection API of the first source
/// write-up): one *source* holds several files; `preLoad.do` hands out an id
/// per file, fragments go up as `multipart/form-data` described by a JSON
/// `file_block` header, and `isFinish.do` either returns every file's URL or
/// names the files the server failed to merge, which are then sent again.
/// See Docs/protocols.md.
///
/// Mapping onto the engine: the client invents the `sourceId` (committed
/// with the job, so a client killed before `preLoad.do` answered asks again
/// with the same id and gets the same file ids); `startJob` is `preLoad.do`,
/// whose file ids the engine commits before any fragment; a fragment is a
/// chunk; `finishJob` is `isFinish.do`, whose failed files become a
/// `.rollback`. The protocol has no per-file open or reconcile call: a
/// resumed job re-sends only what the state store does not call done, and
/// re-sending a stored fragment is harmless.
public struct MultipartBackend: UploadBackend, JobHandleInventing, JobStarting, JobFinishing, UploadCancelling {
    public let name = "multipart"

    public let traits = BackendTraits(
        defaultChunkSize: 512 << 10,
        defaultConcurrency: 4,
        // The contract names no credential; a bearer token is what a
        // fileSection server behind a gateway expects.
        authentication: .authorizationHeader,
        // The server learns that a zero-byte file exists from its one empty fragment.
        emptyFileHasOneChunk: true,
        maximumFinishRounds: 3,
        // preLoad.do hands out the source's file ids: its files are fixed from then on.
        filesFixedAtStart: true,
        smallRequestConcurrency: BackendTraits.wideSmallRequests,
        // The write-up's 512 KiB fragments cost each side a request's work per 512 KiB beside
        // the MD5 the protocol asks for: 1 GiB went at 0.63x the MD5 bound, and at 0.80-0.82x in
        // fragments of 8 MiB (Docs/benchmarks.md, "Multipart in 8 MiB fragments"). Every fragment
        // says its size and offset (`file_block`), so the server needs no agreement on it.
        largeFileChunkSize: 8 << 20)

    /// The source's id, invented by the client and kept with the job.
    public static let sourceID = HandleKey("sourceId")
    /// A file's id, handed out by `preLoad.do`.
    public static let fileID = HandleKey("fileId")

    /// The most files of one source (`defaultFilesPerSource` unless a server wants fewer).
    public let filesPerSource: Int

    /// A backend that puts at most `defaultFilesPerSource` files in one source.
    public init() {
        filesPerSource = Self.defaultFilesPerSource
    }

    /// A backend that puts at most `filesPerSource` files in one source (at least 1).
    public init(filesPerSource: Int) {
        self.filesPerSource = max(1, filesPerSource)
    }

    public func makeJobHandles(for job: JobContext) -> ServerHandles {
        [Self.sourceID: Self.randomSourceID()]
    }

    // MARK: preLoad.do

    public func startJob(_ job: JobContext) throws(BackendError) -> Step<JobStart> {
        let base = try job.handles.require(Self.sourceID)
        return preload(source: 0, base: base, fileCount: job.files.count, gathered: Gathered(JobStart()), in: job)
    }

    /// `preLoad.do` for source `source`, then (`Step.send(_:interpret:then:)`) for the next one.
    /// Each answer's ids go into `gathered` by file index, so an answer read twice changes nothing
    /// and the step's outcome holds every source's ids without being copied once a source.
    private func preload(source: Int, base: String, fileCount: Int, gathered: Gathered<JobStart>, in job: JobContext) -> Step<JobStart> {
        let files = Self.files(ofSource: source, fileCount: fileCount, filesPerSource: filesPerSource)
        let sources = Self.sourceCount(fileCount: fileCount, filesPerSource: filesPerSource)
        let request = formRequest(
            job, FileSectionForm.preloadPath,
            [(FileSectionForm.sourceId, Self.sourceID(base, source: source)), (FileSectionForm.fileCount, String(files.count))])
        let operation = sources == 1
            ? "ask the server for file ids (preLoad.do)"
            : "ask the server for the ids of files \(files.lowerBound + 1)-\(files.upperBound) of \(fileCount) (preLoad.do)"
        let interpret: @Sendable (HTTPResponse) throws(BackendError) -> JobStart = { response throws(BackendError) in
            let data = try FileSectionAnswer.data(of: response, for: operation)
            guard let values = data[FileSectionForm.fileIds]?.arrayValue else {
                throw .transient("\(operation): the answer has no fileIds")
            }
            let ids = values.compactMap(\.stringValue)
            guard ids.count == values.count, ids.count == files.count else {
                throw .mismatch("\(operation): the server sent \(values.count) file ids for \(files.count) files")
            }
            // The ids travel joined by commas in isFinish.do and delete.do.
            guard ids.allSatisfy({ !$0.isEmpty && !$0.contains(",") }), Set(ids).count == ids.count else {
                throw .mismatch("\(operation): the server sent empty, repeated or comma-holding file ids")
            }
            gathered.update { start in
                for (offset, id) in ids.enumerated() { start.fileHandles[files.lowerBound + offset] = [Self.fileID: id] }
            }
            // Only the last answer's outcome is the step's: the others' are not copied out.
            return source + 1 < sources ? JobStart() : gathered.update { $0 }
        }
        guard source + 1 < sources else { return .send(request, interpret: interpret) }
        return .send(request, interpret: interpret) { _ in
            self.preload(source: source + 1, base: base, fileCount: fileCount, gathered: gathered, in: job)
        }
    }

    // MARK: upload.do

    public func uploadChunk(_ chunk: ChunkPayload, of file: FileContext, in job: JobContext) throws(BackendError) -> Exchange<ChunkOutcome> {
        let fileID = try file.handles.require(Self.fileID)
        let sourceID = Self.sourceID(try job.handles.require(Self.sourceID), source: file.index / filesPerSource)
        let block = FileBlock(
            sourceId: sourceID, fileId: fileID, fragmentIndex: chunk.index,
            fragmentOffset: Int(chunk.offset), fragmentSize: chunk.count, totalFileFragment: file.chunkCount,
            totalFileSize: Int(file.size), fileName: file.relativePath, fragmentMd5: Checksums.hex(chunk.md5))

        var form = MultipartForm()
        form.addFile(
            FileSectionForm.sectionFile, filename: Self.fragmentFileName(fileID: fileID, index: chunk.index, fileExtension: file.fileExtension),
            contentType: MIMEType.forFileExtension(file.fileExtension), chunk: chunk)
        var request = HTTPRequest(method: .post, url: job.url(FileSectionForm.uploadPath), body: form.body)
        request.headers.set("Content-Type", form.contentType)
        request.headers.set(FileBlock.headerName, block.headerValue)

        let operation = "send fragment \(chunk.number)/\(file.chunkCount) of \(Self.displayName(file.name))"
        return Exchange(request) { response throws(BackendError) in
            _ = try FileSectionAnswer.data(of: response, for: operation)
            return .stored()
        }
    }

    /// `<fileId>-<fragmentIndex>.<ext>`, or without the dot when the file has no extension.
    public static func fragmentFileName(fileID: String, index: Int, fileExtension: String) -> String {
        fileExtension.isEmpty ? "\(fileID)-\(index)" : "\(fileID)-\(index).\(fileExtension)"
    }

    // MARK: isFinish.do

    public func finishJob(_ job: JobContext) throws(BackendError) -> Step<JobFinish> {
        let base = try job.handles.require(Self.sourceID)
        return try finish(source: 0, base: base, tally: Gathered(FinishTally()), in: job)
    }

    /// Each source's answer so far, by source: its files' URLs or the files it failed to merge
    /// (by file index). An answer read again replaces its source's entry.
    private struct FinishTally: Sendable {
        enum Answer: Sendable {
            case merged([Int: String])
            case failed([Int])
        }
        var answers: [Int: Answer] = [:]

        /// Every source's URLs, or every file a source failed to merge.
        var outcome: JobFinish {
            var urls: [Int: String] = [:]
            var failed: [Int] = []
            for source in answers.keys.sorted() {
                switch answers[source]! {
                case .merged(let merged): urls.merge(merged) { _, new in new }
                case .failed(let files): failed.append(contentsOf: files)
                }
            }
            return failed.isEmpty ? .completed(urls: urls) : .rollback(files: Array(Set(failed)).sorted())
        }
    }

    /// `isFinish.do` for source `source`, then for the next one; the last answer's outcome is
    /// every source's: the URLs of all, or every file any source failed to merge (so one round
    /// sends all of them again).
    private func finish(source: Int, base: String, tally: Gathered<FinishTally>, in job: JobContext) throws(BackendError) -> Step<JobFinish> {
        let fileCount = job.files.count
        let files = Self.files(ofSource: source, fileCount: fileCount, filesPerSource: filesPerSource)
        let isLast = source + 1 >= Self.sourceCount(fileCount: fileCount, filesPerSource: filesPerSource)
        var ids: [String] = []
        var names: [String] = []
        ids.reserveCapacity(files.count)
        names.reserveCapacity(files.count)
        for index in files {
            let file = job.files[index]
            ids.append(try file.handles.require(Self.fileID))
            names.append(Self.displayName(file.name))
        }
        let fileIDs = ids, fileNames = names, first = files.lowerBound
        let request = formRequest(
            job, FileSectionForm.isFinishPath,
            [(FileSectionForm.sourceId, Self.sourceID(base, source: source)), (FileSectionForm.fileIds, fileIDs.joined(separator: ","))])
        let operation = "ask whether the server merged the files (isFinish.do)"
        let interpret: @Sendable (HTTPResponse) throws(BackendError) -> JobFinish = { response throws(BackendError) in
            let data = try FileSectionAnswer.data(of: response, for: operation)
            guard let status = data["finishStatus"]?.intValue else {
                throw .transient("\(operation): the answer has no finishStatus")
            }
            let indexByID = Dictionary(fileIDs.enumerated().map { ($1, $0) }, uniquingKeysWith: { first, _ in first })
            if status == 1 {
                guard let urls = data["fileUrls"]?.objectValue else {
                    throw .transient("\(operation): the answer has no fileUrls")
                }
                var byIndex: [Int: String] = [:]
                for (id, value) in urls {
                    if let index = indexByID[id], let url = value.stringValue, !url.isEmpty { byIndex[first + index] = url }
                }
                if let missing = fileIDs.indices.first(where: { byIndex[first + $0] == nil }) {
                    throw .mismatch("\(operation): the server reports the source finished but gives no URL for \(fileNames[missing])")
                }
                tally.update { $0.answers[source] = .merged(byIndex) }
            } else {
                let failed = Self.idList(data["failFileIds"])
                guard !failed.isEmpty else {
                    throw .mismatch("\(operation): the server reports finishStatus \(status) but names no failed file")
                }
                let indexes = failed.compactMap { indexByID[$0] }
                guard indexes.count == failed.count else {
                    throw .mismatch("\(operation): the server names failed files that are not part of this source")
                }
                tally.update { $0.answers[source] = .failed(indexes.map { first + $0 }) }
            }
            // Only the last answer's outcome is the step's: the others' are not built.
            guard isLast else { return .completed(urls: [:]) }
            return tally.update { $0.outcome }
        }
        guard !isLast else { return .send(request, interpret: interpret) }
        return .send(request, interpret: interpret) { _ throws(BackendError) in
            try self.finish(source: source + 1, base: base, tally: tally, in: job)
        }
    }

    // MARK: delete.do

    public func cancelRequests(for job: JobContext) -> [HTTPRequest] {
        guard let base = job.handles[Self.sourceID] else { return [] }
        let fileCount = job.files.count
        return (0..<Self.sourceCount(fileCount: fileCount, filesPerSource: filesPerSource)).map { source in
            let fileIDs = Self.files(ofSource: source, fileCount: fileCount, filesPerSource: filesPerSource)
                .compactMap { job.files[$0].handles[Self.fileID] }
            return formRequest(
                job, FileSectionForm.deletePath,
                [(FileSectionForm.sourceId, Self.sourceID(base, source: source)), (FileSectionForm.fileIds, fileIDs.joined(separator: ","))])
        }
    }

    // MARK: Sources

    /// A job's files go to the server as sources of at most `filesPerSource` files each, in
    /// push order: a source's ids travel in one form (`isFinish.do`, `delete.do`), and a server
    /// bounds what one `preLoad.do` may make it hold (`xfer serve`: 1,000 files).
    public static let defaultFilesPerSource = 1_000

    /// How many sources `fileCount` files make (one at least: an empty job asks once).
    static func sourceCount(fileCount: Int, filesPerSource: Int) -> Int {
        max(1, (fileCount + filesPerSource - 1) / filesPerSource)
    }

    /// The indexes of source `source`'s files.
    static func files(ofSource source: Int, fileCount: Int, filesPerSource: Int) -> Range<Int> {
        let start = source * filesPerSource
        return start..<min(fileCount, start + filesPerSource)
    }

    /// Source 0 is the job's own id, as for a job of one source; source `n` appends `-n`, so a
    /// run killed between preloads asks again with the same ids and gets the same files.
    public static func sourceID(_ base: String, source: Int) -> String {
        source == 0 ? base : base + "-" + String(source)
    }

    // MARK: Helpers

    private func formRequest(_ job: JobContext, _ path: String, _ fields: [(String, String)]) -> HTTPRequest {
        var request = HTTPRequest(method: .post, url: job.url(path), body: .form(fields))
        request.headers.set("Content-Type", "application/x-www-form-urlencoded")
        return request
    }

    /// `failFileIds` is a comma-separated string in the contract; a JSON array is read too.
    private static func idList(_ value: JSONValue?) -> [String] {
        if let items = value?.arrayValue { return items.compactMap(\.stringValue).filter { !$0.isEmpty } }
        guard let text = value?.stringValue else { return [] }
        return text.split(separator: ",").map { String($0.filter { !$0.isWhitespace }) }.filter { !$0.isEmpty }
    }

    /// Error messages are one line: a file name holding CR/LF must not break them.
    static func displayName(_ name: String) -> String {
        String(String.UnicodeScalarView(name.unicodeScalars.map { $0.value < 0x20 || $0.value == 0x7f ? "?" : $0 }))
    }

    private static func randomSourceID() -> String {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<16).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
        return Checksums.hex(bytes)
    }
}

/// The protocol's envelope: HTTP 200 with `{"code","msg","data"}`, code 200
/// meaning success.
enum FileSectionAnswer {
    /// The answer's `data` (an empty object when absent) once the HTTP status
    /// and the JSON code say success. 5xx/408/429 and unreadable bodies are
    /// transient; any other code is the server's refusal, with its message.
    static func data(of response: HTTPResponse, for operation: String) throws(BackendError) -> JSONValue {
        try response.require(200, for: operation)
        let json = try response.json(for: operation)
        let answer: Envelope
        do {
            answer = try Envelope(parsing: json)
        } catch {
            throw .transient("\(operation): \(error)")
        }
        guard answer.code == MultipartCode.success else {
            let message = response.serverMessage.map { ": \($0)" } ?? ""
            throw .rejected("\(operation): the server answered code \(answer.code)\(message)")
        }
        return answer.data
    }
}

/// A value a chain of exchanges fills in (`Step.send(_:interpret:then:)`): shared by the chain's
/// answers so that what each adds is not copied by the next.
private final class Gathered<Value: Sendable>: Sendable {
    private let value: Mutex<Value>

    init(_ value: sending Value) { self.value = Mutex(value) }

    func update<T: Sendable>(_ body: (inout Value) -> T) -> T {
        value.withLock { body(&$0) }
    }

    func update(_ body: (inout Value) -> Void) {
        value.withLock { body(&$0) }
    }
}
