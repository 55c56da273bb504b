import XferPrimitives
import NIOPosix
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The receiver's group commit: everything any request wrote becomes durable in shared rounds.
///
/// A request writes into the page cache (chunk bytes, a log record, a new directory, a rename),
/// then awaits `sync()`, and answers only after it returns. One round is one `syncfs` of each
/// filesystem the store lives on: it makes every write made before the round began durable,
/// whichever file or directory it touched. Requests that call `sync()` while a round runs wait
/// for the next one, which starts as soon as the current one ends. So ~8 clients' creations,
/// chunks and completions share one flush instead of paying an fsync (or, in one
/// completion, six) each.
///
/// Ordering between two writes (a chunk's bytes before the record that says they arrived; a
/// completion record before the rename that publishes) is kept by awaiting `sync()` between them.
///
/// `syncfs` also flushes what other programs wrote to the same filesystem; the receiver only
/// waits for that, it does not do their work.
final class Durability: Sendable {
    private struct Waiter {
        let continuation: CheckedContinuation<Void, any Error>
        /// Run on the sync thread once this waiter's earlier writes are durable; what it writes
        /// is made durable by the next round before the waiter is resumed.
        var then: (@Sendable () throws -> Void)?
    }

    private struct State {
        var waiting: [Waiter] = []
        var running = false
    }

    private let state = Mutex(State())
    private let pool: NIOThreadPool
    /// One open directory per filesystem the store spans (by `st_dev`), kept open for `syncfs`.
    private let descriptors: [Int32]
    /// Rounds run so far; for tests and benchmarks.
    let rounds = Atomic<Int>(0)

    /// `directories` are the store's top-level directories; each distinct filesystem among them is
    /// flushed in every round. Blocking (opens them).
    init(directories: [String], pool: NIOThreadPool) throws {
        self.pool = pool
        var devices = Set<UInt64>()
        var descriptors: [Int32] = []
        for directory in directories {
            let file = try POSIXFile.open(directory, O_RDONLY | O_DIRECTORY)
            var info = stat()
            guard fstat(file.descriptor, &info) == 0 else {
                let code = errno
                file.close()
                throw IOError(operation: "fstat", path: directory, code: code)
            }
            if devices.insert(UInt64(info.st_dev)).inserted {
                descriptors.append(file.descriptor)
            } else {
                file.close()
            }
        }
        self.descriptors = descriptors
    }

    deinit {
        for descriptor in descriptors { _ = close(descriptor) }
    }

    /// Returns once everything written before the call is on disk; throws if the flush failed
    /// (then nothing written since the previous round may be acknowledged).
    ///
    /// With `then`: once the round has made the earlier writes durable, `then` runs on the sync
    /// thread (a small blocking write, such as the log record that says those bytes arrived),
    /// and the call returns after the next round has made that durable too. Two ordered flushes
    /// without the caller's task waking up in between, and the record lands in the very next
    /// round. A `then` that throws fails the call.
    func sync(then: (@Sendable () throws -> Void)? = nil) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            let start = state.withLock { state in
                state.waiting.append(Waiter(continuation: continuation, then: then))
                guard !state.running else { return false }
                state.running = true
                return true
            }
            if start {
                pool.submit { work in
                    guard work == .active else {
                        self.failAll(IOError(operation: "syncfs", path: "(receiver shutting down)", code: ECANCELED))
                        return
                    }
                    self.runRounds()
                }
            }
        }
    }

    /// A round now, on the caller's thread. Blocking: for recovery work already on the pool.
    func syncNow() throws {
        try flush()
    }

    private func runRounds() {
        // Waiters whose `then` ran after the last flush: the next flush is theirs too.
        var carried: [Waiter] = []
        while true {
            var batch = state.withLock { state in
                let batch = state.waiting
                state.waiting.removeAll(keepingCapacity: true)
                if batch.isEmpty && carried.isEmpty { state.running = false }
                return batch
            }
            if batch.isEmpty && carried.isEmpty { return }
            batch += carried
            carried.removeAll(keepingCapacity: true)
            // Taken before the flush: every write of these callers precedes it.
            let result = Result { try flush() }
            rounds.add(1, ordering: .relaxed)
            for waiter in batch {
                guard case .success = result, let then = waiter.then else {
                    waiter.continuation.resume(with: result)
                    continue
                }
                do {
                    try then()
                    carried.append(Waiter(continuation: waiter.continuation, then: nil))
                } catch {
                    waiter.continuation.resume(throwing: error)
                }
            }
        }
    }

    private func failAll(_ error: any Error) {
        let batch = state.withLock { state in
            let batch = state.waiting
            state.waiting.removeAll()
            state.running = false
            return batch
        }
        for waiter in batch { waiter.continuation.resume(throwing: error) }
    }

    private func flush() throws {
        for descriptor in descriptors {
            while true {
                if Self.syncFilesystem(descriptor) == 0 { break }
                if errno == EINTR { continue }
                throw IOError(operation: "syncfs", path: "(receiver root)", code: errno)
            }
        }
    }

    /// `syncfs(2)`, as XferPrimitives wraps it for the receiver and the engine.
    private static let syncFilesystem = XferPrimitives.syncFilesystem
}
