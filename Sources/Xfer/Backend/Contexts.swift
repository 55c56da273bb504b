import XferPrimitives
import Crypto
import FoundationEssentials

/// What the user supplied to authenticate: one bearer token. The engine
/// sends it as `Authorization: Bearer TOKEN` unless the backend places it
/// itself (`BackendTraits.authentication`); it is never stored or shown.
public struct Credentials: Sendable, Hashable {
    /// The token, if any.
    public var token: String?

    /// Credentials holding `token`, or none.
    public init(token: String? = nil) { self.token = token }

    /// The `Authorization` header's value, or nil without a token.
    public var authorization: String? { token.map { "Bearer \($0)" } }
}

/// A read-only view of a job, handed to every backend step.
public struct JobContext: Sendable {
    /// The job's id.
    public let id: JobID
    /// The URL the user pushed to (`--to`), as the backend normalized it.
    public let target: String
    /// Handles from `makeJobHandles` and `startJob`.
    public let handles: ServerHandles
    /// Every file of the job, in push order, each read from the state store
    /// when accessed (a job may hold 100,000 files; a view of all of them
    /// per step would cost O(files) per chunk). In the steps of one file,
    /// use the step's own `file` argument; `startJob`, `finishJob` and
    /// `cancelRequests` walk this collection.
    public let files: JobFiles
    /// What the user supplied to authenticate (never stored).
    public let credentials: Credentials
    /// Requests the job keeps in flight at once (e.g. whether parallel
    /// uploads are worth their cost).
    public let concurrency: Int
    /// The name of the file the push named, when it named exactly one path
    /// and that path is a regular file (`xfer push FILE`, not a directory,
    /// several paths or a stream); a protocol may then let the target name
    /// the file itself, as `aws s3 cp FILE s3://BUCKET/KEY` does. Set only
    /// in the view `makeJobHandles` gets when the job is created: a backend
    /// keeps what it decides from it in the job's handles, so the job's later
    /// runs decide the same even if the path has since become a directory.
    public let namedFile: String?

    /// Creates a view of a job (the engine makes these; tests of a backend may too).
    public init(
        id: JobID, target: String, handles: ServerHandles, files: [FileContext], credentials: Credentials, concurrency: Int = 1,
        namedFile: String? = nil
    ) {
        self.init(
            id: id, target: target, handles: handles, files: JobFiles(files), credentials: credentials, concurrency: concurrency,
            namedFile: namedFile)
    }

    /// A view whose files come from `files` (e.g. another view's).
    public init(
        id: JobID, target: String, handles: ServerHandles, files: JobFiles, credentials: Credentials, concurrency: Int = 1,
        namedFile: String? = nil
    ) {
        self.id = id
        self.target = target
        self.handles = handles
        self.files = files
        self.credentials = credentials
        self.concurrency = concurrency
        self.namedFile = namedFile
    }

    /// `target` joined with `path` (which should start with "/").
    public func url(_ path: String) -> String {
        target + (path.hasPrefix("/") ? path : "/" + path)
    }
}

/// The files of a job, in push order: an array, or (for the engine's jobs)
/// each file read from the state store when it is accessed, so a view of a
/// job costs the same whatever its number of files.
public struct JobFiles: RandomAccessCollection, Sendable {
    private enum Storage: Sendable {
        case array([FileContext])
        case lookup(count: Int, @Sendable (Int) -> FileContext)
    }

    private let storage: Storage

    /// These files.
    public init(_ files: [FileContext]) { storage = .array(files) }

    /// `count` files, each made by `file` when accessed.
    init(count: Int, file: @escaping @Sendable (Int) -> FileContext) { storage = .lookup(count: count, file) }

    public var startIndex: Int { 0 }
    public var endIndex: Int {
        switch storage {
        case .array(let files): return files.count
        case .lookup(let count, _): return count
        }
    }

    public subscript(position: Int) -> FileContext {
        switch storage {
        case .array(let files): return files[position]
        case .lookup(_, let file): return file(position)
        }
    }
}

