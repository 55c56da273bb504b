import NIOPosix

/// Runs blocking file work (fsync, hashing whole files, directory changes) off the cooperative pool.
///
/// The cooperative pool has one thread per core (two here): an fsync that waits on the disk for
/// milliseconds there would stall every request. The pool is the receiver's own so that slow syncs
/// don't queue behind (or in front of) anything else in the process that shares NIO's singleton.
struct BlockingIO: Sendable {
    let pool: NIOThreadPool

    func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await pool.runIfActive(body)
    }
}
