import FoundationEssentials
import Hummingbird
import Logging
import NIOCore
import Synchronization
import XferPrimitives

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Uploads whose progress is one offset: tus's and the IETF resumable uploads'. What such a
/// protocol keeps per upload beyond the shared `Upload` (whose `meta.json` holds the protocol's
/// name, the file name, `size` = the upload's length and a single chunk standing for the whole
/// file; whose `data` file receives the bytes at their offsets; and whose completion publishes
/// the file once the offset reaches the length):
///
///     root/uploads/<id>/<protocol>.json  what the client declared at creation (tus: metadata
///                                        and concatenation role), written before the upload's
///                                        URL is handed out
///     root/uploads/<id>/offset.log       the acknowledged offset, one record per advance (DurableLog):
///                                        `OFFSET~CRC32C*BOOT`, the CRC-32C of the bytes below it
///                                        computed as they were written, and the boot in whose
///                                        round the record and those bytes were written together;
///                                        `OFFSET~CRC32C` when the bytes were synced before the
///                                        record; plain `OFFSET` when the CRC is not known (after
///                                        a concatenation); `!` voids the record before it (its
///                                        round failed)
///
/// `offset.log` is the protocol's truth: an offset counts once its record is synced. A PATCH
/// writes its bytes and its record, then waits for one sync round that makes both durable
/// (`recordInItsRound`). A killed process leaves both in the page cache; a crash of the machine
/// during the round can keep the record and lose bytes, so a load that finds the last record
/// marked with another boot reads back the bytes that record added (one PATCH's worth, not the
/// file) and drops the record when their CRC-32C differs. Only the last can be torn: the next
/// PATCH's record is written after the round of the one before ended. Bytes past the recorded
/// offset (a body refused by its checksum, or a crash before the record) are never served nor
/// counted; the next PATCH simply writes over them.
/// One offset upload: the shared `Upload` plus its offset.
///
/// Requests that write take turns (`exclusively`): checking `Upload-Offset`, writing and
/// recording the new offset must not interleave with another PATCH of the same upload. A
/// second PATCH takes over (`takingOver`): it cuts the first's body if it is still arriving, waits
/// for the first to keep what arrived (synced, recorded), then usually gets 409 (the offset moved).
actor DiskOffsetUpload: OffsetUpload, TakesTurns {
    nonisolated let upload: DiskUpload
    nonisolated let info: OffsetUploadInfo
    private let log: DurableLog
    private let io: BlockingIO
    private let durability: Durability
    private let statistics: ReceiverStatistics
    private let fileIO: FileIO
    /// The machine's boot, marked on a record written in the round of its bytes (nil: not known;
    /// then every PATCH syncs its bytes before its record).
    private nonisolated let bootID: String?
    private var offset: Int
    /// The CRC-32C of the bytes below `offset`, kept as they are written, so that completion
    /// need not read the file back to hash it (a second pass over the whole file before the last
    /// answer); nil when unknown.
    private var crc: UInt32?
    private var terminated = false
    /// Completed by its creation's body (`writeWhole`) and not yet reported: the next `finish`
    /// is the one that completed it.
    private var completedByItsCreation = false
    /// Every byte in: a partial upload is then final as it is (a concatenation reads it).
    private nonisolated let ended = Atomic<Bool>(false)
    var turns = KeyedTurns<WholeUpload>()

    init(
        upload: DiskUpload, info: OffsetUploadInfo, log: DurableLog, io: BlockingIO, durability: Durability, statistics: ReceiverStatistics,
        fileIO: FileIO, bootID: String?, offset: Int, crc: UInt32?
    ) {
        self.fileIO = fileIO
        self.bootID = bootID
        self.upload = upload
        self.info = info
        self.log = log
        self.io = io
        self.durability = durability
        self.statistics = statistics
        self.offset = offset
        self.crc = crc
        ended.store(offset == upload.meta.size, ordering: .releasing)
    }

    /// Nothing of it in memory differs from what a fresh load finds: published, or a partial
    /// upload with all its bytes.
    nonisolated var isSettled: Bool {
        ended.load(ordering: .acquiring) && (info.role == .partial || upload.isSettled)
    }

    nonisolated var id: String { upload.meta.uploadId }
    /// Upload-Length.
    nonisolated var length: Int { upload.meta.size }

    /// The CRC-32C of the bytes below the offset, when known.
    var currentCRC: UInt32? { crc }

    /// The acknowledged offset; nil once the upload is terminated.
    var currentOffset: Int? { terminated ? nil : offset }

    /// Called by a DELETE before the files go: writes in flight then fail instead of recording.
    func markTerminated() { terminated = true }

    // MARK: Writing

    /// Streams `body` into the data file from `start` (the current offset, checked by the caller
    /// inside `exclusively`), makes it durable and records the new offset.
    ///
    /// At most `limit` bytes are taken (the caller passes what is left of the upload, bounded by
    /// `--max-chunk-size`); a longer body is refused whole. A body with a `check` (tus's
    /// `Upload-Checksum`, a `Content-Digest`) counts whole or not at all; one without keeps what arrived of it when cut.
    nonisolated func write<Body: AsyncSequence>(
        _ body: Body, at start: Int, limit: Int, declaredLength: Int?, check: BodyWriter.Check?
    ) async throws -> OffsetWriteResult where Body.Element == ByteBuffer {
        let room = min(limit, length - start)
        let writer = BodyWriter(
            limit: room, check: check, hashing: .crc32c, keepsCutBody: check == nil, sync: .byCaller,
            counted: { count in
                self.upload.bytesReceived.add(count, ordering: .relaxed)
                self.statistics.received(count)
            })
        let written: BodyWriter.Written
        do {
            written = try await writer.write(body, to: .path(upload.layout.data), at: start)
        } catch let failure as BodyWriter.Failure {
            switch failure {
            case .tooLarge(let limit): return .failed(.tooLarge(limit: limit))
            case .digestMismatch: return .failed(.checksumMismatch)
            // Only a checked body is refused when cut: its checksum cannot be verified.
            case .interrupted: return .failed(.interrupted(offset: start))
            // Not asked for: a body of an offset upload has no fixed length.
            case .tooShort: preconditionFailure("a body of an offset upload has no length to fall short of")
            }
        }
        let reached = start + written.count
        let part = written.digest.map(StreamingDigest.crc32(bytes:))
        try await recordInItsRound(reached, extending: part)
        return written.cutBy == nil ? .stored(offset: reached) : .failed(.interrupted(offset: reached))
    }

    /// Makes the bytes up to `newOffset` (written, not synced) and their record durable in one
    /// sync round: the record carries this boot's mark, which tells a load after a crash of the
    /// machine to read those bytes back (`DiskOffsetUploads.read`). Without a CRC to check them
    /// by, or a boot to mark, the bytes are synced first and the record in the next round.
    ///
    /// A round that fails leaves the record in the page cache, where a later round would make it
    /// durable without its bytes: a `!` after it voids it, for a load of this boot (another
    /// boot's load checks it anyway).
    private func recordInItsRound(_ newOffset: Int, extending part: UInt32?) async throws {
        guard !terminated else { throw UploadError.deleted }
        guard newOffset > offset else { return }
        let newCRC = crc.flatMap { crc in part.map { CRC32C.combine(crc, $0, lengthOfSecond: Int64(newOffset - offset)) } }
        guard let bootID, let newCRC else {
            try await durability.sync()
            try await record(newOffset, crc: newCRC)
            return
        }
        try log.appendUnsynced([Self.offsetRecord(newOffset, crc: newCRC, bootID: bootID)])
        do {
            try await durability.sync()
        } catch {
            try? log.appendUnsynced([Self.voidingRecord])
            throw error
        }
        advance(to: newOffset, crc: newCRC)
    }

    /// `OFFSET~CRC32C*BOOT`: see the layout above.
    nonisolated static func offsetRecord(_ offset: Int, crc: UInt32, bootID: String) -> String {
        String(offset) + "~" + CRC32.hex(crc) + "*" + bootID
    }

    /// Voids the record before it.
    nonisolated static let voidingRecord = "!"

    /// A creation's body that brings the whole upload (`DiskOffsetUploads.create` with a body),
    /// streamed into the data file with nothing synced yet, neither the creation nor the bytes.
    /// When it is whole, the upload completes with its creation in one sync round
    /// (`DiskUpload.completeInItsCreationRound`). Otherwise the creation and what arrived are
    /// made durable as the longer way would have left them: `writeInfo` first (the info file,
    /// when the creation left it out), then one round, then the offset's record. `data`: the
    /// upload's data file as its creation left it open, written through here.
    nonisolated func writeWhole<Body: AsyncSequence>(
        _ body: Body, check: BodyWriter.Check?, bootID: String?, data: POSIXFile, writeInfo: @escaping @Sendable () throws -> Void
    ) async throws -> OffsetWriteResult where Body.Element == ByteBuffer {
        let writer = BodyWriter(
            limit: length, check: check, hashing: .crc32c, keepsCutBody: check == nil, sync: .byCaller,
            counted: { count in
                self.upload.bytesReceived.add(count, ordering: .relaxed)
                self.statistics.received(count)
            })
        let failure: OffsetWriteFailure
        let written: BodyWriter.Written
        do {
            written = try await writer.write(body, to: .file(data), at: 0)
            if written.count == length, written.cutBy == nil, let digest = written.digest {
                let crc = StreamingDigest.crc32(bytes: digest)
                _ = try await upload.completeInItsCreationRound(crc32c: crc, bootID: bootID)
                await completedWhole(crc: crc)
                return .stored(offset: length)
            }
        } catch let refused as BodyWriter.Failure {
            switch refused {
            case .tooLarge(let limit): failure = .tooLarge(limit: limit)
            case .digestMismatch: failure = .checksumMismatch
            case .interrupted: failure = .interrupted(offset: 0)
            case .tooShort: preconditionFailure("a body of an offset upload has no length to fall short of")
            }
            try await durable(writeInfo)
            return .failed(failure)
        }
        try await durable(writeInfo)
        let reached = written.count
        try await record(reached, extending: written.digest.map(StreamingDigest.crc32(bytes:)))
        return written.cutBy == nil ? .stored(offset: reached) : .failed(.interrupted(offset: reached))
    }

    /// The creation (its info file written by `writeInfo` first) and every byte written so far, durable.
    private nonisolated func durable(_ writeInfo: @escaping @Sendable () throws -> Void) async throws {
        try writeInfo()
        try await durability.sync()
    }

    private func completedWhole(crc: UInt32) {
        offset = length
        self.crc = crc
        ended.store(true, ordering: .releasing)
        completedByItsCreation = true
    }

    /// Builds a final upload's data from its partials' files (`finishedFile`), in order, copied in
    /// the kernel (else in bounded buffers); durable and recorded before it returns. `crc`: the
    /// partials' CRC-32Cs combined, when every one is known.
    func concatenate(_ partials: [any OffsetUpload], crc: UInt32?) async throws {
        let sources = try partials.map { partial in
            guard let partial = partial as? DiskOffsetUpload else { throw UploadError.corrupt("a partial upload of another storage") }
            return partial.finishedFile
        }
        let destination = upload.layout.data
        let total = length
        try await io.run {
            let output = try POSIXFile.open(destination, O_WRONLY)
            defer { output.close() }
            var at = 0
            for source in sources {
                let input = try POSIXFile.open(source, O_RDONLY)
                defer { input.close() }
                let size = try input.size()
                guard size <= total - at else { throw UploadError.corrupt("partial uploads hold more than \(total) bytes") }
                // In the kernel (`copy_file_range`): the bytes do not pass through this process,
                // and where the filesystem shares blocks they are not written a second time.
                try output.copyAll(from: input, count: size, at: at)
                at += size
            }
            guard at == total else { throw UploadError.corrupt("partial uploads hold \(at) bytes, expected \(total)") }
        }
        try await durability.sync()
        try await record(total, crc: crc)
    }

    /// Records `newOffset` durably; the bytes below it are already synced.
    /// `part`: the CRC-32C of the bytes from the current offset to `newOffset` (nil: unknown, and
    /// so is the upload's from now on).
    private func record(_ newOffset: Int, extending part: UInt32?) async throws {
        let newCRC = crc.flatMap { crc in part.map { CRC32C.combine(crc, $0, lengthOfSecond: Int64(newOffset - offset)) } }
        try await record(newOffset, crc: newCRC)
    }

    /// `newCRC`: the CRC-32C of the bytes below `newOffset` (nil: unknown from now on).
    private func record(_ newOffset: Int, crc newCRC: UInt32?) async throws {
        guard !terminated else { throw UploadError.deleted }
        precondition(newOffset >= offset && newOffset <= length, "offsets only move forward, within the upload")
        guard newOffset > offset else { return }
        try await log.append(String(newOffset) + (newCRC.map { "~" + CRC32.hex($0) } ?? ""))
        advance(to: newOffset, crc: newCRC)
    }

    private func advance(to newOffset: Int, crc newCRC: UInt32?) {
        offset = newOffset
        if newOffset == length { ended.store(true, ordering: .releasing) }
        crc = newCRC
    }

    /// Publishes the file (as every protocol's completed files are) once the offset has reached
    /// the length. Idempotent: also finishes what a restart cut short.
    ///
    /// Partial uploads are left as they are (the spec has servers not process them until they are
    /// concatenated): their data stays in place, where concatenation and GET read it. That spares
    /// each chunk of a parallel upload a hash and a publication's syncs.
    @discardableResult
    func finish() async throws -> Bool {
        guard !terminated else { throw UploadError.deleted }
        guard offset == length else { throw UploadError.corrupt("finish called at offset \(offset) of \(length)") }
        guard info.role != .partial else { return false }
        if completedByItsCreation {
            completedByItsCreation = false
            return true
        }
        let wasComplete = try await upload.completionRecord() != nil
        _ = try await upload.completeWritten(crc32c: crc)
        return !wasComplete
    }

    nonisolated var path: RelativePath { upload.layout.path }

    func finishedBody(range: ClosedRange<Int>?, context: some RequestContext) async throws -> ResponseBody {
        try await fileIO.load(finishedFile, range: range, context: context)
    }

    /// Where a finished upload's bytes are read from (call `finish` first).
    nonisolated var finishedFile: String {
        info.role == .partial ? upload.layout.data : upload.layout.downloadFile
    }
}

