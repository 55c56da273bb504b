import Foundation
import Glibc

/// A real child process with its stdout read line by line, for tests that
/// kill things with SIGKILL and for running the `xfer` binary.
///
/// Reads block the calling thread: tests wait on what the child prints, not
/// on sleeps.
public final class ChildProcess: @unchecked Sendable {
    public let process = Process()
    private let stdoutPipe = Pipe()
    private let stderrPipe = Pipe()
    private var buffer: [UInt8] = []
    private var stdoutClosed = false
    private let stderrData = LockedData()

    public init(executable: String, arguments: [String], environment: [String: String]? = nil, workingDirectory: String? = nil) throws {
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        var env = ProcessInfo.processInfo.environment
        // The tests may use `xfer serve`'s test switches (faults, held answers...), which the
        // command refuses elsewhere; a test of that refusal sets it to "".
        env["XFER_TEST_HOOKS"] = env["XFER_TEST_HOOKS"] ?? "1"
        for (key, value) in environment ?? [:] { env[key] = value }
        process.environment = env
        if let workingDirectory { process.currentDirectoryURL = URL(fileURLWithPath: workingDirectory) }
        process.standardOutput = stdoutPipe
        process.standardError = stderrPipe
        process.standardInput = FileHandle.nullDevice
        let sink = stderrData
        stderrPipe.fileHandleForReading.readabilityHandler = { handle in
            let data = handle.availableData
            if data.isEmpty {
                handle.readabilityHandler = nil
                sink.close()
            } else {
                sink.append(data)
            }
        }
        try process.run()
    }

    public var pid: Int32 { process.processIdentifier }

    /// The next line on stdout (without the newline), or nil at end of output.
    public func readLine() -> String? {
        while true {
            if let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                let line = String(decoding: buffer[..<newline], as: UTF8.self)
                buffer.removeSubrange(...newline)
                return line
            }
            if stdoutClosed {
                guard !buffer.isEmpty else { return nil }
                defer { buffer.removeAll() }
                return String(decoding: buffer, as: UTF8.self)
            }
            let data = stdoutPipe.fileHandleForReading.availableData
            if data.isEmpty { stdoutClosed = true } else { buffer.append(contentsOf: data) }
        }
    }

    /// Reads lines until one satisfies `predicate`; returns it (nil at EOF).
    public func readLine(where predicate: (String) -> Bool) -> String? {
        while let line = readLine() {
            if predicate(line) { return line }
        }
        return nil
    }

    /// Everything left on stdout.
    public func readRemaining() -> [String] {
        var lines: [String] = []
        while let line = readLine() { lines.append(line) }
        return lines
    }

    public func kill(_ signal: Int32 = SIGKILL) {
        Glibc.kill(process.processIdentifier, signal)
    }

    /// Waits for the child to exit and returns its exit status (128+n for
    /// a signal, as a shell reports it).
    @discardableResult
    public func wait() -> Int32 {
        process.waitUntilExit()
        // stderr is read on another thread: without this, a test could read
        // `standardError` before the child's last line arrived. The pipe's
        // end comes right after the exit (the bound only covers a grandchild
        // keeping the pipe open).
        stderrData.waitUntilClosed(timeout: 10)
        if process.terminationReason == .uncaughtSignal { return 128 + process.terminationStatus }
        return process.terminationStatus
    }

    /// What the child wrote on stderr so far (complete after `wait`).
    public var standardError: String {
        // Give the readability handler a chance to drain after exit.
        stderrData.text
    }

    deinit {
        if process.isRunning {
            Glibc.kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        stderrPipe.fileHandleForReading.readabilityHandler = nil
    }
}

final class LockedData: @unchecked Sendable {
    private let lock = NSLock()
    private var data = Data()
    private let closed = DispatchSemaphore(value: 0)
    private var isClosed = false

    /// The writer saw the end of the pipe.
    func close() {
        lock.lock()
        isClosed = true
        lock.unlock()
        closed.signal()
    }

