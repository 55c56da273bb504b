import Crypto
import Foundation
import Glibc

/// A local file opened for reading chunks with `pread`.
///
/// Nothing reads a whole file into memory: a chunk is read as it is sent,
/// straight into curl's buffer (`BodyFile`).
final class LocalFile: BodyFile {
    let path: String
    let identity: FileIdentity
    private let descriptor: Int32

    /// Opens `path` and checks it is something xfer can send.
    init(path: String) throws(XferError) {
        self.path = path
        var info = stat()
        // Opened before it is looked at, so what is checked is what is read;
        // O_NONBLOCK keeps a FIFO put in the file's place from hanging the open.
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else {
            let code = errno
            // Out of descriptors or memory is this process's trouble, not the
            // file's: it must stop the job, not pass for a file that is gone.
            if code == EMFILE || code == ENFILE || code == ENOMEM {
                throw .transferFailed("cannot open \(path): \(Self.describe(code))")
            }
            throw .fileUnreadable(path: path, reason: Self.describe(code))
        }
        guard fstat(fd, &info) == 0 else {
            let code = errno
            close(fd)
            throw .fileUnreadable(path: path, reason: Self.describe(code))
        }
        guard info.st_mode & S_IFMT == S_IFREG else {
            close(fd)
            throw .fileUnreadable(path: path, reason: "not a regular file")
        }
        descriptor = fd
        identity = Self.identity(of: info)
    }

    deinit {
        close(descriptor)
    }

    /// Reads `length` bytes at `offset`. A short read means the file shrank
    /// under us, which must stop the job rather than send wrong bytes.
    func read(offset: Int64, length: Int) throws(XferError) -> [UInt8] {
        guard length > 0 else { return [] }
        var failure: Int32 = 0
        let bytes = [UInt8](unsafeUninitializedCapacity: length) { buffer, initialized in
            var done = 0
            while done < length {
                let n = pread(descriptor, buffer.baseAddress! + done, length - done, off_t(offset) + off_t(done))
                if n > 0 {
                    done += n
                } else if n == 0 {
                    break
                } else if errno != EINTR {
                    failure = errno
                    break
                }
            }
            initialized = done
        }
        if failure != 0 {
            throw .fileUnreadable(path: path, reason: Self.describe(failure))
        }
        guard bytes.count == length else {
            throw .fileChanged(path: path, detail: "it is shorter than when the job began")
        }
        return bytes
    }

    /// `pread` into `buffer`, retried on EINTR; fewer bytes only at the end of the file.
    func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws(XferError) -> Int {
        var done = 0
        while done < buffer.count {
            let n = pread(descriptor, buffer.baseAddress! + done, buffer.count - done, off_t(offset) + off_t(done))
            if n > 0 {
                done += n
            } else if n == 0 {
                break
            } else if errno != EINTR {
                throw .fileUnreadable(path: path, reason: Self.describe(errno))
            }
        }
        return done
    }

    func checkUnchanged() throws(XferError) {
        let now = try currentIdentity()
        if now != identity {
            throw .fileChanged(path: path, detail: TransferEngine.describeChange(from: identity, to: now))
        }
    }

    /// The identity the file has now (to notice changes during a push).
    func currentIdentity() throws(XferError) -> FileIdentity {
        var info = stat()
        guard fstat(descriptor, &info) == 0 else {
            throw .fileUnreadable(path: path, reason: Self.describe(errno))
        }
        return Self.identity(of: info)
    }

    /// Computes whole-file digests in one pass with a bounded buffer.
    func digests(_ algorithms: Set<DigestAlgorithm>) throws(XferError) -> [DigestAlgorithm: String] {
        guard !algorithms.isEmpty else { return [:] }
        var md5 = Insecure.MD5()
        var sha = SHA256()
        try forEachBlock(from: 0, to: identity.size) { bytes throws(XferError) in
            if algorithms.contains(.md5) { md5.update(data: bytes) }
            if algorithms.contains(.sha256) { sha.update(data: bytes) }
        }
        var result: [DigestAlgorithm: String] = [:]
        if algorithms.contains(.md5) { result[.md5] = Checksums.hex(Array(md5.finalize())) }
        if algorithms.contains(.sha256) { result[.sha256] = Checksums.hex(Array(sha.finalize())) }
        return result
    }

    /// The whole file's CRC-32C, by one read with a bounded buffer.
    func crc32c() throws(XferError) -> UInt32 {
        var crc = CRC32C()
        try forEachBlock(from: 0, to: identity.size) { bytes throws(XferError) in crc.update(bytes) }
        return crc.value
    }

