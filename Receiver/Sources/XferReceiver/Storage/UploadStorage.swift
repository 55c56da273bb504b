import Hummingbird
import NIOCore

/// Where a receiver keeps its uploads: the core every storage has, and the one door every
/// protocol's routes go through. Routes validate their wire format, then speak to a storage in
/// these terms; they never see a path, a file or an object key.
///
/// In tusd's shape (its `DataStore` and `Upload`): this core, with `ChunkedUpload`, is all a
/// storage must have. Uploads whose chunks arrive in any order, each recorded as it is
/// acknowledged: create one, describe it (`upload(id:)`, then its received chunks and completion
/// record), write a chunk at its offset, finish it (`complete`: one file published under a stable
/// name), read that file back (whole), terminate it (`delete`). patch, multipart's files and downloads
/// need nothing more.
///
/// Everything else is a capability of its own, in Storage/Capabilities/, which a storage declares
/// explicitly in a `StorageComposer` (`ComposableStorage.compose(into:)`): offset uploads (tus, the
/// IETF draft), their concatenation, sequences, multipart's sources, whole files, range reads,
/// expiry, idle upkeep, statistics. The receiver resolves the composer once when it starts and
/// derives from it the routes it registers and what they advertise (tus's `Tus-Extension`, the
/// IETF draft's `Upload-Limit`, `Accept-Ranges`): a protocol whose capability is missing has no
/// routes.
///
/// Every implementation keeps the same promise: an answer that acknowledges bytes comes only after
/// they are durable and recorded; what a request that failed or was cut sent is never counted
/// unless its protocol says it may be (an unchecked body cut mid-way keeps what arrived).
///
/// `DiskStorage` (Storage/Disk/) is the implementation `xfer serve` uses by default,
/// `ObjectStorage` (Storage/Object/) the one over an S3 store, `MemoryStorage` the core alone
/// (Docs/storage-guide.md walks through it).
protocol UploadStorage: AnyObject, Sendable {

    /// A new upload, durable (so known to any later lookup, also after a crash) before it returns.
    func create(_ upload: NewUpload) async throws -> any ChunkedUpload
    /// Describe: upload `id`, nil for ids that are malformed or unknown. With `creating`, an upload
    /// that does not exist yet is created as it describes: for protocols that hand out ids before
    /// anything says what the file is (multipart's file ids); concurrent calls for one id then get
    /// the same upload, and `id` must be one this storage generated (`UploadID`). Callers use
    /// `upload(id:)` and `upload(id:creatingIfAbsent:)`.
    func upload(id: String, creating: NewUpload?) async throws -> (any ChunkedUpload)?
    /// False when the upload is unknown or already deleted. Its published file goes with it, and
    /// every other thing the storage kept of it.
    func delete(id: String) async throws -> Bool
    /// The body of a completed upload's file, read from where the storage published it, whole,
    /// streamed. `upload` is one this storage returned. (Ranges of it: `PublishedRangeReading`.)
    func publishedFile(of upload: any ChunkedUpload, context: some RequestContext) async throws -> ResponseBody
}

extension UploadStorage {
    /// Nil for ids that are malformed or unknown.
    func upload(id: String) async throws -> (any ChunkedUpload)? {
        try await upload(id: id, creating: nil)
    }

    /// Upload `id`, created as `upload` describes when it does not exist yet (see
    /// `upload(id:creating:)`).
    func upload(id: String, creatingIfAbsent upload: NewUpload) async throws -> any ChunkedUpload {
        guard let found = try await self.upload(id: id, creating: upload) else {
            throw UploadError.corrupt("upload \(id) was neither found nor created")
        }
        return found
    }
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
    /// What the upload is: its protocol, id, path, size and chunk size.
    var meta: UploadMeta { get }
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
    /// Where its file is published (below `/downloads/<id>/`).
    var path: RelativePath { meta.path }

    func writeChunk<Body: AsyncSequence>(_ chunk: Int, body: Body, check: BodyWriter.Check?) async throws where Body.Element == ByteBuffer {
        try await writeChunk(chunk, body: body, check: check, trailer: nil)
    }

    func complete() async throws -> CompletionOutcome {
        try await complete(crc32c: nil)
    }
}

/// A storage that keeps completed files on a filesystem of this machine, and says where: hooks
/// tell the application the path (`file`), so it need not know the storage's layout.
protocol PublishedFileLocating: Sendable {
    /// The absolute path of upload `id`'s published file; nil when there is none.
    func publishedFilePath(id: String) async -> String?
}
