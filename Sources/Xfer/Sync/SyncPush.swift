import FoundationEssentials
import Glibc
import XferPrimitives

extension TransferEngine {
    /// The id a sync of `directory` to `target` through `backend` gets: the
    /// same sync always maps to the same job, which is how a re-run resumes.
    public static func syncJobID(
        directory: String, target: String, backend: String, dryRun: Bool = false, shard: SyncShard? = nil, filesFrom: String? = nil
    ) -> JobID {
        var kind = "sync\0push\0\(backend)"
        if dryRun { kind += "\0dry-run" }
        if let shard { kind += "\0shard \(shard)" }
        if let filesFrom { kind += "\0files-from \(filesFrom)" }
        return jobID(backend: kind, target: target, files: [directory])
    }

    /// Starts making `target` hold what `directory` holds, or resumes the
    /// unfinished sync of the same directory, backend and target.
    ///
    /// The sync is a job whose plan is kept in the state store as it is
    /// made (see `SyncStage`):
    /// 1. the directory is walked and the destination listed, page by page,
    ///    both into the store, sorted there (memory does not grow with the
    ///    number of keys);
    /// 2. the two listings are merged in key order and each key decided
    ///    (`SyncDecider`); the files to copy become the job's files, each
    ///    with the condition its write must meet (`WriteCondition`: nothing
    ///    at the key for a new one, the listed version for a replacement);
    /// 3. the files are pushed as `push` sends them (resumable per chunk);
    /// 4. with `deletes`, once every copy succeeded and only then, what the
    ///    destination holds and the directory does not is deleted, each only
    ///    if it is still the version listed.
    ///
    /// - Throws: `.invalidInput` for a directory that is not one, a target
    ///   the backend does not take, or bad options.
    public func sync(
        _ directory: String, to target: String, using backend: any ObjectSyncing, options: TransferOptions = TransferOptions(),
        sync: SyncOptions = SyncOptions()
    ) async throws(XferError) -> SyncJob {
        guard let store = store as? StateStore else { throw .invalidInput("sync needs the LMDB state store") }
        let root = URL(fileURLWithPath: directory).standardizedFileURL.path
        var isDirectory = false
        guard FileManager.default.fileExists(atPath: root, isDirectory: &isDirectory), isDirectory else {
            throw .invalidInput("\(directory): not a directory (sync takes a directory and a destination)")
        }
        let normalized: String
        do { normalized = try backend.target(normalizing: target) } catch { throw .invalidInput(error.description) }
        try options.validate()
        if let maximum = sync.maximumDeletes, maximum < 0 { throw .invalidInput("the most deletes allowed cannot be negative") }
        let traits = backend.traits
        let requestedChunkSize = options.chunkSize ?? traits.defaultChunkSize
        try TransferOptions.check(chunkSize: requestedChunkSize)
        let concurrency = options.concurrency ?? traits.defaultConcurrency
        try TransferOptions.check(concurrency: concurrency)
        // Checked before anything is stored: a typo in a pattern is exit 2.
        _ = try FileTree(roots: [root], selection: sync.selection)

        var sync = sync
        if let list = sync.filesFrom {
            guard !sync.deletes else {
                throw .invalidInput("--files-from names what to copy, not what the destination should hold: it cannot go with --delete")
            }
            let path = URL(fileURLWithPath: list).standardizedFileURL.path
            guard FileManager.default.isReadableFile(atPath: path) else { throw .invalidInput("\(list): cannot be read") }
            sync.filesFrom = path
        }
        let id = Self.syncJobID(
            directory: root, target: normalized, backend: backend.name, dryRun: sync.dryRun, shard: sync.shard, filesFrom: sync.filesFrom)
        let lock = try JobLock(stateDirectory: stateDirectory, job: id)
        let settings = SyncSettings(sync).encoded
        var record: JobRecord
        var resumed = false
        // An unfinished plan goes on; so does a failed one with copies left (a
        // conflict needs --restart). One that failed after its copies (a delete
        // refused, the source partly unreadable) is planned anew: its copies are
        // on the destination, where the new listing finds them.
        if let existing = try store.job(id), !sync.restart, !sync.dryRun, existing.phase != .completed,
            try store.syncValue(id, "settings") == settings, let stage = try store.syncStage(id),
            existing.phase == .unfinished || stage < .deleting
        {
            record = existing
            record.concurrency = concurrency
            record.phase = .unfinished
            resumed = true
            try await store.commit(.putJob(record))
            try store.setSyncValues(id, [("maximumDeletes", Array((sync.maximumDeletes.map(String.init) ?? "").utf8))])
        } else {
            if let existing = try store.job(id) {
                // A plan made with other settings, or one the user asked to forget:
                // what the server holds of its unfinished copies goes with it.
                if existing.phase != .completed, existing.backend == backend.name {
                    _ = try await dropOnServer(existing, using: backend, options: options)
                }
                try await store.commit(.deleteJob(id))
            }
            let now = Date()
            record = JobRecord(
                id: id, backend: backend.name, target: normalized, createdAt: now, updatedAt: now, concurrency: concurrency,
                rootCount: 1, firstRoot: root, rules: sync.selection.rules)
            record.handles = backend.inventedHandles(for: record.context(files: JobFiles([]), credentials: options.credentials))
            record.handles.set(SyncHandles.sync, "push")
            try await store.commit(.createJob(record, roots: [root]))
            try store.setSyncValues(id, [
                ("settings", settings), ("stage", [SyncStage.listingSource.rawValue]),
                ("maximumDeletes", Array((sync.maximumDeletes.map(String.init) ?? "").utf8)),
            ])
            try store.sync()
        }

        let named = options.chunkSize
        let chunkSize: @Sendable (Int64) -> Int = { size in
            var requested = requestedChunkSize
            if named == nil, let large = traits.largeFileChunkSize, size >= 8 * Int64(large) { requested = large }
            return max(1, backend.chunkSize(for: size, requested: requested))
        }
        let run = SyncPush(
            id: id, root: root, backend: backend, options: options, sync: sync, concurrency: concurrency, chunkSize: chunkSize,
            store: store, transport: transport, lock: lock, resumed: resumed, engine: self)
        return SyncJob(id: id, lock: lock) { events in await run.run(events: events) }
    }
}

