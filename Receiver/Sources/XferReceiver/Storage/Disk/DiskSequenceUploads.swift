import XferPrimitives
import Crypto
import FoundationEssentials
import Logging
import NIOCore

/// What the `sequence` protocol keeps per upload beyond the shared `Upload` (which holds the
/// data, its `received.log` and the completion):
///
///     root/uploads/<id>/sequence.json   the upToken's digest and the suffix (written before the
///                                       upToken is handed out)
///     root/uploads/<id>/blocks.log      one `<sequenceNo>.<crc>` record per accepted block, in
///                                       order (DurableLog)
///
/// `blocks.log` is the protocol's truth: a block counts as accepted once its record is synced.
/// The block's bytes, its record and the upload's own `+k~CRC*<boot id>`
/// (`DiskUpload.writeChunk(alsoRecord:inOrderUnder:)`) are written and one round makes all three
/// durable. A killed receiver leaves them all in the page cache. A crash of the machine during
/// that round may keep either record without the other, or both without all the bytes: a block
/// counts as accepted only where both records are kept (`read`); a load under another boot reads
/// the last block back and voids its `+k` when its CRC-32C differs (only the last can be torn:
/// blocks are written one at a time, in order); and a block sent again is recorded again, its
/// later record replacing the earlier (`Blocks.parse`). A crash before the records leaves the
/// block unaccepted; the client sends it again and it is written over the same bytes.
///
/// One `sequence` upload: the shared `Upload` plus the ordered record of accepted blocks.
///
/// Requests for one upload take turns (`exclusively`): deciding whether a block is the next
/// one, writing it and recording it must not interleave with another request for the same
/// upload, or a replay racing its original could be appended twice.
actor DiskSequenceUpload: SequenceUpload, TakesTurns {
    nonisolated let diskUpload: DiskUpload
    nonisolated var upload: any ChunkedUpload { diskUpload }
    nonisolated let meta: SequenceMeta
    private let log: DurableLog
    /// `crcs[k - 1]` is accepted block k's CRC-32. Four bytes a block.
    private var crcs: [UInt32]
    /// The machine's boot: blocks are written in order, each in one round (`writeChunk(inOrderUnder:)`).
    private nonisolated let bootID: String?
    var turns = KeyedTurns<WholeUpload>()

    init(upload: DiskUpload, meta: SequenceMeta, log: DurableLog, crcs: [UInt32], bootID: String?) {
        self.bootID = bootID
        self.diskUpload = upload
        self.meta = meta
        self.log = log
        self.crcs = crcs
    }

    /// Blocks in the file: a zero-byte file is one empty block.
    nonisolated var blockCount: Int { max(1, diskUpload.meta.chunkCount) }

    var acceptedCount: Int { crcs.count }

    /// The CRC-32 block `sequenceNo` was accepted with; nil when it was not.
    func acceptedCRC(of sequenceNo: Int) -> UInt32? {
        crcs.indices.contains(sequenceNo - 1) ? crcs[sequenceNo - 1] : nil
    }

    /// Records the next block as accepted, durably; the caller already synced its bytes.
    func recordAccepted(_ sequenceNo: Int, crc: UInt32) async throws {
        precondition(sequenceNo == crcs.count + 1, "blocks are recorded in order")
        try await log.append(SequenceBlockRecord(sequenceNo: sequenceNo, crc: crc).text)
        crcs.append(crc)
    }

    /// The block's bytes, then its record in `blocks.log` beside the upload's `+k`, in one round.
    nonisolated func writeAccepted<Body: AsyncSequence>(
        _ sequenceNo: Int, crc: UInt32, body: Body, trailer: (() async throws -> Void)?
    ) async throws where Body.Element == ByteBuffer {
        let log = self.log
        let record = SequenceBlockRecord(sequenceNo: sequenceNo, crc: crc).text
        try await diskUpload.writeChunk(
            sequenceNo, body: body, check: .crc32(crc), trailer: trailer,
            alsoRecord: { try log.appendUnsynced([record], creating: false) }, inOrderUnder: bootID)
        await accepted(sequenceNo, crc: crc)
    }

    private func accepted(_ sequenceNo: Int, crc: UInt32) {
        // Requests take turns (`exclusively`): the next block is the only one written.
        precondition(sequenceNo == crcs.count + 1, "blocks are recorded in order")
        crcs.append(crc)
    }
}

