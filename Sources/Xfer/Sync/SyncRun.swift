import FoundationEssentials
import Glibc
import Synchronization
import XferPrimitives

/// A sync's end that is not the local directory, and what speaks to it.
enum RemoteEnd: Sendable {
    /// A backend's target (the destination of `xfer sync DIR s3://…`).
    case backend(any ObjectSyncing, BackendSteps)
    /// A source's prefix (`location`, normalized): `xfer sync s3://… DIR`.
    case listing(any ObjectListing, SourceSteps, location: String)

    func prepared(_ request: HTTPRequest, adding headers: HTTPHeaders, in job: JobContext) -> HTTPRequest {
        switch self {
        case .backend(_, let steps): return steps.prepared(request, adding: headers, in: job)
        case .listing(_, let steps, _): return steps.prepared(request, adding: headers, in: job)
        }
    }

    /// Where what xfer learns of this end's objects is kept.
    func place(target: String) -> [UInt8] {
        switch self {
        case .backend: return StateStore.place(target)
        case .listing(_, _, let location): return StateStore.place(location)
        }
    }
}

/// A sync's two ends: nil is the local directory.
struct SyncEnds: Sendable {
    var source: RemoteEnd?
    var destination: RemoteEnd?

    subscript(side: SyncSide) -> RemoteEnd? { side == .source ? source : destination }
}

/// One run of a sync, from the stage its job is at to its end: listing both
/// sides into the store, deciding every key, copying, deleting.
final class SyncRun: Sendable {
    let id: JobID
    /// The local directory.
    let root: String
    let ends: SyncEnds
    let options: TransferOptions
    let sync: SyncOptions
    let concurrency: Int
    let chunkSize: @Sendable (Int64) -> Int
    let store: StateStore
    let transport: HTTPTransport
    let lock: JobLock
    let resumed: Bool
    let engine: TransferEngine
    /// Where what is replaced or deleted is kept (`--backup-dir`).
    let backup: SyncBackup?

    /// Keys decided per transaction; the most held in memory at once.
    static let batch = 512
    /// Descriptions (HEADs) and deletes in flight at once.
    static let requestsInFlight = 64
    /// Keys described while planning (`SyncEvent.Planned.described`).
    let described = TransferByteCounter()
    /// Objects (or files) kept under the backup by this run.
    let backedUp = TransferByteCounter()
    /// Local checksums read for the batch being decided, cached with it.
    let checksumsRead = LocalChecksum.Pending([])

    init(
        id: JobID, root: String, ends: SyncEnds, options: TransferOptions, sync: SyncOptions, concurrency: Int,
        chunkSize: @escaping @Sendable (Int64) -> Int, store: StateStore, transport: HTTPTransport, lock: JobLock, resumed: Bool,
        engine: TransferEngine, backup: SyncBackup? = nil
    ) {
        self.id = id
        self.root = root
        self.ends = ends
        self.options = options
        self.sync = sync
        self.concurrency = concurrency
        self.chunkSize = chunkSize
        self.store = store
        self.transport = transport
        self.lock = lock
        self.resumed = resumed
        self.engine = engine
        self.backup = backup
    }

    var jobContext: JobContext {
        get throws(XferError) { try job }
    }

    private var job: JobContext {
        get throws(XferError) {
            guard let record = try store.job(id) else { throw .transferFailed("the state of sync \(id) vanished") }
            return record.context(files: JobFiles([]), credentials: options.credentials, namedFile: nil)
        }
    }

    private func place(_ end: RemoteEnd) throws(XferError) -> [UInt8] { end.place(target: try job.target) }