extension TransferEngine {
    /// Continues the unfinished sync `id` with `backend` (one whose `name`
    /// it was made with), as it was asked for: the same directory, target,
    /// decisions, selection and deletes.
    ///
    /// - Throws: `.unknownJob`; `.invalidInput` for a job that is no sync or is complete.
    public func resumeSync(
        _ id: JobID, using backend: any ObjectSyncing, options: TransferOptions = TransferOptions()
    ) async throws(XferError) -> SyncJob {
        guard let record = try store.job(id), let store = store as? StateStore else { throw .unknownJob(id.rawValue) }
        guard record.isSync else { throw .invalidInput("job \(id) is not a sync") }
        guard record.phase != .completed else { throw .invalidInput("job \(id) is already complete; nothing to resume") }
        guard backend.name == record.backend else {
            throw .invalidInput("job \(id) syncs with the '\(record.backend)' backend, not '\(backend.name)'")
        }
        guard let stored = try store.syncValue(id, "settings"), var sync = SyncSettings.decode(stored) else {
            throw .invalidInput("job \(id) holds no plan to resume; run the sync again")
        }
        sync.maximumDeletes = try store.syncValue(id, "maximumDeletes").flatMap { Int(String(decoding: $0, as: UTF8.self)) }
        var options = options
        if options.concurrency == nil { options.concurrency = record.concurrency }
        let job = try await self.sync(record.firstRoot, to: record.target, using: backend, options: options, sync: sync)
        guard job.id == id else {
            job.cancel()
            throw .invalidInput("job \(id) cannot be rebuilt from its record; run the sync again")
        }
        return job
    }
}

/// What a plan was made with: a re-run with other settings plans anew
/// rather than carry out a plan the user no longer asks for.
struct SyncSettings {
    let options: SyncOptions

    init(_ options: SyncOptions) { self.options = options }

    static func decode(_ bytes: [UInt8]) -> SyncOptions? {
        var reader = RecordReader(bytes)
        guard reader.byte() == 1, let mode = reader.string().flatMap(SyncMode.init(rawValue:)), let deletes = reader.bool(),
            let includes = reader.strings(), let excludes = reader.strings(), let follow = reader.bool(),
            let shard = reader.optionalString(), let filesFrom = reader.optionalString(), reader.isAtEnd,
            let selection = try? FileSelection(includes: includes, excludes: excludes, followSymlinks: follow)
        else { return nil }
        var options = SyncOptions()
        options.mode = mode
        options.deletes = deletes
        options.selection = selection
        options.shard = shard.flatMap { try? SyncShard(parsing: $0) }
        options.filesFrom = filesFrom
        return options
    }

    var encoded: [UInt8] {
        var writer = RecordWriter(capacity: 64)
        writer.byte(1)
        writer.string(options.mode.rawValue)
        writer.bool(options.deletes)
        writer.strings(options.selection.includes.map(\.description))
        writer.strings(options.selection.excludes.map(\.description))
        writer.bool(options.selection.followSymlinks)
        writer.optionalString(options.shard?.description)
        writer.optionalString(options.filesFrom)
        return writer.bytes
    }
}

extension FileSelection {
    /// Whether a key of a listing (a path below the destination) takes
    /// part: its directories entered and the key taken, as a walk of the
    /// same tree would. A key an exclude names is neither copied nor deleted.
    func takesKey(_ key: String) -> Bool {
        var index = key.startIndex
        while let slash = key[index...].firstIndex(of: "/") {
            if !enters(String(key[..<slash])) { return false }
            index = key.index(after: slash)
        }
        return takes(key)
    }
}

/// One run of a sync from a directory to an `ObjectSyncing` backend, from
/// the stage its job is at to its end.
final class SyncPush: Sendable {
    let id: JobID
    let root: String
    let backend: any ObjectSyncing
    let steps: BackendSteps
    let options: TransferOptions
    let sync: SyncOptions
    let concurrency: Int
    let chunkSize: @Sendable (Int64) -> Int
    let store: StateStore
    let transport: HTTPTransport
    let lock: JobLock
    let resumed: Bool
    let engine: TransferEngine

