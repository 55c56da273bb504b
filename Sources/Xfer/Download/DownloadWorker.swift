import FoundationEssentials
import Glibc
import Crypto
import XferPrimitives

/// Runs a pull's steps: describes an object and creates its partial file
/// (open), fetches a range into it (chunk), checks the whole file and makes
/// it the destination (finish). Each step commits what it changed before it
/// reports, as an upload's `Worker` does: a range is marked done only after
/// its bytes are durable in the partial file.
struct DownloadWorker: Sendable {
    let jobID: JobID
    /// The source's capabilities, resolved once for the pull.
    let steps: SourceSteps
    let options: TransferOptions
    let store: any JobStateStore
    let transport: HTTPTransport
    let events: AsyncStream<TransferEvent>.Continuation
    /// Body bytes written into partial files in this run, retries included.
    let bytesReceived: TransferByteCounter
    /// `--force`: a destination that is not this pull's is replaced.
    let replacesExisting: Bool
    /// Group commit for the ranges and files on the destination's filesystem.
    let syncRounds: SyncRounds?

    private typealias StepError = RetryLoop.Failure

    var source: any DownloadSource { steps.source }

    /// Why a file cannot be fetched, while the others can (its object is gone).
    private struct FileGone: Error {
        let reason: String
    }

    // MARK: Open

    /// Learns what the object is now (unless a listing told, in this
    /// version), creates the partial file at its size, and commits the
    /// record (validator, digests, partial file) before any range: a range
    /// fetched later is conditional on exactly this version.
    func openFile(_ index: Int, record: FileRecord, partial: PartialFile, job: JobContext) async -> WorkResult {
        do {
            var object = DownloadHandles.object(of: record)
            // A listed object of one request is fetched without a question: its answer's
            // headers carry its digests. A larger one is described first, for the
            // digests of the whole (ranges carry none).
            let listed = record.handles[DownloadHandles.listed] == "1" && object.validator != nil
                && object.size <= Int64(record.chunkSize)
            if !listed {
                let location = object.location
                object = try await perform("ask \(Self.shown(location)) what it holds", in: job) { () throws(BackendError) in
                    try source.describeObject(at: location, in: job)
                }
            }
            if !replacesExisting, Self.exists(record.path) {
                return .fileFailed(
                    file: index, work: .openFile(index), reason: "\(record.path) exists and is not this pull's; --force replaces it")
            }
            // A server that ignores ranges sends the object in one answer: one chunk,
            // resumable only from its start.
            let chunkSize = object.acceptsRanges ? record.chunkSize : Int(max(1, object.size))
            if !object.acceptsRanges, object.size > Int64(record.chunkSize) {
                events.yield(
                    .resending(
                        file: index, chunks: 1,
                        reason: "the server does not answer ranges: one stream, which a kill starts over"))
            }
            let plan = ChunkPlan(fileSize: object.size, chunkSize: chunkSize)
            let identity = try partial.create(size: object.size, durableEntry: plan.count > 1)
            var opened = record
            opened.identity = identity
            opened.chunkSize = chunkSize
            var handles = DownloadHandles.handles(of: object, listed: listed)
            // What a sync planned (the local file's condition, its time) stays with the file.
            for (name, value) in record.handles.values where SyncHandles.isPlanned(name) { handles.set(name, value) }
            opened.handles = handles
            opened.isOpen = true
            opened.url = nil
            // A file of one request commits nothing before it completes: a run killed
            // meanwhile opens it again, which is what this record would have said.
            if plan.count > 1 { try await store.commit([.putFiles(job: jobID, files: [(index, opened)])]) }
            return .opened(file: index, opened)
        } catch {
            return failure(.openFile(index), file: index, error)
        }
    }

    // MARK: Chunks

