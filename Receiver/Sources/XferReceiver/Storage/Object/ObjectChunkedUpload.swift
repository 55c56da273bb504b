import AsyncHTTPClient
import Crypto
import FoundationEssentials
import Hummingbird
import Logging
import NIOCore
import Synchronization
import XferPrimitives
import XferS3Core

/// One chunked upload (patch, multipart, sequence's blocks) in an object store. Holds nothing but
/// what never changes: every question is asked of the store.
///
/// A single chunk is recorded in the upload's state. Chunks of an upload of several are recorded
/// each in an object of its own (`ObjectLayout.received`), written once the chunk's bytes are
/// stored: chunks sent at once, from any instances, never contend for one object, and a chunk
/// costs the store two requests (its bytes, its record). Completion lists the records.
final class ObjectChunkedUpload: ChunkedUpload {
    let storage: ObjectStorage
    let meta: UploadMeta
    let path: RelativePath
    /// This handle's last sight of the state, which a compare-and-swap tries first.
    let version = StateVersion()
    private let received = Atomic<Int>(0)

    init(storage: ObjectStorage, meta: UploadMeta, seen: (ObjectUploadState, S3ETag)? = nil) {
        self.storage = storage
        self.meta = meta
        path = RelativePath.validated(meta.fileName) ?? RelativePath.validated("file")!
        if let seen { version.advance(to: seen) }
    }

    var id: String { meta.uploadId }
    var bytesReceivedSoFar: Int { received.load(ordering: .relaxed) }
    var fileKey: String { storage.layout.file(id, path: path) }
    private var recordsChunksApart: Bool { meta.chunkCount > 1 }

    /// Where chunk `chunk` goes: the file's own key for a single chunk, part `chunk` when chunks are
    /// at least a part's minimum, else an object of its own to be folded in at completion.
    private enum Target {
        case file
        case part(Int)
        case staged(String)
    }

    private func target(_ chunk: Int) -> Target {
        if meta.chunkCount == 1 { return .file }
        if meta.chunkSize >= minimumPartSize { return .part(chunk) }
        // A name of its own per body: a chunk sent again never replaces the bytes its record names,
        // so a crash between the two leaves the record true.
        return .staged(ObjectChunkRecord.stagedPrefix(chunk) + UploadID.generate().prefix(8))
    }