    /// Keys decided per transaction; the most held in memory at once.
    static let batch = 512
    /// Descriptions (HEADs) and deletes in flight at once.
    static let requestsInFlight = 32
    /// Keys described while planning (`SyncEvent.Planned.described`).
    let described = TransferByteCounter()

    init(
        id: JobID, root: String, backend: any ObjectSyncing, options: TransferOptions, sync: SyncOptions, concurrency: Int,
        chunkSize: @escaping @Sendable (Int64) -> Int, store: StateStore, transport: HTTPTransport, lock: JobLock, resumed: Bool,
        engine: TransferEngine
    ) {
        self.id = id
        self.root = root
        self.backend = backend
        steps = BackendSteps(backend)
        self.options = options
        self.sync = sync
        self.concurrency = concurrency
        self.chunkSize = chunkSize
        self.store = store
        self.transport = transport
        self.lock = lock
        self.resumed = resumed
        self.engine = engine
    }

    private var job: JobContext {
        get throws(XferError) {
            guard let record = try store.job(id) else { throw .transferFailed("the state of sync \(id) vanished") }
            return record.context(files: JobFiles([]), credentials: options.credentials, namedFile: nil)
        }
    }

    private var knowledgePlace: [UInt8] {
        get throws(XferError) { StateStore.place(try job.target) }
    }

    func run(events: AsyncStream<SyncEvent>.Continuation) async -> Result<SyncReport, XferError> {
        do {
            var stage = try store.syncStage(id) ?? .listingSource
            let planResumed = resumed && stage >= .copying
            if stage == .listingSource {
                try await listSource(events)
                stage = .listingDestination
                try store.setSyncStage(id, stage)
            }
            if stage == .listingDestination {
                try await listDestination(events)
                stage = .deciding
                try store.setSyncStage(id, stage)
            }
            var tally: SyncTally
            if stage == .deciding {
                tally = try await decide()
                if sync.dryRun {
                    events.yield(.planned(.init(job: id, tally: tally, resumed: false, described: described.value)))
                    try await store.commit(.deleteJob(id))
                    lock.removeFile()
                    return .success(SyncReport(job: id, tally: tally, transfer: nil, deleted: 0, dryRun: true))
                }
                try store.setSyncValues(id, [("tally", Self.encode(tally)), ("stage", [SyncStage.copying.rawValue])])
                stage = .copying
                // Too many deletes usually means the wrong source (an empty or unmounted
                // directory): said before anything is copied.
                try checkDeleteLimit(tally.deletes, copying: tally.copies)
            } else {
                tally = try store.syncValue(id, "tally").flatMap(Self.decodeTally) ?? SyncTally()
            }
            events.yield(.planned(.init(job: id, tally: tally, resumed: planResumed, described: described.value)))

            var transfer: JobReport?
            if stage == .copying {
                if try store.counters(id).fileCount > 0 {
                    let result = await copy(events)
                    try await learnCompletedCopies()
                    switch result {
                    case .success(let report): transfer = report
                    case .failure(let error): return .failure(error)
                    }
                }
                stage = .deleting
                try store.setSyncStage(id, stage)
            }
            try failOnUnreadableSource()
            var deleted = 0
            if stage == .deleting {
                deleted = try await deleteExtraneous(events)
                stage = .done
                try store.setSyncStage(id, stage)
            }
            try await complete()
            return .success(SyncReport(job: id, tally: tally, transfer: transfer, deleted: deleted, dryRun: false))
        } catch {
            await end(error)
            return .failure(error)
        }
    }

    // MARK: Listing

    /// Walks the directory into the store, 512 files a transaction.
    private func listSource(_ events: AsyncStream<SyncEvent>.Continuation) async throws(XferError) {
        var batch: [SyncEntry] = []
        var listed = 0
        var unreadable: [String] = []
        var unreadableCount = 0
        let entries: any Sequence<FileTreeEntry>
        if let list = sync.filesFrom {
            entries = try FileManifest(path: list, root: root, selection: sync.selection)
        } else {
            entries = try FileTree(roots: [root], selection: sync.selection)
        }
        for entry in entries {
            if Task.isCancelled { throw .interrupted }
            switch entry {
            case .file(let file):
                guard sync.shard?.contains(file.relativePath) ?? true else { continue }
                let identity = file.identity
                batch.append(
                    SyncEntry(
                        key: file.relativePath, size: identity.size, time: identity.modificationTimeNanoseconds, inode: identity.inode,
                        device: identity.device))
            case .failed(let path, _, _, let reason):
                // An unreadable directory hides what it holds: deleting what the
                // destination has there would lose data. Deletes are refused.
                unreadableCount += 1
                if unreadable.count < 16 { unreadable.append("\(path): \(reason)") }
            case .skipped:
                continue
            }
            if batch.count == Self.batch {
                listed += batch.count
                try store.putSyncEntries(id, side: .source, batch, cursor: nil)
                batch.removeAll(keepingCapacity: true)
                events.yield(.listing(.init(sourceKeys: listed, destinationKeys: 0)))
            }
        }
        listed += batch.count
        try store.putSyncEntries(id, side: .source, batch, cursor: nil)
        try store.setSyncValues(id, [
            ("sourceErrors", Array(unreadable.joined(separator: "\n").utf8)), ("sourceErrorCount", Array(String(unreadableCount).utf8)),
        ])
        events.yield(.listing(.init(sourceKeys: listed, destinationKeys: 0)))
    }