/// Reading `blocks.log`.
enum SequenceBlocks {
    /// The accepted blocks' CRC-32s from `blocks.log`'s records, in order. A record for block k
    /// replaces what followed k - 1 (a block recorded again after a crash kept its record but not
    /// the upload's `+k`); one that skips ahead, or cannot be read, ends the reading: only
    /// tampering writes one.
    static func parse(_ records: [Substring]) -> (crcs: [UInt32], unreadable: Bool) {
        var crcs: [UInt32] = []
        for text in records {
            guard let record = SequenceBlockRecord(text), record.sequenceNo <= crcs.count + 1 else { return (crcs, true) }
            crcs.removeSubrange((record.sequenceNo - 1)...)
            crcs.append(record.crc)
        }
        return (crcs, false)
    }

    /// How many of `crcs` count: the blocks from 1 whose `+k` the upload kept too.
    static func accepted(_ crcs: [UInt32], received: ChunkRanges) -> Int {
        var count = 0
        while count < crcs.count, received.contains(count + 1) { count += 1 }
        return count
    }
}

/// The `sequence` uploads of a store, found by upToken. Built on `UploadStore`, so their files
/// are published and downloaded like every other protocol's.
actor DiskSequenceUploads: SequenceUploadStore {
    static let protocolName = "sequence"

    private let store: DiskUploads
    private let logger: Logger
    private let uploads: KeyedLoads<String, DiskSequenceUpload>

    init(store: DiskUploads, logger: Logger) {
        // Not counted: each holds an upload of `store`'s, which are (see DiskOffsetUploads).
        uploads = KeyedLoads(settled: { $0.diskUpload.isSettled })
        self.store = store
        self.logger = logger
    }

    /// Creates an upload and returns it with its upToken. Everything the token unlocks is on disk
    /// before it is returned.
    func create(path: RelativePath, size: Int, blockSize: Int, suffix: String) async throws -> (any SequenceUpload, upToken: String) {
        let secret = UploadID.generate()
        let meta = SequenceMeta(tokenDigest: UpToken.digest(ofSecret: secret), suffix: suffix)
        let encoded = try JSONEncoder().encode(meta)
        // sequence.json and an empty blocks.log join the upload's own creation round. Sequence
        // uploads keep layout 1 (a directory each), where its end-to-end tests read blocks.log.
        let upload = try await store.create(
            protocolName: Self.protocolName, path: path, size: size, chunkSize: blockSize, format: .directory
        ) { layout in
            try FileSystemOps.writeNew(Array(encoded), to: SequenceFiles(layout).meta)
            try FileSystemOps.touch(SequenceFiles(layout).blocks)
        }
        let files = SequenceFiles(upload.layout)
        let sequenceUpload = DiskSequenceUpload(
            upload: upload, meta: meta, log: DurableLog(path: files.blocks, durability: store.durability), crcs: [], bootID: store.bootID)
        uploads.insert(sequenceUpload, for: upload.meta.uploadId)
        return (sequenceUpload, UpToken.make(uploadId: upload.meta.uploadId, secret: secret))
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

    /// The upload `token` unlocks; nil for a token this store never handed out.
    func upload(forToken token: String) async throws -> (any SequenceUpload)? {
        guard case let (id, secret)? = UpToken.split(token),
            let upload = try await uploads.value(for: id, loading: { [store, logger] in
                try await Self.read(id: id, store: store, logger: logger)
            })
        else { return nil }
        return UpToken.matches(secret, digest: upload.meta.tokenDigest) ? upload : nil
    }

    private static func read(id: String, store: DiskUploads, logger: Logger) async throws -> DiskSequenceUpload? {
        guard let upload = try await store.upload(id: id), upload.meta.protocolName == protocolName else { return nil }
        let files = SequenceFiles(upload.layout)
        let loaded: (SequenceMeta, [UInt32])? = try await store.io.run {
            // A creation that died before sequence.json was synced (missing, or torn) never handed
            // out its token.
            guard let metaBytes = try FileSystemOps.readAll(files.meta),
                let meta = try? JSONDecoder().decode(SequenceMeta.self, from: Data(metaBytes))
            else { return nil }
            let (crcs, unreadable) = SequenceBlocks.parse(try DurableLog.readRecords(path: files.blocks))
            if unreadable {
                // What follows an unreadable record cannot be trusted.
                logger.warning("Ignoring blocks.log from an unreadable record on", metadata: ["upload": "\(id)"])
            }
            return (meta, crcs)
        }
        guard case let (meta, recorded)? = loaded else { return nil }
        let crcs = Array(recorded.prefix(SequenceBlocks.accepted(recorded, received: try await upload.receivedChunks())))
        return DiskSequenceUpload(upload: upload, meta: meta, log: DurableLog(path: files.blocks, durability: store.durability), crcs: crcs, bootID: store.bootID)
    }
}

private struct SequenceFiles {
    let meta: String
    let blocks: String

    init(_ layout: UploadLayout) {
        meta = layout.file("sequence.json")
        blocks = layout.file("blocks.log")
    }
}
