import Glibc

/// The CRC-32C and CRC-64/NVME of a local file, read once: what S3's
/// full-object checksums (`x-amz-checksum-crc32c`, `-crc64nvme`, which S3
/// keeps of every new object since 2025) are compared with, e.g. by a sync
/// deciding by checksum. CRC-32C by ISA-L (the CPU's CRC instruction, ~27
/// GB/s here), CRC-64/NVME by carry-less multiplication (`CRC64NVME`); a
/// 1 MiB buffer whatever the file's size, read sequentially.
public struct FileChecksums: Sendable, Hashable {
    /// The file's CRC-32C, when asked for.
    public var crc32c: UInt32?
    /// The file's CRC-64/NVME, when asked for.
    public var crc64nvme: UInt64?
    /// The file as it was read: size, modification time (nanoseconds since
    /// the epoch), inode and device, taken when it was opened and found the
    /// same once read (a cache of checksums is keyed by what was read).
    public var size: Int64
    public var modificationTimeNanoseconds: Int64
    public var inode: UInt64
    public var device: UInt64

    /// Why a file's checksums could not be computed.
    public struct Failure: Error, Sendable, Hashable, CustomStringConvertible {
        public var path: String
        public var reason: String
        public var description: String { "cannot read \(path): \(reason)" }
    }

    /// Reads the file at `path` once, computing the CRCs asked for.
    ///
    /// - Throws: `Failure` when it cannot be opened or read, is not a
    ///   regular file, or changed (size or modification time) while read.
    public init(ofFileAt path: String, crc32c wantsCRC32C: Bool = true, crc64nvme wantsCRC64: Bool = true) throws(Failure) {
        func failure(_ reason: String) -> Failure { Failure(path: path, reason: reason) }
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw failure(String(cString: strerror(errno))) }
        defer { close(descriptor) }
        var before = stat()
        guard fstat(descriptor, &before) == 0 else { throw failure(String(cString: strerror(errno))) }
        guard before.st_mode & S_IFMT == S_IFREG else { throw failure("not a regular file") }
        _ = posix_fadvise(descriptor, 0, 0, POSIX_FADV_SEQUENTIAL)
        var crc32c = CRC32C()
        var crc64 = CRC64NVME()
        let block = 1 << 20
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: block, alignment: 64)
        defer { buffer.deallocate() }
        var total: Int64 = 0
        while true {
            let count = read(descriptor, buffer.baseAddress, block)
            if count < 0 {
                if errno == EINTR { continue }
                throw failure(String(cString: strerror(errno)))
            }
            if count == 0 { break }
            let bytes = UnsafeRawBufferPointer(rebasing: buffer[0..<count])
            if wantsCRC32C { crc32c.update(bytes) }
            if wantsCRC64 { crc64.update(bytes) }
            total += Int64(count)
        }
        var after = stat()
        guard fstat(descriptor, &after) == 0 else { throw failure(String(cString: strerror(errno))) }
        let modified = { (info: stat) in Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec) }
        guard total == Int64(before.st_size), after.st_size == before.st_size, modified(after) == modified(before) else {
            throw failure("it changed while it was read")
        }
        self.crc32c = wantsCRC32C ? crc32c.value : nil
        self.crc64nvme = wantsCRC64 ? crc64.value : nil
        size = total
        modificationTimeNanoseconds = modified(before)
        inode = UInt64(before.st_ino)
        device = UInt64(before.st_dev)
    }
}