    /// Lists the destination into the store, a page a transaction with the
    /// cursor that follows it: a killed listing goes on from its last page.
    private func listDestination(_ events: AsyncStream<SyncEvent>.Continuation) async throws(XferError) {
        let job = try job
        var cursor: String?
        if let stored = try store.syncValue(id, "cursor.destination") {
            if stored.isEmpty { return }  // listed to its end
            cursor = String(decoding: stored, as: UTF8.self)
        }
        var listed = 0
        var pages = 0
        repeat {
            let after = cursor
            let page: StoredObjectPage = try await send("list \(job.target)", in: job) { () throws(BackendError) in
                try self.backend.listObjects(after: after, in: job)
            }
            let entries = page.objects.filter {
                sync.selection.takesKey($0.relativePath) && (sync.shard?.contains($0.relativePath) ?? true)
            }.map {
                SyncEntry(key: $0.relativePath, size: $0.size, time: $0.lastModifiedNanoseconds ?? 0, version: $0.version)
            }
            try store.putSyncEntries(id, side: .destination, entries, cursor: ("cursor.destination", page.next))
            listed += entries.count
            events.yield(.listing(.init(sourceKeys: 0, destinationKeys: listed)))
            pages += 1
            guard pages < 10_000_000 else { throw .transferFailed("the listing of \(job.target) never ends") }
            cursor = page.next
        } while cursor != nil
    }

    // MARK: Deciding

    /// Merges the two listings in key order, a batch at a time, and records
    /// what each key needs: the copies as the job's files, the deletes.
    /// Deciding again after a kill decides the same and records nothing twice.
    private func decide() async throws(XferError) -> SyncTally {
        let job = try job
        let place = StateStore.place(job.target)
        var tally = SyncTally()
        var merge = SyncMerge(store: store, job: id, batch: Self.batch)
        var next = try store.counters(id).fileCount
        while true {
            if Task.isCancelled { throw .interrupted }
            let pairs = try merge.next()
            if pairs.isEmpty { break }
            let detailed = try await details(of: pairs, place: place, job: job)
            var files: [(index: Int, record: FileRecord)] = []
            var deletes: [SyncEntry] = []
            for (pair, sides) in zip(pairs, detailed) {
                // A manifest names what to copy: the destination's other keys are not this sync's.
                if sync.filesFrom != nil, pair.source == nil { continue }
                let key = pair.source?.key ?? pair.destination!.key
                let decision = SyncDecider.decide(
                    key: key, source: sides.source, destination: sides.destination, mode: sync.mode, deletes: sync.deletes)
                tally.count(decision)
                sync.decisions?(decision)
                switch decision.action {
                case .copy:
                    guard let source = pair.source, try store.fileIndex(job: id, root: 0, relativePath: key) == nil else { continue }
                    var handles = ServerHandles()
                    // New: only if nothing is there by then. A replacement: only of the
                    // version listed (a store that lists none gets no condition).
                    if let destination = pair.destination {
                        if let version = destination.version { handles.set(SyncHandles.condition, version) }
                    } else {
                        handles.set(SyncHandles.condition, "*")
                    }
                    // With --checksum every object keeps its CRC-32C: the next run compares
                    // it without asking (read here at ISA-L's speed; the copy reads the file anyway).
                    var crc = sides.source?.crc32c
                    if crc == nil, sync.mode == .checksum { crc = try LocalChecksum.crc32c(of: FileRecord.join(root, key), store: store) }
                    if let crc { handles.set(SyncHandles.crc32c, String(crc, radix: 16)) }
                    let identity = FileIdentity(
                        size: source.size, modificationTimeNanoseconds: source.time, inode: source.inode, device: source.device)
                    files.append(
                        (next,
                         FileRecord(
                            path: FileRecord.join(root, key), relativePath: key, root: 0, identity: identity,
                            chunkSize: chunkSize(source.size), handles: handles)))
                    next += 1
                case .delete:
                    if let destination = pair.destination { deletes.append(destination) }
                case .skip, .keep:
                    continue
                }
            }
            if !files.isEmpty { try await store.commit(.putFiles(job: id, files: files)) }
            if !deletes.isEmpty { try store.putSyncDeletes(id, deletes) }
        }
        return tally
    }