    func writeChunk<Body: AsyncSequence>(
        _ chunk: Int, body: Body, check: BodyWriter.Check?, trailer: (() async throws -> Void)?
    ) async throws where Body.Element == ByteBuffer {
        precondition(chunk >= 1 && chunk <= meta.chunkCount, "chunk out of range")
        let range = meta.byteRange(ofChunk: chunk)
        // The sight this request's look-up took: enough to refuse a completed upload.
        if version.latest?.0.completion != nil { throw UploadError.completed }
        if !recordsChunksApart, version.latest?.0.pieces.contains(where: { $0.chunk == chunk }) ?? true {
            // A single chunk written again is unmarked first: neither a bad body nor a crash may
            // leave it marked received over bytes that changed.
            try await storage.updateState(id, from: version) { state in
                if state.completion != nil { throw UploadError.completed }
                guard let index = state.pieces.firstIndex(where: { $0.chunk == chunk }) else { return false }
                state.pieces.remove(at: index)
                return true
            }
        }
        let statistics = storage.statistics
        let checked = CheckedBody(
            UncheckedSendableBody(body), limit: range.count, exactLength: true, check: check,
            trailer: trailer.map { trailer in
                let handed = UncheckedSendableTrailer(run: trailer)
                return { @Sendable in try await handed.run() }
            },
            counted: { [self] count in
                received.add(count, ordering: .relaxed)
                statistics.received(count)
            })
        let requests = storage.client.requests
        let etag: S3ETag
        let piece: ObjectUploadState.Piece
        do {
            switch target(chunk) {
            case .file:
                etag = try await storage.client.perform(
                    requests.putObjectStreamed(key: fileKey, length: Int64(range.count)), streaming: checked, length: range.count)
                piece = .init(chunk: chunk, at: range.lowerBound, length: range.count, part: nil, staged: nil, etag: etag.unquoted, crc: 0)
            case .part(let number):
                let uploadID = try await storage.multipartUploadID(of: id, key: fileKey, version: version)
                etag = try await storage.client.perform(
                    requests.uploadPart(key: fileKey, uploadID: uploadID, partNumber: number, length: Int64(range.count)),
                    streaming: checked, length: range.count)
                piece = .init(chunk: chunk, at: range.lowerBound, length: range.count, part: number, staged: nil, etag: etag.unquoted, crc: 0)
            case .staged(let name):
                etag = try await storage.client.perform(
                    requests.putObjectStreamed(key: storage.layout.staged(id, name), length: Int64(range.count)), streaming: checked,
                    length: range.count)
                piece = .init(chunk: chunk, at: range.lowerBound, length: range.count, part: nil, staged: name, etag: etag.unquoted, crc: 0)
            }
        } catch let failure as S3Failure where failure.code == "NoSuchUpload" && checked.outcome.failure == nil {
            // The multipart upload was completed (by a completion whose record its instance did not
            // live to write): the chunk is the completed upload's already. Its completion is left
            // to the client's request for it, which records it and reports it, once.
            if case .found = try await storage.client.perform({ requests.headObject(key: fileKey) }) { throw UploadError.completed }
            throw failure
        } catch {
            if let failure = checked.outcome.failure { throw failure }
            throw error
        }
        var recorded = piece
        recorded.crc = checked.outcome.crc32c
        if recordsChunksApart {
            let key = storage.layout.receivedPrefix(id) + ObjectChunkRecord.name(of: recorded, chunk: chunk)
            _ = try await storage.client.perform({ requests.putObject(key: key, bytes: []) })
            return
        }
        try await storage.updateState(id, from: version) { state in
            if state.completion != nil { throw UploadError.completed }
            state.pieces.removeAll { $0.chunk == chunk }
            state.pieces.append(recorded)
            return true
        }
    }

    /// The state as this request's look-up saw it, else as the store holds it now.
    private func state() async throws -> ObjectUploadState {
        if let seen = version.latest { return seen.0 }
        guard let read = try await storage.readState(id) else { throw UploadError.deleted }
        version.advance(to: read)
        return read.0
    }

    func receivedChunks() async throws -> ChunkRanges {
        let state = try await state()
        if state.completion != nil { return .all(meta.chunkCount) }
        return recordsChunksApart ? try await storage.receivedChunkNumbers(id) : ChunkRanges(numbers: state.pieces.compactMap(\.chunk))
    }

    func completionRecord() async throws -> CompletionRecord? {
        try await state().completion
    }

    func complete(crc32c: UInt32?) async throws -> CompletionOutcome {
        let state = try await state()
        if let completion = state.completion {
            // Completed by a request whose instance died before deleting what it left.
            if state.leftovers == true { try await removeLeftovers() }
            return .completed(completion)
        }
        let records = recordsChunksApart ? try await storage.receivedRecords(id, meta: meta) : []
        let pieces = recordsChunksApart ? records.map(\.piece) : state.pieces
        // Runs: what this costs follows the chunks received, not the chunks declared.
        let missing = ChunkRanges(numbers: pieces.compactMap(\.chunk)).missing(of: meta.chunkCount)
        guard missing.isEmpty else { return .missing(missing) }
        do {
            try await assemble(pieces)
        } catch let failure as S3Failure where failure.code == "InvalidPart" && !failure.isErrorInSuccess {
            // A part sent again after its record was written, by a sender that died before
            // recording it anew: which one the store cannot say. Every part is asked for again.
            // Every record of those chunks goes, older ones of a chunk sent twice too.
            let parts = Set(records.filter { $0.piece.part != nil }.map(\.chunk))
            let prefix = storage.layout.receivedPrefix(id)
            try await storage.deleteAll(under: prefix) { key in
                ObjectChunkRecord.chunk(ofKey: key, under: prefix).map(parts.contains) ?? false
            }
            return .missing(ChunkRanges(numbers: parts))
        }
        if meta.chunkCount > 1 { await storage.abortStrays(key: fileKey, keeping: nil) }
        let combined = ObjectUploadState.Piece.combinedCRC(of: pieces, length: meta.size)
        let record = CompletionRecord(sha256: nil, size: meta.size, crc32c: CRC32.hex(crc32c ?? combined ?? 0))
        let stored = try await storage.updateState(id, from: version) { state in
            guard state.completion == nil else { return false }
            state.completion = record
            if self.recordsChunksApart { state.leftovers = true }
            return true
        }
        // The file holds the staged pieces now, and the state says it is complete: the chunk
        // records and staged chunks go (a crash first leaves them to the next request's cleanup).
        if stored.leftovers == true { try? await removeLeftovers() }
        return .completed(stored.completion ?? record)
    }

