import XferPrimitives
import FoundationEssentials

/// A job's identity: derived from what the user asked for (backend, target
/// and the paths named), so re-running the same push finds the same job.
public struct JobID: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible, Comparable {
    /// 16 lowercase hex digits.
    public let rawValue: String
    /// Wraps an id as stored (see `isWellFormed`).
    public init(rawValue: String) { self.rawValue = rawValue }
    /// The id as shown.
    public var description: String { rawValue }
    /// Ids order as their text does.
    public static func < (a: JobID, b: JobID) -> Bool { a.rawValue < b.rawValue }

    /// A job id is 16 lowercase hex digits; anything else is not one of ours.
    public var isWellFormed: Bool {
        rawValue.utf8.count == 16 && Hex.isLowercase(rawValue)
    }
}

/// Where a job stands.
public enum JobPhase: String, Sendable, Codable, Hashable {
    /// Created or interrupted; a re-run resumes it.
    case unfinished
    /// Every file is on the server.
    case completed
    /// Stopped on an error that retrying did not fix, or ended with files
    /// that failed; a re-run resumes it.
    case failed
}

/// The identity of a local file when the job took it. A file whose
/// identity changed is sent again from its start.
public struct FileIdentity: Sendable, Hashable, Codable {
    /// Size in bytes.
    public var size: Int64
    /// Modification time, in nanoseconds since 1970.
    public var modificationTimeNanoseconds: Int64
    /// Inode number (a replaced file gets another).
    public var inode: UInt64
    /// The device holding the file.
    public var device: UInt64

    /// An identity with these values.
    public init(size: Int64, modificationTimeNanoseconds: Int64, inode: UInt64, device: UInt64) {
        self.size = size
        self.modificationTimeNanoseconds = modificationTimeNanoseconds
        self.inode = inode
        self.device = device
    }
}

/// How a directory named in a push is walked; kept with the job so a re-run
/// (or `xfer resume`) walks it the same way.
package struct TreeRules: Sendable, Hashable {
    package var includes: [String] = []
    package var excludes: [String] = []
    package var followSymlinks = false

    package init(includes: [String] = [], excludes: [String] = [], followSymlinks: Bool = false) {
        self.includes = includes
        self.excludes = excludes
        self.followSymlinks = followSymlinks
    }
}

/// One file of a job as the state store keeps it, under its own key: a
/// change to one file writes this record alone.
package struct FileRecord: Sendable, Hashable {
    /// The absolute local path.
    package var path: String
    /// The path relative to the directory named (the file's name when the
    /// file itself was named), '/'-separated: what the server is told.
    package var relativePath: String
    /// Which of the job's roots the file was found under.
    package var root: Int
    package var identity: FileIdentity
    /// The chunk size in force for this file (the server may change it when
    /// the file is opened, before any chunk is sent).
    package var chunkSize: Int
    /// True once the backend's open step answered and its handles are stored.
    package var isOpen = false
    package var handles = ServerHandles()
    /// The file's URL on the server once it is complete.
    package var url: String?
    /// Why the file failed in the last run (it is retried by the next).
    package var failure: String?

    package init(
        path: String, relativePath: String, root: Int, identity: FileIdentity, chunkSize: Int, isOpen: Bool = false,
        handles: ServerHandles = ServerHandles(), url: String? = nil, failure: String? = nil
    ) {
        self.path = path
        self.relativePath = relativePath
        self.root = root
        self.identity = identity
        self.chunkSize = chunkSize
        self.isOpen = isOpen
        self.handles = handles
        self.url = url
        self.failure = failure
    }

    package var size: Int64 { identity.size }
    package var name: String {
        // The text after the last '/' byte, found without splitting the whole path into an array
        // (a backend asks for it on every request of a small file), and cut by scalars: a '/'
        // followed by a combining mark still ends a component, as it does on disk.
        let scalars = relativePath.unicodeScalars
        guard let slash = scalars.lastIndex(of: "/") else { return relativePath }
        let start = scalars.index(after: slash)
        if start != scalars.endIndex { return String(Substring(scalars[start...])) }
        return relativePath.split(separator: "/").last.map(String.init) ?? relativePath
    }
    package var isComplete: Bool { url != nil }
}

