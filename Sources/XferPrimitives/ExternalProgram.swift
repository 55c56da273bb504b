#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#else
import Darwin
#endif

/// One run of a program xfer did not write — a receiver's hook, a profile's
/// `credential_process` — spawned directly (posix_spawn) rather than through Foundation's
/// `Process` (full Foundation, which a static binary pays for with ICU), for what a long-lived
/// process needs of a child:
/// - no descriptor of the parent's but its three: the pipes are made close-on-exec and spawned
///   under one lock, so that two children starting at once cannot inherit each other's (every
///   other descriptor xfer and NIO open is close-on-exec already);
/// - default signal dispositions and an empty mask;
/// - optionally its own process group, so a deadline kills it and whatever it started (a shell
///   script's background job would otherwise hold the output open);
/// - the input written into the pipe before the child starts (at most `inputLimit`, below a
///   pipe's buffer), so a child that exits without reading cannot raise SIGPIPE here;
/// - its output read up to a limit, then the child stopped.
/// It blocks its thread: callers run it off any event loop.
public enum ExternalProgram {
    /// What the child reads.
    public enum Input: Sendable {
        /// These bytes, then end of file.
        case bytes([UInt8])
        /// The parent's standard input (a credential command may ask for an MFA code).
        case inherited
    }

    public struct Outcome: Sendable {
        /// The exit status; nil when a signal ended it.
        public var exitStatus: Int32?
        /// The signal that ended it, if one did.
        public var signal: Int32?
        /// At most `outputLimit` bytes of what it wrote to standard output.
        public var output: [UInt8]
        /// Whether it wrote more than `outputLimit` (then it was killed).
        public var exceededOutputLimit: Bool
    }

    public enum Failure: Error, Sendable, CustomStringConvertible {
        case cannotStart(String)
        case timedOut(Duration)

        public var description: String {
            switch self {
            case .cannotStart(let reason): "could not be started: \(reason)"
            case .timedOut(let timeout): "took longer than \(timeout)"
            }
        }
    }

    /// Pipes hold at least 64 KiB on Linux: an input below that never blocks the write.
    public static let inputLimit = 60 << 10

    private static let spawning = SpawnLock()

    /// Runs `executable` with `arguments` (argv[0] is `executable`), `environment` (`KEY=VALUE`;
    /// nil passes the parent's), until it exits, `timeout` passes (then SIGKILL, to its group if
    /// it has its own) or it writes more than `outputLimit` bytes (SIGKILL as well).
    public static func run(
        _ executable: String, arguments: [String] = [], input: Input, environment: [String]?, ownProcessGroup: Bool,
        timeout: Duration, outputLimit: Int
    ) throws(Failure) -> Outcome {
        var bytesIn: [UInt8] = []
        if case .bytes(let bytes) = input {
            guard bytes.count <= inputLimit else { throw .cannotStart("its input is larger than \(inputLimit) bytes") }
            bytesIn = bytes
        }
        var inputPipe: [Int32] = [-1, -1]
        var outputPipe: [Int32] = [0, 0]
        var pid: pid_t = 0
        spawning.lock()
        if case .bytes = input, pipe(&inputPipe) != 0 {
            spawning.unlock()
            throw .cannotStart(String(cString: strerror(errno)))
        }
        guard pipe(&outputPipe) == 0 else {
            let reason = String(cString: strerror(errno))
            for descriptor in inputPipe where descriptor >= 0 { close(descriptor) }
            spawning.unlock()
            throw .cannotStart(reason)
        }
        for descriptor in inputPipe + outputPipe where descriptor >= 0 { _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC) }
        var written = 0
        if inputPipe[1] >= 0 {
            // The whole input, then end of file, before the child exists.
            written = bytesIn.withUnsafeBytes { write(inputPipe[1], $0.baseAddress, $0.count) }
            close(inputPipe[1])
        }

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        if inputPipe[0] >= 0 { posix_spawn_file_actions_adddup2(&actions, inputPipe[0], 0) }
        posix_spawn_file_actions_adddup2(&actions, outputPipe[1], 1)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        var noSignals = sigset_t()
        sigemptyset(&noSignals)
        var allSignals = sigset_t()
        sigfillset(&allSignals)
        posix_spawnattr_setsigmask(&attributes, &noSignals)
        posix_spawnattr_setsigdefault(&attributes, &allSignals)
        var flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF
        if ownProcessGroup {
            posix_spawnattr_setpgroup(&attributes, 0)
            flags |= POSIX_SPAWN_SETPGROUP
        }
        posix_spawnattr_setflags(&attributes, Int16(flags))
        let spawned: Int32
        if inputPipe[0] >= 0, written != bytesIn.count {
            spawned = EIO
        } else {
            spawned = withCStrings([executable] + arguments) { argv in
                if let environment {
                    return withCStrings(environment) { envp in posix_spawn(&pid, executable, &actions, &attributes, argv, envp) }
                }
                return posix_spawn(&pid, executable, &actions, &attributes, argv, environ)
            }
        }
        posix_spawn_file_actions_destroy(&actions)
        posix_spawnattr_destroy(&attributes)
        if inputPipe[0] >= 0 { close(inputPipe[0]) }
        close(outputPipe[1])
        spawning.unlock()
        let outputRead = outputPipe[0]
        defer { close(outputRead) }
        guard spawned == 0 else { throw .cannotStart(String(cString: strerror(spawned))) }

