import Crypto
import Synchronization
import XferPrimitives

/// Digests of the bytes sent, to check what a server reports of them
/// (`FileFinish.completed`'s SHA-256 and CRC-32C).
protocol SentDigests {
    func crc32c() async throws(XferError) -> UInt32
    /// Lowercase hex.
    func sha256() async throws(XferError) -> String
}

/// What a file's steps read: a file on disk, or a short stream's bytes in
/// memory. `Worker` performs every step of either through this, so a file
/// and a stream are opened, sent, completed and verified the same way.
protocol StepContent: SentDigests, Sendable {
    /// Throws `.fileChanged` when the bytes are no longer those recorded as `identity`.
    func checkUnchanged(recorded identity: FileIdentity) throws(XferError)
    /// Whole-content digests a backend asks for before it opens the upload.
    func digests(_ algorithms: Set<DigestAlgorithm>) throws(XferError) -> [DigestAlgorithm: String]
    /// The range as a request body carries it. `feedingHash`: its bytes
    /// also feed the whole-content SHA-256 when a digest pass reads them.
    func chunk(offset: Int64, length: Int, feedingHash: Bool) -> ChunkBytes
    /// Starts the digest pass of the range a file's next request will send
    /// (`digests`, those the request before it needed), in the background;
    /// `chunk` then hands out that range's bytes with whatever the pass
    /// found. Nothing where nothing would be read.
    func readAhead(offset: Int64, length: Int, digests: [ChunkBytes.Digest])
}

extension StepContent {
    func readAhead(offset: Int64, length: Int, digests: [ChunkBytes.Digest]) {}
}

/// A file of the job, open, with the SHA-256 its chunks feed when the
/// backend reports one (`SHA256Reporting`).
struct FileOnDisk: StepContent {
    let local: LocalFile
    let hash: StreamingFileHash?
    /// For a file of more than one chunk: the next range, read ahead.
    let ahead: ChunkReadAhead?

    init(local: LocalFile, hash: StreamingFileHash?, readsAhead: Bool) {
        self.local = local
        self.hash = hash
        ahead = readsAhead ? ChunkReadAhead() : nil
    }

    func checkUnchanged(recorded identity: FileIdentity) throws(XferError) {
        try local.checkUnchanged(against: identity)
    }

    func digests(_ algorithms: Set<DigestAlgorithm>) throws(XferError) -> [DigestAlgorithm: String] {
        try local.digests(algorithms)
    }

    func chunk(offset: Int64, length: Int, feedingHash: Bool) -> ChunkBytes {
        if !feedingHash, let ready = ahead?.take(offset: offset, length: length) { return ready }
        guard feedingHash, let hash else { return ChunkBytes(file: local, offset: offset, length: length) }
        return ChunkBytes(file: local, offset: offset, length: length) { (position: Int64, bytes: [UInt8]) throws(XferError) in
            try hash.feed(offset: position, bytes: bytes)
        }
    }

    func readAhead(offset: Int64, length: Int, digests: [ChunkBytes.Digest]) {
        guard let ahead, !digests.isEmpty else { return }
        let next = ChunkBytes(file: local, offset: offset, length: length)
        ahead.offer(next)
        // A thread of the pool, not the transport's: the pass reads the range
        // while the request before it waits for its answer.
        Task.detached(priority: .utility) {
            for digest in digests { _ = next.digest(digest) }
        }
    }

    func crc32c() throws(XferError) -> UInt32 { try local.crc32c() }

    func sha256() async throws(XferError) -> String {
        if let hash { return try await hash.finish() }
        return try local.digests([.sha256])[.sha256] ?? ""
    }
}

/// A stream no longer than one part: all its bytes, read.
struct BytesInMemory: StepContent {
    let bytes: [UInt8]

    func checkUnchanged(recorded identity: FileIdentity) {}

    func digests(_ algorithms: Set<DigestAlgorithm>) -> [DigestAlgorithm: String] {
        var result: [DigestAlgorithm: String] = [:]
        if algorithms.contains(.md5) { result[.md5] = Checksums.hex(Array(Insecure.MD5.hash(data: bytes))) }
        if algorithms.contains(.sha256) { result[.sha256] = Checksums.hex(Array(SHA256.hash(data: bytes))) }
        return result
    }

