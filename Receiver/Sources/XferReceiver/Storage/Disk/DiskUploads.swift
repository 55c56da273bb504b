import XferPrimitives
import FoundationEssentials
import Logging

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Where everything lives under the receiver's root. An upload's working state is a few files
/// named by its id directly in `uploads/` (no directory of its own: creating one cost as much as
/// the rest of a small file's storage); published files live apart, in `downloads/`.
///
///     root/uploads/<id>.log             line 1: what the upload is (`UploadMeta`, JSON); then
///                                       +n / -n records of chunks and, once assembled, one
///                                       =<sha256>.<size> record (DurableLog)
///     root/uploads/<id>.data            chunks land here at their offsets
///     root/uploads/<id>.<name>          a capability's own files (offset uploads: offset.json,
///                                       offset.log; sequences: sequence.json, blocks.log), named
///                                       after what they hold: the log's meta line names the protocol
///     root/downloads/<id>.<name>        the data file of an upload created whole by one request
///                                       (a small file), moved here on completion (`Publication.file`);
///                                       <name> is the last component of the client's path
///     root/downloads/<id>/<path>        any other upload's data file, moved here on completion;
///                                       <path> is the client's relative path (`RelativePath`),
///                                       directories and all (`Publication.directory`)
///     root/trash/                       deleted uploads on their way out; emptied at startup
///
/// Uploads a receiver of layout 1 left keep theirs: a directory `uploads/<id>/` holding
/// `meta.json`, `received.log`, `complete.json`, `data` and the protocol's files, read and
/// written as before.
struct StoreLayout: Sendable {
    let root: String

    var uploads: String { root + "/uploads" }
    var downloads: String { root + "/downloads" }
    var trash: String { root + "/trash" }

    func upload(_ id: String, path: RelativePath, format: UploadLayout.Format = .flat, publication: Publication = .directory) -> UploadLayout {
        UploadLayout(id: id, uploads: uploads, downloadsRoot: downloads, path: path, format: format, publication: publication)
    }

    /// The files of the upload `meta` describes.
    func upload(_ meta: UploadMeta, format: UploadLayout.Format = .flat) -> UploadLayout {
        upload(meta.uploadId, path: meta.path, format: format, publication: meta.publication ?? .directory)
    }
}

struct UploadLayout: Sendable {
    enum Format: Sendable {
        /// `uploads/<id>.log` holds the meta, the chunk records and the completion.
        case flat
        /// Layout 1: `uploads/<id>/` with `meta.json`, `received.log`, `complete.json`.
        case directory
    }

    /// Every name a flat upload's files may have, the log first (it makes the upload exist):
    /// what deletion and expiry look for. `tus.json` and `ietf.json` are where receivers before
    /// `offset.json` kept an offset upload's info (their uploads still load, and go whole).
    static let flatNames = ["log", "data", "offset.json", "offset.log", "sequence.json", "blocks.log", "tus.json", "ietf.json"]

    let id: String
    let uploads: String
    let downloadsRoot: String
    /// Where the file lands: `downloadsRoot/<id>/<path>`, or `downloadsRoot/<id>.<last component>`.
    let path: RelativePath
    let format: Format
    let publication: Publication

    /// The upload's file `name`: `uploads/<id>.<name>`, or `uploads/<id>/<name>` in layout 1.
    func file(_ name: String) -> String {
        uploads + "/" + id + (format == .flat ? "." : "/") + name
    }

    var data: String { file("data") }
    /// Chunk records (and, when flat, the meta line and the completion record).
    var log: String { file(format == .flat ? "log" : "received.log") }
    /// Layout 1 only: the upload's directory.
    var directory: String { uploads + "/" + id }
    /// Layout 1 only.
    var completion: String { file("complete.json") }

    /// Where the completed file is.
    var downloadFile: String {
        switch publication {
        case .directory: downloadsRoot + "/" + id + "/" + path.text
        case .file: downloadsRoot + "/" + id + "." + path.name
        }
    }

    /// What the upload holds in `downloads/`, gone with it on deletion: its directory, or its file.
    var published: String {
        switch publication {
        case .directory: downloadsRoot + "/" + id
        case .file: downloadFile
        }
    }
}