/// A job's header as the state store keeps it: everything but its files,
/// their progress and its counters, each of which lives under keys of its own.
package struct JobRecord: Sendable, Hashable {
    package var id: JobID
    package var backend: String
    package var target: String
    package var createdAt: Date
    package var updatedAt: Date
    package var phase: JobPhase = .unfinished
    package var lastError: String?
    package var concurrency: Int
    /// True once the backend's job-level start step answered and its handles are stored.
    package var isStarted = false
    package var handles = ServerHandles()
    /// How many paths the user named (kept under their own keys) and the first, for listings.
    package var rootCount: Int
    package var firstRoot: String
    package var rules = TreeRules()
    /// The job sends a stream (standard input, a pipe), which cannot be read
    /// again: it is never resumed, and a killed one is dropped on the server.
    package var isStream = false
    /// The job pulls objects from a `DownloadSource` (its `backend` is the
    /// source's name, its `target` the destination) instead of pushing files.
    package var isDownload = false

    package init(
        id: JobID, backend: String, target: String, createdAt: Date, updatedAt: Date, phase: JobPhase = .unfinished,
        lastError: String? = nil, concurrency: Int, isStarted: Bool = false, handles: ServerHandles = ServerHandles(),
        rootCount: Int, firstRoot: String, rules: TreeRules = TreeRules()
    ) {
        self.id = id
        self.backend = backend
        self.target = target
        self.createdAt = createdAt
        self.updatedAt = updatedAt
        self.phase = phase
        self.lastError = lastError
        self.concurrency = concurrency
        self.isStarted = isStarted
        self.handles = handles
        self.rootCount = rootCount
        self.firstRoot = firstRoot
        self.rules = rules
    }
}

/// Totals the store keeps per job in step with every file and chunk change,
/// so listing a job never visits its files.
package struct JobCounters: Sendable, Hashable {
    package var fileCount = 0
    package var totalBytes: Int64 = 0
    /// Bytes of chunks the server acknowledged.
    package var doneBytes: Int64 = 0
    package var completedFiles = 0
    package var failedFiles = 0

    package init() {}
}

// MARK: Binary forms

extension FileIdentity {
    /// Varints: a small file's identity takes ~16 bytes instead of 32.
    func write(to writer: inout RecordWriter) {
        writer.varint(UInt64(bitPattern: size))
        writer.varint(UInt64(bitPattern: modificationTimeNanoseconds))
        writer.varint(inode)
        writer.varint(device)
    }

    init?(from reader: inout RecordReader) {
        guard let size = reader.varint(), let time = reader.varint(), let inode = reader.varint(), let device = reader.varint()
        else { return nil }
        self.init(
            size: Int64(bitPattern: size), modificationTimeNanoseconds: Int64(bitPattern: time), inode: inode, device: device)
    }
}

extension ServerHandles {
    func write(to writer: inout RecordWriter) {
        writer.varint(UInt64(values.count))
        for key in values.keys.sorted() {
            writer.string(key)
            writer.string(values[key] ?? "")
            writer.bool(secretKeys.contains(key))
        }
    }

    init?(from reader: inout RecordReader) {
        guard let count = reader.varint(), count < 1 << 20 else { return nil }
        self.init()
        for _ in 0..<count {
            guard let key = reader.string(), let value = reader.string(), let secret = reader.bool() else { return nil }
            set(key, value, secret: secret)
        }
    }
}

extension FileRecord {
    static func join(_ root: String, _ relativePath: String) -> String {
        root == "/" ? "/" + relativePath : root + "/" + relativePath
    }