/// One protocol's offset uploads in a store, by id. Built on `UploadStore`, so their files are
/// published (and also served at `/downloads/`), deleted and recovered like every other
/// protocol's.
actor DiskOffsetUploads: OffsetUploadStore {
    /// "tus" or "ietf": stored in each upload's log (its meta line), which says whose it is.
    let protocolName: String

    private let store: DiskUploads
    private let logger: Logger
    private let uploads: KeyedLoads<String, DiskOffsetUpload>

    private let fileIO: FileIO

    init(store: DiskUploads, protocolName: String, fileIO: FileIO, logger: Logger) {
        // Not counted in the receiver's uploads in memory: each of these holds an upload of
        // `store`'s, which are (so every upload counts once, and none of these outlives its own).
        uploads = KeyedLoads(settled: { $0.isSettled })
        self.fileIO = fileIO
        self.store = store
        self.protocolName = protocolName
        self.logger = logger
    }

    /// Creates an upload at offset 0. Everything its URL unlocks is on disk before it returns.
    func create(path: RelativePath, length: Int, info: OffsetUploadInfo) async throws -> any OffsetUpload {
        // One chunk stands for the whole file: tus has no chunks, and a chunk bitmap sized by
        // bytes would not do.
        let encoded = try JSONEncoder().encode(info)
        // The info file joins the upload's own creation round. offset.log is made by its first record.
        let upload = try await store.create(protocolName: protocolName, path: path, size: length, chunkSize: max(1, length)) {
            [protocolName] layout in
            try FileSystemOps.writeNew(Array(encoded), to: OffsetUploadFiles(layout, protocolName: protocolName).info)
        }
        let files = OffsetUploadFiles(upload.layout, protocolName: protocolName)
        let tusUpload = DiskOffsetUpload(
            upload: upload, info: info, log: DurableLog(path: files.offsets, durability: store.durability), io: store.io,
            durability: store.durability, statistics: store.statistics, fileIO: fileIO, bootID: store.bootID, offset: 0, crc: 0)
        uploads.insert(tusUpload, for: upload.meta.uploadId)
        return tusUpload
    }

    /// The most a creation's body may hold to be stored whole with its creation in one sync round:
    /// what a load after a crash of the machine reads back to check (`DiskUpload.completeInItsCreationRound`).
    static let storedWholeLimit = DiskUpload.inlineFinishLimit

    /// A creation whose body is the whole upload (a small file, typically) is made and completed
    /// in one sync round with its bytes (`DiskOffsetUpload.writeWhole`): three files and a rename
    /// (two, when the info is the default), where the longer way writes six and waits for five
    /// rounds. Any other takes the longer way (`createThenWrite`).
    ///
    /// The client may learn the upload's URL (`announce`, the IETF draft's 104) before the round:
    /// after a crash of the machine before it ended, the URL is unknown and a resumption starts
    /// over, as it would for an upload that expired. Nothing it was told of bytes is lost.
    nonisolated func create<Body: AsyncSequence>(
        path: RelativePath, length: Int, info: OffsetUploadInfo, body: Body, limit: Int, declaredLength: Int?,
        check: BodyWriter.Check?, announce: (any OffsetUpload) async throws -> Void
    ) async throws -> (upload: any OffsetUpload, result: OffsetWriteResult) where Body.Element == ByteBuffer {
        guard info.role == .single, length > 0, length <= min(limit, Self.storedWholeLimit), declaredLength == length else {
            return try await createThenWrite(
                path: path, length: length, info: info, body: body, limit: limit, declaredLength: declaredLength, check: check,
                announce: announce)
        }
        let (upload, data, writeInfo) = try await createUnsynced(path: path, length: length, info: info)
        defer { data.close() }
        let bootID = store.bootID
        do {
            let result = try await upload.exclusively {
                try await announce(upload)
                return try await upload.writeWhole(body, check: check, bootID: bootID, data: data, writeInfo: writeInfo)
            }
            return (upload, result)
        } catch {
            throw OffsetCreationFailure(upload: upload, error: error)
        }
    }

    /// An upload at offset 0 whose files are written and not synced, its data file left open
    /// for the caller to close. Its info file is left for `writeInfo` when the info is the
    /// default (a completed upload without one reads as having the default: `read`).
    private func createUnsynced(
        path: RelativePath, length: Int, info: OffsetUploadInfo
    ) async throws -> (DiskOffsetUpload, POSIXFile, writeInfo: @Sendable () throws -> Void) {
        let encoded = try JSONEncoder().encode(info)
        let deferred = info == .defaultSingle
        let (upload, open) = try await store.createOpen(protocolName: protocolName, path: path, size: length, chunkSize: length) {
            [protocolName] layout in
            if !deferred { try FileSystemOps.writeNew(Array(encoded), to: OffsetUploadFiles(layout, protocolName: protocolName).info) }
        }
        let files = OffsetUploadFiles(upload.layout, protocolName: protocolName)
        let offsetUpload = DiskOffsetUpload(
            upload: upload, info: info, log: DurableLog(path: files.offsets, durability: store.durability), io: store.io,
            durability: store.durability, statistics: store.statistics, fileIO: fileIO, bootID: store.bootID, offset: 0, crc: 0)
        uploads.insert(offsetUpload, for: upload.meta.uploadId)
        let writeInfo: @Sendable () throws -> Void = {
            guard deferred, !FileSystemOps.exists(files.info) else { return }
            try FileSystemOps.writeNew(Array(encoded), to: files.info)
        }
        return (offsetUpload, open, writeInfo)
    }

    /// Nil for ids that are malformed, unknown, terminated or of another protocol.
    func upload(id: String) async throws -> (any OffsetUpload)? {
        try await diskUpload(id: id)
    }

    private func diskUpload(id: String) async throws -> DiskOffsetUpload? {
        guard UploadID.isValid(id) else { return nil }
        return try await uploads.value(for: id) { [store, protocolName, fileIO, logger] in
            try await Self.read(id: id, protocolName: protocolName, store: store, fileIO: fileIO, logger: logger)
        }
    }

    /// Lets the uploads no request holds and nobody used for `idle` (nil: the idle lifetime)
    /// leave memory (`KeyedLoads`).
    func dropIdle(after idle: Duration? = nil) {
        uploads.dropIdle(after: idle)
    }

    /// Lets go of these uploads where no request holds them (before they expire).
    func dropUnlessHeld(_ ids: [String]) {
        for id in ids { _ = uploads.dropUnlessHeld(id) }
    }

    /// Termination: false when the upload is unknown or already gone.
    func delete(id: String) async throws -> Bool {
        guard let upload = try await diskUpload(id: id), await upload.currentOffset != nil else { return false }
        await upload.markTerminated()
        let deleted = try await store.delete(id: id)
        uploads.remove(id)
        return deleted
    }

    private static func read(
        id: String, protocolName: String, store: DiskUploads, fileIO: FileIO, logger: Logger
    ) async throws -> DiskOffsetUpload? {
        guard let upload = try await store.upload(id: id), upload.meta.protocolName == protocolName else { return nil }
        let files = OffsetUploadFiles(upload.layout, protocolName: protocolName)
        let size = upload.meta.size
        let completion = try await upload.completionRecord()
        let loaded: (OffsetUploadInfo, Int, UInt32?)? = try await store.io.run {
            guard let infoBytes = try FileSystemOps.readAll(files.info) ?? FileSystemOps.readAll(files.infoOfEarlierReceivers) else {
                // Completed with its creation, of the default info (`createUnsynced`): its offset is its length.
                if let completion, !FileSystemOps.exists(files.offsets) {
                    return (.defaultSingle, size, completion.crc32c.flatMap { UInt32($0, radix: 16) })
                }
                // A creation that died before the info file was synced never handed out its URL.
                return nil
            }
            // Torn: as above.
            guard let info = try? JSONDecoder().decode(OffsetUploadInfo.self, from: Data(infoBytes)) else { return nil }
            if let completion, !FileSystemOps.exists(files.offsets) {
                // Completed with its creation (`DiskOffsetUpload.writeWhole`): no offset record.
                return (info, size, completion.crc32c.flatMap { UInt32($0, radix: 16) })
            }
            var records = OffsetRecords(size: size)
            for record in try DurableLog.readRecords(path: files.offsets) where !records.read(record) {
                // Only tampering gets here; what follows an unreadable record cannot be trusted.
                logger.warning("Ignoring offset.log from an unreadable record on", metadata: ["upload": "\(id)"])
                break
            }
            if completion == nil, let check = records.unconfirmed(thisBoot: store.bootID),
                !Self.holds(upload.layout.data, check)
            {
                // Written in the round of its bytes, and the machine went down since: that round
                // kept the record and lost some of them. Nobody was told of that offset (its round
                // never ended); the client resumes from the one before. Voided for good, durably:
                // the next record may be lower than this one.
                logger.warning("Dropping the last offset of an upload whose round a crash of the machine cut short", metadata: ["upload": "\(id)"])
                try POSIXFile.appendRecords([DiskOffsetUpload.voidingRecord], to: files.offsets, creating: false)
                try store.durability.syncNow()
                records.voidLast()
            }
            return (info, records.offset, records.crc)
        }
        guard case let (info, offset, crc)? = loaded else { return nil }
        return DiskOffsetUpload(
            upload: upload, info: info, log: DurableLog(path: files.offsets, durability: store.durability), io: store.io,
            durability: store.durability, statistics: store.statistics, fileIO: fileIO, bootID: store.bootID, offset: offset, crc: crc)
    }
}

