#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#else
import Darwin
#endif

/// `syncfs(2)`: every write to the filesystem holding `descriptor` made
/// durable, in one call (the group commits of the receiver and of a pull).
/// Glibc declares it only under _GNU_SOURCE, which Swift's Glibc module does
/// not see, so it is looked up once by name; without it (not Linux) `sync(2)`
/// does the same for every filesystem. Returns 0, or -1 with `errno` set.
public let syncFilesystem: @convention(c) (Int32) -> Int32 = {
    #if os(Linux)
    if let symbol = dlsym(nil, "syncfs") {
        return unsafeBitCast(symbol, to: (@convention(c) (Int32) -> Int32).self)
    }
    #endif
    return { _ in
        sync()
        return 0
    }
}()

/// `sync_file_range(SYNC_FILE_RANGE_WRITE)`: starts writing a range of a file to the disk
/// without waiting for it, so that the sync which later makes it durable waits only for what
/// is left. Looked up by name as `syncfs` is (Glibc declares it only under _GNU_SOURCE); a
/// no-op where it is missing. Advice only: the later sync reports any failure.
public func startWriteback(descriptor: Int32, offset: Int, count: Int) {
    syncFileRange?(descriptor, Int64(offset), Int64(count), syncFileRangeWrite)
}

/// SYNC_FILE_RANGE_WRITE in <fcntl.h>.
private let syncFileRangeWrite: UInt32 = 2

private let syncFileRange: (@convention(c) (Int32, Int64, Int64, UInt32) -> Int32)? = {
    #if os(Linux)
    if let symbol = dlsym(nil, "sync_file_range") {
        return unsafeBitCast(symbol, to: (@convention(c) (Int32, Int64, Int64, UInt32) -> Int32).self)
    }
    #endif
    return nil
}()

/// `copy_file_range(2)`: copies up to `count` bytes from `source` at `sourceOffset` to
/// `destination` at `destinationOffset` inside the kernel — no pass through user space, and on a
/// filesystem that shares blocks (XFS, Btrfs) no second write at all. Advances both offsets by
/// what it copied and returns that (0: `source` ended); -1 with `errno` set. Looked up by name as
/// `syncfs` is; nil where it is missing, and `errno` then says what the caller falls back from
/// (`EXDEV`, `EINVAL`, `EOPNOTSUPP`, `ENOSYS` where a filesystem or kernel cannot).
public func copyFileRange(
    from source: Int32, at sourceOffset: inout Int, to destination: Int32, at destinationOffset: inout Int, count: Int
) -> Int? {
    guard let copyFileRangeCall else { return nil }
    var from = Int64(sourceOffset)
    var to = Int64(destinationOffset)
    let copied = copyFileRangeCall(source, &from, destination, &to, count, 0)
    if copied > 0 {
        sourceOffset = Int(from)
        destinationOffset = Int(to)
    }
    return copied
}

private let copyFileRangeCall: (@convention(c) (Int32, UnsafeMutablePointer<Int64>?, Int32, UnsafeMutablePointer<Int64>?, Int, UInt32) -> Int)? = {
    #if os(Linux)
    if let symbol = dlsym(nil, "copy_file_range") {
        return unsafeBitCast(
            symbol, to: (@convention(c) (Int32, UnsafeMutablePointer<Int64>?, Int32, UnsafeMutablePointer<Int64>?, Int, UInt32) -> Int).self)
    }
    #endif
    return nil
}()