    func chunk(offset: Int64, length: Int, feedingHash: Bool) -> ChunkBytes {
        let start = Int(offset)
        if start == 0, length == bytes.count { return ChunkBytes(bytes: bytes, offset: 0) }
        return ChunkBytes(bytes: Array(bytes[start..<start + length]), offset: offset)
    }

    func crc32c() -> UInt32 {
        var crc = CRC32C()
        bytes.withUnsafeBytes { crc.update($0) }
        return crc.value
    }

    func sha256() -> String { Checksums.hex(Array(SHA256.hash(data: bytes))) }
}

/// A long stream's digests, fed part by part as it is read (the bytes are
/// gone by the time the server reports its own). CRC-32C always (ISA-L: a
/// fraction of the read's cost); SHA-256 only for a backend that reports one.
struct RunningDigests: SentDigests {
    private var crc = CRC32C()
    private var sha: SHA256?

    init(sha256: Bool) {
        sha = sha256 ? SHA256() : nil
    }

    mutating func update(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { raw in
            crc.update(raw)
            sha?.update(bufferPointer: raw)
        }
    }

    func crc32c() -> UInt32 { crc.value }

    func sha256() throws(XferError) -> String {
        guard let sha else {
            throw .transferFailed("the server reported a SHA-256 that the backend did not announce (SHA256Reporting); it cannot be checked")
        }
        return Checksums.hex(Array(sha.finalize()))
    }
}

extension Worker {
    /// Checks a completion's reported digests against the bytes sent: the
    /// one check of `FileFinish.completed` for files and streams alike.
    static func verify(_ finish: FileFinish?, of path: String, against sent: some SentDigests) async throws(XferError) {
        guard case .completed(let completion) = finish else { return }
        let (reported, reportedCRC) = (completion.sha256, completion.crc32c)
        if let reportedCRC {
            let crc = try await sent.crc32c()
            guard crc == reportedCRC else {
                throw .verificationFailed(
                    "the server's CRC-32C of \(path) is \(CRC32.hex(reportedCRC)), the sent bytes' is \(CRC32.hex(crc)); the server holds different bytes")
            }
        }
        if let reported {
            let digest = try await sent.sha256()
            guard reported.lowercased() == digest else {
                throw .verificationFailed(
                    "the server's SHA-256 of \(path) is \(reported), the sent bytes' is \(digest); the server holds different bytes")
            }
        }
    }
}

// MARK: The views a backend gets

extension JobRecord {
    /// The view of this job a backend's steps get: the one way the engine
    /// builds a `JobContext` (runs, streams, a new job's handles, cancels).
    func context(files: JobFiles, credentials: Credentials, namedFile: String? = nil) -> JobContext {
        JobContext(
            id: id, target: target, handles: handles, files: files, credentials: credentials, concurrency: concurrency,
            namedFile: namedFile)
    }
}

extension FileRecord {
    /// The view of this file, file `index` of its job and cut by `plan`, a
    /// backend's steps get: the one way the engine builds a `FileContext`.
    func context(index: Int, plan: ChunkPlan) -> FileContext {
        var file = FileContext(
            index: index, path: path, relativePath: relativePath, name: name, size: size, plan: plan, handles: handles)
        if identity.inode != 0 || identity.modificationTimeNanoseconds != 0 {
            file.modificationTimeNanoseconds = identity.modificationTimeNanoseconds
        }
        return file
    }
}

/// The one range of a file read ahead of its request (`FileOnDisk.readAhead`),
/// taken by the request that sends exactly that range; any other request
/// (the server asked for another offset) drops it.
final class ChunkReadAhead: Sendable {
    private let ready = Mutex<ChunkBytes?>(nil)

    func offer(_ bytes: ChunkBytes) {
        ready.withLock { $0 = bytes }
    }

    func take(offset: Int64, length: Int) -> ChunkBytes? {
        ready.withLock { ready in
            defer { ready = nil }
            guard let bytes = ready, bytes.offset == offset, bytes.length == length else { return nil }
            return bytes
        }
    }
}
