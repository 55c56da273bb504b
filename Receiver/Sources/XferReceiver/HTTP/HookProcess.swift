import Dispatch
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// One run of a hook executable (`xfer serve --hooks-dir`): the event's JSON on its standard
/// input, its standard output read back, a deadline. Spawned directly (posix_spawn) rather than
/// through Foundation's `Process`, for what a server needs of a child it did not write:
/// - its own process group, so a deadline kills the hook and whatever it started (a shell
///   script's background job would otherwise hold the output open and the request with it);
/// - no descriptor of the receiver's but its three: every one the receiver opens is
///   close-on-exec (NIO's sockets, the storage's files, these pipes, made and spawned under one
///   lock so that two hooks starting at once cannot inherit each other's);
/// - default signal dispositions and an empty mask;
/// - an environment of its own (`environment(event:receiver:)`): a few harmless variables of
///   the receiver's, never its credentials;
/// - the input written into the pipe before the hook starts (an event is far smaller than a
///   pipe's buffer), so a hook that exits without reading cannot raise SIGPIPE in the receiver.
/// The blocking waits run on a dispatch thread, never on an event loop.
enum HookProcess {
    private static let spawning = NSLock()

    struct Outcome: Sendable {
        /// The exit status; nil when a signal ended it.
        var exitStatus: Int32?
        /// At most `outputLimit` bytes of what it wrote to standard output.
        var output: String
    }

    enum Failure: Error, CustomStringConvertible {
        case cannotStart(String)
        case timedOut(Duration)

        var description: String {
            switch self {
            case .cannotStart(let reason): "the hook could not be started: \(reason)"
            case .timedOut(let timeout): "the hook took longer than \(timeout)"
            }
        }
    }

    static let outputLimit = 64 << 10
    /// Pipes hold at least 64 KiB on Linux: an input below that never blocks the write.
    static let inputLimit = 60 << 10

    /// The receiver's variables a hook gets: where programs are, whose home, language and
    /// time zone — nothing that could hold a credential. Besides these, `LC_*` and `XFER_HOOK_*`
    /// (what the operator means hooks to have: `XFER_HOOK_SCANNER_URL=… xfer serve …`).
    ///
    /// An allow-list, not a deny-list: a receiver's environment holds credentials under names
    /// no list can know in advance (`AWS_CONTAINER_AUTHORIZATION_TOKEN`, a platform's own), and
    /// a hook is a program the receiver did not write.
    static let passedVariables: Set<String> = ["PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR"]
    static let passedPrefixes = ["LC_", "XFER_HOOK_"]
    /// When the receiver has no PATH, the hook gets this one (a shell script's `#!/bin/bash` and
    /// the commands in it must be found).
    static let defaultPath = "/usr/local/bin:/usr/bin:/bin"

    /// The environment of a hook run for `event`: the allowed variables of `receiver`, and
    /// `XFER_HOOK_EVENT` naming the event.
    static func environment(event: String, receiver: [String: String] = ProcessInfo.processInfo.environment) -> [String] {
        var chosen = receiver.filter { name, _ in passedVariables.contains(name) || passedPrefixes.contains { name.hasPrefix($0) } }
        if chosen["PATH"] == nil { chosen["PATH"] = defaultPath }
        chosen["XFER_HOOK_EVENT"] = event
        return chosen.keys.sorted().map { "\($0)=\(chosen[$0]!)" }
    }

    static func run(_ executable: String, input: String, environment: [String], timeout: Duration) async throws -> Outcome {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async {
                continuation.resume(with: Result { try runBlocking(executable, input: Array(input.utf8), environment: environment, timeout: timeout) })
            }
        }
    }

    private static func runBlocking(_ executable: String, input: [UInt8], environment: [String], timeout: Duration) throws -> Outcome {
        guard input.count <= inputLimit else { throw Failure.cannotStart("the event is larger than \(inputLimit) bytes") }
        var inputPipe: [Int32] = [0, 0]
        var outputPipe: [Int32] = [0, 0]
        var pid: pid_t = 0
        spawning.lock()
        guard pipe(&inputPipe) == 0 else {
            spawning.unlock()
            throw Failure.cannotStart(String(cString: strerror(errno)))
        }
        guard pipe(&outputPipe) == 0 else {
            close(inputPipe[0]); close(inputPipe[1])
            spawning.unlock()
            throw Failure.cannotStart(String(cString: strerror(errno)))
        }
        for descriptor in inputPipe + outputPipe { _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC) }
        // The whole input, then end of file, before the hook exists.
        let written = input.withUnsafeBytes { write(inputPipe[1], $0.baseAddress, $0.count) }
        close(inputPipe[1])

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        posix_spawn_file_actions_adddup2(&actions, inputPipe[0], 0)
        posix_spawn_file_actions_adddup2(&actions, outputPipe[1], 1)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        var noSignals = sigset_t()
        sigemptyset(&noSignals)
        var allSignals = sigset_t()
        sigfillset(&allSignals)
        posix_spawnattr_setsigmask(&attributes, &noSignals)
        posix_spawnattr_setsigdefault(&attributes, &allSignals)
        posix_spawnattr_setpgroup(&attributes, 0)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        let spawned: Int32 =
            written == input.count
            ? withCStrings([executable]) { argv in withCStrings(environment) { envp in posix_spawn(&pid, executable, &actions, &attributes, argv, envp) } }
            : EIO
        posix_spawn_file_actions_destroy(&actions)
        posix_spawnattr_destroy(&attributes)
        close(inputPipe[0])
        close(outputPipe[1])
        spawning.unlock()
        var outputRead = outputPipe[0]
        defer { if outputRead >= 0 { close(outputRead) } }
        guard spawned == 0 else { throw Failure.cannotStart(String(cString: strerror(spawned))) }

        // Read until end of file or the deadline; past it, the hook's whole group is killed.
        let deadline = ContinuousClock.now + timeout
        var output: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 16 << 10)
        var timedOut = false
        while true {
            let left = deadline - ContinuousClock.now
            if left <= .zero, !timedOut {
                timedOut = true
                kill(-pid, SIGKILL)
            }
            var descriptor = pollfd(fd: outputRead, events: Int16(POLLIN), revents: 0)
            let milliseconds = timedOut ? 1000 : Int32(clamping: max(1, left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000))
            let ready = poll(&descriptor, 1, milliseconds)
            if ready < 0 {
                if errno == EINTR { continue }
                break
            }
            if ready == 0 {
                if timedOut { break }  // killed, yet something still holds the pipe: stop waiting for it
                continue
            }
            let count = buffer.withUnsafeMutableBytes { read(outputRead, $0.baseAddress, $0.count) }
            if count < 0, errno == EINTR { continue }
            if count <= 0 { break }
            if output.count < outputLimit { output.append(contentsOf: buffer[0..<min(count, outputLimit - output.count)]) }
        }
        close(outputRead)
        outputRead = -1
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0, errno == EINTR {}
        if timedOut { throw Failure.timedOut(timeout) }
        // WIFEXITED / WEXITSTATUS, which Swift does not import (macros).
        let exited = status & 0x7F == 0
        return Outcome(exitStatus: exited ? (status >> 8) & 0xFF : nil, output: String(decoding: output, as: UTF8.self))
    }

    /// `strings` as a NULL-terminated array of C strings, for the duration of `body`.
    private static func withCStrings<Result>(_ strings: [String], _ body: ([UnsafeMutablePointer<CChar>?]) -> Result) -> Result {
        let pointers = strings.map { strdup($0) } + [nil]
        defer { for pointer in pointers { free(pointer) } }
        return body(pointers)
    }
}
