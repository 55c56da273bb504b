import Foundation
import Glibc

/// An exclusive, per-job lock held for the life of a push.
///
/// It is an `flock` on a file in the state directory: the kernel drops it
/// when the holder exits or is killed, so a crashed push never leaves a lock
/// that needs cleaning up by hand. The holder writes its pid into the file so
/// the next process can say who holds it.
final class JobLock: Sendable {
    private let descriptor: Int32
    let path: String

    init(stateDirectory: String, job: JobID) throws(XferError) {
        let directory = (stateDirectory as NSString).appendingPathComponent("locks")
        do {
            try FileManager.default.createDirectory(
                atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw .stateUnavailable("cannot create \(directory): \(StateStore.reason(error))")
        }
        path = (directory as NSString).appendingPathComponent("\(job.rawValue).lock")
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            throw .stateUnavailable("cannot open \(path): \(String(cString: strerror(errno)))")
        }
        if flock(fd, LOCK_EX | LOCK_NB) != 0 {
            let busy = errno == EWOULDBLOCK
            let holder = Self.readPid(fd)
            close(fd)
            if busy { throw .jobLocked(job: job, pid: holder) }
            throw .stateUnavailable("cannot lock \(path): \(String(cString: strerror(errno)))")
        }
        descriptor = fd
        let pid = Array("\(getpid())\n".utf8)
        _ = ftruncate(fd, 0)
        _ = pid.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
    }

    deinit {
        // Closing the descriptor releases the flock.
        close(descriptor)
    }

    /// True when some live process holds the lock of `job`.
    static func isHeld(stateDirectory: String, job: JobID) -> Bool {
        let path = ((stateDirectory as NSString).appendingPathComponent("locks") as NSString)
            .appendingPathComponent("\(job.rawValue).lock")
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
        return Int32(text.trimmingCharacters(in: .whitespacesAndNewlines))
    }
}
