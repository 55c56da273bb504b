import XferPrimitives
import Synchronization
import Crypto
import FoundationEssentials
import NIOCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// One upload's chunk state. Everything it acknowledges is on disk first.
///
/// Chunk bodies are streamed outside the actor (see `writeChunk`), so concurrent chunks of one upload
/// hash and write in parallel; the actor only serializes bookkeeping: who is writing which chunk,
/// the received set, and the log appends that make it durable.
actor DiskUpload {
    nonisolated let meta: UploadMeta
    nonisolated let layout: UploadLayout
    /// Body bytes read for this upload since the receiver started, partial
    /// bodies included: what a client really sent, to measure re-sends.
    nonisolated let bytesReceived = Atomic<Int>(0)
    private let statistics: ReceiverStatistics
    private let io: BlockingIO
    private let durability: Durability
    private let log: DurableLog

    /// The chunks acknowledged, with their CRC-32Cs where they came with one.
    private var received: ReceivedChunks {
        didSet { runsHeld.set(received.runCount) }
    }
    /// `received`'s runs, counted in what the receiver holds (`UploadsInMemory`).
    private let runsHeld: ChunkRunsHeld
    /// Chunks being written right now. A second request for the same chunk waits: if both wrote at
    /// once, a good one could be acknowledged over bytes a bad one was still overwriting.
    private var writers = KeyedTurns<Int>()
    private var completion: CompletionRecord?
    /// Completed: its caches may drop it (`KeyedLoads`), a fresh load finding the same.
    private nonisolated let completed = Atomic<Bool>(false)
    nonisolated var isSettled: Bool { completed.load(ordering: .acquiring) }
    private var completionTask: Task<CompletionRecord, any Error>?
    private var deleted = false
    /// SHA-256 (hex) of a single-chunk upload's bytes, once its chunk is received (see
    /// `isSingleSmallChunk`): completion records it without reading the file back.
    private var digest: String?

    init(
        meta: UploadMeta, layout: UploadLayout, io: BlockingIO, durability: Durability, statistics: ReceiverStatistics,
        memory: UploadsInMemory?, received: ReceivedChunks? = nil, completion: CompletionRecord?, digest: String? = nil
    ) {
        runsHeld = ChunkRunsHeld(memory)
        self.digest = digest
        self.meta = meta
        self.statistics = statistics
        self.layout = layout
        self.io = io
        self.durability = durability
        self.log = DurableLog(path: layout.log, durability: durability)
        self.received = received ?? ReceivedChunks(meta: meta)
        runsHeld.set(self.received.runCount)
        self.completion = completion
        completed.store(completion != nil, ordering: .releasing)
    }

    // MARK: Chunks

    /// A flat upload of one chunk no larger than `inlineFinishLimit`: most files of a tree.
    ///
    /// Its chunk is acknowledged after one sync round, not two: the `+1` record carries the
    /// SHA-256 of the bytes (`+1.<hex>`) and is written with them, so a crash during the round
    /// that kept the record and lost (some of) the bytes is caught when the upload loads: the
    /// bytes no longer match, and the chunk reads as missing (`UploadStore.load`; checking costs
    /// a read of at most `inlineFinishLimit` bytes). The digest is the file's, so completion does
    /// not read the file back either.
    nonisolated static func isSingleSmallChunk(_ meta: UploadMeta, _ layout: UploadLayout) -> Bool {
        meta.chunkCount == 1 && meta.size <= inlineFinishLimit && layout.format == .flat
    }

    /// `+1.<sha256 hex>`: the record of a single small chunk (see `isSingleSmallChunk`).
    nonisolated static func digestRecord(chunk: Int, sha256: String) -> String {
        "+" + String(chunk) + "." + sha256
    }

    /// Streams one chunk's body to its place in the data file and acknowledges it durably.
    ///
    /// Returns only after the bytes are durable and `+chunk` is in the log (see `commitWrite`).
    /// Throws, leaving the chunk not received, a `BodyWriter.Failure` when the body is not the
    /// chunk (its length, `check`, or `trailer`: see `BodyWriter.write`), `UploadError` when
    /// the upload cannot take it, any other error for storage. `chunk` must be in
    /// `1...meta.chunkCount`.
    nonisolated func writeChunk<Body: AsyncSequence>(
        _ chunk: Int,
        body: Body,
        check: BodyWriter.Check?,
        trailer: (() async throws -> Void)? = nil
    ) async throws where Body.Element == ByteBuffer {
        try await writeChunk(chunk, body: body, check: check, trailer: trailer, alsoRecord: nil)
    }

    /// `writeChunk`, and with `alsoRecord`: a protocol's own record of the chunk (sequence's
    /// `blocks.log`), written with `+chunk` once the bytes are durable and made durable by the
    /// same round, so the protocol pays no round of its own. A crash can keep one of the two records without the
    /// other: the protocol's load must trust its record only where `+chunk` is kept too.
    ///
    /// `inOrderUnder`: the machine's boot, for a protocol whose chunks are written one at a time
    /// and in order (sequence): the bytes and both records are then written and one round makes
    /// them durable, `+chunk~CRC*<boot id>` saying so. Only the last chunk record of such an
    /// upload can be torn by a crash of the machine (the next one is written after this round
    /// ended), and a load under another boot reads that chunk back (`DiskUploads.load`).
    nonisolated func writeChunk<Body: AsyncSequence>(
        _ chunk: Int,
        body: Body,
        check: BodyWriter.Check?,
        trailer: (() async throws -> Void)?,
        alsoRecord: (@Sendable () throws -> Void)?,
        inOrderUnder bootID: String? = nil
    ) async throws where Body.Element == ByteBuffer {
        precondition(chunk >= 1 && chunk <= meta.chunkCount, "chunk out of range")
        try await beginWrite(chunk)
        let range = meta.byteRange(ofChunk: chunk)
        let single = Self.isSingleSmallChunk(meta, layout)
        let keepsCRC = !single && check?.algorithm != .crc32c && keepsChunkCRCs
        // Runs on the caller's task, not the actor: this is where the bytes and the CPU time go.
        let writer = BodyWriter(
            limit: range.count, exactLength: true, check: check,
            hashing: single ? .sha256 : keepsCRC ? .crc32c : nil, sync: .byCaller,
            counted: { count in
                self.bytesReceived.add(count, ordering: .relaxed)
                self.statistics.received(count)
            })
        let digest: [UInt8]?
        do {
            // Opened before the body is read: a file that is gone (the upload deleted meanwhile)
            // fails the request before any byte of it is taken.
            let file = try POSIXFile.open(layout.data, O_WRONLY)
            defer { file.close() }
            digest = try await writer.write(body, to: .file(file), at: range.lowerBound, trailer: trailer).digest
        } catch {
            await endWrite(chunk)
            // A delete that lands mid-body removes the data file; that's the client's 404, not a storage failure.
            if await deleted { throw UploadError.deleted }
            throw error
        }
        // A CRC-32C the body was checked against, or kept as it passed, is the chunk's, for the
        // completion to combine.
        let checked = check.flatMap { $0.algorithm == .crc32c ? StreamingDigest.crc32(bytes: $0.expected) : nil }
        let crc = checked ?? (keepsCRC ? digest.map(StreamingDigest.crc32(bytes:)) : nil)
        try await commitWrite(
            chunk, sha256: single ? digest.map(Hex.lowercase) : nil, crc32c: crc, alsoRecord: alsoRecord,
            inOrderUnder: bootID)
    }

    /// Whether a chunk checked by another digest (multipart's MD5, sequence's CRC-32) keeps its
    /// CRC-32C too, computed as its bytes pass (ISA-L: a few percent of the MD5 or CRC-32 it is
    /// checked by). Completion then combines the chunks' CRC-32Cs instead of reading the whole
    /// file back for a SHA-256: a serial pass after the last chunk, 0.8 CPU-s per GiB. Not for
    /// patch, whose completion answer gives a client that did not check its chunks by CRC-32C
    /// the file's SHA-256.
    nonisolated var keepsChunkCRCs: Bool { meta.protocolName != PatchRoutes.protocolName }

    private func beginWrite(_ chunk: Int) async throws {
        while true {
            try checkWritable()
            if writers.take(chunk) { break }
            await withCheckedContinuation { writers.queue(chunk, $0) }
        }
        // A chunk between two gaps opens a run: refused, before a byte of it is read, when the
        // upload or the receiver holds as many as it may (`ReceiverLimits`). Chunks that extend
        // or join runs always pass: a client that fills its gaps is never stuck.
        if received.chunks.runChange(inserting: chunk) > 0, let busy = runsHeld.roomForRun() {
            writers.end(chunk)
            throw busy
        }
        if received.contains(chunk) {
            // This request is about to overwrite acknowledged bytes. Unmark them durably first, so
            // neither a bad body nor a crash mid-write can leave the region marked received. If the
            // append fails the chunk simply reads as missing, which costs a resend and nothing else.
            received.remove(chunk)
            digest = nil
            do {
                try await log.append("-\(chunk)")
            } catch {
                endWrite(chunk)
                throw error
            }
        }
    }

    /// Returns once the chunk's bytes and its `+chunk` record are on disk.
    ///
    /// Group commit: the store's sync rounds (`Durability`) are shared by every request of every
    /// upload. The bytes are made durable by one round, and only then is `+chunk` appended, made
    /// durable by the next: a crash between the two costs a resend, never a record of bytes that
    /// are not there. Chunks that finish together share both rounds. A single small chunk
    /// (`sha256` given, see `isSingleSmallChunk`) writes its digest record at once and waits
    /// for one round.
    private func commitWrite(
        _ chunk: Int, sha256: String?, crc32c: UInt32?, alsoRecord: (@Sendable () throws -> Void)?, inOrderUnder bootID: String?
    ) async throws {
        defer { endWrite(chunk) }
        guard !deleted else { throw UploadError.deleted }
        let log = self.log
        do {
            if let sha256 {
                try log.appendUnsynced([Self.digestRecord(chunk: chunk, sha256: sha256)], creating: false)
                try await durability.sync(then: alsoRecord)
            } else if let bootID, let crc32c {
                try log.appendUnsynced([Self.inOrderRecord(chunk: chunk, crc: crc32c, bootID: bootID)], creating: false)
                try alsoRecord?()
                do {
                    try await durability.sync()
                } catch {
                    // The records stay in the page cache, where a later round would make them
                    // durable without the bytes: `-chunk` voids this one.
                    try? log.appendUnsynced(["-\(chunk)"], creating: false)
                    throw error
                }
            } else {
                // The record is appended by the sync thread right after the round that made the
                // bytes durable, and made durable by the next round.
                let record = crc32c.map { ReceivedChunks.record(chunk: chunk, crc: $0) } ?? "+\(chunk)"
                try await durability.sync(then: {
                    try log.appendUnsynced([record], creating: false)
                    try alsoRecord?()
                })
            }
        } catch let error as IOError where error.code == ENOENT && deleted {
            // A delete during the round moved the log away; the record had nowhere to go.
            throw UploadError.deleted
        }
        guard !deleted else { throw UploadError.deleted }
        received.insert(chunk, crc: sha256 == nil ? crc32c : nil)
        digest = sha256
    }

    /// Whether the file at `path` holds bytes whose CRC-32C is `crc32c` in `range` (a chunk's,
    /// read back after a crash of the machine). Blocking.
    nonisolated static func holds(_ path: String, range: Range<Int>, crc32c: UInt32) -> Bool {
        Self.crc32c(ofFileAt: path, range: range) == crc32c
    }

    /// The CRC-32C of the bytes of the file at `path` in `range`, read 1 MiB at a time; nil when
    /// they cannot all be read. Blocking.
    nonisolated static func crc32c(ofFileAt path: String, range: Range<Int>) -> UInt32? {
        guard let file = try? POSIXFile.open(path, O_RDONLY) else { return nil }
        defer { file.close() }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buffer.deallocate() }
        var crc = CRC32C()
        var at = range.lowerBound
        while at < range.upperBound {
            let piece = UnsafeMutableRawBufferPointer(rebasing: buffer[..<min(buffer.count, range.upperBound - at)])
            guard let read = try? file.preadFully(into: piece, at: at), read == piece.count else { return nil }
            crc.update(UnsafeRawBufferPointer(piece))
            at += read
        }
        return crc.value
    }

    /// `+chunk~CRC*<boot id>`: a chunk written in order, its record in the round of its bytes.
    nonisolated static func inOrderRecord(chunk: Int, crc: UInt32, bootID: String) -> String {
        ReceivedChunks.record(chunk: chunk, crc: crc) + "*" + bootID
    }

    private func endWrite(_ chunk: Int) {
        writers.end(chunk)
    }

    private func checkWritable() throws {
        if deleted { throw UploadError.deleted }
        if completion != nil || completionTask != nil { throw UploadError.completed }
    }

    // MARK: Queries

    /// Received chunks. A completed upload reports every chunk so that a client killed during
    /// complete can reconcile and call complete again.
    func receivedChunks() throws -> ChunkRanges {
        if deleted { throw UploadError.deleted }
        if completion != nil { return .all(meta.chunkCount) }
        return received.chunks
    }

    /// Nil until completed.
    func completionRecord() throws -> CompletionRecord? {
        if deleted { throw UploadError.deleted }
        return completion
    }

    // MARK: Completion

    /// Assembles the file once every chunk is in; answers the same record on every later call.
    /// `crc32c`: the whole file's, when the caller kept it as the bytes were written (else the
    /// chunks' CRCs combined, else the file is hashed).
    func complete(crc32c: UInt32? = nil) async throws -> CompletionOutcome {
        if deleted { throw UploadError.deleted }
        if let completion { return .completed(completion) }
        if let completionTask { return .completed(try await completionTask.value) }
        // Chunks being (re)written are never in `received`, so this also waits out in-flight writes.
        let missing = received.chunks.missing(of: meta.chunkCount)
        guard missing.isEmpty else { return .missing(missing) }

        // Unstructured on purpose: once started, finishing must not depend on the client staying connected.
        // On the request's event loop, like the request itself: a small file is finished inline.
        let combined = crc32c ?? received.combinedCRC
        let task = unstructuredTask { [meta, layout, io, durability, digest] in
            try await Self.finalize(meta: meta, layout: layout, digest: digest, combined: combined, io: io, durability: durability)
        }
        completionTask = task
        do {
            let record = try await task.value
            completion = record
            completed.store(true, ordering: .releasing)
            completionTask = nil
            return .completed(record)
        } catch {
            completionTask = nil
            throw error
        }
    }

    /// For protocols that place the bytes in `layout.data` themselves rather than through
    /// `writeChunk` (tus, whose PATCHes start at any byte): the caller has made every byte of the
    /// file durable, so every chunk is recorded as received, then the upload completes as
    /// `complete` does (`crc32c` as there). Idempotent, also after a restart cut an earlier call short.
    func completeWritten(crc32c: UInt32? = nil) async throws -> CompletionRecord {
        if deleted { throw UploadError.deleted }
        if completion == nil, completionTask == nil {
            // A tus upload is one chunk, or layout 1's chunks of a few (its data file written
            // whole by the appends): a handful of records.
            let missing = received.chunks.missing(of: meta.chunkCount).numbers()
            if !missing.isEmpty {
                try await log.append(missing.map { "+\($0)" })
                if deleted { throw UploadError.deleted }
                for chunk in missing { received.insert(chunk, crc: nil) }
            }
        }
        switch try await complete(crc32c: crc32c) {
        case .completed(let record): return record
        case .missing: throw UploadError.corrupt("every byte is written but chunks are missing")
        }
    }

    /// Completes an upload whose every byte a creation's body wrote into the data file just now,
    /// with nothing of it synced yet — not the creation, not the bytes (`DiskOffsetUploads`: a
    /// file created whole). The completion and its `*<boot id>` mark are recorded and the file
    /// published, and one sync round makes all of it durable at once, where the longer way
    /// takes five (creation, bytes, offset, chunk record, completion).
    ///
    /// The mark says the record was written in the round of its bytes. A crash of the process
    /// cannot part them (the page cache keeps every write that returned); a crash of the machine
    /// during the round can, and the next boot has another id: a load that finds a mark of
    /// another boot checks the file against the record's CRC-32C (at most `inlineFinishLimit`
    /// bytes) and, when they differ, drops the upload, which nobody was told of
    /// (`DiskUploads.load`).
    func completeInItsCreationRound(crc32c: UInt32, bootID: String?) async throws -> CompletionRecord {
        try checkWritable()
        precondition(meta.chunkCount == 1 && meta.size <= Self.inlineFinishLimit && layout.format == .flat, "a small flat upload")
        let record = CompletionRecord(sha256: nil, size: meta.size, crc32c: CRC32.hex(crc32c))
        try POSIXFile.appendRecords([Self.sameRoundMark(bootID: bootID), record.logRecord], to: layout.log, creating: false)
        try Self.publish(layout)
        try await durability.sync()
        if deleted { throw UploadError.deleted }
        received.insert(1, crc: crc32c)
        completion = record
        completed.store(true, ordering: .releasing)
        return record
    }

    /// `*<boot id>`: the completion record that follows was written in the same sync round as
    /// the file's bytes, while the machine ran boot `bootID` (see `completeInItsCreationRound`;
    /// `*0` where the boot is not known: always checked).
    nonisolated static func sameRoundMark(bootID: String?) -> String { "*" + (bootID ?? "0") }

    /// Hashes the data, records the completion and publishes the file, then waits for one sync
    /// round to make both durable.
    ///
    /// The record is written before the rename. A crash before the round ends may keep either
    /// without the other, and loading repairs both halves (`UploadStore.load`): a record whose
    /// file is still in `uploads/` is published, a published file without its record is hashed
    /// again (every chunk of it was acknowledged durable before completion began). Layout 1
    /// uploads keep their order by syncing `complete.json` before the rename, as they did.
    ///
    /// `digest`, the SHA-256 of a single small chunk, stands for hashing the file.
    private static func finalize(
        meta: UploadMeta, layout: UploadLayout, digest: String?, combined: UInt32?, io: BlockingIO, durability: Durability
    ) async throws -> CompletionRecord {
        let finish: @Sendable () throws -> CompletionRecord = {
            let record: CompletionRecord
            if let digest {
                record = CompletionRecord(sha256: digest, size: meta.size)
            } else if let combined {
                // Every chunk was checked against its CRC-32C as it arrived (or, for an offset
                // upload, the CRC-32C was kept as the bytes were written): that is the file's, and
                // the file is not read back (no SHA-256 then).
                try checkSize(meta: meta, file: layout.data)
                record = CompletionRecord(sha256: nil, size: meta.size, crc32c: CRC32.hex(combined))
            } else {
                record = try hash(meta: meta, layout: layout, file: layout.data)
            }
            try write(record, for: layout)
            try publish(layout)
            return record
        }
        // A small file is finished inline: reading it back from the page cache, hashing it and
        // a rename cost less than the thread switches of a hop to the blocking pool and back.
        let record = meta.size <= inlineFinishLimit && layout.format == .flat ? try finish() : try await io.run(finish)
        try await durability.sync()
        return record
    }

    /// The largest file `finalize` hashes on the caller's thread (~0.15 ms of SHA-256).
    static let inlineFinishLimit = 256 * 1024

    /// Writes the completion record where the layout keeps it: a record of the flat log (not
    /// synced), or layout 1's `complete.json` (synced, with its directory, as it always was).
    /// Blocking.
    static func write(_ record: CompletionRecord, for layout: UploadLayout) throws {
        switch layout.format {
        case .flat:
            try POSIXFile.appendRecords([record.logRecord], to: layout.log, creating: false)
        case .directory:
            try FileSystemOps.writeAtomically(Array(try JSONEncoder().encode(record)), to: layout.completion, directory: layout.directory)
        }
    }

    /// Throws when `file` is not the size the meta says. Blocking.
    static func checkSize(meta: UploadMeta, file: String) throws {
        let data = try POSIXFile.open(file, O_RDONLY)
        defer { data.close() }
        let size = try data.size()
        guard size == meta.size else { throw UploadError.corrupt("data file has \(size) bytes, expected \(meta.size)") }
    }

    /// SHA-256 and size of the upload's bytes in `file`, checked against the meta. Blocking.
    static func hash(meta: UploadMeta, layout: UploadLayout, file: String) throws -> CompletionRecord {
        let data = try POSIXFile.open(file, O_RDONLY)
        defer { data.close() }
        let size = try data.size()
        guard size == meta.size else {
            throw UploadError.corrupt("data file has \(size) bytes, expected \(meta.size)")
        }
        var sha = SHA256()
        // In the same pass: at ISA-L's speed it costs ~2 % of the SHA-256.
        var crc = CRC32C()
        var buffer = [UInt8](repeating: 0, count: max(1, min(size, 1 << 20)))
        var offset = 0
        while offset < size {
            let n = try buffer.withUnsafeMutableBytes { try data.preadFully(into: $0, at: offset) }
            guard n > 0 else { throw UploadError.corrupt("data file ended early") }
            buffer.withUnsafeBytes {
                let read = UnsafeRawBufferPointer(rebasing: $0[0..<n])
                sha.update(bufferPointer: read)
                crc.update(read)
            }
            offset += n
        }
        return CompletionRecord(sha256: Hex.lowercase(sha.finalize()), size: size, crc32c: CRC32.hex(crc.value))
    }

    /// Moves the assembled data to its download path (`UploadLayout.downloadFile`): one rename
    /// for a file of its own; for a directory of its own, creating the directories on the way
    /// without following a symbolic link. Not synced: the caller waits for a sync round.
    /// Blocking; also used by recovery at load time.
    static func publish(_ layout: UploadLayout) throws {
        switch layout.publication {
        case .file:
            // `rename` replaces a link at the target rather than following it, and nothing but
            // this upload names `<id>.<name>`.
            try FileSystemOps.rename(layout.data, to: layout.downloadFile)
        case .directory:
            try FileSystemOps.place(layout.data, under: layout.downloadsRoot, at: [layout.id] + layout.path.components)
        }
    }

    // MARK: Deletion

    /// Returns false if it was already deleted. Waits out a completion in progress so that it can't
    /// publish a file after the caller has removed the directories.
    func markDeleted() async -> Bool {
        if deleted { return false }
        deleted = true
        writers.wakeAll()
        if let completionTask { _ = try? await completionTask.value }
        return true
    }
}