    /// Waits for `close()`, at most `timeout` seconds; returns at once when it already happened.
    func waitUntilClosed(timeout: Double) {
        lock.lock()
        let done = isClosed
        lock.unlock()
        guard !done else { return }
        if closed.wait(timeout: .now() + timeout) == .success { closed.signal() }
    }

    func append(_ more: Data) {
        lock.lock()
        data.append(more)
        lock.unlock()
    }

    var text: String {
        lock.lock()
        defer { lock.unlock() }
        return String(decoding: data, as: UTF8.self)
    }
}

/// A fresh temporary directory, removed when the value is released.
public final class TemporaryDirectory: @unchecked Sendable {
    public let path: String

    public init(_ label: String = "xfer-test") {
        let base = (NSTemporaryDirectory() as NSString).appendingPathComponent("\(label)-\(UUID().uuidString.prefix(8))")
        try? FileManager.default.createDirectory(atPath: base, withIntermediateDirectories: true)
        path = base
    }

    public func file(_ name: String) -> String { (path as NSString).appendingPathComponent(name) }

    deinit {
        try? FileManager.default.removeItem(atPath: path)
    }
}

/// Writes a file of `size` pseudo-random bytes (deterministic per seed)
/// without holding more than 1 MiB in memory.
public func makeTestFile(at path: String, size: Int, seed: UInt64 = 1) throws {
    _ = FileManager.default.createFile(atPath: path, contents: nil)
    let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
    defer { try? handle.close() }
    var state = seed &* 0x9E37_79B9_7F4A_7C15 | 1
    var remaining = size
    while remaining > 0 {
        let count = min(remaining, 1 << 20)
        var block = [UInt8](repeating: 0, count: count)
        for i in stride(from: 0, to: count, by: 8) {
            state ^= state << 13
            state ^= state >> 7
            state ^= state << 17
            withUnsafeBytes(of: state) { word in
                for j in 0..<min(8, count - i) { block[i + j] = word[j] }
            }
        }
        try handle.write(contentsOf: block)
        remaining -= count
    }
}

/// SHA-256 of a file by the system's `sha256sum`, an implementation
/// independent of xfer's.
public func sha256sum(_ path: String) throws -> String {
    let child = try ChildProcess(executable: "/usr/bin/sha256sum", arguments: [path])
    let line = child.readLine() ?? ""
    child.wait()
    return String(line.prefix(64))
}

/// The directory that holds the built products (`xfer`, the test bundle).
public var productsDirectory: String {
    let bundle = Bundle.main.bundleURL
    // Linux: .build/<triple>/debug/xferPackageTests.xctest is an executable.
    return bundle.path.hasSuffix(".xctest") ? bundle.deletingLastPathComponent().path : bundle.path
}

/// The `xfer` executable built alongside the tests, or the one `XFER_TEST_BINARY` names: the
/// end-to-end suites run against the shipped static binary that way (`make test-dist`).
public var xferExecutable: String {
    if let binary = ProcessInfo.processInfo.environment["XFER_TEST_BINARY"], !binary.isEmpty { return binary }
    return (productsDirectory as NSString).appendingPathComponent("xfer")
}

/// The first of several racing outcomes (e.g. "the receiver held the
/// request" versus "the client exited"), waited for with a last-resort
/// timeout so a broken build fails instead of hanging.
public final class FirstOutcome: @unchecked Sendable {
    // @unchecked: `value` is only touched under `lock`.
    private let lock = NSLock()
    private let done = DispatchSemaphore(value: 0)
    private var value: String?

    public init() {}

    public func finish(_ text: String) {
        lock.lock()
        defer { lock.unlock() }
        guard value == nil else { return }
        value = text
        done.signal()
    }

    public func wait(timeout seconds: Int) -> String? {
        guard done.wait(timeout: .now() + .seconds(seconds)) == .success else { return nil }
        lock.lock()
        defer { lock.unlock() }
        return value
    }
}
