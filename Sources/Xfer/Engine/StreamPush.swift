import Dispatch
import FoundationEssentials
import Glibc

/// Bytes whose length is not known until they end: standard input, a pipe,
/// a FIFO. Read once, to the end; never resumed.
public struct StreamSource: Sendable {
    /// Read to its end; not closed.
    public let fileDescriptor: Int32
    /// What messages and listings call it (e.g. "standard input", a FIFO's path).
    public let description: String
    /// The name the server gives what the stream holds (an object's key tail,
    /// tus's `filename`); a relative path with `/` separators is allowed.
    public let name: String
    /// The length the caller expects, when known. A pipe cannot tell a
    /// producer that died from one that finished: with this, a stream that
    /// ends short of it (or runs past it) fails and is dropped on the server
    /// instead of completing a truncated object.
    public let expectedSize: Int64?

    public init(fileDescriptor: Int32, description: String, name: String, expectedSize: Int64? = nil) {
        self.fileDescriptor = fileDescriptor
        self.description = description
        self.name = name
        self.expectedSize = expectedSize
    }
}

extension TransferEngine {
    /// The id a push of a stream named `name` to `target` gets: the same
    /// stream pushed again is the same job, which is how the next push finds
    /// (and drops on the server) one that was killed.
    public static func streamJobID(backend: String, target: String, name: String) -> JobID {
        jobID(backend: backend, target: target, files: ["\0stream\0" + name])
    }

    /// Starts pushing `source` to `target` as one object named `source.name`.
    ///
    /// The stream is read a part at a time (`StreamUploading.streamPartSize`)
    /// and two parts are in memory at most, whatever the stream's length:
    /// two in flight when the backend takes chunks in any order
    /// (`ChunkOrdering`), else one in flight while the next is read. A stream no longer than
    /// its first part is sent as a file of that length. A stream cannot be
    /// read twice, so a failed, interrupted or paused stream push is not
    /// resumed: its upload is dropped on the server (`cancelRequests`), and
    /// the job is kept as failed until the same stream is pushed again or
    /// the job is cancelled; both drop whatever a killed run left on the
    /// server first.
    ///
    /// - Throws: `.invalidInput` when the backend cannot take a stream, the
    ///   name is not a relative path, or the options are out of bounds;
    ///   `.jobLocked` when another process pushes the same stream.
    public func pushStream(
        _ source: StreamSource, to target: String, using backend: any UploadBackend, options: TransferOptions = TransferOptions()
    ) async throws(XferError) -> TransferJob {
        guard let streaming = backend as? any StreamUploading else {
            throw .invalidInput("the '\(backend.name)' protocol cannot take a stream of unknown length")
        }
        try Self.checkStreamName(source.name)
        if let expected = source.expectedSize, expected < 0 {
            throw .invalidInput("the expected size of a stream cannot be negative")
        }
        let normalized: String
        do { normalized = try backend.target(normalizing: target) } catch { throw .invalidInput(error.description) }
        try options.validate()
        let requested = options.chunkSize ?? backend.traits.defaultChunkSize
        try TransferOptions.check(chunkSize: requested)

        let id = Self.streamJobID(backend: backend.name, target: normalized, name: source.name)
        let lock = try JobLock(stateDirectory: stateDirectory, job: id)
        if let existing = try store.job(id) {
            // Killed or failed before: drop what it left on the server, then start afresh.
            if existing.phase != .completed { _ = try await dropOnServer(existing, using: backend, options: options) }
            try await store.commit(.deleteJob(id))
        }
        let now = Date()
        var record = JobRecord(
            id: id, backend: backend.name, target: normalized, createdAt: now, updatedAt: now, concurrency: 1, rootCount: 1,
            firstRoot: source.description)
        record.isStream = true
        record.handles = backend.inventedHandles(for: record.context(files: JobFiles([]), credentials: options.credentials))
        let file = FileRecord(
            path: source.description, relativePath: source.name, root: 0,
            identity: FileIdentity(size: source.expectedSize ?? 0, modificationTimeNanoseconds: 0, inode: 0, device: 0),
            chunkSize: requested)
        try await store.commit([.createJob(record, roots: [source.description]), .putFiles(job: id, files: [(0, file)])])
        try store.sync()

        let runner = StreamRunner(
            record: record, file: file, source: source, backend: streaming, requestedPartSize: requested, options: options,
            store: store, transport: transport, lock: lock)
        let session = JobSession(
            id: id, store: store, lock: lock, stateDirectory: stateDirectory, retention: finishedJobRetention,
            rerun: { () throws(XferError) -> any JobRun in
                throw .transferFailed("a stream cannot be read again, so a paused stream push cannot go on; push the stream again")
            })
        return TransferJob(runner: runner, session: session)
    }