/// A read-only view of one file of a job.
public struct FileContext: Sendable {
    /// Position in the job (the order the user gave; files a re-run of a
    /// directory push finds are added at the end).
    public let index: Int
    /// The local path.
    public let path: String
    /// The file's path relative to the directory the user named, '/'-separated
    /// (its name when the file itself was named): where a protocol has a
    /// place for it, the server should see this (an S3 key's tail, tus's
    /// `relativePath` metadata).
    public let relativePath: String
    /// The file's name (last path component), as the server should see it.
    public let name: String
    /// The file's size in bytes.
    public let size: Int64
    /// How the file is cut into chunks.
    public let plan: ChunkPlan
    /// Handles from `startJob` and `openFile`.
    public let handles: ServerHandles
    /// Whole-file digests the backend asked for in `digestsBeforeOpen`
    /// (lowercase hex).
    public let digests: [DigestAlgorithm: String]
    /// Receipts of stored chunks, by chunk index (filled for `finishFile`).
    public let receipts: [Int: String]
    /// The local file's modification time as the job took it, in nanoseconds
    /// since 1970 (nil in views not made from a file on disk): what a sync
    /// keeps with the object (`ObjectSyncing`).
    public internal(set) var modificationTimeNanoseconds: Int64?

    /// Creates a view of a file (the engine makes these; tests of a backend may too).
    public init(
        index: Int, path: String, relativePath: String? = nil, name: String, size: Int64, plan: ChunkPlan,
        handles: ServerHandles, digests: [DigestAlgorithm: String] = [:], receipts: [Int: String] = [:]
    ) {
        self.index = index
        self.path = path
        self.relativePath = relativePath ?? name
        self.name = name
        self.size = size
        self.plan = plan
        self.handles = handles
        self.digests = digests
        self.receipts = receipts
    }

    /// The same file with these digests.
    func with(digests: [DigestAlgorithm: String]) -> FileContext {
        var file = FileContext(
            index: index, path: path, relativePath: relativePath, name: name, size: size, plan: plan, handles: handles,
            digests: digests, receipts: receipts)
        file.modificationTimeNanoseconds = modificationTimeNanoseconds
        return file
    }

    /// The same file with these receipts.
    func with(receipts: [Int: String]) -> FileContext {
        var file = FileContext(
            index: index, path: path, relativePath: relativePath, name: name, size: size, plan: plan, handles: handles,
            digests: digests, receipts: receipts)
        file.modificationTimeNanoseconds = modificationTimeNanoseconds
        return file
    }

    /// The chunk size in force for this file.
    public var chunkSize: Int { plan.chunkSize }
    /// How many chunks the file has.
    public var chunkCount: Int { plan.count }

    /// The 0-based indexes (`ChunkPayload.index`) of a wire's 1-based chunk
    /// numbers (`ChunkPayload.number`); numbers outside the file are dropped.
    ///
    /// An array, sized once, and inlinable so it is specialized in the
    /// backend's module: a lazy sequence returned across the module boundary
    /// stayed generic, looked up its type's metadata for every element and
    /// gave `Set` no count to reserve, which made resuming a 512K-chunk
    /// answer ~40 ms slower (perf, issue 17).
    @inlinable
    public func chunkIndexes(fromNumbers numbers: some Sequence<Int>) -> [Int] {
        let count = chunkCount
        var indexes: [Int] = []
        indexes.reserveCapacity(numbers.underestimatedCount)
        for number in numbers where number >= 1 && number <= count {
            indexes.append(number - 1)
        }
        return indexes
    }

    /// The extension of `name` without the dot, or "" when it has none.
    public var fileExtension: String {
        let ext = PathText.pathExtension(of: name)
        return ext
    }
}

/// One chunk of a file, as a step sees it: where it is, how long, and the
/// digests a protocol may send. Its bytes stay in the file: a body names
/// the chunk (`RequestBody(chunk:)`, `MultipartForm.addFile(_:filename:chunk:)`)
/// and the engine streams them into the request as it is sent.
///
/// A digest is computed by one read of the chunk (from the page cache,
/// usually) the first time a step asks for it, and kept for the retries.
/// If the file changed or cannot be read, the engine fails the request
/// before it is sent (the digest is then empty, and never sent).
public struct ChunkPayload: Sendable {
    /// 0-based position in the file.
    public let index: Int
    /// The byte offset of the chunk's bytes in the file: the chunk's start,
    /// or later when the server already holds the chunk's beginning
    /// (`Reconciliation.serverHasPrefix`).
    public let offset: Int64
    /// The chunk's length in bytes.
    public let count: Int
    /// Where the bytes are.
    package let bytesSource: ChunkBytes

