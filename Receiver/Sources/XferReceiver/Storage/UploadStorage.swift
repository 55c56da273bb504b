import Hummingbird
import NIOCore

/// Where a receiver keeps its uploads: the one door every protocol's routes go through. Routes
/// validate their wire format, then speak to a storage in these terms; they never see a path, a
/// file or an object key.
///
/// In tusd's shape: a small base every protocol needs, plus capabilities a storage adopts, each
/// resolved once when the routes are built (`ReceiverRoutes`): a storage without one simply has
/// no routes for the protocols that need it.
///
/// - The base (`UploadStorage`): uploads whose chunks arrive in any order, each recorded as it is
///   acknowledged (patch and multipart directly, sequence beneath its ordered blocks); their
///   completion into one file published under a stable name; that file read back; deletion.
/// - `OffsetUploadStoring`: uploads whose progress is one offset (tus, the IETF draft), appended
///   by turns, concatenated (tus's final uploads).
/// - `SequenceUploadStoring`: sequence's ordered blocks and its secret token.
/// - `MultipartSourceStoring`: multipart's sources (a client's id naming a list of file ids).
/// - `WholeFileStoring`: a whole file in one request (`PUT /raw/NAME`).
///
/// Every implementation keeps the same promise: an answer that acknowledges bytes comes only after
/// they are durable and recorded; what a request that failed or was cut sent is never counted
/// unless its protocol says it may be (an unchecked body cut mid-way keeps what arrived).
///
/// `DiskStorage` (Storage/Disk/) is the implementation `xfer serve` uses by default.
protocol UploadStorage: AnyObject, Sendable {
    /// Counters of what clients sent, since the receiver started.
    var statistics: ReceiverStatistics { get }
    /// Rounds of the storage's group commit so far, for `GET /stats`; 0 where there is none.
    var syncRounds: Int { get }
    /// The smallest chunk this storage takes as it is, for a file of more than one (an object
    /// store's minimum part size): a protocol whose server chooses the chunk size (patch) answers
    /// at least this.
    var preferredMinimumChunkSize: Int { get }

    /// A new upload, durable (so known to any later lookup, also after a crash) before it returns.
    func create(_ upload: NewUpload) async throws -> any ChunkedUpload
    /// Nil for ids that are malformed or unknown.
    func upload(id: String) async throws -> (any ChunkedUpload)?
    /// Upload `id`, created as `upload` describes when it does not exist yet: for protocols that
    /// hand out ids before anything says what the file is (multipart's file ids). Concurrent calls
    /// for one id get the same upload. `id` must be one this storage generated (`UploadID`).
    func upload(id: String, creatingIfAbsent upload: NewUpload) async throws -> any ChunkedUpload
    /// False when the upload is unknown or already deleted. Its published file goes with it.
    func delete(id: String) async throws -> Bool
    /// The body of a completed upload's file, read from where the storage published it: the
    /// whole file, or the bytes of `range` (inclusive offsets within the file), streamed.
    func publishedFile(of upload: any ChunkedUpload, range: ClosedRange<Int>?, context: some RequestContext) async throws -> ResponseBody

    /// The key of upload handles (`UploadHandles`), 32 bytes, made once and kept where every
    /// receiver of this storage finds the same.
    func handleKey() async throws -> [UInt8]

    /// Upkeep, now and then while the routes serve: unfinished uploads no request used for a
    /// while leave memory (`ReceiverLimits.idleUploadLifetime`).
    func dropIdle() async
    /// Upkeep: drops the unfinished uploads nobody touched for `expireAfter` (none when nil),
    /// with everything they hold in the storage. Never one a request is sending to.
    func expire() async
    /// What `expire` drops after; nil: nothing expires.
    var expireAfter: Duration? { get }
}

/// What a new upload is.
struct NewUpload: Sendable {
    /// The wire protocol that creates it; routes of one protocol refuse ids of another.
    var protocolName: String
    /// Where the file is published, below its upload's own name.
    var path: RelativePath
    var size: Int
    var chunkSize: Int
}

/// An upload whose chunks (1-based, `meta.chunkSize` bytes each but the last) arrive in any order.
protocol ChunkedUpload: AnyObject, Sendable {
    var meta: UploadMeta { get }
    /// Where its file is published (below `/downloads/<id>/`).
    var path: RelativePath { get }
    /// Body bytes read for this upload since the receiver started, partial bodies included: what
    /// a client really sent, to measure re-sends.
    var bytesReceivedSoFar: Int { get }

