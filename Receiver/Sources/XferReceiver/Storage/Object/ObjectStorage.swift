import AsyncHTTPClient
import Crypto
import Foundation
import Hummingbird
import Logging
import NIOCore
import Synchronization
import XferPrimitives
import XferS3

/// Uploads in an S3-compatible object store (`xfer serve --storage s3://BUCKET/PREFIX`), shared by
/// any number of receivers with no lock service and no sticky sessions: every upload's state is a
/// small object replaced by compare-and-swap (`ObjectUploadState`), bodies stream from the client
/// straight to the store (checked on the way, `CheckedBody`), and a completed upload is one object
/// at a stable key. Docs/architecture.md, "Uploads on an object store", tells the whole design.
///
/// Chunks of at least the store's minimum part size (5 MiB) are parts of one multipart upload,
/// chunk n as part n; a single chunk goes straight to the file's key; smaller chunks are staged as
/// objects of their own and folded into parts when the upload completes. Offset uploads (tus,
/// ietf) append parts under a claim (`ObjectOffsetUploads`).
final class ObjectStorage: ComposableStorage, OffsetUploadStoring, OffsetUploadConcatenating, SequenceUploadStoring, MultipartSourceStoring,
    WholeFileStoring, UploadExpiring, IdleUploadDropping, StatisticsReporting
{
    let client: ObjectStoreClient
    let layout: ObjectLayout
    var statistics: ReceiverStatistics { client.statistics }
    let logger: Logger
    /// How long a claim on an offset upload holds without being renewed.
    let claimLifetime: Duration
    /// How long an unfinished upload may go untouched before it is dropped; nil: never.
    let expireAfter: Duration?
    let multipartSources: any MultipartSourceStore
    private let offsetStores = Mutex<[String: ObjectOffsetUploads]>([:])
    /// What the receiver holds in memory, against its limits (`KeyedLoads` of the offset uploads).
    let memory: UploadsInMemory?

    init(
        client: ObjectStoreClient, prefix: String, claimLifetime: Duration = .seconds(30), expireAfter: Duration? = nil,
        memory: UploadsInMemory? = nil, logger: Logger
    ) {
        self.memory = memory
        self.client = client
        self.expireAfter = expireAfter
        layout = ObjectLayout(prefix: prefix)
        self.claimLifetime = claimLifetime
        self.logger = logger
        multipartSources = ObjectMultipartSources(client: client, layout: layout)
    }

    /// Keeps nothing of its own: every sequence upload's state is in the store.
    var sequenceUploads: any SequenceUploadStore { ObjectSequenceUploads(storage: self) }

    /// Every capability there is, as on disk.
    func compose(into composer: inout StorageComposer) {
        composer.offsetUploads = self
        composer.concatenation = self
        composer.sequences = self
        composer.multipartSources = self
        composer.wholeFiles = self
        if let expireAfter { composer.expiry = StorageExpiry(after: expireAfter, sweeper: self) }
        composer.upkeep = self
        composer.statistics = self
    }

    /// A final upload's bytes copied from its partials' objects (`ObjectOffsetUpload.concatenate`).
    func concatenate(_ partials: [any OffsetUpload], into final: any OffsetUpload, crc: UInt32?) async throws {
        guard let final = final as? ObjectOffsetUpload else { throw UploadError.corrupt("a final upload of another storage") }
        try await final.concatenate(partials, crc: crc)
    }

    func reportSweptCompletions(to report: @escaping @Sendable (FinishedUpload) async -> Void) {
        sweepFinished.withLock { $0 = report }
    }

    var syncRounds: Int { 0 }
    /// Chunks of at least a part's minimum go to the store as parts, with no staging; 8 MiB (the
    /// AWS CLI's part size) rather than the 5 MiB minimum, because every chunk costs the store its
    /// request and its record whatever its size (Docs/benchmarks.md, section 11).
    var preferredMinimumChunkSize: Int { 8 << 20 }

    // MARK: State, by compare-and-swap

    /// The upload's state as the store holds it now, with the version it was read at. An
    /// unfinished upload past its expiry is dropped here, and reads as unknown.
    func readState(_ id: String) async throws -> (ObjectUploadState, S3ETag)? {
        guard UploadID.isValid(id) else { return nil }
        let key = layout.state(id)
        switch try await client.perform({ client.requests.getObject(key: key) }) {
        case .found(let content):
            guard let etag = content.metadata.etag else { throw UploadError.corrupt("the store gave no ETag for \(key)") }
            let state: ObjectUploadState
            do {
                state = try JSONDecoder.objectState.decode(ObjectUploadState.self, from: Data(content.body))
            } catch {
                throw UploadError.corrupt("the state of \(id) does not decode")
            }
            if state.deletion != nil {
                // A deletion began and has not ended (its deleter is at work, or died): nothing may
                // change the upload any more, and whoever meets it finishes the deletion.
                try await removeObjects(of: id, state)
                return nil
            }
            if state.completion == nil, !state.isDueForCompletion, isExpired(lastChanged: content.metadata.lastModified),
                try await isExpired(chunksOf: id, recordedApart: state.meta.chunkCount > 1 && state.info == nil)
            {
                // Dropped only if the state is still the version read: a claim, a renewal or a
                // record since made it live again, and it stays (read anew: fresh, so not expired).
                guard try await tombstone(id, (state, etag), onlyIfUnchanged: true) else { return try await readState(id) }
                try await removeObjects(of: id, state)
                return nil
            }
            return (state, etag)
        case .notFound:
            return UploadID.isStoredWhole(id) ? try await stateInFileMetadata(id) : nil
        case .preconditionFailed, .rangeNotSatisfiable:
            throw UploadError.corrupt("the store answered a plain read of \(key) with a condition")
        }
    }

    /// The version of a state read from a file's metadata: there is no state object yet, so a
    /// change creates one (`updateState` writes it only if absent).
    static let noStateObject = S3ETag("")

    /// The state of an upload stored whole by the request that created it, read from its file's
    /// metadata (the file's key holds a name the id alone does not give: one listing finds it).
    private func stateInFileMetadata(_ id: String) async throws -> (ObjectUploadState, S3ETag)? {
        let page = try await client.perform({ client.requests.listObjects(prefix: layout.filesPrefix(id), maxKeys: 1) })
        guard let key = page.objects.first?.key else { return nil }
        guard case .found(let metadata) = try await client.perform({ client.requests.headObject(key: key) }) else { return nil }
        guard let encoded = metadata.userMetadata[ObjectLayout.stateMetadataName], let json = Data(base64Encoded: encoded),
            let state = try? JSONDecoder.objectState.decode(ObjectUploadState.self, from: json), state.meta.uploadId == id
        else {
            throw UploadError.corrupt("\(key) holds no readable state of upload \(id)")
        }
        return (state, Self.noStateObject)
    }

    /// `state` as user metadata of its file's object; nil when it is too large to go there.
    static func fileMetadata(holding state: ObjectUploadState) -> [String: String]? {
        guard let json = try? JSONEncoder.objectState.encode(state) else { return nil }
        let encoded = json.base64EncodedString()
        return encoded.utf8.count <= ObjectLayout.stateMetadataLimit ? [ObjectLayout.stateMetadataName: encoded] : nil
    }

    /// Creates `state` under `id` only if no upload has that id: its version, nil when one has.
    /// (`state` gets the write's nonce: a creation whose answer was lost is recognised as this
    /// one's, not taken for another upload's.)
    func createState(_ id: String, _ state: inout ObjectUploadState) async throws -> S3ETag? {
        try await write(&state, of: id, condition: .onlyIfAbsent)
    }

    /// Writes `state` as upload `id`'s on `condition`, marked with a nonce of its own (`writer`)
    /// and the next revision: the new version, or nil when the condition failed — unless the
    /// version the store holds now is this very write, applied by an attempt whose answer was
    /// lost (then its version). One read more, only after a refusal.
    private func write(_ state: inout ObjectUploadState, of id: String, condition: S3WriteCondition) async throws -> S3ETag? {
        let key = layout.state(id)
        let nonce = Self.writeNonce()
        state.writer = nonce
        let bytes = Array(try JSONEncoder.objectState.encode(state))
        switch try await client.perform({ client.requests.putObject(key: key, bytes: bytes, condition: condition, contentType: "application/json") }) {
        case .stored(let etag):
            return etag
        case .preconditionFailed:
            guard case .found(let content) = try await client.perform({ client.requests.getObject(key: key) }),
                let etag = content.metadata.etag,
                let current = try? JSONDecoder.objectState.decode(ObjectUploadState.self, from: Data(content.body)), current.writer == nonce
            else { return nil }
            return etag
        }
    }

    /// A write's nonce: unique enough that two writes of one upload never share it.
    private static func writeNonce() -> String { String(UploadID.generate().prefix(16)) }

    /// Applies `change` to the upload's current state and stores the result only if nobody changed
    /// it meanwhile; on a lost race, reads again and applies `change` anew. `change` returns false
    /// to store nothing. Returns the state as stored (or as found). Throws `UploadError.deleted`
    /// when the upload is gone or being deleted.
    ///
    /// `version`, a handle's last sight of the state, saves the first read: a write from it is
    /// still conditional on it being current, and a decision to write nothing is only taken on a
    /// fresh read. The new version is left there.
    @discardableResult
    func updateState(
        _ id: String, from version: StateVersion? = nil, _ change: (inout ObjectUploadState) throws -> Bool
    ) async throws -> ObjectUploadState {
        try await changeState(id, from: version, change).state
    }

    /// `updateState`, telling also whether this call's write is the one that made the state: of
    /// any number of callers racing to change one thing (to record a completion, say), exactly one
    /// hears true — also when the store applied its write and the answer was lost.
    ///
    /// `change` is evaluated anew on every version it meets, and must decide from that version
    /// alone (flags it sets are reset at each evaluation by the caller's closure).
    func changeState(
        _ id: String, from version: StateVersion? = nil, _ change: (inout ObjectUploadState) throws -> Bool
    ) async throws -> (state: ObjectUploadState, wrote: Bool) {
        let key = layout.state(id)
        var known = version?.latest
        // The nonce of a write the store refused (412) after retrying it: the first attempt may
        // have been applied, and the next read tells.
        var unconfirmed: String?
        while true {
            let fresh = known == nil
            let current: (ObjectUploadState, S3ETag)
            if let seen = known {
                current = seen
                known = nil
            } else {
                guard let read = try await readState(id) else { throw UploadError.deleted }
                current = read
            }
            if let nonce = unconfirmed, current.0.writer == nonce {
                version?.advance(to: current)
                return (current.0, true)
            }
            unconfirmed = nil
            guard current.0.deletion == nil else { throw UploadError.deleted }
            var (state, etag) = current
            guard try change(&state) else {
                if fresh {
                    version?.advance(to: current)
                    return (state, false)
                }
                continue
            }
            let nonce = Self.writeNonce()
            state.revision = (current.0.revision ?? 0) + 1
            state.writer = nonce
            let bytes = Array(try JSONEncoder.objectState.encode(state))
            let condition: S3WriteCondition = etag == Self.noStateObject ? .onlyIfAbsent : .onlyIfCurrent(etag)
            switch try await client.perform(
                { client.requests.putObject(key: key, bytes: bytes, condition: condition, contentType: "application/json") })
            {
            case .stored(let newETag):
                version?.advance(to: (state, newETag))
                return (state, true)
            case .preconditionFailed:
                unconfirmed = nonce
            }
        }
    }

    /// Marks the upload deleted (`ObjectUploadState.deletion`) by compare-and-swap on the version
    /// `read`: true once marked (by this call); false when another version is current — with
    /// `onlyIfUnchanged` (an expiry), whatever changed; else only when someone else marked it.
    private func tombstone(_ id: String, _ read: (ObjectUploadState, S3ETag), onlyIfUnchanged: Bool) async throws -> Bool {
        var marked = read.0
        marked.deletion = Date()
        marked.revision = (read.0.revision ?? 0) + 1
        let condition: S3WriteCondition = read.1 == Self.noStateObject ? .onlyIfAbsent : .onlyIfCurrent(read.1)
        if try await write(&marked, of: id, condition: condition) != nil { return true }
        if onlyIfUnchanged { return false }
        do {
            return try await changeState(id) { state in
                state.deletion = Date()
                return true
            }.wrote
        } catch UploadError.deleted {
            return false
        }
    }

    /// The multipart upload receiving upload `id`'s parts: made and recorded on first need. Of two
    /// instances making one at once, one records its own and the other aborts its spare.
    func multipartUploadID(of id: String, key: String, version: StateVersion? = nil) async throws -> String {
        // Recorded once and never changed while parts are sent: a sight of it is as good as a read,
        // and a sight without one costs at worst a refused write (another instance recorded one).
        if let seen = version?.latest {
            if let known = seen.0.multipartUploadID { return known }
        } else if let known = try await readState(id)?.0.multipartUploadID {
            return known
        }
        let made = try await client.perform({ client.requests.createMultipartUpload(key: key) })
        let state = try await updateState(id, from: version) { state in
            guard state.multipartUploadID == nil else { return false }
            state.multipartUploadID = made
            return true
        }
        if state.multipartUploadID != made {
            _ = try? await client.perform({ client.requests.abortMultipartUpload(key: key, uploadID: made) })
        }
        guard let recorded = state.multipartUploadID else { throw UploadError.corrupt("no multipart upload recorded for \(id)") }
        return recorded
    }

    /// Aborts the multipart uploads of `key` but `keeping`: those whose creator died between
    /// creating one and recording it. The key is one upload's alone, so nobody else's are touched.
    /// Best effort: a stray left now is found by the next completion or deletion of the key.
    func abortStrays(key: String, keeping: String?) async {
        guard let page = try? await client.perform({ client.requests.listMultipartUploads(prefix: key) }) else { return }
        for upload in page.uploads where upload.key == key && upload.uploadID != keeping {
            _ = try? await client.perform({ client.requests.abortMultipartUpload(key: key, uploadID: upload.uploadID) })
        }
    }

    // MARK: The base

    func create(_ upload: NewUpload) async throws -> any ChunkedUpload {
        try await createUpload(upload, extra: { _ in })
    }

    /// A new upload with a fresh id; `extra` adds a protocol's own fields to its first state.
    func createUpload(_ upload: NewUpload, extra: (inout ObjectUploadState) -> Void) async throws -> ObjectChunkedUpload {
        while true {
            let id = UploadID.generate()
            var state = ObjectUploadState(meta: Self.meta(id: id, upload), created: Date())
            extra(&state)
            if let etag = try await createState(id, &state) { return try await prepared(ObjectChunkedUpload(storage: self, meta: state.meta, seen: (state, etag))) }
        }
    }

    /// A new chunked upload whose chunks will be parts gets its multipart upload now, while no
    /// sender knows its id: its chunks then never race to make one.
    private func prepared(_ upload: ObjectChunkedUpload) async throws -> ObjectChunkedUpload {
        if upload.meta.chunkCount > 1, upload.meta.chunkSize >= minimumPartSize, upload.version.latest?.0.info == nil {
            _ = try await multipartUploadID(of: upload.id, key: upload.fileKey, version: upload.version)
        }
        return upload
    }

    func upload(id: String) async throws -> (any ChunkedUpload)? {
        try await chunkedUpload(id: id)
    }

    func chunkedUpload(id: String) async throws -> ObjectChunkedUpload? {
        guard let read = try await readState(id) else { return nil }
        return ObjectChunkedUpload(storage: self, meta: read.0.meta, seen: read)
    }

    func upload(id: String, creatingIfAbsent upload: NewUpload) async throws -> any ChunkedUpload {
        precondition(UploadID.isValid(id), "upload ids name objects")
        while true {
            if let existing = try await chunkedUpload(id: id) { return existing }
            var state = ObjectUploadState(meta: Self.meta(id: id, upload), created: Date())
            if let etag = try await createState(id, &state) { return try await prepared(ObjectChunkedUpload(storage: self, meta: state.meta, seen: (state, etag))) }
        }
    }

    /// Marks the upload deleted (its tombstone, so that no append on any instance records anything
    /// more), then aborts its multipart upload, removes staged pieces and the file, then the state:
    /// the state goes last, so that a crash part way leaves a tombstone whoever meets it finishes.
    func delete(id: String) async throws -> Bool {
        guard let read = try await readState(id) else { return false }
        guard try await tombstone(id, read, onlyIfUnchanged: false) else { return false }
        try await removeObjects(of: id, read.0)
        return true
    }

    /// Everything of an upload whose tombstone is written, the state last (unconditionally: a
    /// tombstone is never replaced). Repeatable.
    private func removeObjects(of id: String, _ state: ObjectUploadState) async throws {
        var fileKey = try fileKey(state)
        if state.info?.role == .partial { fileKey = layout.staged(id, ObjectLayout.completedPartial) }
        if let uploadID = state.multipartUploadID {
            _ = try await client.perform({ client.requests.abortMultipartUpload(key: fileKey, uploadID: uploadID) })
        }
        await abortStrays(key: fileKey, keeping: nil)
        try await deleteAll(under: layout.stagingPrefix(id))
        try await deleteAll(under: layout.receivedPrefix(id))
        try await client.perform({ client.requests.deleteObject(key: fileKey) })
        try await client.perform({ client.requests.deleteObject(key: layout.state(id)) })
    }

    func publishedFile(of upload: any ChunkedUpload, range: ClosedRange<Int>?, context: some RequestContext) async throws -> ResponseBody {
        try await body(ofKey: layout.file(upload.meta.uploadId, path: upload.path), range: range)
    }

    /// A stored object's bytes, or those of `range` (the store reads the range itself), streamed
    /// from the store as the client reads them.
    func body(ofKey key: String, range: ClosedRange<Int>? = nil) async throws -> ResponseBody {
        let bytes = range.map { Int64($0.lowerBound)...Int64($0.upperBound) }
        let response = try await client.open(client.requests.getObject(key: key, range: bytes))
        let contentLength = response.headers.first(name: "Content-Length").flatMap(Int.init)
        // A store that ignored the range would answer the whole object, which must not go out as
        // the part the client asked for.
        guard response.status == (range == nil ? .ok : .partialContent), range.map({ $0.count == contentLength }) ?? true else {
            throw UploadError.corrupt("the store answered \(response.status.code) for \(key)" + (range.map { " bytes \($0)" } ?? ""))
        }
        return ResponseBody(contentLength: contentLength) { writer in
            for try await buffer in response.body { try await writer.write(buffer) }
            try await writer.finish(nil)
        }
    }

    func fileKey(_ state: ObjectUploadState) throws -> String {
        guard let path = RelativePath.validated(state.meta.fileName) else { throw UploadError.corrupt("the state names no safe path") }
        return layout.file(state.meta.uploadId, path: path)
    }

    static func meta(id: String, _ upload: NewUpload) -> UploadMeta {
        UploadMeta(
            formatVersion: UploadMeta.currentFormatVersion, protocolName: upload.protocolName, uploadId: id, fileName: upload.path.text,
            size: upload.size, chunkSize: upload.chunkSize)
    }

    // MARK: Keys under a prefix

    /// Every object under `prefix`, a page (1,000) at a time.
    func objects(under prefix: String) async throws -> [S3ObjectSummary] {
        var objects: [S3ObjectSummary] = []
        var token: String?
        repeat {
            let page = try await client.perform({ client.requests.listObjects(prefix: prefix, continuationToken: token) })
            objects += page.objects
            token = page.nextContinuationToken
        } while token != nil
        return objects
    }

    /// Deletes every object under `prefix` (that `including` takes): one listing and one
    /// `DeleteObjects` per 1,000 keys.
    func deleteAll(under prefix: String, including: (String) -> Bool = { _ in true }) async throws {
        let keys = try await objects(under: prefix).map(\.key).filter(including)
        for start in stride(from: 0, to: keys.count, by: 1000) {
            let batch = Array(keys[start..<min(start + 1000, keys.count)])
            try await client.perform({ client.requests.deleteObjects(keys: batch) })
        }
    }

    /// The chunks of upload `id` recorded apart (a chunked upload of several), by number.
    func receivedChunkNumbers(_ id: String) async throws -> ChunkRanges {
        let prefix = layout.receivedPrefix(id)
        return ChunkRanges(numbers: try await objects(under: prefix).compactMap { ObjectChunkRecord.chunk(ofKey: $0.key, under: prefix) })
    }

    /// The records of the chunks of upload `id` recorded apart, from one listing (each record is
    /// all in its key). A chunk recorded twice (sent again) is what its newest record says.
    func receivedRecords(_ id: String, meta: UploadMeta) async throws -> [ObjectChunkRecord] {
        let prefix = layout.receivedPrefix(id)
        var newest: [Int: (record: ObjectChunkRecord, at: Date)] = [:]
        for object in try await objects(under: prefix) {
            guard let record = ObjectChunkRecord(key: object.key, under: prefix, meta: meta) else {
                throw UploadError.corrupt("\(object.key) is not a chunk record")
            }
            let at = object.lastModified ?? .distantPast
            if let seen = newest[record.chunk], seen.at > at { continue }
            newest[record.chunk] = (record, at)
        }
        return newest.values.map(\.record).sorted { $0.chunk < $1.chunk }
    }

    // MARK: Expiry

    /// Whether an unfinished upload last changed at `lastChanged` has expired. (A state is
    /// replaced by every change, an append's claim renewals included: its age is its idleness.)
    private func isExpired(lastChanged: Date?) -> Bool {
        guard let expireAfter, let lastChanged else { return false }
        return Date().timeIntervalSince(lastChanged) > expireAfter.seconds
    }

    /// A chunked upload of several records its chunks apart, leaving its state unchanged: it is
    /// idle when its newest chunk record is too (asked only of a state that looks expired).
    private func isExpired(chunksOf id: String, recordedApart: Bool) async throws -> Bool {
        guard recordedApart else { return true }
        let newest = try await objects(under: layout.receivedPrefix(id)).compactMap(\.lastModified).max()
        return newest.map { isExpired(lastChanged: $0) } ?? true
    }

    /// Drops the unfinished uploads nobody touched for `expireAfter`, a page of states at a time:
    /// one sweep, which the receiver's upkeep runs every quarter of it (at most every minute, at
    /// least every second). Each receiver sweeps; a drop is the same whoever does it, and a
    /// repeated one finds nothing. An offset upload whose every byte is acknowledged is completed
    /// instead (its completion failed and no request came back to finish it), and
    /// `sweepFinished` hears of it if this sweep did it.
    func expire() async {
        guard expireAfter != nil else { return }
        let finished = sweepFinished.withLock { $0 }
        var token: String?
        repeat {
            guard let page = try? await client.perform({ client.requests.listObjects(prefix: layout.uploadsPrefix, continuationToken: token) })
            else { break }
            for object in page.objects where isExpired(lastChanged: object.lastModified) {
                let name = object.key.dropFirst(layout.uploadsPrefix.count)
                guard name.hasSuffix(".json") else { continue }
                // Read again: the state decides (a completed upload stays; a fresh change wins).
                guard let read = try? await readState(String(name.dropLast(".json".count))), read.0.isDueForCompletion else { continue }
                await finishDue(read, reporting: finished)
            }
            token = page.nextContinuationToken
        } while token != nil && !Task.isCancelled
    }

    /// Who hears of an upload a sweep completed (the routes' hooks: `post-finish`), set once
    /// the routes are built.
    let sweepFinished = Mutex<@Sendable (FinishedUpload) async -> Void>({ _ in })

    /// `PREFIX/upload-urls.key`: made by the first receiver of the store (`If-None-Match: *`), read
    /// by every other, so an upload URL one handed out works through all.
    func handleKey() async throws -> [UInt8] {
        let key = layout.prefix + "upload-urls.key"
        for _ in 0..<3 {
            switch try await client.perform({ client.requests.getObject(key: key) }) {
            case .found(let content):
                guard content.body.count == UploadHandles.keyLength else { throw UploadError.corrupt("\(key) is not a key of 32 bytes") }
                return Array(content.body)
            case .notFound:
                var generator = SystemRandomNumberGenerator()
                let made = (0..<UploadHandles.keyLength).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
                switch try await client.perform({ client.requests.putObject(key: key, bytes: made, condition: .onlyIfAbsent) }) {
                case .stored: return made
                // Another receiver made it first: read theirs.
                case .preconditionFailed: continue
                }
            case .preconditionFailed, .rangeNotSatisfiable:
                throw UploadError.corrupt("the store answered a plain read of \(key) with a condition")
            }
        }
        throw UploadError.corrupt("\(key) could not be read or made")
    }

    /// Offset uploads no request used for a while leave memory.
    func dropIdle() async {
        for store in offsetStores.withLock({ Array($0.values) }) { await store.dropIdle() }
    }

    /// An upload a sweep completed: what its `post-finish` says.
    /// Completes an offset upload whose every byte is acknowledged, as a request would
    /// (`ObjectOffsetUpload.finish`), and reports it when this call completed it (partial uploads
    /// aside: their final upload is the file).
    private func finishDue(_ read: (ObjectUploadState, S3ETag), reporting finished: @Sendable (FinishedUpload) async -> Void) async {
        let (state, _) = read
        guard let info = state.info else { return }
        let upload = ObjectOffsetUpload(storage: self, meta: state.meta, info: info)
        upload.version.advance(to: read)
        do {
            guard try await upload.finish(), info.role != .partial else { return }
            await finished(
                FinishedUpload(
                    protocolName: state.meta.protocolName, id: state.meta.uploadId, path: upload.path.text, size: state.meta.size,
                    metadata: info.metadataText))
        } catch {
            logger.warning("An upload whose bytes are all in could not be completed; the next sweep tries again",
                           metadata: ["upload": "\(state.meta.uploadId)", "reason": "\(error)"])
        }
    }

    // MARK: Capabilities

    func offsetUploads(protocolName: String) -> any OffsetUploadStore {
        offsetStores.withLock { stores in
            if let store = stores[protocolName] { return store }
            let store = ObjectOffsetUploads(storage: self, protocolName: protocolName)
            stores[protocolName] = store
            return store
        }
    }

    // MARK: Whole files

    /// One `PutObject` streamed through at `PREFIX/raw/NAME` (so at most the store's 5 GiB).
    func storeWhole<Body: AsyncSequence>(_ body: Body, name: String, limit: Int, declaredLength: Int?) async throws -> Int
    where Body.Element == ByteBuffer {
        // The routes checked it; checked again where it becomes a key, whoever calls.
        guard RelativePath.isValidComponent(name) else { throw UploadError.corrupt("an unsafe name reached the storage") }
        guard let length = declaredLength else { throw WholeFileFailure.lengthRequired }
        let limit = min(limit, 5 << 30)
        guard length <= limit else { throw BodyWriter.Failure.tooLarge(limit: limit) }
        let statistics = self.statistics
        let checked = CheckedBody(
            UncheckedSendableBody(body), limit: length, exactLength: true, check: nil,
            counted: { statistics.received($0) })
        do {
            _ = try await client.perform(
                client.requests.putObjectStreamed(key: layout.prefix + "raw/" + name, length: Int64(length)), streaming: checked, length: length)
        } catch {
            if let failure = checked.outcome.failure { throw failure }
            throw error
        }
        return length
    }

    // MARK: Streams of stored bytes

    /// The bytes of `keys`, one object after another, as one body: what folds staged pieces into a
    /// part, read from the store as it is sent back to it (one buffer at a time in memory).
    func concatenation(of keys: [String]) -> ConcatenatedObjects {
        ConcatenatedObjects(client: client, keys: keys)
    }
}

