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
