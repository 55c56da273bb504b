import AsyncHTTPClient
import Crypto
import FoundationEssentials
import Hummingbird
import Logging
import NIOCore
import Synchronization
import XferPrimitives
import XferS3Core
import NIOHTTP1

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
    PublishedRangeReading, IdleUploadDropping, StatisticsReporting, HandleKeyKeeping
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
        composer.rangeReads = self
        if let expireAfter { composer.expiry = StorageExpiry(after: expireAfter, sweeper: self) }
        composer.upkeep = self
        composer.statistics = self
        composer.handleKeys = self
        // Chunks of at least a part's minimum go to the store as parts, with no staging; 8 MiB (the
        // AWS CLI's part size) rather than the 5 MiB minimum, because every chunk costs the store
        // its request and its record whatever its size (Docs/benchmarks.md, section 11).
        composer.preferredMinimumChunkSize = 8 << 20
    }

    /// A final upload's bytes copied from its partials' objects (`ObjectOffsetUpload.concatenate`).
    func concatenate(_ partials: [any OffsetUpload], into final: any OffsetUpload, crc: UInt32?) async throws {
        guard let final = final as? ObjectOffsetUpload else { throw UploadError.corrupt("a final upload of another storage") }
        try await final.concatenate(partials, crc: crc)
    }

    var syncRounds: Int { 0 }

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
        if condition == .onlyIfAbsent { try await markPending(state, id) }
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
        var unconfirmed: (nonce: String, completes: Bool)?
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
            if let attempt = unconfirmed, current.0.writer == attempt.nonce {
                version?.advance(to: current)
                if attempt.completes { await unmarkPending(id) }
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
            if condition == .onlyIfAbsent { try await markPending(state, id) }
            // The write that completes the upload takes its pending marker with it.
            let completes = state.completion != nil && current.0.completion == nil
            switch try await client.perform(
                { client.requests.putObject(key: key, bytes: bytes, condition: condition, contentType: "application/json") })
            {
            case .stored(let newETag):
                version?.advance(to: (state, newETag))
                if completes { await unmarkPending(id) }
                return (state, true)
            case .preconditionFailed:
                unconfirmed = (nonce, completes)
            }
        }
    }

    /// Writes upload `id`'s pending marker (`ObjectLayout.pending`) before its state object is
    /// created, when that state is unfinished: the expiry sweep finds unfinished uploads by their
    /// markers, so that it need not read the state of every completed upload the store keeps.
    private func markPending(_ state: ObjectUploadState, _ id: String) async throws {
        guard state.completion == nil, state.deletion == nil else { return }
        _ = try await client.perform({ client.requests.putObject(key: layout.pending(id), bytes: []) })
    }

    /// Removes upload `id`'s pending marker once a change completed or removed it. A removal that
    /// fails (or a crash before it) leaves the marker for a sweep, which reads the state once more
    /// and removes it then.
    func unmarkPending(_ id: String) async {
        _ = try? await client.perform({ client.requests.deleteObject(key: layout.pending(id)) })
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


    func chunkedUpload(id: String) async throws -> ObjectChunkedUpload? {
        guard let read = try await readState(id) else { return nil }
        return ObjectChunkedUpload(storage: self, meta: read.0.meta, seen: read)
    }

    func upload(id: String, creating upload: NewUpload?) async throws -> (any ChunkedUpload)? {
        guard let upload else { return try await chunkedUpload(id: id) }
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

    /// Everything of an upload whose tombstone is written, the state (unconditionally: a
    /// tombstone is never replaced) and then its pending marker last. Repeatable.
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
        // Last: while a tombstone is left, the marker brings a sweep to finish the deletion.
        try await client.perform({ client.requests.deleteObject(key: layout.pending(id)) })
    }

    func publishedFile(of upload: any ChunkedUpload, context: some RequestContext) async throws -> ResponseBody {
        try await body(ofKey: layout.file(upload.meta.uploadId, path: upload.path))
    }

    /// The store reads the range itself (a ranged `GetObject`).
    func publishedFile(of upload: any ChunkedUpload, range: ClosedRange<Int>, context: some RequestContext) async throws -> ResponseBody {
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

    /// Who hears of an upload a sweep completed (the routes' hooks: `post-finish`), set once
    /// the routes are built.
    let sweepFinished = Mutex<@Sendable (FinishedUpload) async -> Void>({ _ in })

    /// When this receiver's sweep next reads every state (`expire`): nil before its first sweep.
    let nextFullSweep = Mutex<ContinuousClock.Instant?>(nil)

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

    // MARK: Capabilities

    func offsetUploads(protocolName: String) -> any OffsetUploadStore {
        offsetStores.withLock { stores in
            if let store = stores[protocolName] { return store }
            let store = ObjectOffsetUploads(storage: self, protocolName: protocolName)
            stores[protocolName] = store
            return store
        }
    }

    // MARK: Streams of stored bytes

    /// The bytes of `keys`, one object after another, as one body: what folds staged pieces into a
    /// part, read from the store as it is sent back to it (one buffer at a time in memory).
    func concatenation(of keys: [String]) -> ConcatenatedObjects {
        ConcatenatedObjects(client: client, keys: keys)
    }
}