    /// What the decider needs of each pair: sizes always; where the sizes
    /// are equal, the times kept with the destination (from what xfer
    /// knows of its version, else a description) or both checksums.
    private func details(
        of pairs: [SyncMerge.Pair], place: [UInt8], job: JobContext
    ) async throws(XferError) -> [(source: SyncDecider.Side?, destination: SyncDecider.Side?)] {
        var result: [(source: SyncDecider.Side?, destination: SyncDecider.Side?)] = pairs.map { pair in
            (pair.source.map { SyncDecider.Side(size: $0.size, modificationTime: $0.time) },
             pair.destination.map { SyncDecider.Side(size: $0.size, storedAt: $0.time) })
        }
        var unknown: [Int] = []
        var learned: [(key: String, object: KnownObject)] = []
        for (index, pair) in pairs.enumerated()
        where SyncDecider.needsDetail(source: result[index].source, destination: result[index].destination, mode: sync.mode) {
            let destination = pair.destination!
            if let version = destination.version, let known = try store.knownObject(place: place, key: destination.key),
                known.version == version, known.size == destination.size,
                sync.mode != .checksum || known.crc32c != nil
            {
                result[index].destination?.modificationTime = known.modificationTime
                result[index].destination?.crc32c = known.crc32c
            } else {
                unknown.append(index)
            }
            if sync.mode == .checksum, let source = pair.source {
                result[index].source?.crc32c = try LocalChecksum.crc32c(of: FileRecord.join(root, source.key), store: store)
            }
        }
        var comparedByMD5: [Int] = []
        // Keys xfer knows nothing of (another tool wrote them, or the state is
        // new): described, many at once, and remembered.
        var start = 0
        while start < unknown.count {
            let slice = Array(unknown[start..<min(unknown.count, start + Self.requestsInFlight)])
            start += slice.count
            let objects = try await describe(slice.map { pairs[$0].destination!.key }, job: job)
            described.add(slice.count)
            for (index, object) in zip(slice, objects) {
                guard let object else {
                    // Gone since it was listed: compared as listed; its write is conditional anyway.
                    continue
                }
                result[index].destination?.modificationTime = object.modificationTimeNanoseconds
                result[index].destination?.crc32c = object.crc32c
                if sync.mode == .checksum, object.crc32c == nil, let md5 = object.version.flatMap(Self.md5(ofETag:)),
                    let source = pairs[index].source
                {
                    result[index].destination?.md5 = md5
                    result[index].source?.md5 = LocalChecksum.md5(of: FileRecord.join(root, source.key))
                    comparedByMD5.append(index)
                }
                // Remembered even without a time or checksum kept with it: the next
                // run then decides from the listing alone, as this one did.
                if let version = object.version {
                    learned.append(
                        (object.relativePath,
                         KnownObject(
                            version: version, size: object.size, modificationTime: object.modificationTimeNanoseconds,
                            crc32c: object.crc32c)))
                }
            }
        }
        // An object whose MD5 is the file's holds the file's bytes: its CRC-32C is the file's.
        for index in comparedByMD5 {
            guard let ours = result[index].source?.md5, ours == result[index].destination?.md5,
                let crc = result[index].source?.crc32c, let position = learned.firstIndex(where: { $0.key == pairs[index].destination?.key })
            else { continue }
            learned[position].object.crc32c = crc
        }
        try store.putKnownObjects(place: place, learned)
        return result
    }

    /// The MD5 an ETag is, when it is one: 32 hexadecimal digits (an object of
    /// several parts has `-N`). Under a key service's encryption an ETag is
    /// not the MD5, and a file compared to it reads as changed: copied, never
    /// wrongly skipped.
    static func md5(ofETag etag: String) -> [UInt8]? {
        let bare = etag.trimming { $0 == "\"" }
        guard bare.utf8.count == 32, let bytes = Hex.bytes(bare) else { return nil }
        return bytes
    }

    /// Describes `keys` concurrently; nil for a key that holds nothing now.
    private func describe(_ keys: [String], job: JobContext) async throws(XferError) -> [StoredObject?] {
        let results = await withTaskGroup(of: (Int, Result<StoredObject?, XferError>).self) { group in
            for (index, key) in keys.enumerated() {
                group.addTask {
                    do throws(XferError) {
                        let object: StoredObject? = try await self.send("look up \(key)", in: job) { () throws(BackendError) in
                            try self.backend.describeObject(at: key, in: job)
                        }
                        return (index, .success(object))
                    } catch {
                        return (index, .failure(error))
                    }
                }
            }
            var results = [Result<StoredObject?, XferError>?](repeating: nil, count: keys.count)
            for await (index, result) in group { results[index] = result }
            return results
        }
        return try results.map { result throws(XferError) in try result!.get() }
    }

    // MARK: Copying

    /// The job's files pushed as `push` sends them; the job stays unfinished
    /// (its deletes follow).
    private func copy(_ events: AsyncStream<SyncEvent>.Continuation) async -> Result<JobReport, XferError> {
        guard let record = try? store.job(id) else { return .failure(.transferFailed("the state of sync \(id) vanished")) }
        let runner = JobRunner(
            record: record, direction: .push(steps, notes: []), options: options, concurrency: concurrency, chunkSize: chunkSize,
            store: store, transport: transport, lock: lock, resumed: resumed, completesJob: false)
        let (stream, continuation) = AsyncStream.makeStream(of: TransferEvent.self, bufferingPolicy: .bufferingNewest(4096))
        let forward = Task {
            for await event in stream { events.yield(.transfer(event)) }
        }
        var result = await runner.run(events: continuation)
        continuation.finish()
        await forward.value
        if case .failure(let error) = result, error != .interrupted {
            // A write whose condition failed may be this sync's own, whose answer
            // was lost and whose retry then found the object it had made.
            if (try? await settleOwnWrites()) == true {
                let again = JobRunner(
                    record: (try? store.job(id)) ?? record, direction: .push(steps, notes: []), options: options, concurrency: concurrency,
                    chunkSize: chunkSize, store: store, transport: transport, lock: lock, resumed: true, completesJob: false)
                let (stream, continuation) = AsyncStream.makeStream(of: TransferEvent.self, bufferingPolicy: .bufferingNewest(4096))
                let forward = Task { for await event in stream { events.yield(.transfer(event)) } }
                result = await again.run(events: continuation)
                continuation.finish()
                await forward.value
            }
        }
        return result
    }

