// Capability: sequence's ordered blocks and their secret token (`StorageComposer.sequences`).

import NIOCore

/// sequence's uploads: blocks in order, each recorded once accepted, found by a secret token.
protocol SequenceUploadStoring: AnyObject, Sendable {
    var sequenceUploads: any SequenceUploadStore { get }
}

protocol SequenceUploadStore: Sendable {
    /// Creates an upload and returns it with its upToken. Everything the token unlocks is durable
    /// before it is returned.
    func create(path: RelativePath, size: Int, blockSize: Int, suffix: String) async throws -> (any SequenceUpload, upToken: String)
    /// The upload `token` unlocks; nil for a token this storage never handed out.
    func upload(forToken token: String) async throws -> (any SequenceUpload)?
}

/// One sequence upload: its chunks (the blocks' bytes) plus the ordered record of accepted blocks.
/// Requests take turns (`exclusively`): deciding whether a block is the next one, writing it and
/// recording it must not interleave with another request of the same upload.
protocol SequenceUpload: AnyObject, Sendable {
    var upload: any ChunkedUpload { get }
    var meta: SequenceMeta { get }
    /// Blocks in the file: a zero-byte file is one empty block.
    var blockCount: Int { get }
    func exclusively<T>(_ body: () async throws -> T) async throws -> T
    var acceptedCount: Int { get async }
    /// The CRC-32 block `sequenceNo` was accepted with; nil when it was not.
    func acceptedCRC(of sequenceNo: Int) async -> UInt32?
    /// Records the next block as accepted, durably; its bytes are already durable.
    func recordAccepted(_ sequenceNo: Int, crc: UInt32) async throws
    /// Writes the next block, `sequenceNo`, from `body` and records it accepted: returns once
    /// both are durable. Throws as `ChunkedUpload.writeChunk`, the block then not accepted.
    func writeAccepted<Body: AsyncSequence>(
        _ sequenceNo: Int, crc: UInt32, body: Body, trailer: (() async throws -> Void)?
    ) async throws where Body.Element == ByteBuffer
}

extension SequenceUpload {
    /// The block's bytes, then its record: two steps, for a storage that cannot join them.
    func writeAccepted<Body: AsyncSequence>(
        _ sequenceNo: Int, crc: UInt32, body: Body, trailer: (() async throws -> Void)?
    ) async throws where Body.Element == ByteBuffer {
        try await upload.writeChunk(sequenceNo, body: body, check: .crc32(crc), trailer: trailer)
        try await recordAccepted(sequenceNo, crc: crc)
    }
}