    /// A relative path of named components: what every protocol can name.
    static func checkStreamName(_ name: String) throws(XferError) {
        let components = name.split(separator: "/", omittingEmptySubsequences: false)
        guard !name.isEmpty, !name.hasPrefix("/"),
            !components.contains(where: { $0.isEmpty || $0 == "." || $0 == ".." }),
            !name.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F })
        else {
            throw .invalidInput("a stream's name must be a relative path like 'backup.tar' or 'dir/backup.tar'")
        }
    }
}

/// One run of a stream push: the job-level step, then the stream as a file
/// (short) or as parts, each sent while the next is read; on any failure the
/// upload is dropped on the server and the job recorded as failed.
final class StreamRunner: JobRun {
    let jobID: JobID
    private let initialRecord: JobRecord
    private let file: FileRecord
    private let source: StreamSource
    private let backend: any StreamUploading
    private let requestedPartSize: Int
    private let options: TransferOptions
    private let store: any JobStateStore
    private let transport: HTTPTransport
    private let lock: JobLock

    init(
        record: JobRecord, file: FileRecord, source: StreamSource, backend: any StreamUploading, requestedPartSize: Int,
        options: TransferOptions, store: any JobStateStore, transport: HTTPTransport, lock: JobLock
    ) {
        jobID = record.id
        initialRecord = record
        self.file = file
        self.source = source
        self.backend = backend
        self.requestedPartSize = requestedPartSize
        self.options = options
        self.store = store
        self.transport = transport
        self.lock = lock
    }

    /// What a run knows as it goes: the job's and the file's handles, bytes read.
    private struct Progress {
        var record: JobRecord
        var file: FileRecord
        var length: Int64 = 0
        /// By part index (number - 1): parts may be acknowledged out of order.
        var receipts: [Int: String] = [:]
    }

    func run(events: AsyncStream<TransferEvent>.Continuation) async -> Result<JobReport, XferError> {
        defer { withExtendedLifetime(lock) {} }
        let worker = Worker(
            jobID: jobID, steps: BackendSteps(backend), options: options, store: store, transport: transport, events: events,
            bytesSent: TransferByteCounter())
        var progress = Progress(record: initialRecord, file: file)
        events.yield(
            .started(job: jobID, totalBytes: source.expectedSize ?? 0, doneBytes: 0, files: 1, doneFiles: 0, resumed: false))
        do {
            let url = try await send(&progress, worker: worker, events: events)
            var completed = progress.file
            completed.url = url
            completed.identity.size = progress.length
            var ended = progress.record
            ended.phase = .completed
            ended.updatedAt = Date()
            try await store.commit([.putFiles(job: jobID, files: [(0, completed)]), .putJob(ended)])
            try store.sync()
            events.yield(.fileCompleted(file: 0, path: source.description, url: url))
            return .success(
                JobReport(
                    job: jobID, files: JobReport.Files([JobReport.File(path: source.description, url: url, size: progress.length)]),
                    bytesSent: Int64(worker.bytesSent.value), bytesResumed: 0))
        } catch {
            let failure = Task.isCancelled ? XferError.interrupted : error
            // In a task of its own: an interrupted run's task is cancelled, and
            // the transport would not send for it.
            let dropped = progress
            await Task { await self.drop(dropped, worker: worker) }.value
            var ended = progress.record
            ended.phase = .failed
            ended.lastError = "\(failure == .interrupted ? "interrupted" : failure.description); a stream cannot be read again, so this push cannot be resumed (its upload was dropped on the server)"
            ended.updatedAt = Date()
            try? await store.commit(.putJob(ended))
            return .failure(failure)
        }
    }