    /// Streams one chunk's body to its place and acknowledges it durably: returns only once the
    /// bytes are durable and the chunk recorded as received. Throws, leaving the chunk not
    /// received, a `BodyWriter.Failure` when the body is not the chunk (its length, `check`,
    /// `trailer`), `UploadError` when the upload cannot take it, any other error for storage.
    /// `chunk` must be in `1...meta.chunkCount`.
    func writeChunk<Body: AsyncSequence>(
        _ chunk: Int, body: Body, check: BodyWriter.Check?, trailer: (() async throws -> Void)?
    ) async throws where Body.Element == ByteBuffer

    /// Received chunks; every chunk once completed.
    func receivedChunks() async throws -> ChunkRanges
    /// Nil until completed.
    func completionRecord() async throws -> CompletionRecord?
    /// Assembles and publishes the file once every chunk is in; the same record on every later
    /// call. `crc32c`: the whole file's, when the caller kept it as the bytes were written.
    func complete(crc32c: UInt32?) async throws -> CompletionOutcome
}

extension ChunkedUpload {
    func writeChunk<Body: AsyncSequence>(_ chunk: Int, body: Body, check: BodyWriter.Check?) async throws where Body.Element == ByteBuffer {
        try await writeChunk(chunk, body: body, check: check, trailer: nil)
    }

    func complete() async throws -> CompletionOutcome {
        try await complete(crc32c: nil)
    }
}

// MARK: Capabilities

/// Uploads whose progress is one offset (tus's, the IETF draft's), each protocol's under its own name.
protocol OffsetUploadStoring: UploadStorage {
    func offsetUploads(protocolName: String) -> any OffsetUploadStore
}

protocol OffsetUploadStore: Sendable {
    /// Creates an upload at offset 0. Everything its URL unlocks is durable before it returns.
    func create(path: RelativePath, length: Int, info: OffsetUploadInfo) async throws -> any OffsetUpload
    /// Creates an upload with the request's body as its first append (tus's creation-with-upload,
    /// the IETF draft's creation): `create`, then `write` from offset 0 in the upload's turn, with
    /// `announce` called with the upload, in that turn, before the body's first byte is read (where
    /// a protocol tells the client its URL early, and says what body it receives). A storage may take a shorter way when the body is the
    /// whole upload, as long as the outcome is the same once this returns (`ObjectOffsetUploads`:
    /// one object, its state in the object's metadata).
    func create<Body: AsyncSequence>(
        path: RelativePath, length: Int, info: OffsetUploadInfo, body: Body, limit: Int, declaredLength: Int?,
        check: BodyWriter.Check?, announce: (any OffsetUpload) async throws -> Void
    ) async throws -> (upload: any OffsetUpload, result: OffsetWriteResult) where Body.Element == ByteBuffer
    /// Nil for ids that are malformed, unknown, terminated or of another protocol.
    func upload(id: String) async throws -> (any OffsetUpload)?
    /// Termination: false when the upload is unknown or already gone.
    func delete(id: String) async throws -> Bool
}

extension OffsetUploadStore {
    func create<Body: AsyncSequence>(
        path: RelativePath, length: Int, info: OffsetUploadInfo, body: Body, limit: Int, declaredLength: Int?,
        check: BodyWriter.Check?, announce: (any OffsetUpload) async throws -> Void
    ) async throws -> (upload: any OffsetUpload, result: OffsetWriteResult) where Body.Element == ByteBuffer {
        try await createThenWrite(
            path: path, length: length, info: info, body: body, limit: limit, declaredLength: declaredLength, check: check,
            announce: announce)
    }

    /// The way every storage can take: the upload made durable first, then its first append.
    func createThenWrite<Body: AsyncSequence>(
        path: RelativePath, length: Int, info: OffsetUploadInfo, body: Body, limit: Int, declaredLength: Int?,
        check: BodyWriter.Check?, announce: (any OffsetUpload) async throws -> Void
    ) async throws -> (upload: any OffsetUpload, result: OffsetWriteResult) where Body.Element == ByteBuffer {
        let upload = try await create(path: path, length: length, info: info)
        do {
            // The body's turn starts before the client can learn the URL: an offset asked for
            // meanwhile waits for what this request brings.
            let result = try await upload.exclusively {
                try await announce(upload)
                return try await upload.write(body, at: 0, limit: limit, declaredLength: declaredLength, check: check)
            }
            return (upload, result)
        } catch {
            throw OffsetCreationFailure(upload: upload, error: error)
        }
    }
}

/// A creation whose first append threw: the upload exists (the caller decides whether it stays).
struct OffsetCreationFailure: Error {
    let upload: any OffsetUpload
    let error: any Error
}

