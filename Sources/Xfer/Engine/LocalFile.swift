import Crypto
import FoundationEssentials
import Glibc
import Synchronization
import XferPrimitives

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
        try checkUnchanged(against: identity)
    }

    /// Throws `.fileChanged` when the file no longer has `recorded` (e.g. the job's record of it).
    func checkUnchanged(against recorded: FileIdentity) throws(XferError) {
        let now = try currentIdentity()
        if now != recorded {
            throw .fileChanged(path: path, detail: TransferEngine.describeChange(from: recorded, to: now))
        }
    }

    /// What `fstat` says of the open file now (nil if it cannot).
    func status() -> stat? {
        var info = stat()
        return fstat(descriptor, &info) == 0 ? info : nil
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
            if algorithms.contains(.md5) { md5.update(bufferPointer: bytes) }
            if algorithms.contains(.sha256) { sha.update(bufferPointer: bytes) }
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

    /// Calls `body` with the bytes from `start` to `end`, a buffer at a time
    /// (the one bounded read of whole-file digests and catch-up hashing).
    /// `buffer` is reused when given; otherwise one of 1 MiB is allocated for
    /// the call. Either way the bytes are read into the same pages over and
    /// over: a fresh allocation per block is a fresh mapping the kernel
    /// faults in and zeroes, which showed in the profile.
    func forEachBlock(
        from start: Int64, to end: Int64, cancellable: Bool = false, using buffer: UnsafeMutableRawBufferPointer? = nil,
        _ body: (UnsafeRawBufferPointer) throws(XferError) -> Void
    ) throws(XferError) {
        guard start < end else { return }
        let owned = buffer == nil ? UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 64) : nil
        defer { owned?.deallocate() }
        guard let block = buffer ?? owned, block.count > 0 else { return }
        var offset = start
        while offset < end {
            if cancellable, Task.isCancelled { throw .interrupted }
            let want = Int(min(Int64(block.count), end - offset))
            let got = try read(into: UnsafeMutableRawBufferPointer(rebasing: block[0..<want]), at: offset)
            guard got == want else { throw .fileChanged(path: path, detail: "it is shorter than when the job began") }
            try body(UnsafeRawBufferPointer(rebasing: block[0..<want]))
            offset += Int64(want)
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
/// arrive ahead of a gap; the gap is then read from disk (from the page
/// cache, usually). Chunks behind the hashed prefix are ignored: retries and
/// rollbacks re-read bytes already hashed.
///
/// The hashing runs outside the lock: one feeder at a time holds the hash
/// (`busy`), and a feeder that finds it held goes on without feeding — its
/// bytes are a gap the next feeder reads back. Hashing under the lock made
/// the other chunks' passes wait in the kernel's spinning mutex for as long
/// as a gap took to hash (3 % of a Content-MD5 push's CPU in `perf`).
///
/// A large gap means a resumed job: the acknowledged part was never fed in
/// this process. Reading it inline would hold the first new chunk back until
/// all of it was hashed (64 s for 32 GiB), so the file is hashed in one
/// background pass instead, while the upload goes on, and `finish` waits for it.
final class StreamingFileHash: @unchecked Sendable {
    /// Gaps up to this are read inline: chunks in flight at once are never further apart.
    static let largestInlineGap: Int64 = 256 << 20
    /// The catch-up read's buffer, allocated once per file that needs one.
    static let catchUpBlock = 256 << 10

    private struct State {
        var hash = SHA256()
        var hashedUpTo: Int64 = 0
        /// A feeder holds `hash` (and `buffer`) outside the lock.
        var busy = false
        var digest: String?
        /// Set once a large gap handed the rest of the file to `background`.
        var backgrounded = false
        var background: Task<String, any Error>?
    }

    /// What a feeder takes out of the lock to work on. `SHA256` is a plain
    /// value with no shared storage, so a copy moved between tasks is safe.
    private struct Turn: @unchecked Sendable {
        var hash: SHA256
        var position: Int64
    }

    private let file: LocalFile
    /// Inline, not a `LockedValue`: one allocation a file fewer, and no
    /// generic class to take apart when each file's hash goes.
    private let state = Mutex(State())
    /// Used only by the feeder holding the turn (`busy`): that is what makes
    /// the class `@unchecked Sendable`. Allocated at the first catch-up: most
    /// files are hashed from their chunks' own reads, or not at all (a CRC-32C
    /// was agreed), and 256 KiB mapped and unmapped per file was ~8 % of a
    /// small patch file's client CPU.
    private var buffer: UnsafeMutableRawBufferPointer?

    init(file: LocalFile) {
        self.file = file
    }

    deinit {
        state.withLock { $0.background?.cancel() }
        buffer?.deallocate()
    }

    func feed(offset: Int64, bytes: [UInt8]) throws(XferError) {
        let end = offset + Int64(bytes.count)
        enum Claim { case none, turn(Turn), background(Turn) }
        let claim = state.withLock { state -> Claim in
            guard state.digest == nil, !state.backgrounded, !state.busy, end > state.hashedUpTo else { return .none }
            let turn = Turn(hash: state.hash, position: state.hashedUpTo)
            if offset - state.hashedUpTo > Self.largestInlineGap {
                state.backgrounded = true
                return .background(turn)
            }
            state.busy = true
            return .turn(turn)
        }
        switch claim {
        case .none:
            return
        case .background(let start):
            startBackground(from: start)
        case .turn(var turn):
            do {
                if offset > turn.position { try catchUp(&turn, to: offset) }
                let skip = Int(turn.position - offset)
                bytes.withUnsafeBytes { turn.hash.update(bufferPointer: UnsafeRawBufferPointer(rebasing: $0[skip...])) }
                turn.position = end
            } catch {
                state.withLock { $0.busy = false }
                throw error
            }
            state.withLock { state in
                state.hash = turn.hash
                state.hashedUpTo = turn.position
                state.busy = false
            }
        }
    }

    /// Hashes the rest of the file in a task of its own (a resumed job's large gap).
    private func startBackground(from start: Turn) {
        let whole = file
        let task = Task.detached(priority: .utility) { () throws -> String in
            var hash = start.hash
            var position = start.position
            try whole.forEachBlock(from: position, to: whole.identity.size, cancellable: true) { bytes throws(XferError) in
                hash.update(bufferPointer: bytes)
                position += Int64(bytes.count)
            }
            return Checksums.hex(Array(hash.finalize()))
        }
        state.withLock { $0.background = task }
    }

    /// The file's SHA-256 (lowercase hex), reading whatever was not fed.
    func finish() async throws(XferError) -> String {
        while true {
            if let background = state.withLock({ $0.background }) {
                do {
                    return try await background.value
                } catch let error as XferError {
                    throw error
                } catch {
                    throw .interrupted
                }
            }
            enum Claim { case done(String), turn(Turn), wait }
            let claim = state.withLock { state -> Claim in
                if let digest = state.digest { return .done(digest) }
                // Every chunk's pass is over when the file finishes; a feeder
                // still holding the turn is one of a retried chunk's, nearly done.
                guard !state.busy else { return .wait }
                state.busy = true
                return .turn(Turn(hash: state.hash, position: state.hashedUpTo))
            }
            switch claim {
            case .done(let digest):
                return digest
            case .wait:
                await Task.yield()
            case .turn(var turn):
                do {
                    try catchUp(&turn, to: file.identity.size)
                } catch {
                    state.withLock { $0.busy = false }
                    throw error
                }
                let digest = Checksums.hex(Array(turn.hash.finalize()))
                state.withLock { state in
                    state.hash = turn.hash
                    state.hashedUpTo = turn.position
                    state.digest = digest
                    state.busy = false
                }
                return digest
            }
        }
    }

    /// Reads and hashes the gap up to `target`; only the turn's holder calls it.
    private func catchUp(_ turn: inout Turn, to target: Int64) throws(XferError) {
        var hash = turn.hash
        var position = turn.position
        defer {
            turn.hash = hash
            turn.position = position
        }
        guard position < target else { return }
        let block: UnsafeMutableRawBufferPointer
        if let buffer {
            block = buffer
        } else {
            block = UnsafeMutableRawBufferPointer.allocate(byteCount: Self.catchUpBlock, alignment: 64)
            buffer = block
        }
        try file.forEachBlock(from: position, to: target, using: block) { bytes throws(XferError) in
            hash.update(bufferPointer: bytes)
            position += Int64(bytes.count)
        }
    }
}
