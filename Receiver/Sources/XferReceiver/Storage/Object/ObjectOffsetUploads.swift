import FoundationEssentials
import Hummingbird
import NIOCore
import Synchronization
import XferPrimitives
import XferS3Core
import Logging

/// One protocol's offset uploads (tus's, the IETF draft's) in an object store.
///
/// An append becomes a part of the upload's multipart upload when it ends the file or, with the
/// staged tail before it, reaches the minimum part size (the tail is then read back from the store
/// and sent ahead of the append's bytes, so each byte is staged at most once); else it is staged as
/// an object of its own. So every part but the last is at least the minimum, and completion is one
/// `CompleteMultipartUpload`.
///
/// Appends to one upload from several instances are ordered by a claim in the upload's state
/// (`ObjectUploadState.Claim`), taken and released by compare-and-swap: the offset it starts at,
/// the part number it sends, until when it holds. A second append at the same offset waits for the
/// claim to end, then finds the offset moved (409, as on disk). A claim whose sender died lapses
/// after `ObjectStorage.claimLifetime`, and a live sender renews its own while its body streams.
/// Part numbers are never handed out twice, so a lapsed sender that wakes up late writes into a
/// part nobody will name.
actor ObjectOffsetUploads: OffsetUploadStore {
    let storage: ObjectStorage
    let protocolName: String
    /// A completed upload is settled: every request re-reads what matters from the store.
    private let uploads: KeyedLoads<String, ObjectOffsetUpload>

    init(storage: ObjectStorage, protocolName: String) {
        uploads = KeyedLoads(settled: { $0.version.latest?.0.completion != nil }, memory: storage.memory)
        self.storage = storage
        self.protocolName = protocolName
    }

    func create(path: RelativePath, length: Int, info: OffsetUploadInfo) async throws -> any OffsetUpload {
        try uploads.makeRoom()
        let created = try await storage.createUpload(
            NewUpload(protocolName: protocolName, path: path, size: length, chunkSize: max(1, length))
        ) { state in
            state.info = info
        }
        let upload = ObjectOffsetUpload(storage: storage, meta: created.meta, info: info)
        if let latest = created.version.latest { upload.version.advance(to: latest) }
        uploads.insert(upload, for: created.id)
        return upload
    }

    /// The most a body may hold to be stored whole at creation: beyond it, the longer way's cost
    /// (three more small requests) is nothing beside the body's, and a body cut early is better
    /// left resumable by a state made before it (see below).
    static let storedWholeLimit = 16 << 20

    /// A creation whose body is the whole upload — a small file, typically — is one `PutObject` of
    /// the file, its state in the object's metadata (`ObjectStorage.stateInFileMetadata`) and its
    /// id marked so (`UploadID.isStoredWhole`): one store request for the file, where the longer
    /// way takes four (a state, a claim, the object, the record). Its outcome is the same once
    /// this returns: a completed upload any instance finds.
    ///
    /// What differs is only while the body streams: the upload exists nowhere yet, so a `HEAD` of
    /// the URL a 104 announced answers 404 until the body ends. A body that fails leaves the
    /// upload as the longer way would, at offset 0 (its state written then), unless this process
    /// dies first — then the URL is unknown, and the client, which had sent nothing durable,
    /// starts again.
    nonisolated func create<Body: AsyncSequence>(
        path: RelativePath, length: Int, info: OffsetUploadInfo, body: Body, limit: Int, declaredLength: Int?,
        check: BodyWriter.Check?, announce: (any OffsetUpload) async throws -> Void
    ) async throws -> (upload: any OffsetUpload, result: OffsetWriteResult) where Body.Element == ByteBuffer {
        let id = UploadID.generate(storedWhole: true)
        let meta = ObjectStorage.meta(id: id, NewUpload(protocolName: protocolName, path: path, size: length, chunkSize: max(1, length)))
        var state = ObjectUploadState(meta: meta, created: Date())
        state.info = info
        state.offset = length
        state.crc = nil
        state.completion = CompletionRecord(sha256: nil, size: length, crc32c: nil)
        guard info.role == .single, length > 0, length <= min(limit, Self.storedWholeLimit), declaredLength == length,
            let metadata = ObjectStorage.fileMetadata(holding: state)
        else {
            return try await createThenWrite(
                path: path, length: length, info: info, body: body, limit: limit, declaredLength: declaredLength, check: check,
                announce: announce)
        }
        let upload = ObjectOffsetUpload(storage: storage, meta: meta, info: info)
        // Known here from now on, and in its turn until the body is in: a request of this
        // instance asking for it meanwhile (a HEAD after the 104) waits for the outcome.
        try await remember(upload)
        let result: OffsetWriteResult = try await upload.exclusively {
            try await announce(upload)
            let statistics = storage.statistics
            let checked = CheckedBody(
                UncheckedSendableBody(body), limit: length, exactLength: true, check: check,
                counted: { statistics.received($0) })
            do {
                _ = try await storage.client.perform(
                    storage.client.requests.putObjectStreamed(
                        key: storage.layout.file(id, path: path), length: Int64(length), metadata: metadata),
                    streaming: checked, length: length)
            } catch {
                // Nothing of the body is in the store: the upload is left at offset 0, as the
                // longer way leaves it, for a client that learned its URL.
                var empty = ObjectUploadState(meta: meta, created: state.created)
                empty.info = info
                if let made = try? await storage.createState(id, &empty) { upload.version.advance(to: (empty, made)) }
                switch checked.outcome.failure {
                case .digestMismatch?: return .failed(.checksumMismatch)
                case .tooLarge(let limit)?: return .failed(.tooLarge(limit: limit))
                case .interrupted?, .tooShort?: return .failed(.interrupted(offset: 0))
                case nil: throw OffsetCreationFailure(upload: upload, error: error)
                }
            }
            upload.version.advance(to: (state, ObjectStorage.noStateObject))
            upload.completedByItsWrite()
            return .stored(offset: length)
        }
        return (upload, result)
    }

    private func remember(_ upload: ObjectOffsetUpload) throws {
        try uploads.makeRoom()
        uploads.insert(upload, for: upload.id)
    }

    func upload(id: String) async throws -> (any OffsetUpload)? {
        try await objectUpload(id: id)
    }

    private func objectUpload(id: String) async throws -> ObjectOffsetUpload? {
        guard UploadID.isValid(id) else { return nil }
        return try await uploads.value(for: id) { [storage, protocolName] in
            guard let read = try await storage.readState(id), read.0.meta.protocolName == protocolName, let info = read.0.info else {
                return nil
            }
            let upload = ObjectOffsetUpload(storage: storage, meta: read.0.meta, info: info)
            upload.version.advance(to: read)
            return upload
        }
    }

    /// Lets the uploads no request used for a while leave memory (`KeyedLoads`).
    func dropIdle() {
        uploads.dropIdle()
    }

    func delete(id: String) async throws -> Bool {
        guard try await objectUpload(id: id) != nil else { return false }
        let deleted = try await storage.delete(id: id)
        uploads.remove(id)
        return deleted
    }
}

