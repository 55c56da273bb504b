import FoundationEssentials
import Glibc
import Synchronization
import XferPrimitives

/// An exclusive, per-job lock held for the life of a push.
///
/// It is an `flock` on a file in the state directory: the kernel drops it
/// when the holder exits or is killed, so a crashed push never leaves a lock
/// that needs cleaning up by hand. The holder writes its pid into the file so
/// the next process can say who holds it.
final class JobLock: Sendable {
    /// The locked file; nil once released.
    private let descriptor: Mutex<Int32?>
    let path: String

    init(stateDirectory: String, job: JobID) throws(XferError) {
        let directory = PathText.appending("locks", to: stateDirectory)
        do {
            try FileManager.default.createDirectory(
                atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw .stateUnavailable("cannot create \(directory): \(StateStore.reason(error))")
        }
        path = Self.path(stateDirectory: stateDirectory, job: job)
        var acquired: Int32?
        while acquired == nil {
            let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
            guard fd >= 0 else {
                throw .stateUnavailable("cannot open \(path): \(String(cString: strerror(errno)))")
            }
            if flock(fd, LOCK_EX | LOCK_NB) != 0 {
                let code = errno
                let holder = Self.readPid(fd)
                close(fd)
                if code == EWOULDBLOCK { throw .jobLocked(job: job, pid: holder) }
                throw .stateUnavailable("cannot lock \(path): \(String(cString: strerror(code)))")
            }
            // Cancel and prune unlink a job's lock file while holding it; a
            // lock taken on a file unlinked meanwhile guards nothing, so
            // only a lock on the file still at `path` counts.
            var held = stat()
            var current = stat()
            if fstat(fd, &held) == 0, stat(path, &current) == 0, held.st_ino == current.st_ino, held.st_dev == current.st_dev {
                acquired = fd
            } else {
                close(fd)
            }
        }
        let fd = acquired!
        descriptor = Mutex(fd)
        let pid = Array("\(getpid())\n".utf8)
        _ = ftruncate(fd, 0)
        _ = pid.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
    }

    deinit {
        release()
    }

    /// Gives the lock up now rather than when the last reference goes, so a
    /// job that ended can be resumed or cancelled at once, even from this
    /// process. Idempotent.
    func release() {
        descriptor.withLock { descriptor in
            guard let fd = descriptor else { return }
            descriptor = nil
            // An empty pid tells `holder` nobody runs the job without it
            // probing the lock (a probe could make a starting push see a busy lock).
            _ = ftruncate(fd, 0)
            // Closing the descriptor releases the flock.
            close(fd)
        }
    }

    /// Removes the lock file; call only while holding the lock, once the
    /// job's state is gone, so lock files do not pile up.
    func removeFile() {
        descriptor.withLock { descriptor in
            if descriptor != nil { _ = unlink(path) }
        }
    }

    static func path(stateDirectory: String, job: JobID) -> String {
        PathText.appending("\(job.rawValue).lock", to: PathText.appending("locks", to: stateDirectory))
    }

    /// The pid of the live process holding the lock of `job`, or nil when
    /// nobody holds it.
    ///
    /// Reads the pid the holder wrote first and probes the lock only when
    /// that process is alive: most jobs are not running, and a probe (a
    /// shared flock, however brief) could make a push starting at that
    /// instant fail with "locked".
    static func holder(stateDirectory: String, job: JobID) -> Int32? {
        let fd = open(path(stateDirectory: stateDirectory, job: job), O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        guard let pid = readPid(fd), pid > 0, kill(pid, 0) == 0 || errno == EPERM else { return nil }
        if flock(fd, LOCK_SH | LOCK_NB) == 0 {
            flock(fd, LOCK_UN)
            return nil
        }
        return pid
    }

    /// True when some live process holds the lock of `job`.
    static func isHeld(stateDirectory: String, job: JobID) -> Bool {
        let path = path(stateDirectory: stateDirectory, job: job)
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        if flock(fd, LOCK_SH | LOCK_NB) == 0 {
            flock(fd, LOCK_UN)
            return false
        }
        return true
    }

    private static func readPid(_ fd: Int32) -> Int32? {
        var buffer = [UInt8](repeating: 0, count: 32)
        let count = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
        guard count > 0 else { return nil }
        let text = String(decoding: buffer[0..<count], as: UTF8.self)
        return Int32(text.trimmingWhitespace())
    }
}