    /// Whether `path` has exactly the bytes of `join(root, relativePath)`, without making it (a
    /// file's record is encoded on every change of it). Bytes, not `==`'s canonical equivalence:
    /// a path whose bytes differ from the joined one must be kept as it is.
    static func path(_ path: String, isJoinOf root: String, _ relativePath: String) -> Bool {
        // Compared as contiguous bytes: through the views' iterators this was ~4,700 instructions
        // a call, twice a small file's commit (`callgrind`, issue 46).
        var path = path
        var head = root == "/" ? "" : root
        var relativePath = relativePath
        return path.withUTF8 { whole in
            head.withUTF8 { head in
                relativePath.withUTF8 { tail in
                    guard whole.count == head.count + 1 + tail.count, whole[head.count] == UInt8(ascii: "/") else { return false }
                    return whole[..<head.count].elementsEqual(head) && whole[(head.count + 1)...].elementsEqual(tail)
                }
            }
        }
    }
}

extension JobPhase {
    var code: UInt8 {
        switch self {
        case .unfinished: return 0
        case .completed: return 1
        case .failed: return 2
        }
    }

    init?(code: UInt8) {
        switch code {
        case 0: self = .unfinished
        case 1: self = .completed
        case 2: self = .failed
        default: return nil
        }
    }
}

extension JobRecord {
    private static let version: UInt8 = 1

    package var encoded: [UInt8] {
        var writer = RecordWriter(capacity: 128 + target.utf8.count + firstRoot.utf8.count)
        writer.byte(Self.version)
        writer.string(backend)
        writer.string(target)
        writer.double(createdAt.timeIntervalSince1970)
        writer.double(updatedAt.timeIntervalSince1970)
        writer.byte(phase.code)
        writer.optionalString(lastError)
        writer.int(concurrency)
        writer.bool(isStarted)
        handles.write(to: &writer)
        writer.int(rootCount)
        writer.string(firstRoot)
        writer.strings(rules.includes)
        writer.strings(rules.excludes)
        writer.bool(rules.followSymlinks)
        // Written only for a stream (1) or a download (2), so every upload's
        // record keeps the form it had.
        if isStream { writer.byte(1) } else if isDownload { writer.byte(2) }
        return writer.bytes
    }

    package init?(id: JobID, decoding bytes: [UInt8]) {
        var reader = RecordReader(bytes)
        guard reader.byte() == Self.version, let backend = reader.string(), let target = reader.string(),
            let created = reader.double(), let updated = reader.double(), let phaseCode = reader.byte(),
            let phase = JobPhase(code: phaseCode), let lastError = reader.optionalString(), let concurrency = reader.int(),
            let isStarted = reader.bool(), let handles = ServerHandles(from: &reader), let rootCount = reader.int(),
            let firstRoot = reader.string(), let includes = reader.strings(), let excludes = reader.strings(),
            let follow = reader.bool()
        else { return nil }
        // Present only for a stream or a download (see `encoded`): anything else after the rules is damage.
        var kind: UInt8 = 0
        if !reader.isAtEnd {
            guard let byte = reader.byte(), byte == 1 || byte == 2, reader.isAtEnd else { return nil }
            kind = byte
        }
        self.init(
            id: id, backend: backend, target: target, createdAt: Date(timeIntervalSince1970: created),
            updatedAt: Date(timeIntervalSince1970: updated), phase: phase, lastError: lastError, concurrency: concurrency,
            isStarted: isStarted, handles: handles, rootCount: rootCount, firstRoot: firstRoot,
            rules: TreeRules(includes: includes, excludes: excludes, followSymlinks: follow))
        isStream = kind == 1
        isDownload = kind == 2
    }
}

extension JobCounters {
    package var encoded: [UInt8] {
        var writer = RecordWriter(capacity: 40)
        writer.int64(Int64(fileCount))
        writer.int64(totalBytes)
        writer.int64(doneBytes)
        writer.int64(Int64(completedFiles))
        writer.int64(Int64(failedFiles))
        return writer.bytes
    }

    package init?(decoding bytes: [UInt8]) {
        var reader = RecordReader(bytes)
        guard let files = reader.int64(), let total = reader.int64(), let done = reader.int64(),
            let completed = reader.int64(), let failed = reader.int64(), reader.isAtEnd
        else { return nil }
        self.init()
        fileCount = Int(files)
        totalBytes = total
        doneBytes = done
        completedFiles = Int(completed)
        failedFiles = Int(failed)
    }
}