    /// Fetches chunk `chunk` straight into its range of the partial file
    /// (`RangeWriter`), conditional on the recorded validator; makes it
    /// durable and marks it done, with its CRC-32C as the chunk's receipt
    /// (the whole file's CRC-32C is combined from them at the end).
    ///
    /// A file of one request is checked here instead, against every digest
    /// its answer and its record offer, and committed only when it completes.
    func fetchChunk(
        _ chunk: Int, of index: Int, record: FileRecord, plan: ChunkPlan, partial: PartialFile, job: JobContext
    ) async -> WorkResult {
        let work = Work.chunk(file: index, chunk: chunk)
        let object = DownloadHandles.object(of: record)
        let offset = plan.offset(of: chunk)
        let length = plan.length(of: chunk)
        let whole = plan.count == 1 && offset == 0 && Int64(length) == object.size
        let shown = Self.shown(object.location)
        let operation = plan.count == 1 ? "fetch \(shown)" : "fetch range \(chunk + 1)/\(plan.count) of \(shown)"
        let hashes = whole ? Self.hashes(checking: object.digests, listed: record.handles[DownloadHandles.listed] == "1") : []
        do {
            let (writer, answer) = try await retrying(operation) { () async throws -> (RangeWriter, [ObjectDigest]) in
                var request =
                    whole
                    ? source.wholeObjectRequest(object, in: job)
                    : source.rangeRequest(offset...(offset + Int64(length) - 1), of: object, in: job)
                request = prepared(request, in: job)
                let writer = RangeWriter(
                    descriptor: partial.descriptor, offset: offset, length: Int64(length),
                    acceptsWholeObject: offset == 0 && Int64(length) == object.size, hashes: hashes)
                let response = try await send(request, into: writer)
                bytesReceived.add(Int(writer.written))
                return (writer, try interpretRange(response, writer: writer, object: object, operation: operation, job: job))
            }
            if whole {
                let offered = Self.merged(object.digests, answer)
                if let mismatch = Self.mismatch(offered, computed: writer.digests) {
                    return try await discard(index, record: record, plan: plan, partial: partial, work: work, reason: mismatch)
                }
                partial.wholeObjectDigests = offered
                return .chunkStored(file: index, chunk: chunk, bytes: length)
            }
            // Durable before it is marked done: by the round of syncs the ranges and files
            // in flight share (one `syncfs` for many ranges), else by the file's own fdatasync.
            if let rounds = rounds(for: record) { try await rounds.sync() } else { try partial.syncData() }
            try await store.commit(
                StepRecords.chunkStored(
                    job: jobID, file: index, chunk: chunk, plan: plan, record: record, receipt: CRC32.hex(writer.crc32c.value),
                    url: nil, commitsAcknowledgement: true))
            return .chunkStored(file: index, chunk: chunk, bytes: length)
        } catch {
            return failure(work, file: index, error)
        }
    }

    /// What an answer to a range means, by HTTP's rules (one place for every
    /// source): the range, arrived whole; a changed object (`412`, `416`, or a
    /// `200` of another version); a server that ignores ranges (a `200` of
    /// the same version: the file starts over as one stream); an object
    /// gone; or the status's usual meaning.
    private func interpretRange(
        _ response: HTTPResponse, writer: RangeWriter, object: RemoteObject, operation: String, job: JobContext
    ) throws -> [ObjectDigest] {
        let shown = Self.shown(object.location)
        if let refused = writer.refusedStatus, (200..<300).contains(refused) {
            let now = HTTPSource.validator(in: response.headers)
            if let now, let recorded = object.validator, now != recorded {
                throw StepError.objectChanged("\(shown) changed on the server")
            }
            throw StepError.objectChanged("the server ignored the range asked of \(shown)")
        }
        switch response.status {
        case 200, 206:
            guard writer.isComplete else {
                throw BackendError.transient("\(operation): the answer ended after \(writer.written) of \(writer.length) bytes")
            }
            return source.digests(in: response)
        case 412, 416:
            throw StepError.objectChanged("\(shown) changed on the server")
        case 404, 410:
            throw FileGone(reason: "it is gone from the server (HTTP \(response.status))")
        default:
            throw source.failure(response, of: object, in: job)
        }
    }

    // MARK: Finish

    /// Checks the whole file against what the source offers, then makes it
    /// the destination (durable before the completion is committed). A
    /// mismatch drops the partial file and the file's progress: nothing that
    /// claims to be complete is kept, and the next run fetches it again.
    func finishFile(_ index: Int, record: FileRecord, plan: ChunkPlan, partial: PartialFile) async -> WorkResult {
        let work = Work.finishFile(index)
        do {
            if partial.wholeObjectDigests == nil {
                let object = DownloadHandles.object(of: record)
                let receipts = try store.receipts(job: jobID, file: index)
                if let mismatch = try Self.check(partial, plan: plan, receipts: receipts, against: object.digests) {
                    return try await discard(index, record: record, plan: plan, partial: partial, work: work, reason: mismatch)
                }
            }
            if partial.isBlocked(replacing: replacesExisting) {
                return .fileFailed(file: index, work: work, reason: "\(record.path) exists and is not this pull's; --force replaces it")
            }
            if let condition = record.handles[SyncHandles.condition.name], let conflict = LocalDeletion.conflict(at: record.path, expecting: condition) {
                // A sync's file replaces only what its walk saw there.
                return .fileFailed(file: index, work: work, reason: conflict)
            }
            if let time = record.handles[SyncHandles.modificationTime.name].flatMap({ Int64($0) }) {
                try partial.setModificationTime(nanoseconds: time)
            }
            let completed = StepRecords.fileCompleted(job: jobID, file: index, record: record, url: record.path)
            // The completion is committed before the rename: a run killed between finds
            // the destination missing and fetches the file again, never a file at the
            // destination it cannot tell from somebody else's. Its bytes and its rename are
            // made durable by the rounds every range and file in flight shares, not by two
            // fsyncs of its own.
            let rounds = rounds(for: record)
            if let rounds { try await rounds.sync() } else { try partial.syncData() }
            try await store.commit(completed)
            try partial.place(replacing: replacesExisting)
            if let rounds { try await rounds.sync() } else { try PartialFile.syncDirectory(PathText.deletingLastComponent(of: record.path)) }
            return .fileFinished(file: index, .completed(url: record.path))
        } catch {
            return failure(work, file: index, error)
        }
    }

