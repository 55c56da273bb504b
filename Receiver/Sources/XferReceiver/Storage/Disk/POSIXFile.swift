import XferPrimitives

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A failed system call, with enough context to tell which file was involved.
/// Paths are safe to log: tokens only ever travel in headers, never in names on disk.
struct IOError: Error, CustomStringConvertible {
    let operation: String
    let path: String
    let code: Int32

    var description: String {
        "\(operation)(\(path)): \(String(cString: strerror(code))) (errno \(code))"
    }
}

/// A thin owner of a file descriptor. Every call blocks, so callers run these on `BlockingIO`,
/// except `pwriteAll`, which only copies into the page cache and is cheaper inline than a thread hop.
struct POSIXFile: Sendable {
    let descriptor: Int32
    let path: String

    static func open(_ path: String, _ flags: Int32, mode: mode_t = 0o644) throws -> POSIXFile {
        while true {
            let fd = Self.systemOpen(path, flags | O_CLOEXEC, mode)
            if fd >= 0 { return POSIXFile(descriptor: fd, path: path) }
            if errno == EINTR { continue }
            throw IOError(operation: "open", path: path, code: errno)
        }
    }

    /// `name` inside the open directory `directory` (`openat`); `O_NOFOLLOW` in `flags` refuses a
    /// symbolic link there.
    static func open(_ name: String, relativeTo directory: POSIXFile, _ flags: Int32, mode: mode_t = 0o644) throws -> POSIXFile {
        let path = directory.path + "/" + name
        while true {
            let fd = openat(directory.descriptor, name, flags | O_CLOEXEC, mode)
            if fd >= 0 { return POSIXFile(descriptor: fd, path: path) }
            if errno == EINTR { continue }
            throw IOError(operation: "openat", path: path, code: errno)
        }
    }

    private static func systemOpen(_ path: String, _ flags: Int32, _ mode: mode_t) -> Int32 {
        #if canImport(Darwin)
        Darwin.open(path, flags, mode)
        #elseif canImport(Musl)
        Musl.open(path, flags, mode)
        #else
        Glibc.open(path, flags, mode)
        #endif
    }

    func close() {
        // Retrying close after EINTR can close a descriptor another thread just got, so never retry.
        #if canImport(Darwin)
        _ = Darwin.close(descriptor)
        #elseif canImport(Musl)
        _ = Musl.close(descriptor)
        #else
        _ = Glibc.close(descriptor)
        #endif
    }

    func pwriteAll(_ bytes: UnsafeRawBufferPointer, at offset: Int) throws {
        var done = 0
        while done < bytes.count {
            let n = pwrite(descriptor, bytes.baseAddress! + done, bytes.count - done, off_t(offset + done))
            if n < 0 {
                if errno == EINTR { continue }
                throw IOError(operation: "pwrite", path: path, code: errno)
            }
            done += n
        }
    }

    func writeAll(_ bytes: UnsafeRawBufferPointer) throws {
        var done = 0
        while done < bytes.count {
            let n = write(descriptor, bytes.baseAddress! + done, bytes.count - done)
            if n < 0 {
                if errno == EINTR { continue }
                throw IOError(operation: "write", path: path, code: errno)
            }
            done += n
        }
    }

    /// Reads until `buffer` is full or the file ends; returns the number of bytes read.
    func preadFully(into buffer: UnsafeMutableRawBufferPointer, at offset: Int) throws -> Int {
        var done = 0
        while done < buffer.count {
            let n = pread(descriptor, buffer.baseAddress! + done, buffer.count - done, off_t(offset + done))
            if n < 0 {
                if errno == EINTR { continue }
                throw IOError(operation: "pread", path: path, code: errno)
            }
            if n == 0 { break }
            done += n
        }
        return done
    }

    /// Makes the data (and the file size, which fdatasync covers) durable; timestamps are not worth a journal write.
    func syncData() throws {
        #if os(Linux) || os(Android)
        let rc = fdatasync(descriptor)
        #else
        let rc = fsync(descriptor)
        #endif
        if rc != 0 { throw IOError(operation: "fdatasync", path: path, code: errno) }
    }

    func sync() throws {
        if fsync(descriptor) != 0 { throw IOError(operation: "fsync", path: path, code: errno) }
    }

    /// Starts writing `count` bytes from `offset` to the disk without waiting for them
    /// (`sync_file_range(SYNC_FILE_RANGE_WRITE)`), so that the sync which makes a long body
    /// durable waits only for its tail. Advice: a failure is left to that sync to report.
    func startWriteback(offset: Int, count: Int) {
        XferPrimitives.startWriteback(descriptor: descriptor, offset: offset, count: count)
    }