    /// Files that failed although the object at their key carries their
    /// write's token: written by this sync, answer lost. Marked complete with
    /// the object's version. True when any was.
    private func settleOwnWrites() async throws(XferError) -> Bool {
        let job = try job
        var settled = false
        while true {
            let failed = try store.failedFiles(job: id, limit: 256)
            var changes: [(index: Int, record: FileRecord)] = []
            for (index, record) in failed where record.handles[SyncHandles.condition] != nil {
                let view = record.context(index: index, plan: ChunkPlan(fileSize: record.size, chunkSize: max(1, record.chunkSize)))
                guard let token = view.writeToken else { continue }
                let object: StoredObject?
                do {
                    object = try await send("look up \(record.relativePath)", in: job) { () throws(BackendError) in
                        try self.backend.describeObject(at: record.relativePath, in: job)
                    }
                } catch {
                    continue
                }
                guard let object, object.writeToken == token, object.size == record.size else { continue }
                var done = record
                done.failure = nil
                done.url = job.target + "/" + record.relativePath
                if let version = object.version { done.handles.set(SyncHandles.version, version) }
                changes.append((index, done))
            }
            guard !changes.isEmpty else { break }
            try await store.commit(.putFiles(job: id, files: changes))
            settled = true
            if failed.count < 256 { break }
        }
        return settled
    }

    /// Remembers what each copied object is (its version, the time and
    /// checksum of the file it was made from), so the next sync knows it
    /// from the listing alone.
    private func learnCompletedCopies() async throws(XferError) {
        let place = try knowledgePlace
        var start = 0
        while true {
            let page = try store.files(job: id, from: start, limit: 1024)
            guard let last = page.last else { break }
            start = last.index + 1
            let known: [(key: String, object: KnownObject)] = page.compactMap { _, record in
                guard record.isComplete, let version = record.handles[SyncHandles.version] else { return nil }
                return (
                    record.relativePath,
                    KnownObject(
                        version: version, size: record.size, modificationTime: record.identity.modificationTimeNanoseconds,
                        crc32c: record.handles[SyncHandles.crc32c].flatMap { UInt32($0, radix: 16) })
                )
            }
            try store.putKnownObjects(place: place, known)
        }
    }

    // MARK: Deleting

    /// Deletes what the plan says, once every copy succeeded; refuses all of
    /// it past the limit or after the walk could not read part of the source.
    private func deleteExtraneous(_ events: AsyncStream<SyncEvent>.Continuation) async throws(XferError) -> Int {
        let count = try store.countSyncDeletes(id)
        guard count > 0 else { return 0 }
        try checkDeleteLimit(count, copying: 0)
        events.yield(.deleting(.init(count: count)))
        let job = try job
        let place = StateStore.place(job.target)
        var deleted = 0
        var changed: [String] = []
        while true {
            if Task.isCancelled { throw .interrupted }
            let entries = try store.syncDeletes(id, limit: Self.requestsInFlight)
            if entries.isEmpty { break }
            let outcomes = await withTaskGroup(of: (SyncEntry, Result<DeletionOutcome, XferError>).self) { group in
                for entry in entries {
                    group.addTask {
                        let object = StoredObject(relativePath: entry.key, size: entry.size, version: entry.version)
                        do throws(XferError) {
                            let outcome: DeletionOutcome = try await self.send("delete \(entry.key)", in: job) { () throws(BackendError) in
                                try self.backend.deleteObject(object, in: job)
                            }
                            return (entry, .success(outcome))
                        } catch {
                            return (entry, .failure(error))
                        }
                    }
                }
                var outcomes: [(SyncEntry, Result<DeletionOutcome, XferError>)] = []
                for await outcome in group { outcomes.append(outcome) }
                return outcomes
            }
            for (entry, outcome) in outcomes {
                switch outcome {
                case .success(.deleted):
                    deleted += 1
                    try store.removeSyncDelete(id, entry, place: place)
                    events.yield(.deleted(.init(key: entry.key)))
                case .success(.changed):
                    // Written by someone else since the listing: not ours to delete.
                    changed.append(entry.key)
                    try store.removeSyncDelete(id, entry, place: place)
                case .failure(let error):
                    throw error
                }
            }
        }
        if !changed.isEmpty {
            throw .transferFailed(
                "\(changed.count) key\(changed.count == 1 ? "" : "s") changed on the destination since the sync listed "
                    + "\(changed.count == 1 ? "it" : "them") and \(changed.count == 1 ? "was" : "were") not deleted: \(changed[0])")
        }
        return deleted
    }

