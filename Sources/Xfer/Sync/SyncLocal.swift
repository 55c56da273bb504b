import FoundationEssentials
import Glibc
import XferPrimitives

/// The two listings of a sync merged in key order, a batch at a time.
struct SyncMerge {
    struct Pair {
        var source: SyncEntry?
        var destination: SyncEntry?
    }

    let store: StateStore
    let job: JobID
    let batch: Int
    private var sourceAfter: [UInt8]?
    private var destinationAfter: [UInt8]?
    private var sources: [(key: [UInt8], entry: SyncEntry)] = []
    private var destinations: [(key: [UInt8], entry: SyncEntry)] = []
    private var sourceEnded = false
    private var destinationEnded = false

    init(store: StateStore, job: JobID, batch: Int) {
        self.store = store
        self.job = job
        self.batch = batch
    }

    /// The next pairs (empty at the end): each key of either side once.
    mutating func next() throws(XferError) -> [Pair] {
        var pairs: [Pair] = []
        while pairs.count < batch {
            if sources.isEmpty, !sourceEnded {
                sources = try store.syncEntries(job, side: .source, after: sourceAfter, limit: batch)
                sourceEnded = sources.count < batch
                if let last = sources.last { sourceAfter = last.key }
                sources.reverse()
            }
            if destinations.isEmpty, !destinationEnded {
                destinations = try store.syncEntries(job, side: .destination, after: destinationAfter, limit: batch)
                destinationEnded = destinations.count < batch
                if let last = destinations.last { destinationAfter = last.key }
                destinations.reverse()
            }
            switch (sources.last, destinations.last) {
            case (nil, nil):
                return pairs
            case (let source?, nil):
                pairs.append(Pair(source: source.entry))
                sources.removeLast()
            case (nil, let destination?):
                pairs.append(Pair(destination: destination.entry))
                destinations.removeLast()
            case (let source?, let destination?):
                if source.key == destination.key {
                    pairs.append(Pair(source: source.entry, destination: destination.entry))
                    sources.removeLast()
                    destinations.removeLast()
                } else if source.key.lexicographicallyPrecedes(destination.key) {
                    pairs.append(Pair(source: source.entry))
                    sources.removeLast()
                } else {
                    pairs.append(Pair(destination: destination.entry))
                    destinations.removeLast()
                }
            }
        }
        return pairs
    }
}

/// A local file's CRC-32C, read once per identity: cached in the state
/// store by device and inode with the size and times it was read at, so an
/// unchanged file is never read twice (a write changes its ctime, which a
/// `touch -m` back cannot undo).
enum LocalChecksum {
    /// The MD5 of a file's bytes, read once (not cached: only objects another
    /// tool wrote without a checksum are compared so, once each).
    static func md5(of path: String) -> [UInt8]? {
        guard let file = try? LocalFile(path: path), let digests = try? file.digests([.md5]), let hex = digests[.md5] else { return nil }
        return Hex.bytes(hex)
    }

    /// Checksums read but not yet written to the cache: written with the
    /// plan's batch they were read for (one transaction, not one per file).
    typealias Pending = LockedValue<[(device: UInt64, inode: UInt64, checksum: CachedChecksum)]>

    static func crc32c(of path: String, store: StateStore, pending: Pending) throws(XferError) -> UInt32? {
        try checksums(of: path, store: store, pending: pending, crc64nvme: false)?.crc32c
    }

    /// The file's CRC64NVME (and CRC-32C), read in one pass when not cached.
    static func crc64nvme(of path: String, store: StateStore, pending: Pending) throws(XferError) -> UInt64? {
        try checksums(of: path, store: store, pending: pending, crc64nvme: true)?.crc64nvme
    }

    /// Writes what `pending` holds to the cache, in one transaction.
    static func flush(_ pending: Pending, to store: StateStore) throws(XferError) {
        let items = pending.withLock { items in
            defer { items.removeAll() }
            return items
        }
        try store.putCachedChecksums(items)
    }

    private static func checksums(
        of path: String, store: StateStore, pending: Pending, crc64nvme wants64: Bool
    ) throws(XferError) -> CachedChecksum? {
        var info = stat()
        guard stat(path, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { return nil }
        let identity = LocalFile.identity(of: info)
        let changeTime = Int64(info.st_ctim.tv_sec) * 1_000_000_000 + Int64(info.st_ctim.tv_nsec)
        if let cached = try store.cachedChecksum(device: identity.device, inode: identity.inode), cached.size == identity.size,
            cached.modificationTime == identity.modificationTimeNanoseconds, cached.changeTime == changeTime,
            !wants64 || cached.crc64nvme != nil
        {
            return cached
        }
        // One read (ISA-L's CRC-32C, and CRC64NVME when asked), refused if the file changes meanwhile.
        guard let read = try? FileChecksums(ofFileAt: path, crc32c: true, crc64nvme: wants64), let crc = read.crc32c,
            read.inode == identity.inode, read.device == identity.device
        else { return nil }
        let cached = CachedChecksum(
            size: read.size, modificationTime: read.modificationTimeNanoseconds, changeTime: changeTime, crc32c: crc,
            crc64nvme: read.crc64nvme)
        pending.withLock { $0.append((identity.device, identity.inode, cached)) }
        return cached
    }
}

/// `--files-from`: the paths a manifest names, one per line (relative to the
/// source directory; empty lines and lines starting with `#` are skipped),
/// each looked at on its own instead of walking the directory. Read a line
/// at a time: memory does not grow with the manifest.
struct FileManifest: Sequence {
    let path: String
    let root: String
    let selection: FileSelection

    init(path: String, root: String, selection: FileSelection) throws(XferError) {
        guard access(path, R_OK) == 0 else { throw .invalidInput("\(path): cannot be read") }
        self.path = path
        self.root = root
        self.selection = selection
    }

    func makeIterator() -> Iterator { Iterator(self) }

    final class Iterator: IteratorProtocol {
        private let manifest: FileManifest
        private let stream: UnsafeMutablePointer<FILE>?
        private var line: UnsafeMutablePointer<CChar>?
        private var capacity = 0

        init(_ manifest: FileManifest) {
            self.manifest = manifest
            stream = fopen(manifest.path, "re")
        }

        deinit {
            free(line)
            if let stream { fclose(stream) }
        }

        func next() -> FileTreeEntry? {
            guard let stream else { return nil }
            while true {
                let length = getline(&line, &capacity, stream)
                guard length >= 0, let line else { return nil }
                var text = String(cString: line)
                while text.hasSuffix("\n") || text.hasSuffix("\r") { text.removeLast() }
                while text.hasPrefix("./") { text.removeFirst(2) }
                if text.isEmpty || text.hasPrefix("#") { continue }
                if let entry = entry(for: text) { return entry }
            }
        }

        private func entry(for relative: String) -> FileTreeEntry? {
            let full = FileRecord.join(manifest.root, relative)
            guard TransferEngine.safeRelativePath(relative) != nil else {
                return .failed(path: full, relativePath: relative, root: 0, reason: "not a path below the directory (in --files-from)")
            }
            guard manifest.selection.takesKey(relative) else { return nil }
            var info = stat()
            guard stat(full, &info) == 0 else {
                return .failed(path: full, relativePath: relative, root: 0, reason: "\(String(cString: strerror(errno))) (named in --files-from)")
            }
            guard info.st_mode & S_IFMT == S_IFREG else {
                return .failed(path: full, relativePath: relative, root: 0, reason: "not a regular file (named in --files-from)")
            }
            return .file(FoundFile(path: full, relativePath: relative, root: 0, identity: LocalFile.identity(of: info)))
        }
    }
}