/// A handle's last sight of an upload's state and the version the store gave it: where a
/// compare-and-swap starts, so that a request that just read or wrote the state does not read it
/// again. A stale sight costs one refused write (412) and a read, never a wrong one.
///
/// It only moves forward (by `ObjectUploadState.revision`): requests of one instance read and
/// write one upload's state at once (a `HEAD` while an append records), and a sight read before a
/// write but arriving after it must not replace the newer one.
final class StateVersion: Sendable {
    private let seen = Mutex<(ObjectUploadState, S3ETag)?>(nil)

    init(_ sight: (ObjectUploadState, S3ETag)? = nil) {
        if let sight { advance(to: sight) }
    }

    var latest: (ObjectUploadState, S3ETag)? { seen.withLock { $0 } }

    /// Keeps `sight` unless the sight kept is newer.
    func advance(to sight: (ObjectUploadState, S3ETag)) {
        seen.withLock { kept in
            if let old = kept, old.0.created == sight.0.created, (old.0.revision ?? 0) > (sight.0.revision ?? 0) { return }
            kept = sight
        }
    }
}

/// Staged objects read one after another, then (optionally) a body: the contents of a part made of
/// a staged tail and an append's own bytes.
struct ConcatenatedObjects: AsyncSequence, Sendable {
    typealias Element = ByteBuffer
    let client: ObjectStoreClient
    let keys: [String]