    /// What the walk could not read was not synced, and nothing was deleted
    /// after it (an unreadable directory hides what it holds): the rest was
    /// copied, and the sync fails saying so.
    private func failOnUnreadableSource() throws(XferError) {
        guard let errors = try store.syncValue(id, "sourceErrors"), !errors.isEmpty else { return }
        let count = try store.syncValue(id, "sourceErrorCount").flatMap { Int(String(decoding: $0, as: UTF8.self)) } ?? 1
        let first = String(decoding: errors, as: UTF8.self).split(separator: "\n").first.map(String.init) ?? ""
        let deletes = try store.countSyncDeletes(id)
        throw .transferFailed(
            "\(count) path\(count == 1 ? "" : "s") of the source could not be read (\(first)); the rest was synced"
                + (deletes > 0 ? ", and nothing was deleted" : ""))
    }

    private func checkDeleteLimit(_ count: Int, copying copies: Int) throws(XferError) {
        guard let maximum = sync.maximumDeletes, count > maximum else { return }
        throw .transferFailed(
            "the plan deletes \(count) key\(count == 1 ? "" : "s"), more than the \(maximum) allowed (--max-delete): "
                + (copies > 0 ? "nothing was copied or deleted" : "nothing was deleted"))
    }

    // MARK: Ending

    private func complete() async throws(XferError) {
        guard var record = try store.job(id) else { return }
        record.phase = .completed
        record.lastError = nil
        record.updatedAt = Date()
        try await store.commit(.putJob(record))
        try store.sync()
        let cutoff = Date().addingTimeInterval(-engine.finishedJobRetention.timeInterval)
        if let pruned = try? await store.pruneCompletedJobs(finishedBefore: cutoff) {
            for other in pruned {
                if other == id { lock.removeFile() } else { JobCatalog.removeLockFile(stateDirectory: engine.stateDirectory, job: other, store: store) }
            }
        }
    }

    /// Marks the job as it stopped: unfinished when interrupted, failed otherwise.
    private func end(_ error: XferError) async {
        guard var record = try? store.job(id) else { return }
        record.phase = error == .interrupted ? .unfinished : .failed
        record.lastError = error == .interrupted ? nil : error.description
        record.updatedAt = Date()
        try? await store.commit(.putJob(record))
    }

    // MARK: Requests

    /// Sends one request outside the scheduler (a listing page, a
    /// description, a delete), signed and retried as a job's are.
    private func send<T: Sendable>(
        _ operation: String, in job: JobContext, _ exchange: @escaping @Sendable () throws(BackendError) -> Exchange<T>
    ) async throws(XferError) -> T {
        do {
            return try await RetryLoop.run(operation, policy: options.retry) { _, _, _ in } _: { () async throws -> T in
                let made = try exchange()
                let request = steps.prepared(made.request, adding: options.extraHeaders, in: job)
                return try made.interpret(try await transport.send(request))
            }
        } catch {
            switch error {
            case .failed(let failure): throw failure
            case .uploadUnknown(let message), .outOfSync(let message), .objectChanged(let message), .conflict(let message):
                throw .transferFailed(message)
            }
        }
    }

    // MARK: Tally

    static func encode(_ tally: SyncTally) -> [UInt8] {
        var writer = RecordWriter(capacity: 40)
        writer.int(tally.copies)
        writer.int64(tally.copyBytes)
        writer.int(tally.skips)
        writer.int(tally.deletes)
        writer.int(tally.kept)
        return writer.bytes
    }

    static func decodeTally(_ bytes: [UInt8]) -> SyncTally? {
        var reader = RecordReader(bytes)
        guard let copies = reader.int(), let bytes = reader.int64(), let skips = reader.int(), let deletes = reader.int(),
            let kept = reader.int(), reader.isAtEnd
        else { return nil }
        var tally = SyncTally()
        tally.copies = copies
        tally.copyBytes = bytes
        tally.skips = skips
        tally.deletes = deletes
        tally.kept = kept
        return tally
    }
}

/// The two listings of a sync merged in key order, a batch at a time.
struct SyncMerge {
    struct Pair {
        var source: SyncEntry?
        var destination: SyncEntry?
    }

    let store: StateStore
    let job: JobID
    let batch: Int
    private var sourceAfter: [UInt8]?
    private var destinationAfter: [UInt8]?
    private var sources: [(key: [UInt8], entry: SyncEntry)] = []
    private var destinations: [(key: [UInt8], entry: SyncEntry)] = []
    private var sourceEnded = false
    private var destinationEnded = false

    init(store: StateStore, job: JobID, batch: Int) {
        self.store = store
        self.job = job
        self.batch = batch
    }