    /// Deletes what a completed upload of several chunks no longer needs, its staged chunks and
    /// chunk records, then says so in its state (`ObjectUploadState.leftovers`).
    private func removeLeftovers() async throws {
        try await storage.deleteAll(under: storage.layout.stagingPrefix(id))
        try await storage.deleteAll(under: storage.layout.receivedPrefix(id))
        try await storage.updateState(id, from: version) { state in
            guard state.leftovers == true else { return false }
            state.leftovers = nil
            return true
        }
    }

    /// Makes the file's object from the pieces: nothing to do for a single chunk (already there);
    /// an empty object for an empty file; else a multipart completion, staged pieces folded into
    /// parts of at least the minimum size, in order. Repeatable: a completion whose answer was
    /// lost is found done.
    private func assemble(_ pieces: [ObjectUploadState.Piece]) async throws {
        let client = storage.client
        let requests = client.requests
        let key = fileKey
        if meta.chunkCount == 0 {
            _ = try await client.perform({ requests.putObject(key: key, bytes: []) })
            return
        }
        if meta.chunkCount == 1 { return }
        let uploadID = try await storage.multipartUploadID(of: id, key: key, version: version)
        do {
            var parts: [S3CompletedPart] = []
            var group: [ObjectUploadState.Piece] = []
            // Staged chunks (the only kind folded here) never share an upload with chunks sent as
            // parts, so the folded parts are numbered from 1: a file of many small chunks still
            // needs at most size / 5 MiB of S3's 10,000 part numbers.
            var nextNumber = 1
            func flush() async throws {
                guard !group.isEmpty else { return }
                let length = group.reduce(0) { $0 + $1.length }
                let keys = group.compactMap { $0.staged.map { storage.layout.staged(id, $0) } }
                let number = nextNumber
                nextNumber += 1
                let etag = try await client.perform(
                    requests.uploadPart(key: key, uploadID: uploadID, partNumber: number, length: Int64(length)),
                    streaming: storage.concatenation(of: keys), length: length)
                parts.append(S3CompletedPart(number: number, etag: etag))
                group = []
            }
            for piece in pieces.sorted(by: { $0.at < $1.at }) {
                if let part = piece.part {
                    try await flush()
                    parts.append(S3CompletedPart(number: part, etag: S3ETag(piece.etag)))
                } else {
                    group.append(piece)
                    if group.reduce(0, { $0 + $1.length }) >= minimumPartSize { try await flush() }
                }
            }
            try await flush()
            if case .completed = try await client.perform({ requests.completeMultipartUpload(key: key, uploadID: uploadID, parts: parts) }) {
                return
            }
        } catch let failure as S3Failure where failure.code == "NoSuchUpload" {
            // A part folded into an upload the store no longer knows: as a completion answered
            // `NoSuchUpload` (`.uploadUnknown`), below.
        }
        // The store no longer knows the multipart upload: completed by an earlier attempt whose
        // answer or record was lost (its instance died between the two, say), or gone. The
        // object tells.
        guard case .found = try await client.perform({ requests.headObject(key: key) }) else {
            throw UploadError.corrupt("the store no longer knows the multipart upload of \(id)")
        }
    }
}
