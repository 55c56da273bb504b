import FoundationEssentials
import Hummingbird
import Logging
import NIOCore
import NIOPosix
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Uploads on a local filesystem under one root (`StoreLayout` has the layout): `xfer serve`'s
/// default storage, with every capability.
///
/// Bytes are written into the page cache and made durable by a group commit (`Durability`: one
/// `syncfs` per round, shared by every request in flight) before the record that says they arrived;
/// published files are renamed into `downloads/<id>/<path>`, or `downloads/<id>.<name>` for a
/// file created whole by one request (`Publication`). A restarted receiver, even one
/// killed with SIGKILL, loads each upload from its files on first access.
final class DiskStorage: ComposableStorage, OffsetUploadStoring, OffsetUploadConcatenating, SequenceUploadStoring, MultipartSourceStoring,
    PublishedRangeReading, IdleUploadDropping, StatisticsReporting, HandleKeyKeeping, PublishedFileLocating
{
    let uploads: DiskUploads
    let fileIO: FileIO
    let sequenceUploads: any SequenceUploadStore
    let diskSequenceUploads: DiskSequenceUploads
    let multipartSources: any MultipartSourceStore
    let diskMultipartSources: DiskMultipartSources
    let logger: Logger
    /// One store per protocol name, made on first use: each keeps the uploads it loaded.
    let offsetStores = Mutex<[String: DiskOffsetUploads]>([:])

    /// Opens (or creates) the store under `root`, emptying the trash a crash left. `bootID`: the
    /// machine's (`BootID`); tests give another to stand for a reboot.
    static func open(
        root: String, threadPool: NIOThreadPool, memory: UploadsInMemory, expireAfter: Duration?, bootID: String? = BootID.current,
        logger: Logger
    ) async throws -> DiskStorage {
        let uploads = try await DiskUploads.open(
            root: root, io: BlockingIO(pool: threadPool), memory: memory, bootID: bootID, logger: logger)
        let storage = DiskStorage(uploads: uploads, fileIO: FileIO(threadPool: threadPool), expireAfter: expireAfter, logger: logger)
        // A full count of uploads in memory can be full of uploads that only the protocols' idle
        // entries hold: those let go first, then the count is asked again.
        await uploads.whenFull { [weak storage] in
            guard let storage else { return }
            for store in storage.offsetStores.withLock({ Array($0.values) }) { await store.dropIdle(after: .zero) }
            await storage.diskSequenceUploads.dropIdle(after: .zero)
        }
        return storage
    }

    /// Unfinished uploads untouched this long are dropped; nil: never.
    let expireAfter: Duration?

    private init(uploads: DiskUploads, fileIO: FileIO, expireAfter: Duration?, logger: Logger) {
        self.expireAfter = expireAfter
        self.uploads = uploads
        self.fileIO = fileIO
        self.logger = logger
        diskSequenceUploads = DiskSequenceUploads(store: uploads, logger: logger)
        sequenceUploads = diskSequenceUploads
        diskMultipartSources = DiskMultipartSources(root: uploads.layout.root, io: uploads.io)
        multipartSources = diskMultipartSources
    }

    /// Every capability there is: the disk is the reference storage.
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
    }

    var statistics: ReceiverStatistics { uploads.statistics }
    var syncRounds: Int { uploads.durability.rounds.load(ordering: .relaxed) }

    func create(_ upload: NewUpload) async throws -> any ChunkedUpload {
        try await uploads.create(protocolName: upload.protocolName, path: upload.path, size: upload.size, chunkSize: upload.chunkSize)
    }

    func upload(id: String, creating upload: NewUpload?) async throws -> (any ChunkedUpload)? {
        guard let upload else { return try await uploads.upload(id: id) }
        return try await uploads.upload(
            id: id, creatingIfAbsent: upload.protocolName, path: upload.path, size: upload.size, chunkSize: upload.chunkSize)
    }

    func delete(id: String) async throws -> Bool {
        try await uploads.delete(id: id)
    }

    func publishedFile(of upload: any ChunkedUpload, context: some RequestContext) async throws -> ResponseBody {
        try await fileIO.load(publishedPath(of: upload), range: nil, context: context)
    }

    func publishedFile(of upload: any ChunkedUpload, range: ClosedRange<Int>, context: some RequestContext) async throws -> ResponseBody {
        try await fileIO.load(publishedPath(of: upload), range: range, context: context)
    }

    /// The absolute path of upload `id`'s published file (what hooks tell the application);
    /// nil when the upload is unknown or its file is not published.
    func publishedFilePath(id: String) async -> String? {
        guard let upload = try? await uploads.upload(id: id) else { return nil }
        let path = uploads.layout.upload(upload.meta).downloadFile
        guard FileSystemOps.exists(path) else { return nil }
        return path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
    }

    /// Every upload's file is where its meta's publication says (downloads/<id>/<path> or
    /// downloads/<id>.<name>), whatever its layout in uploads/: found by its meta, not by its type.
    private func publishedPath(of upload: any ChunkedUpload) -> String {
        uploads.layout.upload(upload.meta).downloadFile
    }

    /// Unfinished uploads no request used for a while leave memory: the protocols' registries
    /// first (theirs hold the uploads beneath), then the uploads'.
    func dropIdle() async {
        await dropIdle(after: nil)
    }

    /// Drops what no request holds and nobody used for `idle` (nil: the idle lifetime; `.zero`:
    /// whatever no request holds), the protocols' registries first: theirs hold the uploads beneath.
    private func dropIdle(after idle: Duration?) async {
        for store in offsetStores.withLock({ Array($0.values) }) { await store.dropIdle(after: idle) }
        await diskSequenceUploads.dropIdle(after: idle)
        await uploads.dropIdle(after: idle)
    }

    /// `ROOT/upload-urls.key`, made with the first start (readable by the receiver's user only).
    func handleKey() async throws -> [UInt8] {
        let path = uploads.layout.root + "/upload-urls.key"
        return try await uploads.io.run {
            if let key = try FileSystemOps.readAll(path) {
                guard key.count == UploadHandles.keyLength else { throw UploadError.corrupt("\(path) is not a key of 32 bytes") }
                return key
            }
            var generator = SystemRandomNumberGenerator()
            let key = (0..<UploadHandles.keyLength).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
            let temporary = path + ".new"
            let file = try POSIXFile.open(temporary, O_WRONLY | O_CREAT | O_TRUNC, mode: 0o600)
            do {
                try key.withUnsafeBytes { try file.writeAll($0) }
                try file.sync()
                file.close()
            } catch {
                file.close()
                throw error
            }
            try FileSystemOps.rename(temporary, to: path)
            try FileSystemOps.syncDirectory(self.uploads.layout.root)
            return key
        }
    }

    /// Large enough to keep loopback throughput up, small enough that a slow reader pins little memory.
    static let readChunkLength = 256 * 1024

    /// A final upload's bytes appended from its partials' data files (`DiskOffsetUpload.concatenate`).
    func concatenate(_ partials: [any OffsetUpload], into final: any OffsetUpload, crc: UInt32?) async throws {
        guard let final = final as? DiskOffsetUpload else { throw UploadError.corrupt("a final upload of another storage") }
        try await final.concatenate(partials, crc: crc)
    }

    func offsetUploads(protocolName: String) -> any OffsetUploadStore {
        offsetStores.withLock { stores in
            if let store = stores[protocolName] { return store }
            let store = DiskOffsetUploads(store: uploads, protocolName: protocolName, fileIO: fileIO, logger: logger)
            stores[protocolName] = store
            return store
        }
    }

}

extension FileIO {
    /// A file's bytes, or those of `range`, read in `DiskStorage.readChunkLength` pieces as the
    /// client takes them.
    func load(_ path: String, range: ClosedRange<Int>?, context: some RequestContext) async throws -> ResponseBody {
        guard let range else { return try await loadFile(path: path, context: context, chunkLength: DiskStorage.readChunkLength) }
        return try await loadFile(path: path, range: range, context: context, chunkLength: DiskStorage.readChunkLength)
    }
}

extension DiskUpload: ChunkedUpload {
    nonisolated var bytesReceivedSoFar: Int { bytesReceived.load(ordering: .relaxed) }
}

extension DiskMultipartSources: MultipartSourceStore {}