    /// The next pairs (empty at the end): each key of either side once.
    mutating func next() throws(XferError) -> [Pair] {
        var pairs: [Pair] = []
        while pairs.count < batch {
            if sources.isEmpty, !sourceEnded {
                sources = try store.syncEntries(job, side: .source, after: sourceAfter, limit: batch)
                sourceEnded = sources.count < batch
                if let last = sources.last { sourceAfter = last.key }
                sources.reverse()
            }
            if destinations.isEmpty, !destinationEnded {
                destinations = try store.syncEntries(job, side: .destination, after: destinationAfter, limit: batch)
                destinationEnded = destinations.count < batch
                if let last = destinations.last { destinationAfter = last.key }
                destinations.reverse()
            }
            switch (sources.last, destinations.last) {
            case (nil, nil):
                return pairs
            case (let source?, nil):
                pairs.append(Pair(source: source.entry))
                sources.removeLast()
            case (nil, let destination?):
                pairs.append(Pair(destination: destination.entry))
                destinations.removeLast()
            case (let source?, let destination?):
                if source.key == destination.key {
                    pairs.append(Pair(source: source.entry, destination: destination.entry))
                    sources.removeLast()
                    destinations.removeLast()
                } else if source.key.lexicographicallyPrecedes(destination.key) {
                    pairs.append(Pair(source: source.entry))
                    sources.removeLast()
                } else {
                    pairs.append(Pair(destination: destination.entry))
                    destinations.removeLast()
                }
            }
        }
        return pairs
    }
}

/// A local file's CRC-32C, read once per identity: cached in the state
/// store by device and inode with the size and times it was read at, so an
/// unchanged file is never read twice (a write changes its ctime, which a
/// `touch -m` back cannot undo).
enum LocalChecksum {
    /// The MD5 of a file's bytes, read once (not cached: only objects another
    /// tool wrote without a checksum are compared so, once each).
    static func md5(of path: String) -> [UInt8]? {
        guard let file = try? LocalFile(path: path), let digests = try? file.digests([.md5]), let hex = digests[.md5] else { return nil }
        return Hex.bytes(hex)
    }

    static func crc32c(of path: String, store: StateStore) throws(XferError) -> UInt32? {
        let file: LocalFile
        do { file = try LocalFile(path: path) } catch { return nil }
        guard let info = file.status() else { return nil }
        let identity = LocalFile.identity(of: info)
        let changeTime = Int64(info.st_ctim.tv_sec) * 1_000_000_000 + Int64(info.st_ctim.tv_nsec)
        if let cached = try store.cachedChecksum(device: identity.device, inode: identity.inode), cached.size == identity.size,
            cached.modificationTime == identity.modificationTimeNanoseconds, cached.changeTime == changeTime
        {
            return cached.crc32c
        }
        let crc: UInt32
        do { crc = try file.crc32c() } catch { return nil }
        try store.putCachedChecksums([
            (identity.device, identity.inode,
             CachedChecksum(size: identity.size, modificationTime: identity.modificationTimeNanoseconds, changeTime: changeTime, crc32c: crc))
        ])
        return crc
    }
}

/// `--files-from`: the paths a manifest names, one per line (relative to the
/// source directory; empty lines and lines starting with `#` are skipped),
/// each looked at on its own instead of walking the directory. Read a line
/// at a time: memory does not grow with the manifest.
struct FileManifest: Sequence {
    let path: String
    let root: String
    let selection: FileSelection

    init(path: String, root: String, selection: FileSelection) throws(XferError) {
        guard access(path, R_OK) == 0 else { throw .invalidInput("\(path): cannot be read") }
        self.path = path
        self.root = root
        self.selection = selection
    }

    func makeIterator() -> Iterator { Iterator(self) }

    final class Iterator: IteratorProtocol {
        private let manifest: FileManifest
        private let stream: UnsafeMutablePointer<FILE>?
        private var line: UnsafeMutablePointer<CChar>?
        private var capacity = 0

        init(_ manifest: FileManifest) {
            self.manifest = manifest
            stream = fopen(manifest.path, "re")
        }

        deinit {
            free(line)
            if let stream { fclose(stream) }
        }

        func next() -> FileTreeEntry? {
            guard let stream else { return nil }
            while true {
                let length = getline(&line, &capacity, stream)
                guard length >= 0, let line else { return nil }
                var text = String(cString: line)
                while text.hasSuffix("\n") || text.hasSuffix("\r") { text.removeLast() }
                while text.hasPrefix("./") { text.removeFirst(2) }
                if text.isEmpty || text.hasPrefix("#") { continue }
                if let entry = entry(for: text) { return entry }
            }
        }

        private func entry(for relative: String) -> FileTreeEntry? {
            let full = FileRecord.join(manifest.root, relative)
            guard TransferEngine.safeRelativePath(relative) != nil else {
                return .failed(path: full, relativePath: relative, root: 0, reason: "not a path below the directory (in --files-from)")
            }
            guard manifest.selection.takesKey(relative) else { return nil }
            var info = stat()
            guard stat(full, &info) == 0 else {
                return .failed(path: full, relativePath: relative, root: 0, reason: "\(String(cString: strerror(errno))) (named in --files-from)")
            }
            guard info.st_mode & S_IFMT == S_IFREG else {
                return .failed(path: full, relativePath: relative, root: 0, reason: "not a regular file (named in --files-from)")
            }
            return .file(FoundFile(path: full, relativePath: relative, root: 0, identity: LocalFile.identity(of: info)))
        }
    }
}
