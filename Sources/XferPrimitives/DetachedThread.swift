import Dispatch

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#else
import Darwin
#endif

/// A thread of its own for work that blocks for long (a loop of `fsync` rounds, a credential
/// fetch that may wait on a network or a command): dispatch's pool would lend one of its few
/// threads for it. A pthread, not Foundation's `Thread` (full Foundation, which a static binary
/// pays for with ICU).
public enum DetachedThread {
    /// Runs `body` on a new detached thread; when the system refuses one (out of threads or
    /// memory), on dispatch's global queue rather than not at all.
    public static func start(_ body: @escaping @Sendable () -> Void) {
        let box = Unmanaged.passRetained(Body(body)).toOpaque()
        var thread = pthread_t()
        let status = pthread_create(&thread, nil, { context in
            Unmanaged<Body>.fromOpaque(context!).takeRetainedValue().run()
            return nil
        }, box)
        guard status == 0 else {
            Unmanaged<Body>.fromOpaque(box).release()
            DispatchQueue.global().async(execute: body)
            return
        }
        pthread_detach(thread)
    }

    private final class Body {
        let run: @Sendable () -> Void
        init(_ run: @escaping @Sendable () -> Void) { self.run = run }
    }
}