    /// The file's bytes against the offered digests: the CRC-32C combined
    /// from the chunks' receipts (no read), else the file read once for the
    /// strongest digest offered. Nil when they match or nothing is offered.
    static func check(
        _ partial: PartialFile, plan: ChunkPlan, receipts: [Int: String], against offered: [ObjectDigest]
    ) throws(XferError) -> String? {
        for digest in offered {
            guard case .crc32c(let expected) = digest else { continue }
            var combined: UInt32 = 0
            var complete = true
            for chunk in 0..<plan.count {
                guard let hex = receipts[chunk], let bytes = Hex.bytes(hex), bytes.count == 4 else {
                    complete = false
                    break
                }
                combined = CRC32C.combine(combined, ObjectDigest.bigEndian(bytes), lengthOfSecond: Int64(plan.length(of: chunk)))
            }
            guard complete else { break }
            return combined == expected ? nil : describe(digest, computed: .crc32c(combined))
        }
        let wanted = offered.first { if case .sha256 = $0 { return true } else { return false } }
            ?? offered.first { if case .md5 = $0 { return true } else { return false } }
            ?? offered.first { if case .crc32 = $0 { return true } else { return false } }
            ?? offered.first
        guard let wanted else { return nil }
        return mismatch([wanted], computed: try read(partial, size: plan.fileSize, for: wanted))
    }

