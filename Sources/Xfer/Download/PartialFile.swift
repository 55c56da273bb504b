import FoundationEssentials
import Glibc
import Synchronization
import XferPrimitives

/// What a download keeps in a file's record: the object's location, the
/// validator every ranged request is conditional on, and the digests its
/// bytes are checked against at the end. Committed when the file is opened,
/// before its first range.
enum DownloadHandles {
    static let location = "location"
    /// `etag:"…"` or `date:…` (see `RemoteObject.Validator`).
    static let validator = "validator"
    /// `crc32c=hex;md5=hex;…`.
    static let digests = "digests"
    /// "1": the server ignores ranges; the object is one stream.
    static let noRanges = "noRanges"
    /// "1": a listing described the object (size, validator): it is fetched
    /// without asking about it first.
    static let listed = "listed"

    static func encode(_ validator: RemoteObject.Validator?) -> String? {
        switch validator {
        case .etag(let tag)?: return "etag:" + tag
        case .lastModified(let date)?: return "date:" + date
        case nil: return nil
        }
    }

    static func decodeValidator(_ text: String?) -> RemoteObject.Validator? {
        guard let text else { return nil }
        if text.hasPrefix("etag:") { return .etag(String(text.dropFirst(5))) }
        if text.hasPrefix("date:") { return .lastModified(String(text.dropFirst(5))) }
        return nil
    }

    static func encode(_ digests: [ObjectDigest]) -> String {
        digests.map { digest in
            switch digest {
            case .crc32c(let value): return "crc32c=" + CRC32.hex(value)
            case .crc32(let value): return "crc32=" + CRC32.hex(value)
            case .md5(let bytes): return "md5=" + Checksums.hex(bytes)
            case .sha256(let bytes): return "sha256=" + Checksums.hex(bytes)
            case .crc64nvme(let value): return "crc64nvme=" + CRC64NVME.hex(value)
            // composite-crc32c=HEX-N
            case .composite(let composite):
                return "composite-\(compositeNames[composite.algorithm] ?? "?")=\(Checksums.hex(composite.digest))-\(composite.partCount)"
            }
        }.joined(separator: ";")
    }

    static func decodeDigests(_ text: String?) -> [ObjectDigest] {
        guard let text, !text.isEmpty else { return [] }
        return text.split(separator: ";").compactMap { member in
            let parts = member.split(separator: "=", maxSplits: 1)
            if parts.count == 2, parts[0].hasPrefix("composite-") { return decodeComposite(name: parts[0].dropFirst(10), value: parts[1]) }
            guard parts.count == 2, let bytes = Hex.bytes(parts[1]) else { return nil }
            switch parts[0] {
            case "crc32c" where bytes.count == 4: return .crc32c(ObjectDigest.bigEndian(bytes))
            case "crc32" where bytes.count == 4: return .crc32(ObjectDigest.bigEndian(bytes))
            case "md5" where bytes.count == 16: return .md5(bytes)
            case "sha256" where bytes.count == 32: return .sha256(bytes)
            case "crc64nvme" where bytes.count == 8: return .crc64nvme(bytes.reduce(0) { $0 << 8 | UInt64($1) })
            default: return nil
            }
        }
    }

    private static let compositeNames: [CompositeChecksum.Algorithm: String] = [
        .crc32: "crc32", .crc32c: "crc32c", .sha1: "sha1", .sha256: "sha256",
    ]

    private static func decodeComposite(name: Substring, value: Substring) -> ObjectDigest? {
        guard let algorithm = compositeNames.first(where: { $0.value == name })?.key, let dash = value.lastIndex(of: "-"),
            let bytes = Hex.bytes(value[..<dash]), bytes.count == algorithm.digestLength,
            let count = Int(value[value.index(after: dash)...]), count > 0
        else { return nil }
        return .composite(CompositeChecksum(algorithm: algorithm, digest: bytes, partCount: count))
    }

    /// The object a file's record describes.
    static func object(of record: FileRecord) -> RemoteObject {
        RemoteObject(
            location: record.handles[location] ?? "", size: record.size, validator: decodeValidator(record.handles[validator]),
            digests: decodeDigests(record.handles[digests]), acceptsRanges: record.handles[noRanges] != "1")
    }

    static func handles(of object: RemoteObject, listed: Bool) -> ServerHandles {
        var values = [location: object.location, digests: encode(object.digests)]
        if let validator = encode(object.validator) { values[Self.validator] = validator }
        if !object.acceptsRanges { values[noRanges] = "1" }
        if listed { values[Self.listed] = "1" }
        return ServerHandles(values)
    }
}

/// The partial file of a download in progress, beside its destination
/// (`NAME.xfer-partial`): ranges are written into it at their offsets, and
/// it becomes the destination only complete and checked, by a rename.
///
/// Held by the runner while the file is in progress; its descriptor is
/// opened when the file is loaded (resuming) or opened (a new file), and
/// closed when the runner lets go of it.
final class PartialFile: Sendable {
    let destination: String
    private let state = Mutex<(descriptor: Int32, wholeObjectDigests: [ObjectDigest]?, keptModificationTime: Int64?)>((-1, nil, nil))

    static let suffix = ".xfer-partial"

    init(destination: String) {
        self.destination = destination
    }

    deinit {
        let descriptor = state.withLock { $0.descriptor }
        if descriptor >= 0 { close(descriptor) }
    }

    var path: String { destination + Self.suffix }
    var descriptor: Int32 { state.withLock { $0.descriptor } }

    /// What a one-request file's answer was checked against (set by its chunk, read by its finish).
    var wholeObjectDigests: [ObjectDigest]? {
        get { state.withLock { $0.wholeObjectDigests } }
        set { state.withLock { $0.wholeObjectDigests = newValue } }
    }