    struct AsyncIterator: AsyncIteratorProtocol {
        let client: ObjectStoreClient
        var keys: ArraySlice<String>
        var current: HTTPClientResponse.Body.AsyncIterator?

        mutating func next() async throws -> ByteBuffer? {
            while true {
                if var iterator = current {
                    let buffer = try await iterator.next()
                    current = iterator
                    if let buffer { return buffer }
                    current = nil
                }
                guard let key = keys.popFirst() else { return nil }
                let response = try await client.open(client.requests.getObject(key: key))
                guard response.status == .ok else { throw UploadError.corrupt("the store answered \(response.status.code) for \(key)") }
                current = response.body.makeAsyncIterator()
            }
        }
    }

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(client: client, keys: keys[...]) }
}

/// A body made of two: the first's bytes, then the second's.
struct Chained<First: AsyncSequence & Sendable, Second: AsyncSequence & Sendable>: AsyncSequence, Sendable
where First.Element == ByteBuffer, Second.Element == ByteBuffer {
    typealias Element = ByteBuffer
    let first: First
    let second: Second

    struct AsyncIterator: AsyncIteratorProtocol {
        var first: First.AsyncIterator?
        var second: Second.AsyncIterator

        mutating func next() async throws -> ByteBuffer? {
            if var iterator = first {
                let buffer = try await iterator.next()
                first = iterator
                if let buffer { return buffer }
                first = nil
            }
            return try await second.next()
        }
    }

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(first: first.makeAsyncIterator(), second: second.makeAsyncIterator()) }
}

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

