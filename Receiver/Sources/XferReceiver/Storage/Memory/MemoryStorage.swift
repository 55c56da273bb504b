import Crypto
import Hummingbird
import NIOCore
import Synchronization
import XferPrimitives

/// The storage core and nothing else, in memory: the example of Docs/storage-guide.md, and a
/// storage the receiver's route tests run on beside the disk. With no capability declared, a
/// receiver over it serves patch, downloads (whole files: no ranges), `/stats` (zeros) and
/// `/health`; no tus, IETF, sequence, multipart or raw routes, and no upload page.
///
/// Nothing outlives the process and every byte is held in memory, so it is no storage for a
/// receiver that serves anyone: "durable" here means "recorded in this process".
final class MemoryStorage: ComposableStorage {
    private let uploads = Mutex<[String: MemoryUpload]>([:])

    init() {}

    /// The core only: no capability is declared (and any chunk size is taken as it is).
    func compose(into composer: inout StorageComposer) {}

    func create(_ upload: NewUpload) async throws -> any ChunkedUpload {
        let made = MemoryUpload(id: UploadID.generate(), upload)
        uploads.withLock { $0[made.meta.uploadId] = made }
        return made
    }

    func upload(id: String, creating upload: NewUpload?) async throws -> (any ChunkedUpload)? {
        uploads.withLock { uploads in
            if let existing = uploads[id] { return existing }
            guard let upload else { return nil }
            let made = MemoryUpload(id: id, upload)
            uploads[id] = made
            return made
        }
    }

    func delete(id: String) async throws -> Bool {
        guard let upload = uploads.withLock({ $0.removeValue(forKey: id) }) else { return false }
        // A request still writing to it finds it gone (`UploadError.deleted`).
        upload.markDeleted()
        return true
    }

    func publishedFile(of upload: any ChunkedUpload, context: some RequestContext) async throws -> ResponseBody {
        // Looked up by id: the caller's upload is one of ours, but asking by id needs no cast.
        guard let held = uploads.withLock({ $0[upload.meta.uploadId] }), let file = held.file else { throw UploadError.deleted }
        return ResponseBody(byteBuffer: file)
    }
}

/// One upload of `MemoryStorage`: its chunks until it completes, then its file.
final class MemoryUpload: ChunkedUpload {
    let meta: UploadMeta
    private let received = Atomic<Int>(0)

    private struct State {
        var chunks: [Int: ByteBuffer] = [:]
        var file: ByteBuffer?
        var record: CompletionRecord?
        var deleted = false
    }
    private let state = Mutex(State())

    init(id: String, _ upload: NewUpload) {
        meta = UploadMeta(
            formatVersion: UploadMeta.currentFormatVersion, protocolName: upload.protocolName, uploadId: id, fileName: upload.path.text,
            size: upload.size, chunkSize: upload.chunkSize)
    }

    var bytesReceivedSoFar: Int { received.load(ordering: .relaxed) }
    fileprivate var file: ByteBuffer? { state.withLock { $0.file } }
    fileprivate func markDeleted() { state.withLock { $0 = State(deleted: true) } }

    func writeChunk<Body: AsyncSequence>(
        _ chunk: Int, body: Body, check: BodyWriter.Check?, trailer: (() async throws -> Void)?
    ) async throws where Body.Element == ByteBuffer {
        precondition(chunk >= 1 && chunk <= meta.chunkCount, "chunk out of range")
        if state.withLock({ $0.record != nil }) { throw UploadError.completed }
        // The same checks every storage makes of a chunk's body (its length, its digest, what
        // must follow it), as the body passes.
        let checked = CheckedBody(
            UncheckedSendableBody(body), limit: meta.byteRange(ofChunk: chunk).count, exactLength: true, check: check,
            trailer: trailer.map { trailer in
                let handed = UncheckedSendableTrailer(run: trailer)
                return { @Sendable in try await handed.run() }
            },
            counted: { [self] count in received.add(count, ordering: .relaxed) })
        var bytes = ByteBuffer()
        do {
            for try await buffer in checked { bytes.writeImmutableBuffer(buffer) }
        } catch {
            throw checked.outcome.failure ?? error
        }
        try state.withLock { state in
            if state.deleted { throw UploadError.deleted }
            if state.record != nil { throw UploadError.completed }
            state.chunks[chunk] = bytes
        }
    }

    func receivedChunks() async throws -> ChunkRanges {
        state.withLock { state in
            state.record != nil ? ChunkRanges.all(meta.chunkCount) : ChunkRanges(numbers: state.chunks.keys.sorted())
        }
    }

    func completionRecord() async throws -> CompletionRecord? {
        state.withLock { $0.record }
    }

    func complete(crc32c: UInt32?) async throws -> CompletionOutcome {
        try state.withLock { state in
            if state.deleted { throw UploadError.deleted }
            if let record = state.record { return .completed(record) }
            let missing = ChunkRanges(numbers: state.chunks.keys.sorted()).missing(of: meta.chunkCount)
            guard missing.count == 0 else { return .missing(missing) }
            var file = ByteBuffer()
            for chunk in stride(from: 1, through: meta.chunkCount, by: 1) { file.writeImmutableBuffer(state.chunks[chunk]!) }
            var crc = CRC32C()
            file.withUnsafeReadableBytes { crc.update($0) }
            let sha256 = Hex.lowercase(file.withUnsafeReadableBytes { SHA256.hash(data: $0) })
            let record = CompletionRecord(sha256: sha256, size: file.readableBytes, crc32c: CRC32.hex(crc.value))
            state = State(file: file, record: record)
            return .completed(record)
        }
    }
}