extension DiskOffsetUploads {
    /// Whether the data file at `path` holds the bytes an unconfirmed record added: their CRC-32C
    /// joined to the one before gives the record's. Reads one record's bytes. Blocking.
    fileprivate static func holds(_ path: String, _ check: OffsetRecords.Check) -> Bool {
        guard let part = DiskUpload.crc32c(ofFileAt: path, range: check.from..<check.to) else { return false }
        return CRC32C.combine(check.crcBefore, part, lengthOfSecond: Int64(check.to - check.from)) == check.crc
    }
}

/// What `offset.log`'s records say, read in order (the layout is in `DiskOffsetUpload`'s
/// comment): the offset, its CRC-32C, and what a load must check of the last record.
struct OffsetRecords {
    /// The bytes between `from` and `to` that a record written in their round added, and the CRCs
    /// before and after them.
    struct Check: Equatable {
        var from: Int
        var to: Int
        var crcBefore: UInt32
        var crc: UInt32
    }

    let size: Int
    private(set) var offset = 0
    /// Nil when not known (a concatenation, or records of receivers before the CRC was kept).
    private(set) var crc: UInt32? = 0
    /// The boot marked on the last record, when it was written in the round of its bytes.
    private var boot: Substring?
    /// Offset and CRC before the last record, which `!` restores.
    private var before: (offset: Int, crc: UInt32?)?

