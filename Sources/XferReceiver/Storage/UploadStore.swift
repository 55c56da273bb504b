import Foundation
import Logging

/// Where everything lives under the receiver's root. One upload's working state sits in one
/// directory so that deleting it is one rename; published files live apart so their URL path
/// (`downloads/<id>/<name>`) maps straight to disk.
///
///     root/uploads/<id>/meta.json       what the upload is (written last at creation)
///     root/uploads/<id>/data            chunks land here at their offsets
///     root/uploads/<id>/received.log    +n / -n records (DurableLog)
///     root/uploads/<id>/complete.json   sha256 + size, once assembled
///     root/downloads/<id>/<path>        the data file, moved here on completion; <path> is the
///                                       client's relative path (`RelativePath`), directories and all
///     root/trash/                       deleted uploads on their way out; emptied at startup
struct StoreLayout: Sendable {
    let root: String

    var uploads: String { root + "/uploads" }
    var downloads: String { root + "/downloads" }
    var trash: String { root + "/trash" }

    func upload(_ id: String, path: RelativePath) -> UploadLayout {
        UploadLayout(
            id: id,
            directory: uploads + "/" + id,
            downloadsRoot: downloads,
            downloadDirectory: downloads + "/" + id,
            path: path
        )
    }
}

struct UploadLayout: Sendable {
    let id: String
    let directory: String
    let downloadsRoot: String
    let downloadDirectory: String
    /// Where the file lands below `downloadDirectory`.
    let path: RelativePath

    var meta: String { directory + "/meta.json" }
    var data: String { directory + "/data" }
    var log: String { directory + "/received.log" }
    var completion: String { directory + "/complete.json" }
    var downloadFile: String { downloadDirectory + "/" + path.text }
}