/// What must follow a body's last byte (sequence's closing boundary), run by whoever reads the
/// body to its end: like the body, by one task at a time.
struct UncheckedSendableTrailer: @unchecked Sendable {
    let run: () async throws -> Void
}

/// A request body as the protocols hand it over: read by one task at a time, as the sender's
/// connection delivers it. Sending it to the store from that same task is what makes it safe.
struct UncheckedSendableBody<Base: AsyncSequence>: AsyncSequence, @unchecked Sendable where Base.Element == ByteBuffer {
    typealias Element = ByteBuffer
    let base: Base
    init(_ base: Base) { self.base = base }
    func makeAsyncIterator() -> Base.AsyncIterator { base.makeAsyncIterator() }
}

// MARK: multipart's sources

/// multipart's sources as small objects, created only if absent: two instances preloading one
/// source at once agree on the ids the store kept.
struct ObjectMultipartSources: MultipartSourceStore {
    let client: ObjectStoreClient
    let layout: ObjectLayout

    private func key(_ sourceId: String) -> String {
        layout.source(Hex.lowercase(SHA256.hash(data: Array(sourceId.utf8))))
    }

    func preload(sourceId: String, fileCount: Int) async throws -> MultipartSourceRecord {
        if let existing = try await source(id: sourceId) { return existing }
        let record = MultipartSourceRecord(
            formatVersion: MultipartSourceRecord.currentFormatVersion, sourceId: sourceId,
            fileIds: (0..<fileCount).map { _ in UploadID.generate() })
        let bytes = Array(try JSONEncoder.objectState.encode(record))
        let key = key(sourceId)
        switch try await client.perform({ client.requests.putObject(key: key, bytes: bytes, condition: .onlyIfAbsent) }) {
        case .stored: return record
        case .preconditionFailed:
            guard let kept = try await source(id: sourceId) else { throw UploadError.corrupt("source \(sourceId.prefix(64)) vanished") }
            return kept
        }
    }