    init(size: Int) { self.size = size }

    /// Takes the next record; false for one that cannot be read (only tampering makes one).
    mutating func read(_ record: Substring) -> Bool {
        if record == Substring(DiskOffsetUpload.voidingRecord) {
            guard let before else { return false }
            voidLast(restoring: before)
            return true
        }
        let marked = record.split(separator: "*", maxSplits: 1, omittingEmptySubsequences: false)
        let fields = marked[0].split(separator: "~", maxSplits: 1)
        guard let first = fields.first, let value = Int(first), value >= offset, value <= size else { return false }
        let newCRC = fields.count == 2 ? UInt32(fields[1], radix: 16) : nil
        guard marked.count == 1 || (newCRC != nil && !marked[1].isEmpty) else { return false }
        before = (offset, crc)
        offset = value
        crc = newCRC
        boot = marked.count == 2 ? marked[1] : nil
        return true
    }

    /// The last record's bytes to read back, when it was written in their round during another
    /// boot than `thisBoot` (or the boot is not known).
    func unconfirmed(thisBoot: String?) -> Check? {
        guard let boot, let crc, let before, let crcBefore = before.crc, before.offset < offset else { return nil }
        if let thisBoot, boot == Substring(thisBoot) { return nil }
        return Check(from: before.offset, to: offset, crcBefore: crcBefore, crc: crc)
    }

    /// Drops the last record (its bytes were not all kept).
    mutating func voidLast() {
        if let before { voidLast(restoring: before) }
    }

    private mutating func voidLast(restoring earlier: (offset: Int, crc: UInt32?)) {
        (offset, crc) = earlier
        before = nil
        boot = nil
    }
}

/// An offset upload's own files, named after what they hold, never after the protocol (which the
/// upload's log records).
private struct OffsetUploadFiles {
    let info: String
    /// Where receivers before this layout kept `info`: `<id>.tus.json`, `<id>.ietf.json`. Read
    /// when `info` is absent, so their uploads go on.
    let infoOfEarlierReceivers: String
    let offsets: String

    init(_ layout: UploadLayout, protocolName: String) {
        info = layout.file("offset.json")
        infoOfEarlierReceivers = layout.file(protocolName + ".json")
        offsets = layout.file("offset.log")
    }
}