    /// Sends the whole stream; returns the object's URL.
    private func send(
        _ progress: inout Progress, worker: Worker, events: AsyncStream<TransferEvent>.Continuation
    ) async throws(XferError) -> String {
        if worker.steps.jobStarting != nil, case .started(let start?) = try expect(await worker.startJob(context(progress))) {
            progress.record.handles.merge(start.handles)
            if let handles = start.fileHandles[0] { progress.file.handles.merge(handles) }
            progress.record.isStarted = true
            try await store.commit(.putJob(progress.record))
        }
        let reader = StreamReader(source)
        let firstSize = partSize(1)
        let first = try await reader.read(upTo: firstSize)
        if first.count < firstSize {
            return try await sendWhole(first, &progress, worker: worker, events: events)
        }

        // Longer than a part: the upload is opened, and its handles committed, before any part.
        let opened = try await worker.send("open the upload of \(source.name)", in: context(progress)) {
            () throws(BackendError) in try backend.openStream(fileContext(progress), in: context(progress))
        }
        if let opened {
            progress.file.handles.merge(opened.handles)
            try await store.commit(.putFiles(job: jobID, files: [(0, progress.file)]))
        }
        // Two parts in memory at most: each part read is sent at once, and the
        // next is read while parts are in flight — up to two of them when the
        // protocol takes a file's chunks in any order (S3's parts), else one
        // in flight while the next is read (tus's offsets). A stream's bytes
        // usually come faster than a server takes them, so two in flight is
        // what keeps the link busy.
        let inFlightAtMost = backend.chunkOrder(in: context(progress)) == .any ? 2 : 1
        var ready: [UInt8]? = first
        var digests = RunningDigests(sha256: worker.steps.sha256Reporting != nil)
        digests.update(first)
        var ended = false
        var parts = 0
        var acknowledgedBytes: Int64 = 0
        do {
            try await withThrowingTaskGroup(of: (number: Int, bytes: Int, outcome: ChunkOutcome?).self) { group in
                var inFlight = 0
                while true {
                    if let bytes = ready, inFlight < inFlightAtMost {
                        parts += 1
                        let number = parts
                        try checkExpected(progress.length + Int64(bytes.count), ended: false)
                        let part = ChunkPayload(index: number - 1, offset: progress.length, bytes: bytes)
                        progress.length += Int64(bytes.count)
                        let job = context(progress)
                        let file = fileContext(progress)
                        group.addTask {
                            let outcome = try await worker.send("send part \(number) of \(self.source.name)", in: job, chunk: part.bytesSource) {
                                () throws(BackendError) in .send(try self.backend.uploadStreamPart(part, of: file, in: job))
                            }
                            return (number, bytes.count, outcome)
                        }
                        inFlight += 1
                        ready = nil
                        continue
                    }
                    if ready == nil, !ended, inFlight < 2 {
                        let next = try await reader.read(upTo: partSize(parts + 1))
                        if next.isEmpty { ended = true } else { ready = next }
                        digests.update(next)
                        continue
                    }
                    guard inFlight > 0, let sent = try await group.next() else { break }
                    inFlight -= 1
                    let receipt = try acknowledged(sent.outcome, operation: "send part \(sent.number) of \(source.name)")
                    if let receipt {
                        progress.receipts[sent.number - 1] = receipt
                        // Kept so a killed run's parts can be dropped (e.g. tus's partial uploads).
                        try await store.commit(
                            .markDone(
                                job: jobID, file: 0, chunks: [], plan: ChunkPlan(fileSize: 0, chunkSize: 1),
                                receipts: [sent.number - 1: receipt]))
                    }
                    acknowledgedBytes += Int64(sent.bytes)
                    events.yield(
                        .chunkStored(
                            file: 0, chunk: sent.number - 1, bytes: sent.bytes, doneBytes: acknowledgedBytes,
                            totalBytes: source.expectedSize ?? 0))
                }
            }
        } catch let error as XferError {
            throw error
        } catch {
            throw .transferFailed("sending \(source.name): \(error)")
        }
        try checkExpected(progress.length, ended: true)
        let receipts = (0..<parts).map { progress.receipts[$0] }
        let finished = try await worker.send("complete the upload of \(source.name)", in: context(progress)) {
            () throws(BackendError) in try backend.finishStream(fileContext(progress), receipts: receipts, in: context(progress))
        }
        guard case .completed(let completion)? = finished else {
            // A stream's parts cannot be sent again (its bytes are gone), so the run ends here,
            // naming how many parts the server lacks rather than each of them (a stream may have
            // thousands).
            let answer: String
            switch finished {
            case .missing(let missing)?:
                answer = "the server lacks \(missing.count) of its \(parts) part\(parts == 1 ? "" : "s")"
                    + (missing.first.map { ", part \($0 + 1) first" } ?? "") + "; a stream's parts cannot be sent again"
            default:
                answer = "the '\(backend.name)' backend gave no answer"
            }
            throw .transferFailed("the server did not complete the upload of \(source.name): \(answer)")
        }
        try await Worker.verify(finished, of: source.description, against: digests)
        return completion.url
    }

