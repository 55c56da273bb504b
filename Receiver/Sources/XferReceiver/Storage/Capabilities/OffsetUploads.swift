import Hummingbird
import NIOCore

// Capability: uploads whose progress is one offset (tus, the IETF draft). A storage that has it
// declares it in its composer (`StorageComposer.offsetUploads`).

/// Uploads whose progress is one offset (tus's, the IETF draft's), each protocol's under its own name.
protocol OffsetUploadStoring: AnyObject, Sendable {
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