        // Read until end of file, the deadline or the limit; past either, the child is killed.
        let target = ownProcessGroup ? -pid : pid
        let deadline = ContinuousClock.now + timeout
        var output: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 16 << 10)
        var timedOut = false
        var exceeded = false
        var total = 0
        while true {
            let left = deadline - ContinuousClock.now
            if left <= .zero, !timedOut, !exceeded {
                timedOut = true
                kill(target, SIGKILL)
            }
            var descriptor = pollfd(fd: outputRead, events: Int16(POLLIN), revents: 0)
            let stopped = timedOut || exceeded
            let milliseconds = stopped ? 1000 : Int32(clamping: max(1, left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000))
            let ready = poll(&descriptor, 1, milliseconds)
            if ready < 0 {
                if errno == EINTR { continue }
                break
            }
            if ready == 0 {
                if stopped { break }  // killed, yet something still holds the pipe: stop waiting for it
                continue
            }
            let count = buffer.withUnsafeMutableBytes { read(outputRead, $0.baseAddress, $0.count) }
            if count < 0, errno == EINTR { continue }
            if count <= 0 { break }
            total += count
            if output.count < outputLimit { output.append(contentsOf: buffer[0..<min(count, outputLimit - output.count)]) }
            if total > outputLimit, !exceeded {
                // More than a child of ours may say: stop it, and drain what it already wrote.
                exceeded = true
                kill(target, SIGKILL)
            }
        }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0, errno == EINTR {}
        if timedOut { throw .timedOut(timeout) }
        // WIFEXITED / WEXITSTATUS / WTERMSIG, which Swift does not import (macros).
        let exited = status & 0x7F == 0
        return Outcome(
            exitStatus: exited ? (status >> 8) & 0xFF : nil, signal: exited ? nil : status & 0x7F,
            output: output, exceededOutputLimit: exceeded)
    }

    /// `strings` as a NULL-terminated array of C strings, for the duration of `body`.
    private static func withCStrings<Result>(_ strings: [String], _ body: ([UnsafeMutablePointer<CChar>?]) -> Result) -> Result {
        let pointers = strings.map { strdup($0) } + [nil]
        defer { for pointer in pointers { free(pointer) } }
        return body(pointers)
    }
}

/// A process-wide lock around making pipes and spawning: a plain pthread mutex (the
/// standard library's `Mutex` holds a value; this one guards a section of system calls).
private final class SpawnLock: @unchecked Sendable {
    // @unchecked: the mutex is only touched through lock/unlock.
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>

    init() {
        mutex = .allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
    }

    func lock() { pthread_mutex_lock(mutex) }
    func unlock() { pthread_mutex_unlock(mutex) }
}
