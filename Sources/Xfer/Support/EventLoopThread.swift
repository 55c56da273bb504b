#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Marks the threads that run an event loop (the transport's), so code that
/// could block on a disk can tell it must not do so on the current thread.
///
/// A thread-specific flag rather than a task-local: what matters is the
/// thread the code runs on, and a task's steps may run on either kind.
enum EventLoopThread {
    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        precondition(pthread_key_create(&key, nil) == 0, "cannot create a thread-specific key")
        return key
    }()

    /// Marks the calling thread for the rest of its life.
    static func markCurrent() {
        pthread_setspecific(key, UnsafeRawPointer(bitPattern: 1))
    }

    static var isCurrent: Bool {
        pthread_getspecific(key) != nil
    }
}
