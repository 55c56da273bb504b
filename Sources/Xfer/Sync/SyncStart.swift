import FoundationEssentials
import Glibc
import XferPrimitives

extension TransferEngine {
    /// The id a sync of `directory` to `target` through `backend` gets: the
    /// same sync always maps to the same job, which is how a re-run resumes.
    public static func syncJobID(
        directory: String, target: String, backend: String, dryRun: Bool = false, shard: SyncShard? = nil, filesFrom: String? = nil
    ) -> JobID {
        var kind = syncKind("push\0\(backend)", dryRun: dryRun, shard: shard)
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
        var backup: SyncBackup?
        if let named = sync.backupDirectory {
            var probe = JobRecord(
                id: JobID(rawValue: "0000000000000000"), backend: backend.name, target: normalized, createdAt: Date(), updatedAt: Date(),
                concurrency: concurrency, rootCount: 1, firstRoot: root)
            probe.handles = backend.inventedHandles(for: probe.context(files: JobFiles([]), credentials: options.credentials))
            backup = try SyncBackup.store(named, backend: backend, probe: probe.context(files: JobFiles([]), credentials: options.credentials))
            sync.backupDirectory = backup?.name
        }
        let id = Self.syncJobID(
            directory: root, target: normalized, backend: backend.name, dryRun: sync.dryRun, shard: sync.shard, filesFrom: sync.filesFrom)
        let lock = try JobLock(stateDirectory: stateDirectory, job: id)
        let resumed = try await openSyncJob(id, in: store, sync: sync, concurrency: concurrency) { existing throws(XferError) in
            // What the server holds of the forgotten plan's unfinished copies goes with it.
            if existing.backend == backend.name { _ = try await dropOnServer(existing, using: backend, options: options) }
        } make: {
            let now = Date()
            var record = JobRecord(
                id: id, backend: backend.name, target: normalized, createdAt: now, updatedAt: now, concurrency: concurrency,
                rootCount: 1, firstRoot: root, rules: sync.selection.rules)
            record.handles = backend.inventedHandles(for: record.context(files: JobFiles([]), credentials: options.credentials))
            record.handles.set(SyncHandles.sync, "push")
            return (record, [root])
        }

        let chunkSize = backend.chunkSizes(named: options.chunkSize)
        let run = SyncRun(
            id: id, root: root, ends: SyncEnds(source: nil, destination: .backend(backend, BackendSteps(backend))), options: options, sync: sync,
            concurrency: concurrency, chunkSize: chunkSize, store: store, transport: transport, lock: lock, resumed: resumed,
            engine: self, backup: backup)
        return SyncJob(id: id, lock: lock) { events in await run.run(events: events) }
    }

    /// What a sync's id is made from besides its ends: its direction, and a
    /// dry run's or a share's own job.
    static func syncKind(_ direction: String, dryRun: Bool, shard: SyncShard?) -> String {
        var kind = "sync\0" + direction
        if dryRun { kind += "\0dry-run" }
        if let shard { kind += "\0shard \(shard)" }
        return kind
    }

    /// The id a sync of the prefix `location` from `source` into `directory` gets.
    public static func syncJobID(
        location: String, source: String, directory: String, dryRun: Bool = false, shard: SyncShard? = nil
    ) -> JobID {
        jobID(backend: syncKind("pull\0\(source)", dryRun: dryRun, shard: shard), target: directory, files: [location])
    }