/// The registry of uploads: creates them, finds them (loading from disk on first access, which is
/// how a restarted receiver, even one killed with SIGKILL, picks up where it left off) and deletes them.
///
/// Shared by every protocol: a protocol's routes validate their own wire format and then work on
/// `Upload`s from here.
actor DiskUploads {
    nonisolated let layout: StoreLayout
    nonisolated let io: BlockingIO
    /// The group commit every protocol's acknowledgements wait on.
    nonisolated let durability: Durability
    nonisolated let statistics = ReceiverStatistics()
    /// What the receiver holds in memory, against its limits: every registry's entries count.
    nonisolated let memory: UploadsInMemory
    private let logger: Logger

    /// The machine's boot (`BootID`), written with and compared to the marks of completions
    /// recorded in the round of their bytes.
    nonisolated let bootID: String?
    private let uploads: KeyedLoads<String, DiskUpload>

    private init(layout: StoreLayout, io: BlockingIO, durability: Durability, memory: UploadsInMemory, bootID: String?, logger: Logger) {
        self.bootID = bootID
        self.layout = layout
        self.io = io
        self.durability = durability
        self.memory = memory
        self.logger = logger
        uploads = KeyedLoads(settled: { $0.isSettled }, memory: memory)
    }

    /// Creates the root's directories and empties the trash left by deletes a crash interrupted.
    /// `bootID`: the machine's (`BootID.current`); tests give another to stand for a reboot.
    static func open(
        root: String, io: BlockingIO, memory: UploadsInMemory, bootID: String? = BootID.current, logger: Logger
    ) async throws -> DiskUploads {
        let layout = StoreLayout(root: root.count > 1 && root.hasSuffix("/") ? String(root.dropLast()) : root)
        let durability = try await io.run {
            try FileManager.default.createDirectory(atPath: layout.root, withIntermediateDirectories: true)
            for directory in [layout.uploads, layout.downloads, layout.trash] {
                try FileSystemOps.makeDirectory(directory)
            }
            for leftover in (try? FileManager.default.contentsOfDirectory(atPath: layout.trash)) ?? [] {
                try? FileManager.default.removeItem(atPath: layout.trash + "/" + leftover)
            }
            // Bodies of `PUT /raw` a crash cut short: no request of this process is under way.
            // Read a name at a time (raw/ keeps every file stored whole), removed after.
            var partials: [String] = []
            let partial = Array(".partial-".utf8)
            FileSystemOps.forEachName(in: layout.root + "/raw") { name in
                if name.starts(with: partial) { partials.append(String(decoding: name, as: UTF8.self)) }
            }
            for leftover in partials { try? FileManager.default.removeItem(atPath: layout.root + "/raw/" + leftover) }
            // Each filesystem the store spans is flushed by every round (an operator may mount
            // downloads/ elsewhere).
            return try Durability(directories: [layout.root, layout.uploads, layout.downloads, layout.trash], pool: io.pool)
        }
        return DiskUploads(layout: layout, io: io, durability: durability, memory: memory, bootID: bootID, logger: logger)
    }

    /// `size`/`chunkSize` must already be validated by the protocol. Returns once the creation is
    /// durable, with whatever `alsoWrite` wrote (a protocol's own files) in the same sync round.
    ///
    /// `format` is `.flat` but for protocols whose files something outside the receiver reads in
    /// layout 1's places (sequence: its end-to-end tests read `uploads/<id>/blocks.log`).
    ///
    /// `durable: false` returns before any sync: for a creation whose caller makes it durable
    /// with what follows in one round (`DiskOffsetUploads`, a file created whole), and tells
    /// nobody of the id before that round but a client whose resumption may then find it unknown.
    func create(
        protocolName: String, path: RelativePath, size: Int, chunkSize: Int, format: UploadLayout.Format = .flat, durable: Bool = true,
        alsoWrite: @escaping @Sendable (UploadLayout) throws -> Void = { _ in }
    ) async throws -> DiskUpload {
        let (upload, _) = try await create(
            protocolName: protocolName, path: path, size: size, chunkSize: chunkSize, format: format, durable: durable, keepingOpen: false,
            alsoWrite: alsoWrite)
        return upload
    }

    /// A flat upload, not synced (as `durable: false` above), with its data file still open for
    /// the caller, who writes the whole file through it and closes it: a small file's creation
    /// opens its data file once. Only that one: a connection may hold one file while its body
    /// comes (`ConnectionGuard.defaultMaximum` counts on it), however slowly a client sends.
    func createOpen(
        protocolName: String, path: RelativePath, size: Int, chunkSize: Int,
        alsoWrite: @escaping @Sendable (UploadLayout) throws -> Void = { _ in }
    ) async throws -> (DiskUpload, POSIXFile) {
        let (upload, files) = try await create(
            protocolName: protocolName, path: path, size: size, chunkSize: chunkSize, format: .flat, durable: false, keepingOpen: true,
            alsoWrite: alsoWrite)
        return (upload, files!)
    }

    private func create(
        protocolName: String, path: RelativePath, size: Int, chunkSize: Int, format: UploadLayout.Format, durable: Bool, keepingOpen: Bool,
        alsoWrite: @escaping @Sendable (UploadLayout) throws -> Void
    ) async throws -> (DiskUpload, POSIXFile?) {
        await relieveIfFull()
        try uploads.makeRoom()
        let layout = self.layout
        // Inline, not on the blocking pool: creating two small files costs less than the two
        // thread switches a hop there and back takes. Layout 1 makes a directory: that one hops.
        let make: @Sendable () throws -> (UploadMeta, UploadLayout, POSIXFile?) = {
            while true {
                let id = UploadID.generate()
                let meta = UploadMeta(
                    formatVersion: UploadMeta.currentFormatVersion,
                    protocolName: protocolName,
                    uploadId: id,
                    fileName: path.text,
                    size: size,
                    chunkSize: chunkSize,
                    // Created whole by one request (a small file): a file of its own when done.
                    publication: keepingOpen ? Publication.forFileCreatedWhole(name: path.name) : nil
                )
                let uploadLayout = layout.upload(meta, format: format)
                // The log claims the id; another upload holding it (never, with 128 random bits)
                // would only make this draw again.
                guard case .created(let files) = try Self.initialize(meta, in: uploadLayout, keepingOpen: keepingOpen) else { continue }
                do {
                    try alsoWrite(uploadLayout)
                } catch {
                    files?.close()
                    throw error
                }
                return (meta, uploadLayout, files)
            }
        }
        let (meta, uploadLayout, files) = format == .flat ? try make() : try await io.run(make)
        if durable { try await durability.sync() }
        let upload = DiskUpload(
            meta: meta, layout: uploadLayout, io: io, durability: durability, statistics: statistics, memory: memory,
            completion: nil)
        uploads.insert(upload, for: meta.uploadId)
        return (upload, files)
    }

    /// DiskUpload `id`, created as described when it does not exist yet.
    ///
    /// For protocols that hand out ids before anything says what the file is (multipart's fileIds,
    /// given per source before the first fragment brings name and size). Concurrent calls for one id
    /// share one load-or-create, so they all get the same upload. `id` must be a valid `UploadID`.
    func upload(id: String, creatingIfAbsent protocolName: String, path: RelativePath, size: Int, chunkSize: Int) async throws -> DiskUpload {
        precondition(UploadID.isValid(id), "upload ids name directories")
        let loadOrCreate: @Sendable () async throws -> DiskUpload = { [layout, io, durability, statistics, memory, bootID, logger] in
            let (upload, created) = try await io.run { () throws -> (DiskUpload, Bool) in
                if let existing = try Self.load(
                    id: id, layout: layout, io: io, durability: durability, statistics: statistics, memory: memory, bootID: bootID,
                    logger: logger)
                {
                    return (existing, false)
                }
                let meta = UploadMeta(
                    formatVersion: UploadMeta.currentFormatVersion, protocolName: protocolName, uploadId: id,
                    fileName: path.text, size: size, chunkSize: chunkSize)
                let uploadLayout = layout.upload(id, path: path)
                // Files that do not load are a creation a crash cut short: nothing in them
                // was ever acknowledged, and their names are needed again.
                try Self.moveToTrash(id: id, layout: layout, suffix: ".partial")
                guard case .created = try Self.initialize(meta, in: uploadLayout, keepingOpen: false) else {
                    throw UploadError.corrupt("upload \(id) reappeared during its creation")
                }
                let upload = DiskUpload(
                    meta: meta, layout: uploadLayout, io: io, durability: durability, statistics: statistics, memory: memory,
                    completion: nil)
                return (upload, true)
            }
            // Durable before anyone writes a chunk into it.
            if created { try await durability.sync() }
            return upload
        }
        while true {
            await relieveIfFull(for: id)
            if let upload = try await uploads.value(for: id, loading: loadOrCreate) { return upload }
            // Nil only from a plain lookup (`upload(id:)`) that was under way and found nothing
            // (`loadOrCreate` always gives one). That lookup is forgotten now: the next pass creates.
        }
    }

    /// Nil for ids that are malformed or unknown.
    func upload(id: String) async throws -> DiskUpload? {
        guard UploadID.isValid(id) else { return nil }
        await relieveIfFull(for: id)
        return try await uploads.value(for: id) { [layout, io, durability, statistics, memory, bootID, logger] in
            try await io.run {
                try Self.load(
                    id: id, layout: layout, io: io, durability: durability, statistics: statistics, memory: memory, bootID: bootID,
                    logger: logger)
            }
        }
    }

    /// Lets the unfinished uploads no request holds and nobody used for `idle` (nil: the idle
    /// lifetime) leave memory (`KeyedLoads`).
    func dropIdle(after idle: Duration? = nil) {
        uploads.dropIdle(after: idle)
    }

    /// What the protocols' registries do to let go of the uploads they hold when the count of
    /// uploads in memory is full (set once, by the storage).
    private var relieve: (@Sendable () async -> Void)?

    func whenFull(_ relieve: @escaping @Sendable () async -> Void) {
        self.relieve = relieve
    }

    /// Before an upload not in memory joins it: when the count is full, the protocols' registries
    /// let go of what no request holds, so that this registry can (`KeyedLoads.makeRoom`).
    private func relieveIfFull(for id: String? = nil) async {
        guard memory.isFull, id.map({ !uploads.contains($0) }) ?? true, let relieve else { return }
        await relieve()
    }

    // MARK: Expiry

    /// The unfinished uploads whose files nobody changed for `expireAfter`: what `expire` may
    /// drop, once the protocols' registries let go of those no request holds.
    func expiryCandidates(after expireAfter: Duration) async throws -> [String] {
        let layout = self.layout
        let cutoff = Date() - expireAfter.seconds
        return try await io.run { Self.unfinishedUploads(in: layout, untouchedSince: cutoff) }
    }

    /// Drops each of `candidates` whose files nobody changed for `expireAfter` and that no
    /// request holds; returns how many went.
    ///
    /// An upload is live while a request holds it (`KeyedLoads` never lets a held value go, and
    /// an upload beneath a protocol's is held by it: the storage asks those to let go first) or
    /// while its files change (every chunk, append or record writes one); looking at it (a
    /// `HEAD`) changes nothing, as on the object store. The scan ran on the blocking pool; the
    /// decision for each upload is taken again here, with no suspension between the check and
    /// the renames, so a request can neither load the upload while it goes nor lose a write it
    /// was acknowledged: such a write made the files new. Completed uploads never expire (their
    /// data file has gone to `downloads/`, so the scan skips them after one look).
    @discardableResult
    func expire(_ candidates: [String], after expireAfter: Duration) async throws -> Int {
        let layout = self.layout
        let cutoff = Date() - expireAfter.seconds
        var trashed: [String] = []
        var expired = 0
        for id in candidates where uploads.dropUnlessHeld(id) {
            // Again, now, with nothing in between: the scan may be old news.
            guard let newest = Self.newestChange(of: id, in: layout), newest < cutoff,
                let moved = try? Self.moveToTrash(id: id, layout: layout, suffix: ".expired"), !moved.isEmpty
            else { continue }
            trashed += moved
            expired += 1
        }
        guard expired > 0 else { return 0 }
        try await durability.sync()
        _ = try? await io.run { [trashed] in
            for path in trashed where FileSystemOps.exists(path) { try FileManager.default.removeItem(atPath: path) }
        }
        logger.info("Expired unfinished uploads", metadata: ["count": "\(expired)"])
        return expired
    }

    /// The ids of the unfinished uploads under `uploads/` (those whose data file is still there)
    /// whose files are all older than `cutoff`, and whose log holds no completion (a completion a
    /// crash left unpublished is finished by the upload's next load, not expired). Blocking.
    ///
    /// `uploads/` keeps every completed upload's log, so it grows with every upload ever made: it
    /// is read a name at a time (`FileSystemOps.forEachName`), and a name becomes a `String` only
    /// where it is an unfinished upload's (a flat upload's `.data`, or a layout 1 directory).
    private static func unfinishedUploads(in layout: StoreLayout, untouchedSince cutoff: Date) -> [String] {
        func isUntouchedAndUnfinished(_ id: String) -> Bool {
            guard UploadID.isValid(id), let newest = newestChange(of: id, in: layout), newest < cutoff else { return false }
            if let bytes = try? FileSystemOps.readAll(layout.uploads + "/" + id + ".log") {
                var completed = false
                DurableLog.forEachRecord(in: bytes[...]) { if $0.first == UInt8(ascii: "=") { completed = true } }
                if completed { return false }
            }
            return !FileSystemOps.exists(layout.uploads + "/" + id + "/complete.json")
        }
        var ids: [String] = []
        let dataSuffix = Array(".data".utf8)
        FileSystemOps.forEachName(in: layout.uploads) { name in
            let id: String
            if name.count == UploadID.length + dataSuffix.count, name.suffix(dataSuffix.count).elementsEqual(dataSuffix) {
                id = String(decoding: name.prefix(UploadID.length), as: UTF8.self)
            } else if name.count == UploadID.length {
                id = String(decoding: name, as: UTF8.self)
                guard FileSystemOps.exists(layout.uploads + "/" + id + "/data") else { return }
            } else {
                return
            }
            if isUntouchedAndUnfinished(id) { ids.append(id) }
        }
        return ids
    }

    /// When upload `id`'s files last changed (the newest of their modification times); nil when
    /// it has none. Blocking (a few `stat`s).
    private static func newestChange(of id: String, in layout: StoreLayout) -> Date? {
        var newest: Date?
        func consider(_ path: String) {
            var info = stat()
            guard stat(path, &info) == 0 else { return }
            let changed = Date(timeIntervalSince1970: TimeInterval(info.st_mtim.tv_sec) + TimeInterval(info.st_mtim.tv_nsec) / 1e9)
            newest = max(newest ?? changed, changed)
        }
        for name in UploadLayout.flatNames { consider(layout.uploads + "/" + id + "." + name) }
        let directory = layout.uploads + "/" + id
        if FileSystemOps.exists(directory) {
            consider(directory)
            for name in (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [] { consider(directory + "/" + name) }
        }
        return newest
    }

    /// False when the upload is unknown or already deleted.
    func delete(id: String) async throws -> Bool {
        guard let upload = try await upload(id: id) else { return false }
        guard await upload.markDeleted() else { return false }
        let layout = self.layout
        let uploadLayout = upload.layout
        // Renames make the upload vanish (the log first: without it the id is unknown); the slow
        // removal happens after, and a crash during it is cleaned up by the next startup.
        let trashed = try await io.run {
            var trashed = try Self.moveToTrash(id: id, layout: layout, suffix: ".upload")
            if FileSystemOps.exists(uploadLayout.published) {
                let target = layout.trash + "/" + id + "." + UploadID.generate().prefix(8) + ".download"
                try FileSystemOps.rename(uploadLayout.published, to: target)
                trashed.append(target)
            }
            return trashed
        }
        try await durability.sync()
        // Only now: until the renames are done a fresh load could still find the files on disk.
        uploads.remove(id)
        _ = try? await io.run {
            for path in trashed where FileSystemOps.exists(path) {
                try FileManager.default.removeItem(atPath: path)
            }
        }
        return true
    }

    enum Initialized {
        /// The files are made; the data file open when asked (flat only).
        case created(POSIXFile?)
        /// Another upload holds the id.
        case taken
    }

    /// Creates a flat upload's log, holding the meta line, then its empty data file; `.taken` when
    /// the log exists. (Layout 1: its directory, `meta.json` and the data file; `.taken` when the
    /// directory exists.) Not synced: the caller waits for a sync round before anyone learns the
    /// id. Blocking.
    private static func initialize(_ meta: UploadMeta, in uploadLayout: UploadLayout, keepingOpen: Bool) throws -> Initialized {
        if uploadLayout.format == .directory {
            precondition(!keepingOpen, "only a flat upload's files are kept open")
            guard try FileSystemOps.makeNewDirectory(uploadLayout.directory) else { return .taken }
            try FileSystemOps.writeNew(meta.jsonLine(), to: uploadLayout.file("meta.json"))
            try POSIXFile.open(uploadLayout.data, O_WRONLY | O_CREAT | O_EXCL).close()
            try POSIXFile.open(uploadLayout.log, O_WRONLY | O_CREAT | O_EXCL).close()
            return .created(nil)
        }
        let log: POSIXFile
        do {
            log = try POSIXFile.open(uploadLayout.log, O_WRONLY | O_CREAT | O_EXCL)
        } catch let error as IOError where error.code == EEXIST {
            return .taken
        }
        defer { log.close() }
        try meta.jsonLine().withUnsafeBytes { try log.writeAll($0) }
        let data = try POSIXFile.open(uploadLayout.data, O_WRONLY | O_CREAT | O_TRUNC)
        guard keepingOpen else {
            data.close()
            return .created(nil)
        }
        return .created(data)
    }

    /// Renames whatever files upload `id` has in `uploads/` (flat: its log first; layout 1: its
    /// directory) into the trash; returns where they went. Blocking.
    @discardableResult
    private static func moveToTrash(id: String, layout: StoreLayout, suffix: String) throws -> [String] {
        let tag = layout.trash + "/" + id + "." + UploadID.generate().prefix(8) + suffix
        var moved: [String] = []
        let directory = layout.uploads + "/" + id
        if FileSystemOps.exists(directory) {
            try FileSystemOps.rename(directory, to: tag)
            moved.append(tag)
        }
        for name in UploadLayout.flatNames {
            let path = layout.uploads + "/" + id + "." + name
            guard FileSystemOps.exists(path) else { continue }
            try FileSystemOps.rename(path, to: tag + "." + name)
            moved.append(tag + "." + name)
        }
        return moved
    }

    /// Blocking.
    private static func load(
        id: String, layout: StoreLayout, io: BlockingIO, durability: Durability, statistics: ReceiverStatistics,
        memory: UploadsInMemory, bootID: String?, logger: Logger
    ) throws -> DiskUpload? {
        let directory = layout.uploads + "/" + id
        let meta: UploadMeta
        let records: ArraySlice<UInt8>
        let format: UploadLayout.Format
        var completion: CompletionRecord?
        if let bytes = try FileSystemOps.readAll(layout.uploads + "/" + id + ".log") {
            format = .flat
            let newline = bytes.firstIndex(of: UInt8(ascii: "\n")) ?? bytes.endIndex
            // A meta line that does not decode was never synced, so never answered: the creation
            // a crash cut short, unknown like a directory without the file.
            guard let decoded = try? JSONDecoder().decode(UploadMeta.self, from: Data(bytes[..<newline])) else { return nil }
            meta = decoded
            records = bytes[newline...]
        } else if let metaBytes = try FileSystemOps.readAll(directory + "/meta.json") {
            format = .directory
            // Torn only if its creation's sync round never ended (so never answered), as above.
            guard let decoded = try? JSONDecoder().decode(UploadMeta.self, from: Data(metaBytes)) else { return nil }
            meta = decoded
            records = try FileSystemOps.readAll(directory + "/received.log")?[...] ?? []
            if let bytes = try FileSystemOps.readAll(directory + "/complete.json") {
                completion = try JSONDecoder().decode(CompletionRecord.self, from: Data(bytes))
            }
        } else {
            return nil
        }
        guard meta.uploadId == id, meta.formatVersion == UploadMeta.currentFormatVersion else {
            throw UploadError.corrupt("the meta of \(id) does not describe it")
        }
        // Checked again: whatever the meta says, the file can only land inside downloads/<id>/.
        guard let path = RelativePath.validated(meta.fileName), path.text.utf8.elementsEqual(meta.fileName.utf8) else {
            throw UploadError.corrupt("the meta of \(id) names no safe relative path")
        }
        let uploadLayout = layout.upload(id, path: path, format: format, publication: meta.publication ?? .directory)

        var received = ReceivedChunks(meta: meta)
        // The last `+1.<sha256>` record of a single small chunk (`Upload.isSingleSmallChunk`),
        // checked against the data below.
        var digest: String?
        var malformed = 0
        // The boot of a `*<boot id>` mark: the completion was recorded in the round of its bytes.
        var sameRoundBoot: ArraySlice<UInt8>?
        // The last chunk record, when it was written in the round of its bytes
        // (`DiskUpload.writeChunk(inOrderUnder:)`): any later chunk record was written after
        // that round ended.
        var lastInOrder: ChunkRecord?
        DurableLog.forEachRecord(in: records) { record in
            if record.first == UInt8(ascii: "*"), format == .flat {
                sameRoundBoot = record.dropFirst()
                return
            }
            if record.first == UInt8(ascii: "="), format == .flat {
                guard let parsed = CompletionRecord(logRecord: Substring(decoding: record, as: UTF8.self)) else {
                    logger.warning("Ignoring malformed completion record in the upload's log", metadata: ["upload": "\(id)"])
                    return
                }
                completion = parsed
                return
            }
            guard let chunkRecord = ChunkRecord(record), chunkRecord.number <= meta.chunkCount,
                chunkRecord.digest == nil || (chunkRecord.received && DiskUpload.isSingleSmallChunk(meta, uploadLayout))
            else {
                malformed += 1
                return
            }
            let chunk = chunkRecord.number
            lastInOrder = chunkRecord.sameRoundBoot == nil ? nil : chunkRecord
            if chunkRecord.received {
                // A record written again over an older one of the same chunk: the newest wins.
                received.remove(chunk)
                received.insert(chunk, crc: chunkRecord.crc)
            } else {
                received.remove(chunk)
            }
            if chunkRecord.digest != nil || digest != nil { digest = chunkRecord.received ? chunkRecord.digest : nil }
        }
        if malformed > 0 {
            logger.warning("Ignoring malformed records in the upload's log", metadata: ["upload": "\(id)", "records": "\(malformed)"])
        }

        if let recorded = completion, let boot = sameRoundBoot, !(bootID.map { boot.elementsEqual($0.utf8) } ?? false) {
            // Recorded in the round of its bytes, and the machine went down since: that round may
            // have kept the record and lost bytes. Nobody heard of a completion whose bytes do not
            // match (its round never ended), nor of the upload (created in the same round): it goes.
            let file = FileSystemOps.exists(uploadLayout.data) ? uploadLayout.data : uploadLayout.downloadFile
            let read = try? FileChecksums(ofFileAt: file, crc64nvme: false)
            guard let read, read.size == Int64(meta.size), let crc = read.crc32c, recorded.crc32c == CRC32.hex(crc) else {
                logger.warning("Dropping an upload whose creation a crash of the machine cut short", metadata: ["upload": "\(id)"])
                var trashed = try moveToTrash(id: id, layout: layout, suffix: ".torn")
                if FileSystemOps.exists(uploadLayout.published) {
                    let target = layout.trash + "/" + id + "." + UploadID.generate().prefix(8) + ".torn-download"
                    try FileSystemOps.rename(uploadLayout.published, to: target)
                    trashed.append(target)
                }
                try durability.syncNow()
                for path in trashed where FileSystemOps.exists(path) { try? FileManager.default.removeItem(atPath: path) }
                return nil
            }
            // The bytes were read from the disk (nothing of an earlier boot is in the page cache):
            // a mark of this boot spares every later load of it the check, which a small file's
            // every download would otherwise pay once the receiver has been rebooted. Not synced:
            // a crash that loses it only costs the next boot the check again.
            if let bootID {
                try POSIXFile.appendRecords([DiskUpload.sameRoundMark(bootID: bootID)], to: uploadLayout.log, creating: false)
            }
        }
        if completion == nil, let last = lastInOrder, let crc = last.crc, let boot = last.sameRoundBoot,
            !(bootID.map { boot.elementsEqual($0.utf8) } ?? false), received.contains(last.number),
            !DiskUpload.holds(uploadLayout.data, range: meta.byteRange(ofChunk: last.number), crc32c: crc)
        {
            // Written in the round of its bytes, and the machine went down since: that round kept
            // the record and lost some of them. Nobody was told of the chunk (its round never
            // ended): voided, durably, and the client sends it again.
            logger.warning("Dropping the last chunk of an upload whose round a crash of the machine cut short", metadata: ["upload": "\(id)", "chunk": "\(last.number)"])
            try POSIXFile.appendRecords(["-\(last.number)"], to: uploadLayout.log, creating: false)
            try durability.syncNow()
            received.remove(last.number)
        }
        if completion != nil {
            // Killed between recording completion and publishing: finish the publication now.
            if FileSystemOps.exists(uploadLayout.data) && !FileSystemOps.exists(uploadLayout.downloadFile) {
                try DiskUpload.publish(uploadLayout)
                try durability.syncNow()
            }
        } else if !FileSystemOps.exists(uploadLayout.data) {
            if FileSystemOps.exists(uploadLayout.downloadFile) {
                // Killed in the round that was making a completion durable, with the rename kept
                // and the record lost: every chunk was durable before completion began, so the
                // published file is whole. Hash it again and record it.
                let record = try DiskUpload.hash(meta: meta, layout: uploadLayout, file: uploadLayout.downloadFile)
                try DiskUpload.write(record, for: uploadLayout)
                try durability.syncNow()
                completion = record
            } else {
                // The data file is made with the log and the pair is synced before the id is
                // answered: without it, this creation never completed either.
                return nil
            }
        }
        if completion == nil, let expected = digest {
            // Written with its bytes in one round: a crash during that round can have kept the
            // record without them, and then they no longer match.
            let actual = try? DiskUpload.hash(meta: meta, layout: uploadLayout, file: uploadLayout.data)
            if actual?.sha256 != expected {
                received.remove(1)
                digest = nil
            }
        }
        return DiskUpload(
            meta: meta, layout: uploadLayout, io: io, durability: durability, statistics: statistics, memory: memory,
            received: received, completion: completion, digest: digest)
    }

}

/// One chunk record of an upload's log, read from its bytes: `+n` or `-n` (chunk n received or
/// rolled back), `+n.<sha256 hex>` (a single small chunk's digest), `+n~<crc32c hex>`, or
/// `+n~<crc32c hex>*<boot id>` (written in the round of its bytes).
/// Bytes, not Strings: a log holds a record per chunk, a million for a large file.
struct ChunkRecord: Equatable {
    var received: Bool
    var number: Int
    var digest: String?
    var crc: UInt32?
    /// The boot of a `*<boot id>` mark after the CRC: written in the round of its bytes.
    var sameRoundBoot: ArraySlice<UInt8>?

    init(received: Bool, number: Int, digest: String? = nil, crc: UInt32? = nil) {
        self.received = received
        self.number = number
        self.digest = digest
        self.crc = crc
    }

    /// nil for anything else (a torn or foreign record).
    init?(_ bytes: ArraySlice<UInt8>) {
        guard let sign = bytes.first, sign == UInt8(ascii: "+") || sign == UInt8(ascii: "-") else { return nil }
        received = sign == UInt8(ascii: "+")
        var index = bytes.startIndex + 1
        var number = 0
        // 18 digits cannot overflow an Int; no log has that many chunks.
        while index < bytes.endIndex, index - bytes.startIndex <= 18, let digit = Self.decimal(bytes[index]) {
            number = number * 10 + digit
            index += 1
        }
        guard index > bytes.startIndex + 1, number >= 1 else { return nil }
        self.number = number
        guard index < bytes.endIndex else { return }
        let rest = bytes[(index + 1)...]
        switch bytes[index] {
        case UInt8(ascii: "~"):
            // `~CRC`, or `~CRC*<boot id>` (written in the round of its bytes).
            let star = rest.firstIndex(of: UInt8(ascii: "*"))
            let hex = rest[..<(star ?? rest.endIndex)]
            guard hex.count == 8, let crc = Self.lowercaseHex(hex) else { return nil }
            self.crc = UInt32(crc)
            if let star {
                guard star + 1 < rest.endIndex else { return nil }
                sameRoundBoot = rest[(star + 1)...]
            }
        case UInt8(ascii: "."):
            guard rest.count == 64, rest.allSatisfy(Hex.isLowercaseDigit) else { return nil }
            digest = String(decoding: rest, as: UTF8.self)
        default:
            return nil
        }
    }

    private static func decimal(_ byte: UInt8) -> Int? {
        byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") ? Int(byte - UInt8(ascii: "0")) : nil
    }

    private static func lowercaseHex(_ bytes: ArraySlice<UInt8>) -> UInt64? {
        var value: UInt64 = 0
        for byte in bytes {
            guard Hex.isLowercaseDigit(byte), let nibble = Hex.value(of: byte) else { return nil }
            value = value << 4 | UInt64(nibble)
        }
        return value
    }
}
