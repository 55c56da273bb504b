import XferPrimitives
import Crypto
import Foundation
import Logging

/// What the `sequence` protocol keeps per upload beyond the shared `Upload` (which holds the
/// data, its `received.log` and the completion):
///
///     root/uploads/<id>/sequence.json   the upToken's digest and the suffix (written before the
///                                       upToken is handed out)
///     root/uploads/<id>/blocks.log      one `<sequenceNo>.<crc>` record per accepted block, in
///                                       order (DurableLog)
///
/// `blocks.log` is the protocol's truth: a block counts as accepted once its record is synced,
/// and that happens only after `Upload` synced its bytes. A crash between the two leaves the
/// block unaccepted; the client sends it again and it is written over the same bytes.
struct SequenceMeta: Codable, Sendable {
    /// SHA-256 of the upToken's secret half: the disk never holds a usable token.
    var tokenDigest: String
    var suffix: String
}

/// The upToken: the upload's id followed by a random secret, 64 lowercase hex digits. The id
/// half finds the upload without an index; the secret half proves the caller was given it.
enum UpToken {
    static let secretLength = 32

    static func make(uploadId: String, secret: String) -> String { uploadId + secret }

    static func split(_ token: String) -> (uploadId: String, secret: String)? {
        guard token.utf8.count == UploadID.length + secretLength,
            token.utf8.allSatisfy(Hex.isLowercaseDigit)
        else { return nil }
        return (String(token.prefix(UploadID.length)), String(token.suffix(secretLength)))
    }

    static func digest(ofSecret secret: String) -> String {
        Hex.lowercase(SHA256.hash(data: Array(secret.utf8)))
    }

    /// Compares in time independent of where the digests differ.
    static func matches(_ secret: String, digest: String) -> Bool {
        let computed = Array(Self.digest(ofSecret: secret).utf8)
        let stored = Array(digest.utf8)
        guard computed.count == stored.count else { return false }
        return zip(computed, stored).reduce(UInt8(0)) { $0 | ($1.0 ^ $1.1) } == 0
    }
}

/// One `sequence` upload: the shared `Upload` plus the ordered record of accepted blocks.
///
/// Requests for one upload take turns (`exclusively`): deciding whether a block is the next
/// one, writing it and recording it must not interleave with another request for the same
/// upload, or a replay racing its original could be appended twice.
actor SequenceUpload: TakesTurns {
    nonisolated let upload: Upload
    nonisolated let meta: SequenceMeta
    private let log: DurableLog
    /// `crcs[k - 1]` is accepted block k's CRC-32. Four bytes a block.
    private var crcs: [UInt32]
    var turns = KeyedTurns<WholeUpload>()

    init(upload: Upload, meta: SequenceMeta, log: DurableLog, crcs: [UInt32]) {
        self.upload = upload
        self.meta = meta
        self.log = log
        self.crcs = crcs
    }

    /// Blocks in the file: a zero-byte file is one empty block.
    nonisolated var blockCount: Int { max(1, upload.meta.chunkCount) }

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
}

/// One line of `blocks.log`: `<sequenceNo>.<crc as 8 hex digits>`.
struct SequenceBlockRecord: Equatable {
    var sequenceNo: Int
    var crc: UInt32

    var text: String { "\(sequenceNo).\(SequenceCRC.hex(crc))" }

    init(sequenceNo: Int, crc: UInt32) {
        self.sequenceNo = sequenceNo
        self.crc = crc
    }

    init?(_ record: Substring) {
        let parts = record.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 2, let sequenceNo = Int(parts[0]), sequenceNo >= 1, let crc = SequenceCRC.parse(parts[1]) else { return nil }
        self.init(sequenceNo: sequenceNo, crc: crc)
    }
}

/// The protocol's `crc` field: zlib's CRC-32 as 8 lowercase hex digits.
enum SequenceCRC {
    static func hex(_ crc: UInt32) -> String {
        CRC32.hex(crc)
    }

    static func parse(_ text: some StringProtocol) -> UInt32? {
        guard text.utf8.count == 8,
            text.utf8.allSatisfy(Hex.isLowercaseDigit)
        else { return nil }
        return UInt32(text, radix: 16)
    }
}

/// The `sequence` uploads of a store, found by upToken. Built on `UploadStore`, so their files
/// are published and downloaded like every other protocol's.
actor SequenceUploads {
    static let protocolName = "sequence"

    private let store: UploadStore
    private let logger: Logger
    private let uploads = KeyedLoads<String, SequenceUpload>()

    init(store: UploadStore, logger: Logger) {
        self.store = store
        self.logger = logger
    }

    /// Creates an upload and returns it with its upToken. Everything the token unlocks is on disk
    /// before it is returned.
    func create(path: RelativePath, size: Int, blockSize: Int, suffix: String) async throws -> (SequenceUpload, upToken: String) {
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
        let sequenceUpload = SequenceUpload(
            upload: upload, meta: meta, log: DurableLog(path: files.blocks, durability: store.durability), crcs: [])
        uploads.insert(sequenceUpload, for: upload.meta.uploadId)
        return (sequenceUpload, UpToken.make(uploadId: upload.meta.uploadId, secret: secret))
    }

    /// The upload `token` unlocks; nil for a token this store never handed out.
    func upload(forToken token: String) async throws -> SequenceUpload? {
        guard case let (id, secret)? = UpToken.split(token),
            let upload = try await uploads.value(for: id, loading: { [store, logger] in
                try await Self.read(id: id, store: store, logger: logger)
            })
        else { return nil }
        return UpToken.matches(secret, digest: upload.meta.tokenDigest) ? upload : nil
    }

    private static func read(id: String, store: UploadStore, logger: Logger) async throws -> SequenceUpload? {
        guard let upload = try await store.upload(id: id), upload.meta.protocolName == protocolName else { return nil }
        let files = SequenceFiles(upload.layout)
        let loaded: (SequenceMeta, [UInt32])? = try await store.io.run {
            // A creation that died before sequence.json was synced (missing, or torn) never handed
            // out its token.
            guard let metaBytes = try FileSystemOps.readAll(files.meta),
                let meta = try? JSONDecoder().decode(SequenceMeta.self, from: Data(metaBytes))
            else { return nil }
            var crcs: [UInt32] = []
            for text in try DurableLog.readRecords(path: files.blocks) {
                guard let record = SequenceBlockRecord(text), record.sequenceNo == crcs.count + 1 else {
                    // Only tampering gets here; what follows an unreadable record cannot be trusted.
                    logger.warning("Ignoring blocks.log from an unreadable record on", metadata: ["upload": "\(id)"])
                    break
                }
                crcs.append(record.crc)
            }
            return (meta, crcs)
        }
        guard case let (meta, crcs)? = loaded else { return nil }
        return SequenceUpload(upload: upload, meta: meta, log: DurableLog(path: files.blocks, durability: store.durability), crcs: crcs)
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