    /// Calls `body` with the bytes from `start` to `end`, 1 MiB at a time
    /// (the one bounded read of whole-file digests and catch-up hashing).
    func forEachBlock(
        from start: Int64, to end: Int64, cancellable: Bool = false, _ body: ([UInt8]) throws(XferError) -> Void
    ) throws(XferError) {
        let step: Int64 = 1 << 20
        var offset = start
        while offset < end {
            if cancellable, Task.isCancelled { throw .interrupted }
            let length = Int(min(step, end - offset))
            try body(try read(offset: offset, length: length))
            offset += Int64(length)
        }
    }

    static func identity(of info: stat) -> FileIdentity {
        FileIdentity(
            size: Int64(info.st_size),
            modificationTimeNanoseconds: Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec),
            inode: UInt64(info.st_ino),
            device: UInt64(info.st_dev))
    }

    static func describe(_ code: Int32) -> String {
        switch code {
        case ENOENT: return "no such file"
        case EACCES: return "permission denied"
        case ELOOP: return "too many levels of symbolic links"
        case ENOTDIR: return "a component of the path is not a directory"
        case ENAMETOOLONG: return "file name too long"
        default: return String(cString: strerror(code))
        }
    }
}

/// SHA-256 of a whole file, fed by the chunks as they are read so a fresh
/// push needs no second pass over the file.
///
/// Chunks are read in ascending order but by concurrent tasks, so one can
/// arrive ahead of a gap; a small gap is then read from disk (from the page
/// cache, usually). Chunks behind the hashed prefix are ignored: retries and
/// rollbacks re-read bytes already hashed.
///
/// A large gap means a resumed job: the acknowledged part was never fed in
/// this process. Reading it inline would hold the first new chunk back until
/// all of it was hashed (64 s for 32 GiB), so the file is hashed in one
/// background pass instead, while the upload goes on, and `finish` waits for it.
final class StreamingFileHash: Sendable {
    /// Gaps up to this are read inline: chunks in flight at once are never further apart.
    static let largestInlineGap: Int64 = 256 << 20

    private struct State {
        var hash = SHA256()
        var hashedUpTo: Int64 = 0
        var digest: String?
        /// Set once a large gap handed the rest of the file to `background`.
        var backgrounded = false
        var background: Task<String, any Error>?
    }

    private let file: LocalFile
    private let state = LockedValue(State())

    init(file: LocalFile) {
        self.file = file
    }

    deinit {
        state.withLock { $0.background?.cancel() }
    }

    func feed(offset: Int64, bytes: [UInt8]) throws(XferError) {
        let handOff = try state.withLock { state throws(XferError) -> (hash: SHA256, position: Int64)? in
            guard state.digest == nil, !state.backgrounded else { return nil }
            let end = offset + Int64(bytes.count)
            guard end > state.hashedUpTo else { return nil }
            if offset - state.hashedUpTo > Self.largestInlineGap {
                state.backgrounded = true
                return (state.hash, state.hashedUpTo)
            }
            if offset > state.hashedUpTo {
                try Self.catchUp(&state, file: self.file, to: offset)
            }
            let skip = Int(state.hashedUpTo - offset)
            if skip == 0 {
                state.hash.update(data: bytes)
            } else {
                state.hash.update(data: bytes[skip...])
            }
            state.hashedUpTo = end
            return nil
        }
        guard let handOff else { return }
        let whole = self.file
        // SHA256 is a plain value; this copy is the task's alone.
        nonisolated(unsafe) let start = handOff
        let task = Task.detached(priority: .utility) { () throws -> String in
            var hash = start.hash
            var position = start.position
            try Self.hash(whole, into: &hash, from: &position, to: whole.identity.size, cancellable: true)
            return Checksums.hex(Array(hash.finalize()))
        }
        state.withLock { $0.background = task }
    }

    /// The file's SHA-256 (lowercase hex), reading whatever was not fed.
    func finish() async throws(XferError) -> String {
        if let background = state.withLock({ $0.background }) {
            do {
                return try await background.value
            } catch let error as XferError {
                throw error
            } catch {
                throw .interrupted
            }
        }
        return try state.withLock { state throws(XferError) -> String in
            if let digest = state.digest { return digest }
            try Self.catchUp(&state, file: file, to: file.identity.size)
            let digest = Checksums.hex(Array(state.hash.finalize()))
            state.digest = digest
            return digest
        }
    }

    private static func catchUp(_ state: inout State, file: LocalFile, to target: Int64) throws(XferError) {
        try hash(file, into: &state.hash, from: &state.hashedUpTo, to: target, cancellable: false)
    }

    private static func hash(
        _ file: LocalFile, into hash: inout SHA256, from position: inout Int64, to target: Int64, cancellable: Bool
    ) throws(XferError) {
        var hashed = position
        defer { position = hashed }
        try file.forEachBlock(from: position, to: target, cancellable: cancellable) { bytes throws(XferError) in
            hash.update(data: bytes)
            hashed += Int64(bytes.count)
        }
    }
}