    /// The modification time an answer to one of the file's ranges said its
    /// object keeps (`ModificationTimeReading`; set by a chunk, read by the finish).
    var keptModificationTime: Int64? {
        get { state.withLock { $0.keptModificationTime } }
        set { state.withLock { $0.keptModificationTime = newValue } }
    }

    /// Opens the partial file a previous run left; nil when it is gone or
    /// is not the one the record names (its bytes are not the recorded ones).
    func reopen(expecting identity: FileIdentity) -> FileIdentity? {
        let descriptor = open(path, O_RDWR | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        var info = stat()
        guard fstat(descriptor, &info) == 0, UInt64(info.st_ino) == identity.inode, UInt64(info.st_dev) == identity.device,
            Int64(info.st_size) == identity.size
        else {
            close(descriptor)
            return nil
        }
        install(descriptor)
        return identity
    }

    /// Creates (or empties) the partial file at `size` bytes: preallocated
    /// where the filesystem can, else sparse. Its directory entry is made
    /// durable when ranges will be committed before the file completes.
    func create(size: Int64, durableEntry: Bool) throws(XferError) -> FileIdentity {
        let directory = PathText.deletingLastComponent(of: destination)
        try Self.makeDirectories(directory)
        let descriptor = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else { throw Self.failure("cannot create \(path)", errno) }
        // Preallocated: a full disk shows now, not halfway through the ranges.
        // (glibc emulates it on a filesystem without fallocate.)
        if size > 0, case let code = posix_fallocate(descriptor, 0, off_t(size)), code != 0 {
            if code == ENOSPC || code == EDQUOT || code == EFBIG {
                close(descriptor)
                unlink(path)
                throw Self.failure("no room for \(destination) (\(size) bytes)", code)
            }
            // One that cannot be preallocated at all: sparse.
            guard ftruncate(descriptor, off_t(size)) == 0 else {
                close(descriptor)
                throw Self.failure("cannot size \(path)", errno)
            }
        }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else {
            close(descriptor)
            throw Self.failure("cannot read \(path)", errno)
        }
        if durableEntry { try Self.syncDirectory(directory) }
        install(descriptor)
        return FileIdentity(size: size, modificationTimeNanoseconds: 0, inode: UInt64(info.st_ino), device: UInt64(info.st_dev))
    }

    /// Forces the ranges written so far to disk (before they are marked done).
    func syncData() throws(XferError) {
        let descriptor = self.descriptor
        guard descriptor >= 0 else { throw .transferFailed("the partial file of \(destination) is not open (this is a bug)") }
        guard fdatasync(descriptor) == 0 else { throw Self.failure("cannot write \(path) to disk", errno) }
    }

    /// Gives the file a modification time (a sync's: the one its object is synced as).
    func setModificationTime(nanoseconds: Int64) throws(XferError) {
        let descriptor = self.descriptor
        guard descriptor >= 0 else { throw .transferFailed("the partial file of \(destination) is not open (this is a bug)") }
        let seconds = nanoseconds >= 0 ? nanoseconds / 1_000_000_000 : (nanoseconds - 999_999_999) / 1_000_000_000
        let time = timespec(tv_sec: Int(seconds), tv_nsec: Int(nanoseconds - seconds * 1_000_000_000))
        let times = [time, time]
        guard futimens(descriptor, times) == 0 else { throw Self.failure("cannot set the time of \(path)", errno) }
    }

    /// Whether a file that is not this pull's stands at the destination.
    func isBlocked(replacing: Bool) -> Bool {
        !replacing && access(destination, F_OK) == 0
    }

    /// Renames the partial file onto the destination (durable only after the
    /// caller's sync) and lets go of its descriptor.
    func place(replacing: Bool) throws(XferError) {
        if isBlocked(replacing: replacing) {
            throw .invalidInput("\(destination) exists and is not this pull's; --force replaces it")
        }
        guard rename(path, destination) == 0 else { throw Self.failure("cannot rename \(path) to \(destination)", errno) }
        let descriptor = state.withLock { state in
            defer { state.descriptor = -1 }
            return state.descriptor
        }
        if descriptor >= 0 { close(descriptor) }
    }

    /// Drops the partial file (its bytes failed their check, or the pull was cancelled).
    func discard() {
        let descriptor = state.withLock { state in
            defer { state.descriptor = -1 }
            return state.descriptor
        }
        if descriptor >= 0 { close(descriptor) }
        unlink(path)
    }

    private func install(_ descriptor: Int32) {
        let old = state.withLock { state in
            defer { state.descriptor = descriptor }
            return state.descriptor
        }
        if old >= 0 { close(old) }
    }

    static func makeDirectories(_ directory: String) throws(XferError) {
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        } catch {
            throw .transferFailed("cannot create the directory \(directory): \(SystemErrorReason.of(error))")
        }
    }

    static func syncDirectory(_ directory: String) throws(XferError) {
        let descriptor = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard descriptor >= 0 else { throw failure("cannot open \(directory)", errno) }
        defer { close(descriptor) }
        guard fsync(descriptor) == 0 else { throw failure("cannot write \(directory) to disk", errno) }
    }

    static func failure(_ what: String, _ code: Int32) -> XferError {
        let reason = String(cString: strerror(code))
        if code == ENOSPC || code == EDQUOT {
            return .transferFailed("\(what): the disk is full (\(reason)); free space first")
        }
        if code == EFBIG {
            return .transferFailed(
                "\(what): larger than the filesystem or this process's file-size limit allows (\(reason)); make room first")
        }
        return .transferFailed("\(what): \(reason)")
    }
}