    /// Starts making `directory` hold what the prefix `location` of `source`
    /// holds (`xfer sync s3://BUCKET/PREFIX DIR`), or resumes the unfinished
    /// sync of the same prefix, source and directory: the same plan as a sync
    /// to a server, the other way. Each file is fetched as `pull` fetches it
    /// (into `NAME.xfer-partial`, checked, renamed into place), gets the time
    /// kept with its object (else the object's `LastModified`), and replaces
    /// a local file only if that file is still what the walk saw; deletes
    /// remove a local file only if it is still what the walk saw.
    public func sync(
        _ location: String, from source: any ObjectListing, to directory: String, options: TransferOptions = TransferOptions(),
        sync: SyncOptions = SyncOptions()
    ) async throws(XferError) -> SyncJob {
        guard let store = store as? StateStore else { throw .invalidInput("sync needs the LMDB state store") }
        guard sync.filesFrom == nil else { throw .invalidInput("--files-from names local files: it is for a sync from a directory") }
        var normalized: String
        do { normalized = try source.normalizedLocation(location) } catch { throw .invalidInput(error.description) }
        if !source.isPrefix(normalized) {
            // A sync's source is always a prefix: `s3://B/P` means the objects under `P/`.
            do { normalized = try source.normalizedLocation(Self.asPrefix(location)) } catch { throw .invalidInput(error.description) }
        }
        guard source.isPrefix(normalized) else { throw .invalidInput("\(location) names no prefix to sync from") }
        let root = URL(fileURLWithPath: directory).standardizedFileURL.path
        var isDirectory = false
        if FileManager.default.fileExists(atPath: root, isDirectory: &isDirectory) {
            guard isDirectory else { throw .invalidInput("\(directory) is a file; a sync goes into a directory") }
        } else {
            try PartialFile.makeDirectories(root)
        }
        try options.validate()
        if let maximum = sync.maximumDeletes, maximum < 0 { throw .invalidInput("the most deletes allowed cannot be negative") }
        let traits = source.traits
        let chunkSizeAsked = options.chunkSize ?? traits.defaultChunkSize
        try TransferOptions.check(chunkSize: chunkSizeAsked)
        let concurrency = options.concurrency ?? traits.defaultConcurrency
        try TransferOptions.check(concurrency: concurrency)
        _ = try FileTree(roots: [root], selection: sync.selection)
        var sync = sync
        let backup = try sync.backupDirectory.map { named throws(XferError) in
            try SyncBackup.directory(named, of: root, creating: !sync.dryRun)
        }
        sync.backupDirectory = backup?.name

        let id = Self.syncJobID(location: normalized, source: source.name, directory: root, dryRun: sync.dryRun, shard: sync.shard)
        let lock = try JobLock(stateDirectory: stateDirectory, job: id)
        let resumed = try await openSyncJob(id, in: store, sync: sync, concurrency: concurrency) { _ throws(XferError) in
            try discardPartialFiles(of: id)
        } make: {
            let now = Date()
            var record = JobRecord(
                id: id, backend: source.name, target: root, createdAt: now, updatedAt: now, concurrency: concurrency, rootCount: 1,
                firstRoot: normalized, rules: sync.selection.rules)
            record.isDownload = true
            record.isStarted = true
            record.handles.set(SyncHandles.sync, "pull")
            return (record, [normalized])
        }
        let named = options.chunkSize
        let chunkSize: @Sendable (Int64) -> Int = { _ in max(1, named ?? traits.defaultChunkSize) }
        let run = SyncRun(
            id: id, root: root, ends: SyncEnds(source: .listing(source, SourceSteps(source), location: normalized), destination: nil),
            options: options, sync: sync,
            concurrency: concurrency, chunkSize: chunkSize, store: store, transport: transport, lock: lock, resumed: resumed,
            engine: self, backup: backup)
        return SyncJob(id: id, lock: lock) { events in await run.run(events: events) }
    }

    /// `location` with a `/` at its end (before ` at ENDPOINT`, if any).
    static func asPrefix(_ location: String) -> String {
        if let at = location.lastRange(of: " at ") {
            let bare = location[..<at.lowerBound]
            return bare.hasSuffix("/") ? location : bare + "/" + location[at.lowerBound...]
        }
        return location.hasSuffix("/") ? location : location + "/"
    }

    /// The id a sync of the prefix `location` of `source` to `target` through `backend` gets.
    public static func syncJobID(
        location: String, source: String, target: String, backend: String, dryRun: Bool = false, shard: SyncShard? = nil
    ) -> JobID {
        jobID(backend: syncKind("copy\0\(source)\0\(backend)", dryRun: dryRun, shard: shard), target: target, files: [location])
    }

