import XferPrimitives
import Crypto
import FoundationEssentials

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The registry of multipart sources, one small JSON file each:
///
///     root/sources/<sha256(sourceId) hex>.json
///
/// Client-chosen ids never name a path: any string (slashes, dots, non-ASCII) maps to a fixed-shape
/// digest. Operations on one source are serialized, so two preLoads racing for a new source agree
/// on one set of file ids, and that set is on disk (fsync'd) before either is answered.
actor DiskMultipartSources {
    nonisolated let directory: String
    private let root: String
    private let io: BlockingIO

    /// Sources asked for lately (each fragment names its source): bounded, because every preLoad
    /// makes one and a record holds up to 1,000 ids; emptied when full, since a miss costs a read.
    private var cache: [String: MultipartSourceRecord] = [:] {
        didSet { if cache.count > Self.cacheLimit { cache.removeAll(keepingCapacity: true) } }
    }
    static let cacheLimit = 1024
    private var turns = KeyedTurns<String>()
    private var directoryReady = false

    init(root: String, io: BlockingIO) {
        self.root = root
        self.directory = root + "/sources"
        self.io = io
    }

    /// The source's record, creating it with `fileCount` fresh ids if it does not exist. An existing
    /// source is returned as it is, whatever `fileCount` says: the caller decides what a different
    /// count means.
    func preload(sourceId: String, fileCount: Int) async throws -> MultipartSourceRecord {
        let key = Self.key(sourceId)
        await lock(key)
        defer { unlock(key) }
        if let existing = try await lookup(sourceId, key: key) { return existing }

        let record = MultipartSourceRecord(
            formatVersion: MultipartSourceRecord.currentFormatVersion, sourceId: sourceId,
            fileIds: (0..<fileCount).map { _ in UploadID.generate() })
        let bytes = try JSONEncoder().encode(record)
        let (directory, root, file, createDirectory) = (self.directory, self.root, recordPath(key), !directoryReady)
        try await io.run {
            if createDirectory {
                try FileSystemOps.makeDirectory(directory)
                try FileSystemOps.syncDirectory(root)
            }
            try FileSystemOps.writeAtomically(Array(bytes), to: file, directory: directory)
        }
        directoryReady = true
        cache[key] = record
        return record
    }

    /// Nil for a source nobody preloaded (or that was removed).
    func source(id sourceId: String) async throws -> MultipartSourceRecord? {
        let key = Self.key(sourceId)
        await lock(key)
        defer { unlock(key) }
        return try await lookup(sourceId, key: key)
    }

    /// Forgets the source; false when it was unknown. Its files are the caller's to delete.
    func remove(id sourceId: String) async throws -> Bool {
        let key = Self.key(sourceId)
        await lock(key)
        defer { unlock(key) }
        guard try await lookup(sourceId, key: key) != nil else { return false }
        let (file, directory) = (recordPath(key), self.directory)
        try await io.run {
            if unlink(file) != 0 && errno != ENOENT { throw IOError(operation: "unlink", path: file, code: errno) }
            try FileSystemOps.syncDirectory(directory)
        }
        cache[key] = nil
        return true
    }

    /// Forgets the sources made before `cutoff` none of whose files is an unfinished upload
    /// (`hasUnfinished`): every file completed, expired or never begun. A source is a request's
    /// record of up to 1,000 ids; kept for ever, what clients could make a disk hold would only
    /// grow. A client that asks about one after this is told the source is unknown.
    func expire(madeBefore cutoff: Date, hasUnfinished: @escaping @Sendable (String) -> Bool) async throws -> Int {
        let directory = self.directory
        let stale: [MultipartSourceRecord] = try await io.run {
            // A name at a time: the sources of the last `--expire-after` are all here.
            var found: [MultipartSourceRecord] = []
            let json = Array(".json".utf8)
            try FileSystemOps.forEachName(in: directory) { name in
                guard name.count > json.count, name.suffix(json.count).elementsEqual(json) else { return }
                let path = directory + "/" + String(decoding: name, as: UTF8.self)
                var info = stat()
                guard stat(path, &info) == 0,
                    Date(timeIntervalSince1970: TimeInterval(info.st_mtim.tv_sec) + TimeInterval(info.st_mtim.tv_nsec) / 1e9) < cutoff,
                    let bytes = try FileSystemOps.readAll(path),
                    let record = try? JSONDecoder().decode(MultipartSourceRecord.self, from: Data(bytes)),
                    !record.fileIds.contains(where: hasUnfinished)
                else { return }
                found.append(record)
            }
            return found
        }
        var removed = 0
        for record in stale where try await remove(id: record.sourceId) { removed += 1 }
        return removed
    }

    // MARK: Helpers

    private func lookup(_ sourceId: String, key: String) async throws -> MultipartSourceRecord? {
        if let cached = cache[key] { return cached }
        let file = recordPath(key)
        guard let bytes = try await io.run({ try FileSystemOps.readAll(file) }) else { return nil }
        let record = try JSONDecoder().decode(MultipartSourceRecord.self, from: Data(bytes))
        guard record.sourceId == sourceId, record.formatVersion == MultipartSourceRecord.currentFormatVersion,
            record.fileIds.allSatisfy(UploadID.isValid)
        else {
            throw UploadError.corrupt("source record \(key) does not describe the source asked for")
        }
        cache[key] = record
        return record
    }

    private func recordPath(_ key: String) -> String { directory + "/" + key + ".json" }

    private static func key(_ sourceId: String) -> String {
        Hex.lowercase(SHA256.hash(data: Array(sourceId.utf8)))
    }

    /// Per-source mutual exclusion across the suspensions of disk work.
    private func lock(_ key: String) async {
        while !turns.take(key) { await withCheckedContinuation { turns.queue(key, $0) } }
    }

    private func unlock(_ key: String) {
        turns.end(key)
    }
}