    /// A stream no longer than one part, as a file of that length: the
    /// worker's steps of a file (open, each chunk, finish), on the bytes read.
    private func sendWhole(
        _ bytes: [UInt8], _ progress: inout Progress, worker: Worker, events: AsyncStream<TransferEvent>.Continuation
    ) async throws(XferError) -> String {
        try checkExpected(Int64(bytes.count), ended: true)
        let content = BytesInMemory(bytes: bytes)
        progress.length = Int64(bytes.count)
        progress.file.identity.size = progress.length
        progress.file.chunkSize = max(1, bytes.count)
        if case .opened(_, let opened) = try expect(
            await worker.openFile(fileContext(progress), record: progress.file, content: content, job: context(progress)))
        {
            progress.file = opened
        }
        try await store.commit(.putFiles(job: jobID, files: [(0, progress.file)]))
        var url: String?
        let file = fileContext(progress)
        for chunk in 0..<file.plan.count {
            switch try expect(await worker.uploadChunk(chunk, of: file, record: progress.file, content: content, job: context(progress))) {
            case .chunkStoredCompletingFile(_, _, let bytes, let chunkURL):
                url = chunkURL
                events.yield(.chunkStored(file: 0, chunk: chunk, bytes: bytes, doneBytes: file.plan.offset(of: chunk) + Int64(bytes), totalBytes: progress.length))
            case .chunkStored(_, _, let bytes):
                events.yield(.chunkStored(file: 0, chunk: chunk, bytes: bytes, doneBytes: file.plan.offset(of: chunk) + Int64(bytes), totalBytes: progress.length))
            default:
                throw .transferFailed("send \(source.name): the server did not take it")
            }
        }
        // An answer that completed the file (`ChunkOutcome.stored(fileURL:)`) leaves nothing to
        // finish, as for a file of a push.
        if url == nil, case .fileFinished(_, let finish) = try expect(
            await worker.finishFile(file, record: progress.file, content: content, job: context(progress)))
        {
            switch finish {
            case .completed(let completion)?: url = completion.url
            case .missing?: throw .transferFailed("the server lost part of \(source.name) before completing it")
            case nil: break
            }
        }
        guard let url else {
            throw .transferFailed("the server gave no URL for \(source.name) (backend '\(backend.name)')")
        }
        return url
    }

