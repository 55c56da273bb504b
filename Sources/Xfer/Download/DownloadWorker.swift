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
        let listed = record.handles[DownloadHandles.listed] == "1"
        let hashes = whole ? Self.hashes(checking: object.digests, listed: listed) : []
        // A listed object's answer may carry one (S3 keeps a CRC64NVME of every new object).
        let crc64 = object.digests.contains { if case .crc64nvme = $0 { true } else { false } } || (whole && listed)
        // A sync's file gets the time its object keeps (`finishFile`).
        let keepsTime = record.handles[SyncHandles.modificationTime.name] != nil
        do {
            let (writer, answer) = try await retrying(operation) { () async throws -> (RangeWriter, [ObjectDigest]) in
                var request =
                    whole
                    ? source.wholeObjectRequest(object, in: job)
                    : source.rangeRequest(offset...(offset + Int64(length) - 1), of: object, in: job)
                request = prepared(request, in: job)
                let writer = RangeWriter(
                    descriptor: partial.descriptor, offset: offset, length: Int64(length),
                    acceptsWholeObject: offset == 0 && Int64(length) == object.size, hashes: hashes, computesCRC64NVME: crc64)
                let response = try await send(request, into: writer)
                bytesReceived.add(Int(writer.written))
                let digests = try interpretRange(response, writer: writer, object: object, operation: operation, job: job)
                if keepsTime, let time = steps.modificationTimes?.keptModificationTime(in: response) { partial.keptModificationTime = time }
                return (writer, digests)
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
                    job: jobID, file: index, chunk: chunk, plan: plan, record: record, receipt: Self.receipt(of: writer),
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
    func finishFile(_ index: Int, record: FileRecord, plan: ChunkPlan, partial: PartialFile, job: JobContext) async -> WorkResult {
        let work = Work.finishFile(index)
        do {
            let object = DownloadHandles.object(of: record)
            var receipts: [Int: String] = [:]
            if partial.wholeObjectDigests == nil {
                receipts = try store.receipts(job: jobID, file: index)
                if let mismatch = try Self.check(partial, plan: plan, receipts: receipts, against: object.digests) {
                    return try await discard(index, record: record, plan: plan, partial: partial, work: work, reason: mismatch)
                }
            }
            // A composite checksum, whichever answer offered it, is checked part by part.
            var described = object
            described.digests = partial.wholeObjectDigests ?? object.digests
            if let listing = steps.partListing, let composite = Self.composite(in: described.digests),
                let mismatch = try await checkParts(
                    composite, of: described, plan: plan, receipts: receipts, partial: partial, listing: listing, job: job)
            {
                return try await discard(index, record: record, plan: plan, partial: partial, work: work, reason: mismatch)
            }
            if partial.isBlocked(replacing: replacesExisting) {
                return .fileFailed(file: index, work: work, reason: "\(record.path) exists and is not this pull's; --force replaces it")
            }
            if let condition = record.handles[SyncHandles.condition.name], let conflict = LocalDeletion.conflict(at: record.path, expecting: condition) {
                // A sync's file replaces only what its walk saw there.
                return .fileFailed(file: index, work: work, reason: conflict)
            }
            var record = record
            // The time the object keeps, as an answer to one of its ranges in this run said
            // (else the one planned: the kept time described, or the store's own); the record
            // says which, so the sync remembers the time the file has.
            if let planned = record.handles[SyncHandles.modificationTime.name].flatMap({ Int64($0) }) {
                let time = partial.keptModificationTime ?? planned
                try partial.setModificationTime(nanoseconds: time)
                if time != planned { record.handles.set(SyncHandles.modificationTime, String(time)) }
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

    /// A range's receipt: its CRC-32C as 8 hex digits, followed by its
    /// CRC64NVME as 16 when the object offers one (receipts of 8 digits, from
    /// before, still combine into the CRC-32C).
    static func receipt(of writer: RangeWriter) -> String {
        CRC32.hex(writer.crc32c.value) + (writer.crc64nvme.map { CRC64NVME.hex($0.value) } ?? "")
    }

    /// The file's bytes against the offered digests: the CRC-32C and the
    /// CRC64NVME combined from the chunks' receipts (no read), else the file
    /// read once for the strongest digest offered. Nil when they match or
    /// nothing is offered. (A composite checksum is `checkParts`'.)
    static func check(
        _ partial: PartialFile, plan: ChunkPlan, receipts: [Int: String], against offered: [ObjectDigest]
    ) throws(XferError) -> String? {
        var crc32c: UInt32? = 0
        var crc64: UInt64? = 0
        for chunk in 0..<plan.count {
            let length = Int64(plan.length(of: chunk))
            guard let hex = receipts[chunk], let bytes = Hex.bytes(hex), bytes.count == 4 || bytes.count == 12 else {
                (crc32c, crc64) = (nil, nil)
                break
            }
            crc32c = crc32c.map { CRC32C.combine($0, ObjectDigest.bigEndian(Array(bytes[0..<4])), lengthOfSecond: length) }
            crc64 = bytes.count == 12 ? crc64.map { CRC64NVME.combine($0, Self.bigEndian64(bytes[4...]), lengthOfSecond: length) } : nil
        }
        var checked = false
        for digest in offered {
            switch digest {
            case .crc32c(let expected) where crc32c != nil:
                if crc32c != expected { return describe(digest, computed: .crc32c(crc32c!)) }
                checked = true
            case .crc64nvme(let expected) where crc64 != nil:
                if crc64 != expected { return describe(digest, computed: .crc64nvme(crc64!)) }
                checked = true
            default: continue
            }
        }
        if checked { return nil }
        func first(_ matches: (ObjectDigest) -> Bool) -> ObjectDigest? { offered.first(where: matches) }
        let wanted =
            first { if case .sha256 = $0 { true } else { false } } ?? first { if case .md5 = $0 { true } else { false } }
            ?? first { if case .crc64nvme = $0 { true } else { false } } ?? first { if case .crc32 = $0 { true } else { false } }
            ?? first { if case .crc32c = $0 { true } else { false } }
        guard let wanted else { return nil }
        return mismatch([wanted], computed: try read(partial, size: plan.fileSize, for: wanted))
    }

    static func bigEndian64(_ bytes: some Collection<UInt8>) -> UInt64 { bytes.reduce(0) { $0 << 8 | UInt64($1) } }

    /// The file's digest of `wanted`'s kind, read once in 1 MiB blocks.
    private static func read(_ partial: PartialFile, size: Int64, for wanted: ObjectDigest) throws(XferError) -> [ObjectDigest] {
        var digest = LocalDigest(wanted)
        try readRange(partial, from: 0, length: size) { digest.update($0) }
        return digest.result.map { [$0] } ?? []
    }

    /// Calls `body` with bytes `offset..<offset+length` of the partial file, 1 MiB at a time.
    private static func readRange(
        _ partial: PartialFile, from offset: Int64, length: Int64, _ body: (UnsafeRawBufferPointer) -> Void
    ) throws(XferError) {
        let block = 1 << 20
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: block, alignment: 16)
        defer { buffer.deallocate() }
        var position = offset
        let end = offset + length
        while position < end {
            let want = Int(min(Int64(block), end - position))
            let count = pread(partial.descriptor, buffer.baseAddress, want, off_t(position))
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { throw .transferFailed("cannot read back \(partial.path): \(String(cString: strerror(errno)))") }
            body(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
            position += Int64(count)
        }
    }

    /// One digest of bytes read back, of the kind an offered digest is.
    private struct LocalDigest {
        private var crc32c = CRC32C()
        private var crc32 = CRC32()
        private var crc64 = CRC64NVME()
        private var md5 = Insecure.MD5()
        private var sha1 = Insecure.SHA1()
        private var sha256 = SHA256()
        private let kind: Kind

        private enum Kind { case crc32c, crc32, crc64nvme, md5, sha1, sha256, none }

        init(_ digest: ObjectDigest) {
            switch digest {
            case .crc32c: kind = .crc32c
            case .crc32: kind = .crc32
            case .crc64nvme: kind = .crc64nvme
            case .md5: kind = .md5
            case .sha256: kind = .sha256
            case .composite: kind = .none
            }
        }

        /// For a part of a composite checksum.
        init(_ algorithm: CompositeChecksum.Algorithm) {
            switch algorithm {
            case .crc32: kind = .crc32
            case .crc32c: kind = .crc32c
            case .sha1: kind = .sha1
            default: kind = .sha256
            }
        }

        mutating func update(_ bytes: UnsafeRawBufferPointer) {
            switch kind {
            case .crc32c: crc32c.update(bytes)
            case .crc32: crc32.update(bytes)
            case .crc64nvme: crc64.update(bytes)
            case .md5: md5.update(bufferPointer: bytes)
            case .sha1: sha1.update(bufferPointer: bytes)
            case .sha256: sha256.update(bufferPointer: bytes)
            case .none: break
            }
        }

        var result: ObjectDigest? {
            switch kind {
            case .crc32c: return .crc32c(crc32c.value)
            case .crc32: return .crc32(crc32.value)
            case .crc64nvme: return .crc64nvme(crc64.value)
            case .md5: return .md5(Array(md5.finalize()))
            case .sha256: return .sha256(Array(sha256.finalize()))
            case .sha1, .none: return nil
            }
        }

        /// The digest's bytes, big-endian for a CRC (as S3 lists a part's).
        var bytes: [UInt8] {
            switch kind {
            case .crc32c: return CRC32.bigEndianBytes(crc32c.value)
            case .crc32: return CRC32.bigEndianBytes(crc32.value)
            case .crc64nvme: return CRC64NVME.bigEndianBytes(crc64.value)
            case .md5: return Array(md5.finalize())
            case .sha1: return Array(sha1.finalize())
            case .sha256: return Array(sha256.finalize())
            case .none: return []
            }
        }
    }

    static func composite(in offered: [ObjectDigest]) -> CompositeChecksum? {
        for digest in offered { if case .composite(let composite) = digest { return composite } }
        return nil
    }

    /// Checks a composite checksum part by part, a page of the server's list
    /// of parts at a time (O(1) memory a part; done again whole by a resumed
    /// run, which commits nothing of it): each part's digest, from the
    /// ranges' CRC-32C receipts when the part is made of whole ranges (the
    /// usual case: a pull's ranges and the uploaders' parts are both 8 MiB),
    /// else read back; compared with the part's listed checksum, and the
    /// checksum of them all with the object's. Nil when they match, or when
    /// the server lists no parts (nothing to check against).
    private func checkParts(
        _ composite: CompositeChecksum, of object: RemoteObject, plan: ChunkPlan, receipts: [Int: String], partial: PartialFile,
        listing: any ObjectPartListing, job: JobContext
    ) async throws -> String? {
        let shown = Self.shown(object.location)
        var check = CompositeCheck(composite, plan: plan, receipts: receipts, partial: partial)
        var marker = 0
        while true {
            let after = marker
            let page = try await perform("list the parts of \(shown)", in: job) { () throws(BackendError) in
                try listing.listParts(of: object, after: after, in: job)
            }
            if let now = page.validator, let fetched = object.validator, now != fetched {
                throw StepError.objectChanged("\(shown) changed on the server")
            }
            // A server that lists no parts leaves nothing to check against.
            if page.parts.isEmpty, check.count == 0 { return nil }
            if let mismatch = try check.add(page.parts) { return mismatch }
            guard let next = page.next, next > marker else { break }
            marker = next
        }
        return check.finish()
    }

    /// A composite checksum checked against a file's bytes, a page of parts
    /// at a time: each part's digest (from the ranges' CRC-32C receipts when
    /// the part is made of whole ranges, else read back) against the part's
    /// listed checksum, and the checksum of them all against the object's.
    struct CompositeCheck {
        let composite: CompositeChecksum
        let plan: ChunkPlan
        let receipts: [Int: String]
        let partial: PartialFile
        private var ofParts: CompositeAccumulator
        /// Parts and bytes checked so far.
        private(set) var count = 0
        private(set) var offset: Int64 = 0

        init(_ composite: CompositeChecksum, plan: ChunkPlan, receipts: [Int: String], partial: PartialFile) {
            self.composite = composite
            self.plan = plan
            self.receipts = receipts
            self.partial = partial
            ofParts = CompositeAccumulator(composite.algorithm)
        }

        /// The next parts, in order; a mismatch as a message, else nil.
        mutating func add(_ parts: [ObjectPartsPage.Part]) throws(XferError) -> String? {
            for part in parts {
                guard part.number == count + 1, part.size >= 0, offset + part.size <= plan.fileSize else {
                    return "the server lists part \(part.number) of \(part.size) bytes after \(count) parts of \(offset) bytes, which does not fit the \(plan.fileSize) received; the next run fetches it again"
                }
                let digest = try DownloadWorker.partDigest(
                    composite.algorithm, offset: offset, length: part.size, plan: plan, receipts: receipts, partial: partial)
                if let listed = part.checksum, listed != digest {
                    return "part \(part.number)'s bytes do not match the server's \(composite.algorithm.name) of it (\(Checksums.hex(listed)) listed, \(Checksums.hex(digest)) received); the next run fetches it again"
                }
                ofParts.update(digest)
                offset += part.size
                count += 1
            }
            return nil
        }

        /// After the last page: every part and byte accounted for, and the
        /// checksum of the parts' checksums the object's.
        func finish() -> String? {
            guard count == composite.partCount, offset == plan.fileSize else {
                return "the server lists \(count) parts of \(offset) bytes, where its checksum covers \(composite.partCount) parts and the object has \(plan.fileSize) bytes; the next run fetches it again"
            }
            let computed = ofParts.digest
            guard computed == composite.digest else {
                return "its bytes do not match the server's \(ObjectDigest.composite(composite).algorithm) (\(Checksums.hex(composite.digest))-\(composite.partCount) offered, \(Checksums.hex(computed))-\(count) received); the next run fetches it again"
            }
            return nil
        }
    }

    /// A part's digest: combined from the CRC-32C receipts of the ranges it
    /// is made of, when it is made of whole ranges; else read back.
    static func partDigest(
        _ algorithm: CompositeChecksum.Algorithm, offset: Int64, length: Int64, plan: ChunkPlan, receipts: [Int: String],
        partial: PartialFile
    ) throws(XferError) -> [UInt8] {
        if algorithm == .crc32c, let crc = combinedCRC32C(offset: offset, length: length, plan: plan, receipts: receipts) {
            return CRC32.bigEndianBytes(crc)
        }
        var digest = LocalDigest(algorithm)
        try readRange(partial, from: offset, length: length) { digest.update($0) }
        return digest.bytes
    }

    /// The CRC-32C of `offset..<offset+length` from the receipts of the
    /// chunks that make it up exactly; nil when it starts or ends inside a
    /// chunk, or a receipt is missing.
    static func combinedCRC32C(offset: Int64, length: Int64, plan: ChunkPlan, receipts: [Int: String]) -> UInt32? {
        let size = Int64(plan.chunkSize)
        guard size > 0, offset % size == 0, (offset + length) % size == 0 || offset + length == plan.fileSize else { return nil }
        var crc: UInt32 = 0
        var chunk = Int(offset / size)
        var covered: Int64 = 0
        while covered < length {
            guard chunk < plan.count, let hex = receipts[chunk], let bytes = Hex.bytes(hex), bytes.count == 4 || bytes.count == 12 else {
                return nil
            }
            let chunkLength = Int64(plan.length(of: chunk))
            crc = CRC32C.combine(crc, ObjectDigest.bigEndian(Array(bytes[0..<4])), lengthOfSecond: chunkLength)
            covered += chunkLength
            chunk += 1
        }
        return covered == length ? crc : nil
    }

    /// The checksum of the parts' checksums, fed one part's digest at a time.
    struct CompositeAccumulator {
        private var crc32c = CRC32C()
        private var crc32 = CRC32()
        private var sha1 = Insecure.SHA1()
        private var sha256 = SHA256()
        private let algorithm: CompositeChecksum.Algorithm

        init(_ algorithm: CompositeChecksum.Algorithm) { self.algorithm = algorithm }

        mutating func update(_ digest: [UInt8]) {
            switch algorithm {
            case .crc32c: crc32c.update(digest)
            case .crc32: crc32.update(digest)
            case .sha1: sha1.update(data: digest)
            default: sha256.update(data: digest)
            }
        }

        var digest: [UInt8] {
            switch algorithm {
            case .crc32c: return CRC32.bigEndianBytes(crc32c.value)
            case .crc32: return CRC32.bigEndianBytes(crc32.value)
            case .sha1: return Array(sha1.finalize())
            default: return Array(sha256.finalize())
            }
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
        case .crc64nvme(let value): return CRC64NVME.hex(value)
        case .md5(let bytes), .sha256(let bytes): return Checksums.hex(bytes)
        case .composite(let composite): return Checksums.hex(composite.digest) + "-\(composite.partCount)"
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
            case .crc32c, .crc32, .crc64nvme, .composite: break
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