    /// The file's digest of `wanted`'s kind, read once in 1 MiB blocks.
    private static func read(_ partial: PartialFile, size: Int64, for wanted: ObjectDigest) throws(XferError) -> [ObjectDigest] {
        var crc32c = CRC32C()
        var crc32 = CRC32()
        var md5 = Insecure.MD5()
        var sha256 = SHA256()
        let block = 1 << 20
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: block, alignment: 16)
        defer { buffer.deallocate() }
        var offset: Int64 = 0
        while offset < size {
            let want = Int(min(Int64(block), size - offset))
            let count = pread(partial.descriptor, buffer.baseAddress, want, off_t(offset))
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { throw .transferFailed("cannot read back \(partial.path): \(String(cString: strerror(errno)))") }
            let bytes = UnsafeRawBufferPointer(rebasing: buffer[0..<count])
            switch wanted {
            case .crc32c: crc32c.update(bytes)
            case .crc32: crc32.update(bytes)
            case .md5: md5.update(bufferPointer: bytes)
            case .sha256: sha256.update(bufferPointer: bytes)
            }
            offset += Int64(count)
        }
        switch wanted {
        case .crc32c: return [.crc32c(crc32c.value)]
        case .crc32: return [.crc32(crc32.value)]
        case .md5: return [.md5(Array(md5.finalize()))]
        case .sha256: return [.sha256(Array(sha256.finalize()))]
        }
    }

    /// The first offered digest the computed ones contradict, as a message; nil when none does.
    static func mismatch(_ offered: [ObjectDigest], computed: [ObjectDigest]) -> String? {
        for expected in offered {
            for actual in computed where actual.algorithm == expected.algorithm && actual != expected {
                return describe(expected, computed: actual)
            }
        }
        return nil
    }

    private static func describe(_ expected: ObjectDigest, computed: ObjectDigest) -> String {
        "its bytes do not match the server's \(expected.algorithm) (\(hex(expected)) offered, \(hex(computed)) received); the next run fetches it again"
    }

    private static func hex(_ digest: ObjectDigest) -> String {
        switch digest {
        case .crc32c(let value), .crc32(let value): return CRC32.hex(value)
        case .md5(let bytes), .sha256(let bytes): return Checksums.hex(bytes)
        }
    }

    /// The digests beyond the CRC-32C to compute of a one-request file: those
    /// its record offers, and for a listed object (whose answer's headers
    /// are not known before its bytes) an MD5 for an ETag that is one.
    static func hashes(checking offered: [ObjectDigest], listed: Bool) -> Set<DigestAlgorithm> {
        var hashes: Set<DigestAlgorithm> = listed ? [.md5] : []
        for digest in offered {
            switch digest {
            case .md5: hashes.insert(.md5)
            case .sha256: hashes.insert(.sha256)
            case .crc32c, .crc32: break
            }
        }
        return hashes
    }

    static func merged(_ recorded: [ObjectDigest], _ answered: [ObjectDigest]) -> [ObjectDigest] {
        recorded + answered.filter { new in !recorded.contains { $0.algorithm == new.algorithm } }
    }

    /// Drops a file whose bytes failed their check: its partial file and its
    /// progress go (committed), and the file fails for this run.
    private func discard(
        _ index: Int, record: FileRecord, plan: ChunkPlan, partial: PartialFile, work: Work, reason: String
    ) async throws(XferError) -> WorkResult {
        partial.discard()
        var reset = record
        reset.isOpen = false
        reset.url = nil
        reset.identity = FileIdentity(size: record.size, modificationTimeNanoseconds: 0, inode: 0, device: 0)
        if let location = record.handles[DownloadHandles.location] {
            var kept = record.handles.values.filter { SyncHandles.isPlanned($0.key) }
            kept[DownloadHandles.location] = location
            reset.handles = ServerHandles(kept)
        }
        try await store.commit([
            .replaceDone(job: jobID, file: index, done: ChunkSet(capacity: plan.count), plan: plan, receipts: [:]),
            .putFiles(job: jobID, files: [(index, reset)]),
        ])
        return .fileFailed(file: index, work: work, reason: reason)
    }

    // MARK: Sending

    /// The user's credentials and extra headers, then the source's signature.
    private func prepared(_ request: HTTPRequest, in job: JobContext) -> HTTPRequest {
        steps.prepared(request, adding: options.extraHeaders, in: job)
    }

    private func perform<T: Sendable>(
        _ operation: String, in job: JobContext, _ make: () throws(BackendError) -> Exchange<T>
    ) async throws(StepError) -> T {
        try await retrying(operation) { () async throws -> T in
            let exchange = try make()
            return try exchange.interpret(try await send(prepared(exchange.request, in: job), into: nil))
        }
    }

    private func retrying<T>(_ operation: String, _ attempt: () async throws -> T) async throws(StepError) -> T {
        let events = self.events
        return try await RetryLoop.run(operation, policy: options.retry) { attempt, delay, reason in
            events.yield(.retrying(operation: operation, attempt: attempt, delay: delay, reason: reason))
        } _: {
            do {
                return try await attempt()
            } catch let gone as FileGone {
                throw StepError.failed(.fileUnreadable(path: operation, reason: gone.reason))
            }
        }
    }

    /// Sends `request`, reporting it when the options ask for every request.
    /// Sends `request` (following redirects, as every pull's request does),
    /// reporting it when the options ask for every request.
    private func send(_ request: HTTPRequest, into writer: RangeWriter?) async throws(TransportError) -> HTTPResponse {
        try await transport.send(request, into: writer, followingRedirects: true, reportingTo: options.reportsRequests ? events : nil)
    }

    // MARK: Helpers

    /// The sync rounds that cover `record`'s partial file: those of the
    /// destination's filesystem, unless the file is under another mount.
    private func rounds(for record: FileRecord) -> SyncRounds? {
        syncRounds.flatMap { $0.device == record.identity.device ? $0 : nil }
    }

    private func failure(_ work: Work, file: Int, _ error: any Error) -> WorkResult {
        switch error {
        // A source of its own may say the object is not what was asked for in
        // an upload's words (`BackendError.uploadUnknown`, `.outOfSync`): for a
        // pull, each means the file's record names another version.
        case StepError.objectChanged(let message), StepError.uploadUnknown(let message), StepError.outOfSync(let message),
            StepError.conflict(let message):
            return .objectChanged(file: file, work: work, message: message)
        case StepError.failed(let error) where error.kind == .fileUnreadable:
            return .fileFailed(file: file, work: work, reason: error.reason ?? error.message)
        case StepError.failed(let error):
            return .failed(work, error)
        case let error as XferError:
            return .failed(work, error)
        default:
            return .failed(work, .transferFailed("\(error)"))
        }
    }

    static func exists(_ path: String) -> Bool {
        var info = stat()
        return lstat(path, &info) == 0
    }

    /// A location for messages: a URL without its query or password, a source's
    /// own form (`s3://B/K at ENDPOINT`) without the endpoint it keeps.
    static func shown(_ location: String) -> String {
        if location.hasPrefix("http://") || location.hasPrefix("https://") { return TransferEngine.displayURL(location) }
        return location.firstRange(of: " at ").map { String(location[..<$0.lowerBound]) } ?? location
    }
}

extension HTTPRequest {
    /// The request as a pull sends it: the user's credentials (when the
    /// engine places them) and extra headers, then the source's signature.
    /// (For a test's single request; a pull resolves its source's steps once, `SourceSteps`.)
    package func prepared(adding extraHeaders: HTTPHeaders, for source: any DownloadSource, in job: JobContext) -> HTTPRequest {
        SourceSteps(source).prepared(self, adding: extraHeaders, in: job)
    }
}