    /// A step's result, or the error that ends the stream's push: a stream
    /// cannot be read again, so nothing is left for a later run.
    private func expect(_ result: WorkResult) throws(XferError) -> WorkResult {
        switch result {
        case .failed(_, let error): throw error
        case .fileFailed(_, _, let reason): throw .transferFailed("\(source.description) \(reason)")
        case .uploadUnknown(_, _, let message), .outOfSync(_, _, let message): throw .transferFailed(message)
        default: return result
        }
    }

    /// The part's receipt once the server acknowledged it.
    private func acknowledged(_ sent: ChunkOutcome?, operation: String) throws(XferError) -> String? {
        guard case .stored(let stored)? = sent else {
            throw .transferFailed("\(operation): the server did not take it (a part of a stream cannot be sent again later)")
        }
        return stored.receipt
    }

    /// Fails a stream that runs past, or ends short of, the size it was said to have.
    private func checkExpected(_ length: Int64, ended: Bool) throws(XferError) {
        guard let expected = source.expectedSize else { return }
        if length > expected || (ended && length != expected) {
            throw .transferFailed(
                "\(source.description) \(ended ? "ended after" : "ran past") \(length) bytes; \(expected) were expected (did the program writing it fail?)")
        }
    }

    /// Best-effort, a few quick attempts each: what the server holds of this stream goes.
    private func drop(_ progress: Progress, worker: Worker) async {
        let receipts = progress.receipts
        let job = progress.record.context(files: JobFiles([fileContext(progress).with(receipts: receipts)]), credentials: options.credentials)
        for unprepared in backend.requestsToCancel(job) {
            _ = await RetryLoop.sendCleanup(worker.steps.prepared(unprepared, adding: options.extraHeaders, in: job), through: transport)
        }
    }

    private func partSize(_ number: Int) -> Int {
        min(TransferOptions.maximumChunkSize, max(1, backend.streamPartSize(ofPart: number, requested: requestedPartSize)))
    }

    private func context(_ progress: Progress) -> JobContext {
        progress.record.context(files: JobFiles([fileContext(progress)]), credentials: options.credentials)
    }

    /// The stream as a file of the length read so far.
    private func fileContext(_ progress: Progress) -> FileContext {
        var file = progress.file
        file.identity.size = progress.length
        return file.context(index: 0, plan: ChunkPlan(fileSize: progress.length, chunkSize: file.chunkSize, traits: backend.traits))
    }

}

/// Reads a stream a part at a time on a thread of its own: a blocking
/// `read(2)` on a cooperative thread would stall every task sharing it.
final class StreamReader: Sendable {
    private let source: StreamSource
    private let queue = DispatchQueue(label: "xfer.stream-reader")

    init(_ source: StreamSource) {
        self.source = source
    }

    /// Up to `limit` bytes: fewer only where the stream ends.
    func read(upTo limit: Int) async throws(XferError) -> [UInt8] {
        let source = self.source
        let result: Result<[UInt8], XferError> = await withCheckedContinuation { continuation in
            queue.async {
                var failure: Int32 = 0
                let bytes = [UInt8](unsafeUninitializedCapacity: limit) { buffer, initialized in
                    var done = 0
                    while done < limit {
                        let n = Glibc.read(source.fileDescriptor, buffer.baseAddress! + done, min(limit - done, 1 << 20))
                        if n > 0 {
                            done += n
                        } else if n == 0 {
                            break
                        } else if errno == EAGAIN {
                            // A descriptor left non-blocking by whoever opened it: wait for bytes.
                            var poller = pollfd(fd: source.fileDescriptor, events: Int16(POLLIN), revents: 0)
                            _ = poll(&poller, 1, -1)
                        } else if errno != EINTR {
                            failure = errno
                            break
                        }
                    }
                    initialized = done
                }
                if failure != 0 {
                    continuation.resume(
                        returning: .failure(.fileUnreadable(path: source.description, reason: String(cString: strerror(failure)))))
                } else {
                    continuation.resume(returning: .success(bytes))
                }
            }
        }
        return try result.get()
    }
}