/// One offset upload in an object store. What it holds never changes; the offset, the pieces and
/// the claim are read from the store whenever they matter.
actor ObjectOffsetUpload: OffsetUpload, TakesTurns {
    nonisolated let storage: ObjectStorage
    nonisolated let meta: UploadMeta
    nonisolated let info: OffsetUploadInfo
    nonisolated let path: RelativePath
    /// The last sight of the state a request here read or wrote: where the next change starts.
    nonisolated let version = StateVersion()
    var turns = KeyedTurns<WholeUpload>()
    /// Set when a write of this handle completed the upload by itself (a whole upload in one
    /// append, or in its creation): the `finish` that follows is then the call that completed it.
    private nonisolated let completedUnreported = Atomic<Bool>(false)

    init(storage: ObjectStorage, meta: UploadMeta, info: OffsetUploadInfo) {
        self.storage = storage
        self.meta = meta
        self.info = info
        path = RelativePath.validated(meta.fileName) ?? RelativePath.validated("file")!
    }

    nonisolated var id: String { meta.uploadId }
    nonisolated var length: Int { meta.size }
    /// See `completedUnreported`.
    fileprivate nonisolated func completedByItsWrite() {
        completedUnreported.store(true, ordering: .relaxed)
    }

    /// A partial upload (tus's `Upload-Concat: partial`) is completed into an object of its own
    /// among the staged ones, which a concatenation copies from: only files live under `files/`.
    private nonisolated var fileKey: String {
        info.role == .partial ? storage.layout.staged(id, ObjectLayout.completedPartial) : storage.layout.file(id, path: path)
    }

    /// Read from the store (another receiver may have moved it), and kept as the latest sight.
    var currentOffset: Int? {
        get async {
            guard let read = (try? await storage.readState(id)) ?? nil else { return nil }
            version.advance(to: read)
            return read.0.offset
        }
    }

    var currentCRC: UInt32? {
        get async { (try? await storage.readState(id))??.0.crc }
    }

    nonisolated func write<Body: AsyncSequence>(
        _ body: Body, at start: Int, limit: Int, declaredLength: Int?, check: BodyWriter.Check?
    ) async throws -> OffsetWriteResult where Body.Element == ByteBuffer {
        let room = min(limit, length - start)
        guard let count = declaredLength else { return .failed(.lengthRequired) }
        guard count <= room else { return .failed(.tooLarge(limit: room)) }
        if count == 0 {
            // Nothing to send to the store, and nothing that could move the offset.
            for try await buffer in body where buffer.readableBytes > 0 { return .failed(.tooLarge(limit: 0)) }
            return .stored(offset: start)
        }
        let nonce = UploadID.generate()

        // Take the upload: the offset must still be `start`, and no other append may be under way.
        let claimed: ObjectUploadState
        switch try await claim(at: start, count: count, nonce: nonce) {
        case .moved(let offset): return .failed(.offsetMoved(offset: offset))
        case .claimed(let state): claimed = state
        }
        guard let claim = claimed.claim else { preconditionFailure("a claimed state holds its claim") }

        // Until when the claim holds as this append last confirmed it (taking it, then each renewal).
        let confirmed = ConfirmedClaim(until: claim.until)
        let renewal = Task { [storage, id, version] in
            await Self.renew(nonce, of: id, in: storage, from: version, confirming: confirmed)
        }
        defer { renewal.cancel() }

        let statistics = storage.statistics
        let lifetime = storage.claimLifetime
        let checked = CheckedBody(
            UncheckedSendableBody(body), limit: count, exactLength: true, check: check,
            // The body's last byte goes to the store (which then applies the part or object)
            // only while the claim is confirmed for a third of its lifetime more: a sender whose
            // renewals failed that long may have lost it, and the next claimant may already
            // have sent this part's number (`ObjectUploadState.nextPartNumber`), which a late
            // part must not replace. The body then ends short: the store keeps nothing.
            trailer: {
                guard confirmed.until > Date() + lifetime.seconds / 3 else { throw ClaimNotConfirmed() }
            },
            counted: { statistics.received($0) })
        let requests = storage.client.requests
        // What this append's object holds before its own bytes: the whole staged tail when it is a
        // part; past the cap on staged pieces, the tail's last pieces (each byte of them is then
        // stored again, and the tail keeps few pieces); else nothing. Read back from the store as
        // they are sent (`ConcatenatedObjects`), so nothing is held.
        let tail = claimed.stagedTail
        let folded = claim.part == nil ? Array(tail.suffix(Self.piecesToFold(appending: count, to: tail))) : tail
        let foldedLength = folded.reduce(0) { $0 + $1.length }
        let foldedCRC = folded.reduce(UInt32(0)) { CRC32C.combine($0, $1.crc, lengthOfSecond: Int64($1.length)) }
        let foldedKeys = folded.compactMap { $0.staged.map { storage.layout.staged(id, $0) } }
        let contents = Chained(first: storage.concatenation(of: foldedKeys), second: checked)
        let piece: ObjectUploadState.Piece
        // The whole upload in one append (a small file created with its body, typically): one
        // object at the file's key, no multipart upload, and the record completes it.
        let whole = start == 0 && count == length && count <= Self.largestObject
        do {
            if whole {
                let etag = try await storage.client.perform(
                    requests.putObjectStreamed(key: fileKey, length: Int64(count)), streaming: checked, length: count)
                piece = .init(at: 0, length: count, etag: etag.unquoted, crc: checked.outcome.crc32c)
            } else if let part = claim.part {
                let uploadID = try await storage.multipartUploadID(of: id, key: fileKey, version: version)
                let etag = try await storage.client.perform(
                    requests.uploadPart(key: fileKey, uploadID: uploadID, partNumber: part, length: Int64(foldedLength + count)),
                    streaming: contents, length: foldedLength + count)
                piece = .init(
                    at: start - foldedLength, length: foldedLength + count, part: part, etag: etag.unquoted,
                    crc: CRC32C.combine(foldedCRC, checked.outcome.crc32c, lengthOfSecond: Int64(count)))
            } else {
                let name = "o\(start - foldedLength)-\(nonce.prefix(8))"
                let etag = try await storage.client.perform(
                    requests.putObjectStreamed(key: storage.layout.staged(id, name), length: Int64(foldedLength + count)),
                    streaming: contents, length: foldedLength + count)
                piece = .init(
                    at: start - foldedLength, length: foldedLength + count, staged: name, etag: etag.unquoted,
                    crc: CRC32C.combine(foldedCRC, checked.outcome.crc32c, lengthOfSecond: Int64(count)))
            }
        } catch {
            await release(nonce)
            switch checked.outcome.failure {
            case .digestMismatch?: return .failed(.checksumMismatch)
            case .tooLarge(let limit)?: return .failed(.tooLarge(limit: limit))
            // The store keeps nothing of a body cut short: the offset stays where it was.
            case .interrupted?, .tooShort?: return .failed(.interrupted(offset: start))
            case nil: throw error
            }
        }

        // Record it, if the claim is still ours. Each evaluation decides from the version it is
        // given alone (the flags are set anew each time): a cached sight may be stale.
        var lost = false
        let recorded = try await storage.updateState(id, from: version) { state in
            lost = false
            if state.pieces.contains(piece) {
                // This very record, applied by a write whose answer was lost (and changed since).
                return false
            }
            guard state.claim?.by == nonce, state.offset == start else {
                lost = true
                return false
            }
            state.pieces.removeAll { folded.contains($0) }
            state.pieces.append(piece)
            state.crc = state.crc.map { CRC32C.combine($0, checked.outcome.crc32c, lengthOfSecond: Int64(count)) }
            state.offset = start + count
            state.claim = nil
            if whole { state.completion = CompletionRecord(sha256: nil, size: length, crc32c: state.crc.map(CRC32.hex)) }
            return true
        }
        if whole, !lost, recorded.completion != nil { completedByItsWrite() }
        if lost {
            // Our claim lapsed and another append took the upload: these bytes count for nothing,
            // and the state names none of them (checked above), so they go.
            if let name = piece.staged { _ = try? await storage.client.perform({ requests.deleteObject(key: self.storage.layout.staged(self.id, name)) }) }
            return .failed(.offsetMoved(offset: recorded.offset))
        }
        // The folded pieces are in this append's object now. (Should this process die first, the
        // completion deletes what is left under staging.)
        for staged in folded {
            if let name = staged.staged { _ = try? await storage.client.perform({ requests.deleteObject(key: self.storage.layout.staged(self.id, name)) }) }
        }
        return .stored(offset: recorded.offset)
    }

    /// How many of the staged tail's last pieces an append of `count` bytes staged after it takes
    /// into its own object: none while the tail is below `ObjectUploadState.maximumStagedPieces`;
    /// past it, the last piece and those before it no larger than what is taken so far. The
    /// pieces taken are the small ones at the tail's end, so the tail keeps pieces that grow
    /// towards its start, like a binary counter's: under a stream of tiny appends a byte is
    /// stored again about log2(the tail's size / the append's) times. Appends of the usual sizes
    /// (reaching the 5 MiB part in fewer appends than the cap) are never folded.
    static func piecesToFold(appending count: Int, to tail: [ObjectUploadState.Piece]) -> Int {
        guard tail.count >= ObjectUploadState.maximumStagedPieces else { return 0 }
        var taken = 0
        var merged = count
        repeat {
            merged += tail[tail.count - 1 - taken].length
            taken += 1
        } while taken < tail.count && tail[tail.count - 1 - taken].length <= merged
        return taken
    }

    /// Keeps an append's claim alive while its body streams: renewed every third of the claim's
    /// lifetime, and after a failed renewal sooner (two more may fail before it lapses). Only a
    /// definite loss ends it: the claim no longer this append's, or the upload gone.
    private static func renew(_ nonce: String, of id: String, in storage: ObjectStorage, from version: StateVersion, confirming confirmed: ConfirmedClaim) async {
        let lifetime = storage.claimLifetime
        var pause = lifetime / 3
        while !Task.isCancelled {
            do {
                try await Task.sleep(for: pause)
            } catch {
                return
            }
            do {
                var ours = true
                let renewed = try await storage.updateState(id, from: version) { state in
                    ours = state.claim?.by == nonce
                    guard ours else { return false }
                    state.claim?.until = Date() + lifetime.seconds
                    return true
                }
                guard ours, let until = renewed.claim?.until else {
                    confirmed.lost()
                    return
                }
                confirmed.until = until
                pause = lifetime / 3
            } catch UploadError.deleted {
                confirmed.lost()
                return
            } catch {
                storage.logger.debug("An append's claim renewal failed; retrying", metadata: ["upload": "\(id)", "reason": "\(error)"])
                pause = lifetime / 12
            }
        }
    }

    /// The most one `PutObject` stores (S3's 5 GiB).
    private static let largestObject = 5 << 30

    private enum ClaimOutcome {
        case claimed(ObjectUploadState)
        case moved(Int)
    }

    /// Claims the upload for an append of `count` bytes at `start`, waiting out another instance's
    /// live claim.
    private nonisolated func claim(at start: Int, count: Int, nonce: String) async throws -> ClaimOutcome {
        var wait = Duration.milliseconds(20)
        while true {
            // Set by the evaluation of the version the decision was taken on, and by no other:
            // `updateState` may evaluate the change several times (a stale sight, a lost race).
            var moved: Int?
            let state: ObjectUploadState
            do {
                state = try await storage.updateState(id, from: version) { state in
                    moved = nil
                    // Ours already: a write of this claim whose answer was lost.
                    if state.claim?.by == nonce { return false }
                    if state.completion != nil || state.offset != start {
                        moved = state.offset
                        return false
                    }
                    if let claim = state.claim, claim.until > Date() { return false }
                    let tail = state.stagedTail.reduce(0) { $0 + $1.length }
                    let asPart = tail + count >= minimumPartSize || start + count == state.meta.size
                    state.claim = .init(
                        at: start, part: asPart ? state.nextPartNumber : nil, until: Date() + storage.claimLifetime.seconds, by: nonce)
                    return true
                }
            } catch {
                // The claim may be in the store all the same (written, its answer lost for good):
                // given up, so that the next append need not wait it out.
                await release(nonce)
                throw error
            }
            if state.claim?.by == nonce { return .claimed(state) }
            if let moved { return .moved(moved) }
            // Another append's live claim: wait for it to end or lapse.
            try await Task.sleep(for: wait)
            wait = min(wait * 2, .milliseconds(500))
        }
    }

    /// Gives up a claim this append holds (its body failed), so the next append need not wait.
    private nonisolated func release(_ nonce: String) async {
        _ = try? await storage.updateState(id, from: version) { state in
            guard state.claim?.by == nonce else { return false }
            state.claim = nil
            return true
        }
    }

    /// The partials' completed objects, in order, as the parts of this (final) upload: a partial of
    /// at least the minimum part size (or the last) is copied by the store; smaller ones are read
    /// back and sent together until they reach it.
    nonisolated func concatenate(_ partials: [any OffsetUpload], crc: UInt32?) async throws {
        let requests = storage.client.requests
        let uploadID = try await storage.multipartUploadID(of: id, key: fileKey)
        var pieces: [ObjectUploadState.Piece] = []
        var group: [(key: String, length: Int)] = []
        var at = 0
        var number = 1
        func flush() async throws {
            guard !group.isEmpty else { return }
            let length = group.reduce(0) { $0 + $1.length }
            let etag: S3ETag
            if group.count == 1 {
                etag = try await storage.client.perform({
                    requests.uploadPartCopy(key: self.fileKey, uploadID: uploadID, partNumber: number, sourceKey: group[0].key)
                })
            } else {
                etag = try await storage.client.perform(
                    requests.uploadPart(key: fileKey, uploadID: uploadID, partNumber: number, length: Int64(length)),
                    streaming: storage.concatenation(of: group.map(\.key)), length: length)
            }
            pieces.append(.init(at: at, length: length, part: number, etag: etag.unquoted, crc: 0))
            at += length
            number += 1
            group = []
        }
        for partial in partials {
            guard let partial = partial as? ObjectOffsetUpload else { throw UploadError.corrupt("a partial upload of another storage") }
            group.append((partial.fileKey, partial.length))
            if group.reduce(0, { $0 + $1.length }) >= minimumPartSize { try await flush() }
        }
        try await flush()
        let recorded = pieces
        try await storage.updateState(id, from: version) { state in
            state.pieces = recorded
            state.offset = state.meta.size
            state.crc = crc
            return true
        }
    }

    /// Completes the multipart upload into the file's object once the offset reached the length
    /// (partials too: a concatenation reads them as objects), then records the completion. True
    /// when this call's record is the one that completed the upload (of any number of calls on any
    /// instances, exactly one); false when it was complete already. Repeatable: a completion that
    /// failed, or that a crash cut short, is finished by the next call.
    @discardableResult
    nonisolated func finish() async throws -> Bool {
        // The state the write that reached the length left (or a fresh read): a completion already
        // done elsewhere is found by the store (the multipart upload unknown, the object there).
        var seen = version.latest
        if seen == nil {
            seen = try await storage.readState(id)
            if let seen { version.advance(to: seen) }
        }
        guard let (state, _) = seen else { throw UploadError.deleted }
        // Complete already: by this handle's own last write (then this call reports it), or before.
        guard state.completion == nil else { return completedUnreported.exchange(false, ordering: .relaxed) }
        guard state.offset == length else { throw UploadError.corrupt("finish called at offset \(state.offset) of \(length)") }
        let client = storage.client
        let requests = client.requests
        let key = fileKey
        // Every byte is in parts now (the append that reached the length made the last one, its
        // staged tail with it): what is left under staging is what appends that died, lost their
        // claim or were cut after their record left behind. It goes before the completion is
        // recorded, so that no crash leaves it behind a completed upload.
        try await storage.deleteAll(under: storage.layout.stagingPrefix(id)) { key in
            key != self.storage.layout.staged(self.id, ObjectLayout.completedPartial)
        }
        if let uploadID = state.multipartUploadID {
            let parts = state.pieces.compactMap { piece in piece.part.map { S3CompletedPart(number: $0, etag: S3ETag(piece.etag)) } }
            switch try await client.perform({ requests.completeMultipartUpload(key: key, uploadID: uploadID, parts: parts) }) {
            case .completed: break
            case .uploadUnknown:
                // Completed by an earlier attempt (here or elsewhere) whose record is missing, or
                // aborted by a deletion: the object tells.
                guard case .found = try await client.perform({ requests.headObject(key: key) }) else {
                    guard let current = try await storage.readState(id) else { throw UploadError.deleted }
                    if current.0.completion != nil { return false }
                    throw UploadError.corrupt("the store no longer knows the multipart upload of \(id)")
                }
            }
            await storage.abortStrays(key: key, keeping: nil)
        } else {
            // Only an empty upload has no part.
            _ = try await client.perform({ requests.putObject(key: key, bytes: []) })
        }
        let record = CompletionRecord(sha256: nil, size: length, crc32c: state.crc.map(CRC32.hex))
        return try await storage.changeState(id, from: version) { state in
            guard state.completion == nil else { return false }
            state.completion = record
            state.multipartUploadID = nil
            return true
        }.wrote
    }

    nonisolated func finishedBody(range: ClosedRange<Int>?, context: some RequestContext) async throws -> ResponseBody {
        try await storage.body(ofKey: fileKey, range: range)
    }
}

extension Duration {
    /// In seconds, for dates.
    var seconds: TimeInterval {
        let (seconds, attoseconds) = components
        return TimeInterval(seconds) + TimeInterval(attoseconds) / 1e18
    }
}

/// Why an append's last byte was held back: its claim was not confirmed long enough.
struct ClaimNotConfirmed: Error, CustomStringConvertible {
    var description: String { "the append's claim on its upload may have lapsed" }
}

/// Until when an append's claim holds, as its sender last confirmed it in the store: shared by
/// the append and its renewals.
final class ConfirmedClaim: Sendable {
    private let time: Mutex<Date>

    init(until: Date) {
        time = Mutex(until)
    }

    var until: Date {
        get { time.withLock { $0 } }
        set { time.withLock { $0 = newValue } }
    }

    /// The claim is no longer this sender's.
    func lost() {
        until = .distantPast
    }
}