    /// A chunk of these bytes, in memory (for tests of a backend).
    public init(index: Int, offset: Int64, bytes: [UInt8]) {
        self.index = index
        self.offset = offset
        count = bytes.count
        bytesSource = ChunkBytes(bytes: bytes, offset: offset)
    }

    /// A chunk read from `file` when it is sent.
    package init(index: Int, source: ChunkBytes) {
        self.index = index
        offset = source.offset
        count = source.length
        bytesSource = source
    }

    /// The 1-based chunk number most wires count in (`index + 1`).
    public var number: Int { index + 1 }

    /// The inclusive byte range, as `Content-Range` wants it ("a-b").
    public var lastOffset: Int64 { offset + Int64(count) - 1 }

    /// The MD5 of the chunk's bytes (16 bytes), e.g. for `Content-MD5`.
    public var md5: [UInt8] { bytesSource.digest(.md5) }
    /// The SHA-1 of the chunk's bytes (20 bytes), e.g. for tus's `Upload-Checksum`.
    public var sha1: [UInt8] { bytesSource.digest(.sha1) }
    /// The SHA-256 of the chunk's bytes (32 bytes).
    public var sha256: [UInt8] { bytesSource.digest(.sha256) }
    /// CRC-32 (the zlib/gzip polynomial). As text: `Checksums.hex(crc32)`
    /// (8 digits; `String(_:radix:)` drops leading zeros).
    public var crc32: UInt32 { Self.integer(bytesSource.digest(.crc32)) }
    /// CRC-32C (Castagnoli), e.g. for RFC 9530's `crc32c` or S3's
    /// `x-amz-checksum-crc32c`. As text: `Checksums.hex(crc32c)`.
    public var crc32c: UInt32 { Self.integer(bytesSource.digest(.crc32c)) }
    /// CRC-64/NVME, e.g. for S3's `x-amz-checksum-crc64nvme`.
    public var crc64nvme: UInt64 {
        let bytes = bytesSource.digest(.crc64nvme)
        guard bytes.count == 8 else { return 0 }
        return bytes.reduce(0) { $0 << 8 | UInt64($1) }
    }

    private static func integer(_ bytes: [UInt8]) -> UInt32 {
        guard bytes.count == 4 else { return 0 }
        return UInt32(bytes[0]) << 24 | UInt32(bytes[1]) << 16 | UInt32(bytes[2]) << 8 | UInt32(bytes[3])
    }

    /// The chunk's digest by another of swift-crypto's hash functions
    /// (e.g. `SHA512.self`), computed by a read of the chunk each time.
    public func digest<Hash: HashFunction>(by type: Hash.Type) -> [UInt8] {
        bytesSource.digest(by: type)
    }

    /// The chunk's bytes in memory (tests; a backend sends a chunk by naming it).
    package var bytes: [UInt8] { (try? bytesSource.materialized()) ?? [] }
}

/// Checksums backends commonly send.
public enum Checksums {
    /// The CRC-32 (zlib/gzip polynomial) of `bytes`.
    public static func crc32(_ bytes: [UInt8]) -> UInt32 {
        CRC32.of(bytes)
    }

    /// `bytes` as lowercase hexadecimal.
    public static func hex(_ bytes: [UInt8]) -> String {
        Hex.lowercase(bytes)
    }

    /// A CRC (`ChunkPayload.crc32`, `.crc32c`) as 8 lowercase hex digits,
    /// leading zeros kept, as the built-in protocols write it.
    /// `String(crc, radix: 16)` drops them: a server comparing text then
    /// refuses one chunk in sixteen.
    public static func hex(_ crc: UInt32) -> String {
        CRC32.hex(crc)
    }

    /// `bytes` in standard base64 (with padding).
    public static func base64(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString()
    }
}