    /// Copies `count` bytes of `source`, from its start, into this file at `offset`: inside the
    /// kernel where it can (`copyFileRange`: no pass through user space; on a filesystem that
    /// shares blocks, no second write), else through a buffer of at most 1 MiB. Throws when
    /// `source` holds fewer bytes. Blocking.
    func copyAll(from source: POSIXFile, count: Int, at offset: Int) throws {
        var from = 0
        var to = offset
        while from < count {
            guard let copied = XferPrimitives.copyFileRange(from: source.descriptor, at: &from, to: descriptor, at: &to, count: count - from)
            else { break }
            if copied < 0 {
                if errno == EINTR { continue }
                // Not between these two files (another filesystem, a kind that cannot): the buffer's way.
                if [EXDEV, EINVAL, EOPNOTSUPP, ENOSYS].contains(errno) { break }
                throw IOError(operation: "copy_file_range", path: path, code: errno)
            }
            if copied == 0 { throw IOError(operation: "copy_file_range", path: source.path, code: ENODATA) }
        }
        guard from < count else { return }
        var buffer = [UInt8](repeating: 0, count: min(count - from, 1 << 20))
        while from < count {
            let n = try buffer.withUnsafeMutableBytes {
                try source.preadFully(into: UnsafeMutableRawBufferPointer(rebasing: $0[0..<min($0.count, count - from)]), at: from)
            }
            if n == 0 { throw IOError(operation: "pread", path: source.path, code: ENODATA) }
            try buffer.withUnsafeBytes { try pwriteAll(UnsafeRawBufferPointer(rebasing: $0[0..<n]), at: to) }
            from += n
            to += n
        }
    }

    func size() throws -> Int {
        var info = stat()
        if fstat(descriptor, &info) != 0 { throw IOError(operation: "fstat", path: path, code: errno) }
        return Int(info.st_size)
    }
}

/// Directory-level operations needed to make creations and renames survive a crash.
enum FileSystemOps {
    static func exists(_ path: String) -> Bool {
        var info = stat()
        return stat(path, &info) == 0
    }

    /// Creates the directory; an existing one is fine because startup and creation both race with nothing but themselves.
    static func makeDirectory(_ path: String) throws {
        if mkdir(path, 0o755) != 0 && errno != EEXIST {
            throw IOError(operation: "mkdir", path: path, code: errno)
        }
    }

    /// Creates the directory and fails if it exists, which is how a fresh upload id claims its name.
    static func makeNewDirectory(_ path: String) throws -> Bool {
        if mkdir(path, 0o755) == 0 { return true }
        if errno == EEXIST { return false }
        throw IOError(operation: "mkdir", path: path, code: errno)
    }

    /// A new or renamed entry is only durable once its directory is synced.
    static func syncDirectory(_ path: String) throws {
        let dir = try POSIXFile.open(path, O_RDONLY | O_DIRECTORY)
        defer { dir.close() }
        try dir.sync()
    }

    static func rename(_ from: String, to: String) throws {
        #if canImport(Darwin)
        let rc = Darwin.rename(from, to)
        #elseif canImport(Musl)
        let rc = Musl.rename(from, to)
        #else
        let rc = Glibc.rename(from, to)
        #endif
        if rc != 0 { throw IOError(operation: "rename", path: from, code: errno) }
    }

    /// Readers must see the old content or the new one, never a torn mix, even after a crash.
    static func writeAtomically(_ bytes: [UInt8], to path: String, directory: String) throws {
        let temporary = path + ".tmp"
        let file = try POSIXFile.open(temporary, O_WRONLY | O_CREAT | O_TRUNC)
        do {
            try bytes.withUnsafeBytes { try file.writeAll($0) }
            try file.sync()
            file.close()
        } catch {
            file.close()
            throw error
        }
        try rename(temporary, to: path)
        try syncDirectory(directory)
    }

    /// Creates `path` (which must not exist) holding `bytes`. Not synced: for files made inside a
    /// new upload's directory before its creation's sync round, whose loaders read a missing or
    /// torn file as "never created".
    static func writeNew(_ bytes: [UInt8], to path: String) throws {
        let file = try POSIXFile.open(path, O_WRONLY | O_CREAT | O_EXCL)
        defer { file.close() }
        try bytes.withUnsafeBytes { try file.writeAll($0) }
    }