/// One offset upload. Requests that write take turns (`exclusively`): checking the offset, writing
/// and recording the new one must not interleave with another request of the same upload — on
/// one machine or, for a shared storage, on any.
protocol OffsetUpload: AnyObject, Sendable {
    var id: String { get }
    /// Upload-Length.
    var length: Int { get }
    var info: OffsetUploadInfo { get }
    /// Where its file is published once complete.
    var path: RelativePath { get }

    /// Runs `body` while no other request of this upload runs its own.
    func exclusively<T>(_ body: () async throws -> T) async throws -> T
    /// Runs `body` in this upload's turn as `exclusively` does, but first cuts the body of a
    /// request that holds the turn while still receiving it (`BodyInFlight`): a resuming client's
    /// request, which must not wait behind a body its client has given up on. What the cut
    /// request keeps is what a cut body keeps; only then does this one get the turn.
    /// `receiving`: this request's own body, which a later request may cut in turn.
    func takingOver<T>(receiving: BodyInFlight?, _ body: () async throws -> T) async throws -> T
    /// Called from inside this upload's turn (by a creation's `announce`): the request holding it
    /// now receives `body`, which a request taking over may cut.
    func receiveInTurn(_ body: BodyInFlight) async
    /// The acknowledged offset; nil once the upload is terminated.
    var currentOffset: Int? { get async }
    /// The CRC-32C of the bytes below the offset, when known.
    var currentCRC: UInt32? { get async }

    /// Streams `body` from `start` (the current offset, checked by the caller inside
    /// `exclusively`), makes it durable and records the new offset. At most `limit` bytes are
    /// taken (a longer body is refused whole). A body with a `check` counts whole or not at all;
    /// one without keeps what arrived of it when cut, where the storage can (on disk; an object
    /// store keeps nothing of a cut body). `declaredLength`: the request's `Content-Length`, which
    /// a storage may require (`OffsetWriteFailure.lengthRequired`).
    func write<Body: AsyncSequence>(
        _ body: Body, at start: Int, limit: Int, declaredLength: Int?, check: BodyWriter.Check?
    ) async throws -> OffsetWriteResult where Body.Element == ByteBuffer
    /// A final upload's bytes from its complete partials, in order; durable and recorded before
    /// it returns. `crc`: the partials' CRC-32Cs combined, when every one is known.
    func concatenate(_ partials: [any OffsetUpload], crc: UInt32?) async throws
    /// Publishes the file once the offset has reached the length (partials stay where they are,
    /// for a concatenation). Idempotent: also finishes what a restart or a failed completion cut
    /// short. True when this call is the one that completed the upload — its `post-finish` is the
    /// caller's to report, and no other call's (call it in the upload's turn: `exclusively`).
    @discardableResult
    func finish() async throws -> Bool
    /// The finished upload's bytes, all of them or those of `range` (inclusive offsets within the
    /// file), streamed (call `finish` first).
    func finishedBody(range: ClosedRange<Int>?, context: some RequestContext) async throws -> ResponseBody
}

/// sequence's uploads: blocks in order, each recorded once accepted, found by a secret token.
protocol SequenceUploadStoring: UploadStorage {
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
}

/// multipart's sources: a client-chosen id naming the file ids handed out for it.
protocol MultipartSourceStoring: UploadStorage {
    var multipartSources: any MultipartSourceStore { get }
}

protocol MultipartSourceStore: Sendable {
    /// The source's record, created with `fileCount` fresh ids if it does not exist (durably,
    /// before any caller is answered; concurrent callers agree on one).
    func preload(sourceId: String, fileCount: Int) async throws -> MultipartSourceRecord
    func source(id sourceId: String) async throws -> MultipartSourceRecord?
    func remove(id sourceId: String) async throws -> Bool
}

/// A whole file in one request, kept under a name of the client's (`PUT /raw/NAME`).
protocol WholeFileStoring: UploadStorage {
    /// Streams `body` (at most `limit` bytes: `BodyWriter.Failure.tooLarge` past it) durably under
    /// `name`, replacing what was there; returns the bytes stored. `declaredLength`: the request's
    /// `Content-Length`, which a storage may require (`WholeFileFailure.lengthRequired`).
    func storeWhole<Body: AsyncSequence>(_ body: Body, name: String, limit: Int, declaredLength: Int?) async throws -> Int
    where Body.Element == ByteBuffer
}

enum WholeFileFailure: Error {
    /// The storage sends a body to its store with its length, and the request named none.
    case lengthRequired
}