/// The registry of uploads: creates them, finds them (loading from disk on first access, which is
/// how a restarted receiver, even one killed with SIGKILL, picks up where it left off) and deletes them.
///
/// Shared by every protocol: a protocol's routes validate their own wire format and then work on
/// `Upload`s from here.
actor UploadStore {
    nonisolated let layout: StoreLayout
    nonisolated let io: BlockingIO
    nonisolated let statistics = ReceiverStatistics()
    private let logger: Logger

    private enum Entry {
        case loading(Task<Upload?, any Error>)
        case ready(Upload)
    }
    private var entries: [String: Entry] = [:]

    private init(layout: StoreLayout, io: BlockingIO, logger: Logger) {
        self.layout = layout
        self.io = io
        self.logger = logger
    }

    /// Creates the root's directories and empties the trash left by deletes a crash interrupted.
    static func open(root: String, io: BlockingIO, logger: Logger) async throws -> UploadStore {
        let layout = StoreLayout(root: root.count > 1 && root.hasSuffix("/") ? String(root.dropLast()) : root)
        try await io.run {
            try FileManager.default.createDirectory(atPath: layout.root, withIntermediateDirectories: true)
            for directory in [layout.uploads, layout.downloads, layout.trash] {
                try FileSystemOps.makeDirectory(directory)
            }
            for leftover in (try? FileManager.default.contentsOfDirectory(atPath: layout.trash)) ?? [] {
                try? FileManager.default.removeItem(atPath: layout.trash + "/" + leftover)
            }
        }
        return UploadStore(layout: layout, io: io, logger: logger)
    }

    /// `size`/`chunkSize` must already be validated by the protocol.
    func create(protocolName: String, path: RelativePath, size: Int, chunkSize: Int) async throws -> Upload {
        let layout = self.layout
        let (meta, uploadLayout) = try await io.run {
            while true {
                let id = UploadID.generate()
                let uploadLayout = layout.upload(id, path: path)
                guard try FileSystemOps.makeNewDirectory(uploadLayout.directory) else { continue }
                let meta = UploadMeta(
                    formatVersion: UploadMeta.currentFormatVersion,
                    protocolName: protocolName,
                    uploadId: id,
                    fileName: path.text,
                    size: size,
                    chunkSize: chunkSize
                )
                try Self.initialize(meta, in: uploadLayout, uploads: layout.uploads)
                return (meta, uploadLayout)
            }
        }
        let upload = Upload(meta: meta, layout: uploadLayout, io: io, statistics: statistics, received: ChunkSet(chunkCount: meta.chunkCount), completion: nil)
        entries[meta.uploadId] = .ready(upload)
        return upload
    }

    /// Upload `id`, created as described when it does not exist yet.
    ///
    /// For protocols that hand out ids before anything says what the file is (multipart's fileIds,
    /// given per source before the first fragment brings name and size). Concurrent calls for one id
    /// share one load-or-create, so they all get the same upload. `id` must be a valid `UploadID`.
    func upload(id: String, creatingIfAbsent protocolName: String, path: RelativePath, size: Int, chunkSize: Int) async throws -> Upload {
        precondition(UploadID.isValid(id), "upload ids name directories")
        while true {
            switch entries[id] {
            case .ready(let upload):
                return upload
            case .loading(let task):
                if let upload = try await task.value { return upload }
                // That lookup found nothing; stop it standing for the id so the next pass creates it.
                if case .loading(let current) = entries[id], current == task { entries[id] = nil }
            case nil:
                let task = Task { [layout, io, statistics, logger] () throws -> Upload? in
                    try await io.run {
                        if let existing = try Self.load(id: id, layout: layout, io: io, statistics: statistics, logger: logger) { return existing }
                        let meta = UploadMeta(
                            formatVersion: UploadMeta.currentFormatVersion, protocolName: protocolName, uploadId: id,
                            fileName: path.text, size: size, chunkSize: chunkSize)
                        let uploadLayout = layout.upload(id, path: path)
                        // A directory without meta.json is a creation a crash cut short: nothing in it was
                        // ever acknowledged, and its name is needed again.
                        if FileSystemOps.exists(uploadLayout.directory) {
                            try FileSystemOps.rename(uploadLayout.directory, to: layout.trash + "/" + id + "." + UploadID.generate().prefix(8) + ".partial")
                        }
                        guard try FileSystemOps.makeNewDirectory(uploadLayout.directory) else {
                            throw UploadError.corrupt("upload directory \(id) reappeared during its creation")
                        }
                        try Self.initialize(meta, in: uploadLayout, uploads: layout.uploads)
                        return Upload(meta: meta, layout: uploadLayout, io: io, statistics: statistics, received: ChunkSet(chunkCount: meta.chunkCount), completion: nil)
                    }
                }
                entries[id] = .loading(task)
                let result = await task.result
                if case .loading(let current) = entries[id], current == task {
                    entries[id] = (try? result.get())?.map { .ready($0) }
                }
                guard let upload = try result.get() else { throw UploadError.corrupt("upload \(id) could not be created") }
                return upload
            }
        }
    }

    /// Nil for ids that are malformed or unknown.
    func upload(id: String) async throws -> Upload? {
        guard UploadID.isValid(id) else { return nil }
        switch entries[id] {
        case .ready(let upload):
            return upload
        case .loading(let task):
            return try await task.value
        case nil:
            let task = Task { [layout, io, statistics, logger] in
                try await io.run { try Self.load(id: id, layout: layout, io: io, statistics: statistics, logger: logger) }
            }
            entries[id] = .loading(task)
            let result = await task.result
            // Another caller (a delete) may have replaced the entry while this one waited.
            if case .loading(let current) = entries[id], current == task {
                // Unknown ids are not remembered: clients probing ids must not grow the registry.
                entries[id] = (try? result.get())?.map { .ready($0) }
            }
            return try result.get()
        }
    }

    /// False when the upload is unknown or already deleted.
    func delete(id: String) async throws -> Bool {
        guard let upload = try await upload(id: id) else { return false }
        guard await upload.markDeleted() else { return false }
        let layout = self.layout
        let uploadLayout = upload.layout
        let suffix = "." + UploadID.generate().prefix(8)
        let trashed = [layout.trash + "/" + id + suffix + ".upload", layout.trash + "/" + id + suffix + ".download"]
        // One rename per directory makes the upload vanish atomically; the slow recursive removal
        // happens after, and a crash during it is cleaned up by the next startup.
        try await io.run {
            if FileSystemOps.exists(uploadLayout.directory) {
                try FileSystemOps.rename(uploadLayout.directory, to: trashed[0])
                try FileSystemOps.syncDirectory(layout.uploads)
            }
            if FileSystemOps.exists(uploadLayout.downloadDirectory) {
                try FileSystemOps.rename(uploadLayout.downloadDirectory, to: trashed[1])
                try FileSystemOps.syncDirectory(layout.downloads)
            }
        }
        // Only now: until the renames are done a fresh load could still find the directory on disk.
        entries[id] = nil
        _ = try? await io.run {
            for path in trashed where FileSystemOps.exists(path) {
                try FileManager.default.removeItem(atPath: path)
            }
        }
        return true
    }

    /// Fills a freshly made upload directory. Blocking.
    private static func initialize(_ meta: UploadMeta, in uploadLayout: UploadLayout, uploads: String) throws {
        try FileSystemOps.touch(uploadLayout.data)
        try FileSystemOps.touch(uploadLayout.log)
        // meta.json is written last (and its directory synced): a directory without it is a
        // creation that never answered, and is treated as unknown.
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        try FileSystemOps.writeAtomically(Array(try encoder.encode(meta)), to: uploadLayout.meta, directory: uploadLayout.directory)
        try FileSystemOps.syncDirectory(uploads)
    }

    /// Blocking.
    private static func load(id: String, layout: StoreLayout, io: BlockingIO, statistics: ReceiverStatistics, logger: Logger) throws -> Upload? {
        let directory = layout.uploads + "/" + id
        guard let metaBytes = try FileSystemOps.readAll(directory + "/meta.json") else { return nil }
        let meta = try JSONDecoder().decode(UploadMeta.self, from: Data(metaBytes))
        guard meta.uploadId == id, meta.formatVersion == UploadMeta.currentFormatVersion else {
            throw UploadError.corrupt("meta.json of \(id) does not describe it")
        }
        // Checked again: whatever meta.json says, the file can only land inside downloads/<id>/.
        guard let path = RelativePath.validated(meta.fileName), path.text.utf8.elementsEqual(meta.fileName.utf8) else {
            throw UploadError.corrupt("meta.json of \(id) names no safe relative path")
        }
        let uploadLayout = layout.upload(id, path: path)

        var received = ChunkSet(chunkCount: meta.chunkCount)
        for record in try DurableLog.readRecords(path: uploadLayout.log) {
            guard let sign = record.first, sign == "+" || sign == "-", let chunk = Int(record.dropFirst()),
                chunk >= 1, chunk <= meta.chunkCount
            else {
                logger.warning("Ignoring malformed record in received.log", metadata: ["upload": "\(id)"])
                continue
            }
            if sign == "+" { received.insert(chunk) } else { received.remove(chunk) }
        }

        var completion: CompletionRecord?
        if let bytes = try FileSystemOps.readAll(uploadLayout.completion) {
            completion = try JSONDecoder().decode(CompletionRecord.self, from: Data(bytes))
            // Killed between recording completion and publishing: finish the publication now.
            if FileSystemOps.exists(uploadLayout.data) && !FileSystemOps.exists(uploadLayout.downloadFile) {
                try Upload.publish(uploadLayout)
            }
        }
        return Upload(meta: meta, layout: uploadLayout, io: io, statistics: statistics, received: received, completion: completion)
    }
}