    /// Starts making `target` hold what the prefix `location` of `source`
    /// holds, inside one store (`xfer sync s3://A/P s3://B/Q`): the same plan,
    /// both sides listed, the copies made by the store (`ObjectCopying`: no
    /// byte passes through this machine), deletes conditional on the version
    /// listed. Or resumes the unfinished sync of the same prefixes.
    ///
    /// - Throws: `.invalidInput` when the two are not on one endpoint.
    public func sync(
        _ location: String, from source: any ObjectListing, to target: String, using backend: any ObjectCopying,
        options: TransferOptions = TransferOptions(), sync: SyncOptions = SyncOptions()
    ) async throws(XferError) -> SyncJob {
        guard let store = store as? StateStore else { throw .invalidInput("sync needs the LMDB state store") }
        guard sync.filesFrom == nil else { throw .invalidInput("--files-from names local files: it is for a sync from a directory") }
        var from: String
        do { from = try source.normalizedLocation(location) } catch { throw .invalidInput(error.description) }
        if !source.isPrefix(from) {
            do { from = try source.normalizedLocation(Self.asPrefix(location)) } catch { throw .invalidInput(error.description) }
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
        let probe = JobRecord(
            id: JobID(rawValue: "0000000000000000"), backend: backend.name, target: normalized, createdAt: Date(), updatedAt: Date(),
            concurrency: concurrency, rootCount: 1, firstRoot: from)
        var probeHandles = probe
        probeHandles.handles = backend.inventedHandles(for: probe.context(files: JobFiles([]), credentials: options.credentials))
        guard backend.canCopy(from: from, in: probeHandles.context(files: JobFiles([]), credentials: options.credentials)) else {
            throw .invalidInput("\(location) and \(target) are on different endpoints: a sync between them copies inside one store")
        }
        var sync = sync
        let backup = try sync.backupDirectory.map { named throws(XferError) in
            try SyncBackup.store(named, backend: backend, probe: probeHandles.context(files: JobFiles([]), credentials: options.credentials))
        }
        sync.backupDirectory = backup?.name

        let id = Self.syncJobID(location: from, source: source.name, target: normalized, backend: backend.name, dryRun: sync.dryRun, shard: sync.shard)
        let lock = try JobLock(stateDirectory: stateDirectory, job: id)
        let resumed = try await openSyncJob(
            id, in: store, sync: sync, concurrency: concurrency, values: [("source", Array(source.name.utf8))]
        ) { existing throws(XferError) in
            if existing.backend == backend.name { _ = try await dropOnServer(existing, using: backend, options: options) }
        } make: {
            var record = JobRecord(
                id: id, backend: backend.name, target: normalized, createdAt: Date(), updatedAt: Date(), concurrency: concurrency,
                rootCount: 1, firstRoot: from, rules: sync.selection.rules)
            record.handles = probeHandles.handles
            record.handles.set(SyncHandles.sync, "copy")
            return (record, [from])
        }
        let chunkSize = backend.chunkSizes(named: options.chunkSize)
        let run = SyncRun(
            id: id, root: "", ends: SyncEnds(source: .listing(source, SourceSteps(source), location: from), destination: .backend(backend, BackendSteps(backend))),
            options: options, sync: sync, concurrency: concurrency, chunkSize: chunkSize, store: store, transport: transport, lock: lock,
            resumed: resumed, engine: self, backup: backup)
        return SyncJob(id: id, lock: lock) { events in await run.run(events: events) }
    }

    /// Continues the unfinished sync `id` as it was asked for (the same ends,
    /// decisions, selection and deletes), with the backend and the source in
    /// `backends` and `sources` whose names it was made with.
    ///
    /// - Throws: `.unknownJob`; `.invalidInput` for a job that is no sync, is
    ///   complete, or whose backend or source is not given.
    public func resumeSync(
        _ id: JobID, backends: [any ObjectSyncing] = [], sources: [any ObjectListing] = [], options: TransferOptions = TransferOptions()
    ) async throws(XferError) -> SyncJob {
        guard let record = try store.job(id), let store = store as? StateStore else { throw .unknownJob(id.rawValue) }
        guard record.isSync else { throw .invalidInput("job \(id) is not a sync") }
        guard record.phase != .completed else { throw .invalidInput("job \(id) is already complete; nothing to resume") }
        guard let stored = try store.syncValue(id, "settings"), var sync = SyncSettings.decode(stored) else {
            throw .invalidInput("job \(id) holds no plan to resume; run the sync again")
        }
        sync.maximumDeletes = try store.syncValue(id, "maximumDeletes").flatMap { Int(String(decoding: $0, as: UTF8.self)) }
        var options = options
        if options.concurrency == nil { options.concurrency = record.concurrency }
        func backend() throws(XferError) -> any ObjectSyncing {
            guard let backend = backends.first(where: { $0.name == record.backend }) else {
                throw .invalidInput("job \(id) syncs with the '\(record.backend)' backend, which was not given")
            }
            return backend
        }
        func source(named name: String) throws(XferError) -> any ObjectListing {
            guard let source = sources.first(where: { $0.name == name }) else {
                throw .invalidInput("job \(id) syncs from the '\(name)' source, which was not given")
            }
            return source
        }
        let job: SyncJob
        switch record.handles[SyncHandles.sync] {
        case "pull":
            job = try await self.sync(record.firstRoot, from: try source(named: record.backend), to: record.target, options: options, sync: sync)
        case "copy":
            guard let copying = try backend() as? any ObjectCopying else {
                throw .invalidInput("job \(id) copies with the '\(record.backend)' backend, which cannot copy")
            }
            let name = try store.syncValue(id, "source").map { String(decoding: $0, as: UTF8.self) } ?? record.backend
            job = try await self.sync(
                record.firstRoot, from: try source(named: name), to: record.target, using: copying, options: options, sync: sync)
        default:
            job = try await self.sync(record.firstRoot, to: record.target, using: try backend(), options: options, sync: sync)
        }
        guard job.id == id else {
            job.cancel()
            throw .invalidInput("job \(id) cannot be rebuilt from its record; run the sync again")
        }
        return job
    }
}

extension TransferEngine {
    /// The one place a sync's job is found again or made anew.
    ///
    /// An unfinished plan goes on; so does a failed one with copies left (a
    /// conflict needs `restart`). One that failed after its copies (a delete
    /// refused, the source partly unreadable), a completed one, one planned
    /// with other settings, or one `restart` forgets, is dropped (`drop`:
    /// what the server or the disk holds of its unfinished copies) and
    /// `make` gives the new job's header and roots; `values` join its state.
    /// Returns whether the plan is resumed.
    func openSyncJob(
        _ id: JobID, in store: StateStore, sync: SyncOptions, concurrency: Int, values: [(String, [UInt8])] = [],
        drop: (JobRecord) async throws(XferError) -> Void, make: () -> (JobRecord, roots: [String])
    ) async throws(XferError) -> Bool {
        let settings = SyncSettings(sync).encoded
        let maximumDeletes = ("maximumDeletes", Array((sync.maximumDeletes.map(String.init) ?? "").utf8))
        if let existing = try store.job(id), !sync.restart, !sync.dryRun, existing.phase != .completed,
            try store.syncValue(id, "settings") == settings, let stage = try store.syncStage(id),
            existing.phase == .unfinished || stage < .deleting
        {
            var record = existing
            record.concurrency = concurrency
            record.phase = .unfinished
            try await store.commit(.putJob(record))
            try store.setSyncValues(id, [maximumDeletes])
            return true
        }
        if let existing = try store.job(id) {
            if existing.phase != .completed { try await drop(existing) }
            try await store.commit(.deleteJob(id))
        }
        var (record, roots) = make()
        record.concurrency = concurrency
        try await store.commit(.createJob(record, roots: roots))
        try store.setSyncValues(id, [("settings", settings), ("stage", [SyncStage.listingSource.rawValue]), maximumDeletes] + values)
        try store.sync()
        return false
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
            let shard = reader.optionalString(), let filesFrom = reader.optionalString(),
            let selection = try? FileSelection(includes: includes, excludes: excludes, followSymlinks: follow)
        else { return nil }
        var options = SyncOptions()
        options.mode = mode
        options.deletes = deletes
        options.selection = selection
        options.shard = shard.flatMap { try? SyncShard(parsing: $0) }
        options.filesFrom = filesFrom
        // Written only when set, so the settings of a plan made without one read as before.
        if !reader.isAtEnd {
            guard let backup = reader.optionalString(), reader.isAtEnd else { return nil }
            options.backupDirectory = backup
        }
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
        if let backup = options.backupDirectory { writer.optionalString(backup) }
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