    func source(id sourceId: String) async throws -> MultipartSourceRecord? {
        let key = key(sourceId)
        switch try await client.perform({ client.requests.getObject(key: key) }) {
        case .found(let content):
            return try JSONDecoder.objectState.decode(MultipartSourceRecord.self, from: Data(content.body))
        case .notFound:
            return nil
        case .preconditionFailed, .rangeNotSatisfiable:
            throw UploadError.corrupt("the store answered a plain read of \(key) with a condition")
        }
    }

    func remove(id sourceId: String) async throws -> Bool {
        guard try await source(id: sourceId) != nil else { return false }
        let key = key(sourceId)
        try await client.perform({ client.requests.deleteObject(key: key) })
        return true
    }
}

// MARK: Settings that must hold together

extension ObjectStoreLocation {
    /// How many claim lifetimes `expireAfter` must be at least. A live append shows the store it
    /// is alive only by renewing its claim (every third of a lifetime, more often after a failed
    /// renewal): an expiry near the lifetime could drop an upload whose body is still streaming.
    public static let expiryToClaimLifetimeRatio = 4

    /// Settings that cannot hold together.
    public struct Misconfiguration: Error, CustomStringConvertible, Sendable {
        /// The least `expireAfter` the `claimLifetime` allows.
        public let minimumExpiry: Duration
        public var description: String {
            "an object store's expiry must be at least \(ObjectStoreLocation.expiryToClaimLifetimeRatio) times its claim lifetime (here at least \(minimumExpiry)), so that no upload whose append is alive ever expires"
        }
    }

    /// Throws when the settings cannot hold together: the expiry of uploads in this store (the
    /// receiver's `expireAfter`, given) not well above the `claimLifetime`
    /// (`expiryToClaimLifetimeRatio`).
    public func validate(expireAfter: Duration?) throws(Misconfiguration) {
        let minimum = claimLifetime * Self.expiryToClaimLifetimeRatio
        if let expireAfter = expiry ?? expireAfter, expireAfter < minimum { throw Misconfiguration(minimumExpiry: minimum) }
    }
}