    /// Calls `body` with the bytes of each name in `directory` (not `.` or `..`), one at a time,
    /// as `readdir` reads them; the bytes are valid during the call only. A scan of a directory
    /// that grows with every upload ever made (`uploads/` keeps each completed upload's log)
    /// holds one name, where a listing held them all: a sweep of 300,000 logs took the
    /// receiver's RSS from 31 to 93 MiB. A directory that cannot be opened lists nothing. Names
    /// added or removed meanwhile may or may not be seen, as `readdir` says; callers that
    /// remove what they find collect it first. Blocking.
    static func forEachName(in directory: String, _ body: (UnsafeBufferPointer<UInt8>) throws -> Void) rethrows {
        guard let stream = opendir(directory) else { return }
        defer { closedir(stream) }
        while let entry = readdir(stream) {
            try withUnsafePointer(to: &entry.pointee.d_name) { tuple in
                try tuple.withMemoryRebound(to: UInt8.self, capacity: MemoryLayout.size(ofValue: tuple.pointee)) { start in
                    let name = UnsafeBufferPointer(start: start, count: strlen(UnsafeRawPointer(start).assumingMemoryBound(to: CChar.self)))
                    if name.count == 1 && name[0] == UInt8(ascii: ".") { return }
                    if name.count == 2 && name[0] == UInt8(ascii: ".") && name[1] == UInt8(ascii: ".") { return }
                    try body(name)
                }
            }
        }
    }

    /// Returns nil when the file does not exist; any other failure is an error worth surfacing.
    static func readAll(_ path: String) throws -> [UInt8]? {
        let file: POSIXFile
        do {
            file = try POSIXFile.open(path, O_RDONLY)
        } catch let error as IOError where error.code == ENOENT {
            return nil
        }
        defer { file.close() }
        var result: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        var offset = 0
        while true {
            let n = try chunk.withUnsafeMutableBytes { try file.preadFully(into: $0, at: offset) }
            result.append(contentsOf: chunk[0..<n])
            offset += n
            if n < chunk.count { break }
        }
        return result
    }

    /// Moves `source` to `base/components[0]/.../components[n-1]`, creating the directories on the
    /// way (mode 0755 before the umask). Not synced: callers wait for a `Durability` round. Blocking.
    ///
    /// Below `base` nothing is followed by name: each directory is created with `mkdirat` and
    /// opened with `O_NOFOLLOW | O_DIRECTORY` relative to the one above it, and the file is moved
    /// in with `renameat` relative to the last, so a symbolic link (or a file) where a directory
    /// is expected fails the move instead of leading out of `base`. The components must be
    /// checked names (`RelativePath`): no '/', no `.`/`..`, not empty.
    ///
    /// Where this call creates the first directory itself (a new upload's `downloads/<id>`, the
    /// usual case), it holds nothing this call did not put there, so the rest is done by name:
    /// one `mkdir` a directory and one `rename`, against four calls a directory (open, `mkdirat`,
    /// open, close) the walk takes. Where it exists already (a load repairing a publication a
    /// crash cut short), the walk above.
    static func place(_ source: String, under base: String, at components: [String]) throws {
        precondition(!components.isEmpty, "a place needs a name")
        if components.count > 1 {
            var path = base + "/" + components[0]
            if mkdir(path, 0o755) == 0 {
                for component in components.dropFirst().dropLast() {
                    path += "/" + component
                    guard mkdir(path, 0o755) == 0 else { throw IOError(operation: "mkdir", path: path, code: errno) }
                }
                try rename(source, to: path + "/" + components[components.count - 1])
                return
            }
        }
        var directory = try POSIXFile.open(base, O_RDONLY | O_DIRECTORY)
        defer { directory.close() }
        for component in components.dropLast() {
            if mkdirat(directory.descriptor, component, 0o755) != 0 && errno != EEXIST {
                throw IOError(operation: "mkdirat", path: directory.path + "/" + component, code: errno)
            }
            let next = try POSIXFile.open(component, relativeTo: directory, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
            directory.close()
            directory = next
        }
        let last = components[components.count - 1]
        if renameat(AT_FDCWD, source, directory.descriptor, last) != 0 {
            throw IOError(operation: "renameat", path: directory.path + "/" + last, code: errno)
        }
    }

    /// Creates an empty file (or keeps an existing one) without truncating it.
    static func touch(_ path: String) throws {
        let file = try POSIXFile.open(path, O_WRONLY | O_CREAT)
        file.close()
    }
}