    func run(events: AsyncStream<SyncEvent>.Continuation) async -> Result<SyncReport, XferError> {
        do {
            var stage = try store.syncStage(id) ?? .listingSource
            let planResumed = resumed && stage >= .copying
            if stage < .deciding {
                // Both sides at once: a walk of the directory costs its disk, a listing
                // its round trips; each side marks itself listed, so a killed listing
                // goes on with the side that was not.
                async let source: Result<Void, XferError> = list(.source, events)
                async let destination: Result<Void, XferError> = list(.destination, events)
                let (listedSource, listedDestination) = await (source, destination)
                try listedSource.get()
                try listedDestination.get()
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
                // directory, a mistyped prefix): said before anything is copied.
                try checkDeleteLimit(tally.deletes, copying: tally.copies)
            } else {
                tally = try store.syncValue(id, "tally").flatMap(Self.decodeTally) ?? SyncTally()
            }
            events.yield(.planned(.init(job: id, tally: tally, resumed: planResumed, described: described.value)))

            var transfer: JobReport?
            if stage == .copying {
                if try store.counters(id).fileCount > 0 {
                    backedUp.add(try await backUpReplacements())
                    let result = await copy(events)
                    try await learnCompletedCopies()
                    switch result {
                    case .success(let report): transfer = report
                    case .failure(let error):
                        await end(error)
                        return .failure(error)
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
            var report = SyncReport(job: id, tally: tally, transfer: transfer, deleted: deleted, dryRun: false)
            report.backedUp = backedUp.value
            return .success(report)
        } catch {
            await end(error)
            return .failure(error)
        }
    }

    // MARK: Listing

    /// Lists one side into the store unless an earlier run did.
    private func list(_ side: SyncSide, _ events: AsyncStream<SyncEvent>.Continuation) async -> Result<Void, XferError> {
        let flag = side == .source ? "listed.source" : "listed.destination"
        do throws(XferError) {
            if try store.syncValue(id, flag) != nil { return .success(()) }
            if let end = ends[side] { try await listRemote(end, into: side, events) } else { try await walkLocal(into: side, events) }
            try store.setSyncValues(id, [(flag, [1])])
            return .success(())
        } catch {
            return .failure(error)
        }
    }

    /// Walks the directory (or reads the manifest) into the store, 512 files a transaction.
    private func walkLocal(into side: SyncSide, _ events: AsyncStream<SyncEvent>.Continuation) async throws(XferError) {
        var batch: [SyncEntry] = []
        var listed = 0
        var unreadable: [String] = []
        var unreadableCount = 0
        let entries: any Sequence<FileTreeEntry>
        if side == .source, let list = sync.filesFrom {
            entries = try FileManifest(path: list, root: root, selection: sync.selection)
        } else {
            entries = try FileTree(roots: [root], selection: sync.selection)
        }
        for entry in entries {
            if Task.isCancelled { throw .interrupted }
            switch entry {
            case .file(let file):
                guard sync.shard?.contains(file.relativePath) ?? true else { continue }
                // A pull's own partial files are not the directory's.
                if side == .destination, file.relativePath.hasSuffix(PartialFile.suffix) { continue }
                let identity = file.identity
                batch.append(
                    SyncEntry(
                        key: file.relativePath, size: identity.size, time: identity.modificationTimeNanoseconds, inode: identity.inode,
                        device: identity.device))
            case .failed(let path, _, _, let reason):
                // An unreadable directory hides what it holds: deleting what the other
                // side has there would lose data. Deletes are refused (`failOnUnreadableSource`).
                unreadableCount += 1
                if unreadable.count < 16 { unreadable.append("\(path): \(reason)") }
            case .skipped:
                continue
            }
            if batch.count == Self.batch {
                listed += batch.count
                try store.putSyncEntries(id, side: side, batch, cursor: nil)
                batch.removeAll(keepingCapacity: true)
                events.yield(.listing(.init(sourceKeys: side == .source ? listed : 0, destinationKeys: side == .destination ? listed : 0)))
            }
        }
        listed += batch.count
        try store.putSyncEntries(id, side: side, batch, cursor: nil)
        try store.setSyncValues(id, [
            ("sourceErrors", Array(unreadable.joined(separator: "\n").utf8)), ("sourceErrorCount", Array(String(unreadableCount).utf8)),
        ])
        events.yield(.listing(.init(sourceKeys: side == .source ? listed : 0, destinationKeys: side == .destination ? listed : 0)))
    }

    /// Lists the remote side into the store, a page a transaction with the
    /// cursor that follows it: a killed listing goes on from its last page.
    /// A re-run that knows keys there lists it as key ranges at once
    /// (`SyncKeyRanges`); a first sync, or an end that cannot list from
    /// after a key, a page after the other.
    private func listRemote(_ end: RemoteEnd, into side: SyncSide, _ events: AsyncStream<SyncEvent>.Continuation) async throws(XferError) {
        let job = try job
        let name = side == .source ? "source" : "destination"
        let listed = TransferByteCounter()
        let keyed = KeyedListing(end)
        guard let keyed, let ranges = try keyRanges(of: end, named: name) else {
            let whole = ListedRange(cursorName: "cursor.\(name)", start: nil, end: nil)
            return try await list(whole, of: end, keyed: nil, into: side, counting: listed, events, job: job)
        }
        // A sliding window: each range listed starts the next one.
        let failure: XferError? = await withTaskGroup(of: XferError?.self) { group in
            func listing(_ index: Int) -> @Sendable () async -> XferError? {
                let range = ListedRange(cursorName: "cursor.\(name).\(index)", start: ranges.start(of: index), end: ranges.end(of: index))
                return {
                    do throws(XferError) {
                        try await self.list(range, of: end, keyed: keyed, into: side, counting: listed, events, job: job)
                        return nil
                    } catch {
                        return error
                    }
                }
            }
            var next = min(Self.rangesInFlight, ranges.count)
            for index in 0..<next { group.addTask(operation: listing(index)) }
            var failure: XferError?
            while let outcome = await group.next() {
                if failure == nil, let outcome {
                    failure = outcome
                    group.cancelAll()
                }
                if failure == nil, next < ranges.count {
                    group.addTask(operation: listing(next))
                    next += 1
                }
            }
            return failure
        }
        if let failure { throw failure }
    }

    /// Key ranges listed at once, at most: each holds a page in memory.
    static let rangesInFlight = 16

    /// The ranges a side is listed as: those a killed run stored, else on a
    /// re-run split at the keys known at its place, stored before any is
    /// listed (a resumed listing lists the same ones); nil: a page after the
    /// other (nothing known there, or a killed run began so).
    private func keyRanges(of end: RemoteEnd, named name: String) throws(XferError) -> SyncKeyRanges? {
        let stateName = "ranges.\(name)"
        if let stored = try store.syncValue(id, stateName) {
            guard let ranges = SyncKeyRanges(decoding: stored) else {
                throw .stateUnavailable("the key ranges of sync \(id)'s \(name) listing are unreadable")
            }
            return ranges
        }
        guard try store.syncValue(id, "cursor.\(name)") == nil, let ranges = try store.syncKeyRanges(place: try place(end)) else {
            return nil
        }
        try store.setSyncValues(id, [(stateName, ranges.encoded)])
        return ranges
    }

    /// A part of a side's listing with its own cursor in the sync's state
    /// (absent: not begun; empty: listed; else the continuation token).
    private struct ListedRange: Sendable {
        var cursorName: String
        /// Listed from after this key; nil: from the start.
        var start: String?
        /// Its last key; nil: to the end.
        var end: String?
    }

    /// Lists `range` into the store, a page a transaction with its cursor; a
    /// page that goes past the range's end ends it, the rest of that page left
    /// to the next range.
    private func list(
        _ range: ListedRange, of end: RemoteEnd, keyed: KeyedListing?, into side: SyncSide, counting listed: TransferByteCounter,
        _ events: AsyncStream<SyncEvent>.Continuation, job: JobContext
    ) async throws(XferError) {
        var cursor: String?
        if let stored = try store.syncValue(id, range.cursorName) {
            if stored.isEmpty { return }  // listed to its end
            cursor = String(decoding: stored, as: UTF8.self)
        }
        var pages = 0
        repeat {
            if Task.isCancelled { throw .interrupted }
            let start: PageStart
            if cursor == nil, let key = range.start, let keyed { start = .after(key: key, keyed) } else { start = .continuing(cursor) }
            let page = try await remotePage(end, from: start, job: job)
            let (inRange, ended) = SyncKeyRanges.cut(page.entries, endingAt: range.end) { $0.key }
            let entries = inRange.filter {
                sync.selection.takesKey($0.key) && (sync.shard?.contains($0.key) ?? true)
            }
            let next = ended ? nil : page.next
            try store.putSyncEntries(id, side: side, entries, cursor: (range.cursorName, next))
            listed.add(entries.count)
            events.yield(.listing(.init(sourceKeys: side == .source ? listed.value : 0, destinationKeys: side == .destination ? listed.value : 0)))
            pages += 1
            guard pages < 10_000_000 else { throw .transferFailed("the listing never ends") }
            cursor = next
        } while cursor != nil
    }

    /// A remote end's listing from after a key (`KeyRangeSyncing`,
    /// `KeyRangeListing`), resolved once a listing: nil when it has none.
    private enum KeyedListing: Sendable {
        case backend(any KeyRangeSyncing)
        case listing(any KeyRangeListing)

        init?(_ end: RemoteEnd) {
            switch end {
            case .backend(let backend, _):
                guard let keyed = backend as? any KeyRangeSyncing else { return nil }
                self = .backend(keyed)
            case .listing(let listing, _, _):
                guard let keyed = listing as? any KeyRangeListing else { return nil }
                self = .listing(keyed)
            }
        }
    }

    /// Where a page starts: after a continuation token (nil: the first page), or after a key.
    private enum PageStart {
        case continuing(String?)
        case after(key: String, KeyedListing)
    }

    private func remotePage(_ end: RemoteEnd, from start: PageStart, job: JobContext) async throws(XferError) -> (
        entries: [SyncEntry], next: String?
    ) {
        switch end {
        case .backend(let backend, _):
            let page: StoredObjectPage = try await send("list \(job.target)", via: end, in: job) { () throws(BackendError) in
                switch start {
                case .continuing(let cursor): return try backend.listObjects(after: cursor, in: job)
                case .after(let key, .backend(let keyed)): return try keyed.listObjects(startingAfter: key, in: job)
                case .after(_, .listing): preconditionFailure("a key listing resolved from another end")
                }
            }
            return (
                page.objects.map {
                    SyncEntry(key: $0.relativePath, size: $0.size, time: $0.lastModifiedNanoseconds ?? 0, version: $0.version)
                }, page.next
            )
        case .listing(let listing, _, let location):
            let page: ObjectListingPage = try await send("list \(location)", via: end, in: job) { () throws(BackendError) in
                switch start {
                case .continuing(let cursor): return try listing.listObjects(under: location, after: cursor, in: job)
                case .after(let key, .listing(let keyed)): return try keyed.listObjects(under: location, startingAfter: key, in: job)
                case .after(_, .backend): preconditionFailure("a key listing resolved from another end")
                }
            }
            var entries: [SyncEntry] = []
            for listed in page.objects {
                // A key no file can be at is not this sync's (see `safeRelativePath`).
                guard TransferEngine.safeRelativePath(listed.relativePath) != nil else { continue }
                entries.append(
                    SyncEntry(
                        key: listed.relativePath, size: listed.object.size, time: listed.object.lastModifiedNanoseconds ?? 0,
                        version: listed.object.validator.flatMap(Self.version), location: listed.object.location))
            }
            return (entries, page.next)
        }
    }

    /// An ETag validator's value, unquoted (what a sync compares and keeps).
    static func version(_ validator: RemoteObject.Validator) -> String? {
        guard case .etag(let tag) = validator else { return nil }
        return tag.trimming { $0 == "\"" }
    }

    // MARK: Deciding

    /// Merges the two listings in key order, a batch at a time, and records
    /// what each key needs: the copies as the job's files, the deletes.
    /// Deciding again after a kill decides the same and records nothing twice.
    private func decide() async throws(XferError) -> SyncTally {
        let job = try job
        var tally = SyncTally()
        var merge = SyncMerge(store: store, job: id, batch: Self.batch)
        var next = try store.counters(id).fileCount
        while true {
            if Task.isCancelled { throw .interrupted }
            let pairs = try merge.next()
            if pairs.isEmpty { break }
            let detailed = try await details(of: pairs, job: job)
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
                    files.append((next, try copyRecord(source, over: pair.destination, sides: sides)))
                    next += 1
                case .delete:
                    if let destination = pair.destination { deletes.append(destination) }
                case .skip, .keep:
                    continue
                }
            }
            try LocalChecksum.flush(checksumsRead, to: store)
            if !files.isEmpty { try await store.commit(.putFiles(job: id, files: files)) }
            if !deletes.isEmpty { try store.putSyncDeletes(id, deletes) }
        }
        return tally
    }

    /// The job's file that copies `source` over `destination` (nil: nothing
    /// there when listed), with the condition its write must meet.
    private func copyRecord(
        _ source: SyncEntry, over destination: SyncEntry?, sides: (source: SyncDecider.Side?, destination: SyncDecider.Side?)
    ) throws(XferError) -> FileRecord {
        let key = source.key
        var handles = ServerHandles()
        // The time the copy is synced as: the file's, or the one kept with the object, else its store's.
        let time = sides.source?.modificationTime ?? source.time
        switch (ends.source, ends.destination) {
        case (nil, _):
            // New: only if nothing is there by then. A replacement: only of the
            // version listed (a store that lists none gets no condition).
            if let destination {
                if let version = destination.version { handles.set(SyncHandles.condition, version) }
            } else {
                handles.set(SyncHandles.condition, "*")
            }
            // Every object keeps its CRC-32C: a later --checksum run compares it without
            // asking or reading the file again (read here at ISA-L's speed, and cached;
            // the copy reads the file right after, from the page cache).
            var crc = sides.source?.crc32c
            if crc == nil { crc = try LocalChecksum.crc32c(of: FileRecord.join(root, key), store: store, pending: checksumsRead) }
            if let crc { handles.set(SyncHandles.crc32c, String(crc, radix: 16)) }
            let identity = FileIdentity(size: source.size, modificationTimeNanoseconds: source.time, inode: source.inode, device: source.device)
            return FileRecord(
                path: FileRecord.join(root, key), relativePath: key, root: 0, identity: identity, chunkSize: chunkSize(source.size),
                handles: handles)
        case (_?, nil):
            var object = RemoteObject(
                location: source.location ?? "", size: source.size, validator: source.version.map { .etag("\"\($0)\"") })
            object.lastModifiedNanoseconds = source.time
            handles = DownloadHandles.handles(of: object, listed: true)
            // The local file is replaced only if it is still what the walk saw.
            handles.set(SyncHandles.condition.name, destination.map(Self.localCondition) ?? "*")
            handles.set(SyncHandles.modificationTime.name, String(time))
            let identity = FileIdentity(size: source.size, modificationTimeNanoseconds: 0, inode: 0, device: 0)
            return FileRecord(
                path: FileRecord.join(root, key), relativePath: key, root: 0, identity: identity, chunkSize: chunkSize(source.size),
                handles: handles)
        case (_?, _?):
            if let destination {
                if let version = destination.version { handles.set(SyncHandles.condition, version) }
            } else {
                handles.set(SyncHandles.condition, "*")
            }
            handles.set(SyncHandles.sourceLocation, source.location ?? "")
            if let version = source.version { handles.set(SyncHandles.sourceVersion, version) }
            handles.set(SyncHandles.modificationTime, String(time))
            if let crc = sides.source?.crc32c { handles.set(SyncHandles.crc32c, String(crc, radix: 16)) }
            let identity = FileIdentity(size: source.size, modificationTimeNanoseconds: time, inode: 0, device: 0)
            return FileRecord(
                path: source.location ?? key, relativePath: key, root: 0, identity: identity, chunkSize: chunkSize(source.size),
                handles: handles)
        }
    }

    /// Where a key of `target` is, as reports show it (a target's ` at ENDPOINT` left out).
    static func url(of key: String, in target: String) -> String {
        let base = target.lastRange(of: " at ").map { String(target[..<$0.lowerBound]) } ?? target
        return (base.hasSuffix("/") ? base : base + "/") + key
    }

    /// A local file as a condition: size, modification time and inode.
    static func localCondition(_ entry: SyncEntry) -> String { "\(entry.size).\(entry.time).\(entry.inode)" }

    /// What the decider needs of each pair: sizes always; where the sizes
    /// are equal, the times: a local file's own, a remote object's kept with
    /// it (from what xfer knows of its version, else a description) — or,
    /// with --checksum, both checksums.
    private func details(
        of pairs: [SyncMerge.Pair], job: JobContext
    ) async throws(XferError) -> [(source: SyncDecider.Side?, destination: SyncDecider.Side?)] {
        var sources: [SyncDecider.Side?] = pairs.map { $0.source.map { side(of: $0, remote: ends.source != nil) } }
        var destinations: [SyncDecider.Side?] = pairs.map { $0.destination.map { side(of: $0, remote: ends.destination != nil) } }
        let needing = pairs.indices.filter { SyncDecider.needsDetail(source: sources[$0], destination: destinations[$0], mode: sync.mode) }
        if !needing.isEmpty {
            try await detail(.source, of: pairs, needing, into: &sources, job: job)
            try await detail(.destination, of: pairs, needing, into: &destinations, job: job)
            if sync.mode == .checksum {
                // An object with a CRC64NVME and no CRC-32C (S3's default since 2025): the
                // local file's CRC64NVME, read in the same pass as its CRC-32C and cached with it.
                for index in needing where sources[index]?.crc32c == nil || destinations[index]?.crc32c == nil {
                    for (which, local, other) in [(SyncSide.source, sources[index], destinations[index]), (.destination, destinations[index], sources[index])]
                    where ends[which] == nil && other?.crc64nvme != nil && local?.crc64nvme == nil {
                        let entry = (which == .source ? pairs[index].source : pairs[index].destination)!
                        let crc64 = try LocalChecksum.crc64nvme(of: FileRecord.join(root, entry.key), store: store, pending: checksumsRead)
                        if which == .source { sources[index]?.crc64nvme = crc64 } else { destinations[index]?.crc64nvme = crc64 }
                    }
                }
                // Without a CRC-32C on one side: the MD5s (a local file's read, an object's ETag when it is one).
                var learned: [SyncSide: [(key: String, object: KnownObject)]] = [:]
                for index in needing
                where (sources[index]?.crc32c == nil || destinations[index]?.crc32c == nil)
                    && (sources[index]?.crc64nvme == nil || destinations[index]?.crc64nvme == nil)
                {
                    try fillMD5(&sources[index], entry: pairs[index].source!, local: ends.source == nil)
                    try fillMD5(&destinations[index], entry: pairs[index].destination!, local: ends.destination == nil)
                    // The same MD5: the same bytes, so an object without a CRC-32C has the other side's.
                    guard let md5 = sources[index]?.md5, md5 == destinations[index]?.md5 else { continue }
                    for (which, side, other, entry) in [
                        (SyncSide.source, sources[index], destinations[index], pairs[index].source!),
                        (SyncSide.destination, destinations[index], sources[index], pairs[index].destination!),
                    ] where ends[which] != nil && side?.crc32c == nil {
                        guard let crc = other?.crc32c, let version = entry.version else { continue }
                        learned[which, default: []].append(
                            (entry.key, KnownObject(version: version, size: entry.size, modificationTime: side?.modificationTime, crc32c: crc)))
                    }
                }
                for (which, objects) in learned {
                    if let end = ends[which] { try store.putKnownObjects(place: try place(end), objects) }
                }
            }
        }
        // A remote source is compared as the time it is synced as: the one kept with it, else its store's.
        if ends.source != nil {
            for index in sources.indices {
                guard var side = sources[index], side.modificationTime == nil else { continue }
                side.modificationTime = side.storedAt
                sources[index] = side
            }
        }
        return Array(zip(sources, destinations)).map { ($0, $1) }
    }

    private func side(of entry: SyncEntry, remote: Bool) -> SyncDecider.Side {
        remote ? SyncDecider.Side(size: entry.size, storedAt: entry.time) : SyncDecider.Side(size: entry.size, modificationTime: entry.time)
    }

    /// One side's detail for the pairs `needing` it: a local file's CRC-32C
    /// (with --checksum); a remote object's kept time and checksum, from what
    /// xfer knows of its version, else described (many at once) and remembered.
    private func detail(
        _ which: SyncSide, of pairs: [SyncMerge.Pair], _ needing: [Int], into sides: inout [SyncDecider.Side?], job: JobContext
    ) async throws(XferError) {
        func entry(_ index: Int) -> SyncEntry { (which == .source ? pairs[index].source : pairs[index].destination)! }
        guard let end = ends[which] else {
            if sync.mode == .checksum {
                for index in needing {
                    sides[index]?.crc32c = try LocalChecksum.crc32c(of: FileRecord.join(root, entry(index).key), store: store, pending: checksumsRead)
                }
            }
            return
        }
        let place = try place(end)
        var unknown: [Int] = []
        for index in needing {
            let listed = entry(index)
            if let version = listed.version, let known = try store.knownObject(place: place, key: listed.key), known.version == version,
                known.size == listed.size, sync.mode != .checksum || known.hasChecksum
            {
                sides[index]?.modificationTime = known.modificationTime
                sides[index]?.crc32c = known.crc32c
                sides[index]?.crc64nvme = known.crc64nvme
            } else {
                unknown.append(index)
            }
        }
        var learned: [(key: String, object: KnownObject)] = []
        let objects = try await describe(unknown.map(entry), at: end, job: job)
        described.add(unknown.count)
        for (index, object) in zip(unknown, objects) {
            // Gone since it was listed: compared as listed (every write is conditional anyway).
            guard let object else { continue }
            sides[index]?.modificationTime = object.modificationTimeNanoseconds
            sides[index]?.crc32c = object.crc32c
            sides[index]?.crc64nvme = object.crc64nvme
            // Remembered even without a time or checksum kept with it: the next
            // run then decides from the listing alone, as this one did.
            if let version = object.version {
                learned.append(
                    (object.relativePath,
                     KnownObject(
                        version: version, size: object.size, modificationTime: object.modificationTimeNanoseconds,
                        crc32c: object.crc32c, crc64nvme: object.crc64nvme)))
            }
        }
        try store.putKnownObjects(place: place, learned)
    }

    /// A side's MD5: a local file's, read once; an object's ETag when it is one.
    private func fillMD5(_ side: inout SyncDecider.Side?, entry: SyncEntry, local: Bool) throws(XferError) {
        guard side != nil, side?.md5 == nil else { return }
        side?.md5 = local ? LocalChecksum.md5(of: FileRecord.join(root, entry.key)) : entry.version.flatMap(Self.md5(ofETag:))
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

    /// Describes `entries` of a remote end, `requestsInFlight` at a time (a
    /// sliding window: each answer starts the next request); nil for a key
    /// that holds nothing now.
    private func describe(_ entries: [SyncEntry], at end: RemoteEnd, job: JobContext) async throws(XferError) -> [StoredObject?] {
        // Answers as plain fields, not an array of `Result<StoredObject?, XferError>?`: the
        // release build of that form trapped (SIGILL) on every plan that described a key.
        typealias Answer = (index: Int, object: StoredObject?, failure: XferError?)
        let (objects, failure) = await withTaskGroup(of: Answer.self) { group in
            func describing(_ index: Int) -> @Sendable () async -> Answer {
                let entry = entries[index]
                return {
                    do throws(XferError) {
                        return (index, try await self.describe(entry, at: end, job: job), nil)
                    } catch {
                        return (index, nil, error)
                    }
                }
            }
            var objects = [StoredObject?](repeating: nil, count: entries.count)
            // The first failure in the entries' order, once every answer is in.
            var failure: (index: Int, error: XferError)?
            var next = min(entries.count, Self.requestsInFlight)
            for index in 0..<next { group.addTask(operation: describing(index)) }
            while let answer = await group.next() {
                objects[answer.index] = answer.object
                if let error = answer.failure, answer.index < failure?.index ?? Int.max { failure = (answer.index, error) }
                if next < entries.count {
                    group.addTask(operation: describing(next))
                    next += 1
                }
            }
            return (objects, failure?.error)
        }
        if let failure { throw failure }
        return objects
    }

    private func describe(_ entry: SyncEntry, at end: RemoteEnd, job: JobContext) async throws(XferError) -> StoredObject? {
        switch end {
        case .backend(let backend, _):
            return try await send("look up \(entry.key)", via: end, in: job) { () throws(BackendError) in
                try backend.describeObject(at: entry.key, in: job)
            }
        case .listing(let listing, _, _):
            guard let location = entry.location else { return nil }
            let object: RemoteObject
            do {
                object = try await send("look up \(entry.key)", via: end, in: job) { () throws(BackendError) in
                    try listing.describeObject(at: location, in: job)
                }
            } catch where error.kind == .transferFailed && error.message.contains("no such object") {
                return nil
            }
            var crc: UInt32?
            var crc64: UInt64?
            for digest in object.digests {
                if case .crc32c(let value) = digest { crc = value }
                if case .crc64nvme(let value) = digest { crc64 = value }
            }
            return StoredObject(
                relativePath: entry.key, size: object.size, version: object.validator.flatMap(Self.version),
                lastModifiedNanoseconds: object.lastModifiedNanoseconds, modificationTimeNanoseconds: object.modificationTimeNanoseconds,
                crc32c: crc, crc64nvme: crc64)
        }
    }

    // MARK: Copying

    /// The job's files pushed as `push` sends them, pulled as `pull`
    /// fetches them, or copied inside the store; the job stays unfinished
    /// (its deletes follow).
    private func copy(_ events: AsyncStream<SyncEvent>.Continuation) async -> Result<JobReport, XferError> {
        guard let record = try? store.job(id) else { return .failure(.transferFailed("the state of sync \(id) vanished")) }
        if case .listing? = ends.source, case .backend(let backend, _)? = ends.destination {
            guard let copying = backend as? any ObjectCopying else {
                return .failure(.transferFailed("the '\(backend.name)' backend cannot copy objects server-side"))
            }
            return await StoreCopier(run: self, backend: copying, events: events).run()
        }
        // A push's failed write may be this sync's own, whose answer was lost and
        // whose retry then found the object it had made (a 412): its failures are
        // held until that is settled, so none is reported that was not one.
        let settles = ends.source == nil
        let held = HeldFailures(holding: settles)
        var result = await runCopies(record, resumed: resumed, events, held: held)
        if case .failure(let error) = result, error != .interrupted, settles, (try? await settleOwnWrites()) == true {
            // Settled: the second run reports what still fails, itself.
            result = await runCopies((try? store.job(id)) ?? record, resumed: true, events, held: HeldFailures(holding: false))
        } else {
            for event in held.release() { events.yield(.transfer(event)) }
        }
        return result
    }

    private func runCopies(
        _ record: JobRecord, resumed: Bool, _ events: AsyncStream<SyncEvent>.Continuation, held: HeldFailures
    ) async -> Result<JobReport, XferError> {
        let direction: JobRunner.Direction
        switch (ends.source, ends.destination) {
        case (.listing(_, let steps, _)?, nil): direction = .pull(steps, replacesExisting: true)
        case (nil, .backend(_, let steps)?): direction = .push(steps, notes: [])
        default: return .failure(.transferFailed("this sync has no way to copy (this is a bug)"))
        }
        let runner = JobRunner(
            record: record, direction: direction, options: options, concurrency: concurrency, chunkSize: chunkSize, store: store,
            transport: transport, lock: lock, resumed: resumed, completesJob: false)
        let (stream, continuation) = AsyncStream.makeStream(of: TransferEvent.self, bufferingPolicy: .bufferingNewest(4096))
        let forward = Task {
            for await event in stream where !held.holds(event) { events.yield(.transfer(event)) }
        }
        let result = await runner.run(events: continuation)
        continuation.finish()
        await forward.value
        return result
    }

    /// Files that failed although the object at their key carries their
    /// write's token: written by this sync, answer lost. Marked complete with
    /// the object's version. True when any was.
    private func settleOwnWrites() async throws(XferError) -> Bool {
        guard ends.source == nil, let end = ends.destination, case .backend(let backend, _) = end else { return false }
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
                    object = try await send("look up \(record.relativePath)", via: end, in: job) { () throws(BackendError) in
                        try backend.describeObject(at: record.relativePath, in: job)
                    }
                } catch {
                    continue
                }
                guard let object, object.writeToken == token, object.size == record.size else { continue }
                var done = record
                done.failure = nil
                done.url = Self.url(of: record.relativePath, in: job.target)
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

    /// Remembers what each copied object is (its version, and the time and
    /// checksum it is synced as), so the next sync knows it from the listing alone.
    private func learnCompletedCopies() async throws(XferError) {
        let sourcePlace = try ends.source.map { end throws(XferError) in try place(end) }
        let destinationPlace = try ends.destination.map { end throws(XferError) in try place(end) }
        var start = 0
        while true {
            let page = try store.files(job: id, from: start, limit: 1024)
            guard let last = page.last else { break }
            start = last.index + 1
            var atSource: [(key: String, object: KnownObject)] = []
            var atDestination: [(key: String, object: KnownObject)] = []
            for (_, record) in page where record.isComplete {
                let crc = record.handles[SyncHandles.crc32c].flatMap { UInt32($0, radix: 16) }
                let time = record.handles[SyncHandles.modificationTime].flatMap { Int64($0) }
                if destinationPlace != nil, let version = record.handles[SyncHandles.version] {
                    // Pushed: the file's time; copied: the source's, as kept.
                    let kept = ends.source == nil ? record.identity.modificationTimeNanoseconds : time
                    atDestination.append((record.relativePath, KnownObject(version: version, size: record.size, modificationTime: kept, crc32c: crc)))
                }
                if sourcePlace != nil, let time {
                    let version = record.handles[SyncHandles.sourceVersion]
                        ?? DownloadHandles.decodeValidator(record.handles[DownloadHandles.validator]).flatMap(Self.version)
                    if let version {
                        atSource.append((record.relativePath, KnownObject(version: version, size: record.size, modificationTime: time, crc32c: crc)))
                    }
                }
            }
            if let sourcePlace { try store.putKnownObjects(place: sourcePlace, atSource) }
            if let destinationPlace { try store.putKnownObjects(place: destinationPlace, atDestination) }
        }
    }

    // MARK: Deleting

    /// Deletes what the plan says, once every copy succeeded, each only if it
    /// is still what was listed; refuses all of it past the limit.
    private func deleteExtraneous(_ events: AsyncStream<SyncEvent>.Continuation) async throws(XferError) -> Int {
        let count = try store.countSyncDeletes(id)
        guard count > 0 else { return 0 }
        try checkDeleteLimit(count, copying: 0)
        events.yield(.deleting(.init(count: count)))
        let job = try job
        let place = try ends.destination.map { end throws(XferError) in try self.place(end) } ?? []
        var deleted = 0
        var changed: [String] = []
        while true {
            if Task.isCancelled { throw .interrupted }
            let entries = try store.syncDeletes(id, limit: Self.requestsInFlight)
            if entries.isEmpty { break }
            let outcomes = await withTaskGroup(of: (SyncEntry, Result<DeletionOutcome, XferError>).self) { group in
                for entry in entries {
                    group.addTask {
                        do throws(XferError) {
                            return (entry, .success(try await self.delete(entry, job: job)))
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

    private func delete(_ entry: SyncEntry, job: JobContext) async throws(XferError) -> DeletionOutcome {
        guard let end = ends.destination, case .backend(let backend, _) = end else {
            let kept: String?
            if case .directory(let path) = backup { kept = FileRecord.join(path, entry.key) } else { kept = nil }
            let outcome = try LocalDeletion.delete(FileRecord.join(root, entry.key), ifStill: entry, movingTo: kept)
            if kept != nil, outcome == .deleted { backedUp.add(1) }
            return outcome
        }
        switch try await backUpBeforeDeleting(entry, job: job) {
        case .changed: return .changed
        case .copied: if backup != nil { backedUp.add(1) }
        case .absent: if backup != nil { return .deleted }
        }
        let object = StoredObject(relativePath: entry.key, size: entry.size, version: entry.version)
        return try await send("delete \(entry.key)", via: end, in: job) { () throws(BackendError) in
            try backend.deleteObject(object, in: job)
        }
    }

    /// What the walk could not read was not synced, and nothing was deleted
    /// after it (an unreadable directory hides what it holds): the rest was
    /// copied, and the sync fails saying so.
    private func failOnUnreadableSource() throws(XferError) {
        guard let errors = try store.syncValue(id, "sourceErrors"), !errors.isEmpty else { return }
        let count = try store.syncValue(id, "sourceErrorCount").flatMap { Int(String(decoding: $0, as: UTF8.self)) } ?? 1
        let first = String(decoding: errors, as: UTF8.self).split(separator: "\n").first.map(String.init) ?? ""
        let deletes = try store.countSyncDeletes(id)
        let side = ends.source == nil ? "source" : "destination directory"
        throw .transferFailed(
            "\(count) path\(count == 1 ? "" : "s") of the \(side) could not be read (\(first)); the rest was synced"
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
    func send<T: Sendable>(
        _ operation: String, via end: RemoteEnd, in job: JobContext, _ exchange: @escaping @Sendable () throws(BackendError) -> Exchange<T>
    ) async throws(XferError) -> T {
        do {
            return try await RetryLoop.run(operation, policy: options.retry) { _, _, _ in } _: { () async throws -> T in
                let made = try exchange()
                return try made.interpret(try await transport.send(end.prepared(made.request, adding: options.extraHeaders, in: job)))
            }
        } catch {
            switch error {
            case .failed(let failure): throw failure
            case .uploadUnknown(let message), .outOfSync(let message), .objectChanged(let message), .conflict(let message):
                throw .transferFailed(message)
            }
        }
    }

    /// `send` for the store copier, whose conflicts are a file's, not the sync's.
    func sendKeepingConflicts<T: Sendable>(
        _ operation: String, via end: RemoteEnd, in job: JobContext, _ exchange: @escaping @Sendable () throws(BackendError) -> Exchange<T>
    ) async throws(RetryLoop.Failure) -> T {
        try await RetryLoop.run(operation, policy: options.retry) { _, _, _ in } _: { () async throws -> T in
            let made = try exchange()
            return try made.interpret(try await transport.send(end.prepared(made.request, adding: options.extraHeaders, in: job)))
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

/// The failure events of a sync's copies held back until its own writes are
/// settled (`SyncRun.copy`): at most `limit` (memory bounded whatever the
/// number of files); past it, failures are reported as they come.
final class HeldFailures: Sendable {
    private let held: Mutex<[TransferEvent]?>
    static let limit = 4096

    init(holding: Bool) { held = Mutex(holding ? [] : nil) }

    /// Takes `event` if it is one to hold (a file's failure, the copies' failure) and there is room.
    func holds(_ event: TransferEvent) -> Bool {
        switch event {
        case .fileFailed, .failed:
            return held.withLock { events in
                guard events != nil, events!.count < Self.limit else { return false }
                events!.append(event)
                return true
            }
        default:
            return false
        }
    }

    /// What was held, in order; nothing is held after.
    func release() -> [TransferEvent] {
        held.withLock { events in
            defer { events = nil }
            return events ?? []
        }
    }
}

/// A pull's delete: the local file goes only if it is still the one the
/// walk saw (size, time, inode), so a file written since is kept.
enum LocalDeletion {
    /// Why a sync's pull must not put its file at `path`: the condition
    /// planned (`*`: nothing there; else `SyncRun.localCondition`) no longer
    /// holds. Nil when it holds.
    static func conflict(at path: String, expecting condition: String) -> String? {
        var info = stat()
        let exists = lstat(path, &info) == 0
        if condition == "*" {
            return exists ? "\(path) appeared since the sync listed the directory; it was not replaced (run the sync again with --restart to decide it anew)" : nil
        }
        let identity = exists ? LocalFile.identity(of: info) : nil
        let now = identity.map { "\($0.size).\($0.modificationTimeNanoseconds).\($0.inode)" }
        return now == condition ? nil : "\(path) changed since the sync listed the directory; it was not replaced (run the sync again with --restart to decide it anew)"
    }

    /// Deletes the file at `path` if it is still `entry`; with `backup`, moves it there instead.
    static func delete(_ path: String, ifStill entry: SyncEntry, movingTo backup: String? = nil) throws(XferError) -> DeletionOutcome {
        var info = stat()
        guard lstat(path, &info) == 0 else { return errno == ENOENT ? .deleted : .changed }
        let identity = LocalFile.identity(of: info)
        guard info.st_mode & S_IFMT == S_IFREG, identity.size == entry.size, identity.modificationTimeNanoseconds == entry.time,
            identity.inode == entry.inode
        else { return .changed }
        if let backup {
            try LocalBackup.move(path, to: backup)
            return .deleted
        }
        guard unlink(path) == 0 || errno == ENOENT else {
            throw .transferFailed("cannot delete \(path): \(String(cString: strerror(errno)))")
        }
        return .deleted
    }
}
