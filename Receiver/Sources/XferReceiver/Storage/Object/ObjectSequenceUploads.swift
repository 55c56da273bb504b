import FoundationEssentials
import XferPrimitives

/// sequence's uploads in an object store: the blocks are the chunks of an `ObjectChunkedUpload`,
/// the token's digest and the accepted blocks' CRCs are fields of the same state, each block
/// recorded by compare-and-swap after its bytes were stored.
struct ObjectSequenceUploads: SequenceUploadStore {
    let storage: ObjectStorage

    func create(path: RelativePath, size: Int, blockSize: Int, suffix: String) async throws -> (any SequenceUpload, upToken: String) {
        let secret = UploadID.generate()
        let meta = SequenceMeta(tokenDigest: UpToken.digest(ofSecret: secret), suffix: suffix)
        let upload = try await storage.createUpload(
            NewUpload(protocolName: DiskSequenceUploads.protocolName, path: path, size: size, chunkSize: blockSize)
        ) { state in
            state.sequence = meta
        }
        return (ObjectSequenceUpload(upload: upload, meta: meta), UpToken.make(uploadId: upload.id, secret: secret))
    }

    func upload(forToken token: String) async throws -> (any SequenceUpload)? {
        guard case let (id, secret)? = UpToken.split(token), let read = try await storage.readState(id), case let state = read.0,
            state.meta.protocolName == DiskSequenceUploads.protocolName, let meta = state.sequence,
            UpToken.matches(secret, digest: meta.tokenDigest)
        else { return nil }
        return ObjectSequenceUpload(upload: ObjectChunkedUpload(storage: storage, meta: state.meta, seen: read), meta: meta)
    }
}

/// One sequence upload in an object store. Its turns are this instance's; across instances the
/// accepted blocks are decided by the state's compare-and-swap (a block is recorded only as the
/// next one).
actor ObjectSequenceUpload: SequenceUpload, TakesTurns {
    nonisolated let objectUpload: ObjectChunkedUpload
    nonisolated let meta: SequenceMeta
    var turns = KeyedTurns<WholeUpload>()

    init(upload: ObjectChunkedUpload, meta: SequenceMeta) {
        objectUpload = upload
        self.meta = meta
    }

    nonisolated var upload: any ChunkedUpload { objectUpload }
    nonisolated var blockCount: Int { max(1, objectUpload.meta.chunkCount) }

    private var blocks: [UInt32] {
        get async throws {
            guard let (state, _) = try await objectUpload.storage.readState(objectUpload.id) else { throw UploadError.deleted }
            return state.blocks
        }
    }

    var acceptedCount: Int {
        get async { (try? await blocks.count) ?? 0 }
    }

    func acceptedCRC(of sequenceNo: Int) async -> UInt32? {
        guard let blocks = try? await blocks, blocks.indices.contains(sequenceNo - 1) else { return nil }
        return blocks[sequenceNo - 1]
    }

    func recordAccepted(_ sequenceNo: Int, crc: UInt32) async throws {
        try await objectUpload.storage.updateState(objectUpload.id, from: objectUpload.version) { state in
            guard state.blocks.count == sequenceNo - 1 else { return false }
            state.blocks.append(crc)
            return true
        }
    }
}
