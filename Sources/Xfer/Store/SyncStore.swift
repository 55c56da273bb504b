import Crypto
import FoundationEssentials
import XferPrimitives

/// What `xfer sync` keeps beside its jobs, in the same LMDB environment
/// (Docs/architecture.md, "State store layout"). Keys start with the job's
/// 8-byte id where they belong to one job, so deleting the job deletes them.
///
/// - `sync.entries`: job ‖ side (1 source, 2 destination) ‖ key → `SyncEntry`.
///   Both listings, sorted by LMDB as they arrive: the plan is a merge of two
///   cursors, never a listing held in memory.
/// - `sync.state`: job ‖ name → value: the stage, each remote listing's
///   cursor (or, listed as key ranges, its split keys and each range's
///   cursor), the options planned with, the plan's tally.
/// - `sync.deletes`: job ‖ key → `SyncEntry`: what the plan deletes once
///   every copy succeeded; each goes when it is deleted.
/// - `sync.objects`: place ‖ key → `KnownObject`: what xfer knows of an
///   object it wrote or described (its version, the source's time and
///   CRC-32C): a re-run recognises an unchanged object from its listing
///   alone, with no request per key. Kept across jobs.
/// - `sync.checksums`: device ‖ inode → `CachedChecksum`: a local file's
///   CRC-32C with the identity it was read at (size, times): a file is
///   read again only when one of them changed. Kept across jobs.
struct SyncDatabases: Sendable {
    let entries: LMDBDatabase
    let state: LMDBDatabase
    let deletes: LMDBDatabase
    let objects: LMDBDatabase
    let checksums: LMDBDatabase

    init(_ env: LMDBEnvironment) throws {
        entries = try env.database(named: "sync.entries", checksummed: true)
        state = try env.database(named: "sync.state", checksummed: true)
        deletes = try env.database(named: "sync.deletes", checksummed: true)
        objects = try env.database(named: "sync.objects", checksummed: true)
        checksums = try env.database(named: "sync.checksums", checksummed: true)
    }

    /// The databases whose keys start with a job's id.
    var perJob: [LMDBDatabase] { [entries, state, deletes] }
}

/// One key of a listing.
struct SyncEntry: Sendable, Hashable {
    var key: String
    var size: Int64
    /// Local: the file's modification time. Listed object: its LastModified. (ns)
    var time: Int64
    /// Listed object: its ETag, unquoted.
    var version: String?
    /// Local: the file's inode and device.
    var inode: UInt64 = 0
    var device: UInt64 = 0
    /// Listed object of a sync's source: where it is fetched from.
    var location: String?

    var encoded: [UInt8] {
        var writer = RecordWriter(capacity: 32 + key.utf8.count)
        writer.string(key)
        writer.varint(UInt64(bitPattern: size))
        writer.varint(UInt64(bitPattern: time))
        writer.optionalString(version)
        writer.varint(inode)
        writer.varint(device)
        writer.optionalString(location)
        return writer.bytes
    }

    init(
        key: String, size: Int64, time: Int64, version: String? = nil, inode: UInt64 = 0, device: UInt64 = 0, location: String? = nil
    ) {
        self.key = key
        self.size = size
        self.time = time
        self.version = version
        self.inode = inode
        self.device = device
        self.location = location
    }

    init?(decoding bytes: [UInt8]) {
        var reader = RecordReader(bytes)
        guard let key = reader.string(), let size = reader.varint(), let time = reader.varint(),
            let version = reader.optionalString(), let inode = reader.varint(), let device = reader.varint(),
            let location = reader.optionalString(), reader.isAtEnd
        else { return nil }
        self.init(
            key: key, size: Int64(bitPattern: size), time: Int64(bitPattern: time), version: version, inode: inode, device: device,
            location: location)
    }
}

/// What xfer knows of an object at a key: valid while the key holds `version`.
struct KnownObject: Sendable, Hashable {
    var version: String
    var size: Int64
    /// The source file's modification time the object was made from (ns).
    var modificationTime: Int64?
    var crc32c: UInt32?
    var crc64nvme: UInt64?

    var encoded: [UInt8] {
        var writer = RecordWriter(capacity: 48)
        writer.string(version)
        writer.varint(UInt64(bitPattern: size))
        writer.bool(modificationTime != nil)
        writer.varint(UInt64(bitPattern: modificationTime ?? 0))
        writer.bool(crc32c != nil)
        writer.varint(UInt64(crc32c ?? 0))
        writer.bool(crc64nvme != nil)
        writer.varint(crc64nvme ?? 0)
        return writer.bytes
    }

    init(version: String, size: Int64, modificationTime: Int64?, crc32c: UInt32?, crc64nvme: UInt64? = nil) {
        self.version = version
        self.size = size
        self.modificationTime = modificationTime
        self.crc32c = crc32c
        self.crc64nvme = crc64nvme
    }

    init?(decoding bytes: [UInt8]) {
        var reader = RecordReader(bytes)
        guard let version = reader.string(), let size = reader.varint(), let hasTime = reader.bool(), let time = reader.varint(),
            let hasCRC = reader.bool(), let crc = reader.varint(), crc <= UInt64(UInt32.max), let hasCRC64 = reader.bool(),
            let crc64 = reader.varint(), reader.isAtEnd
        else { return nil }
        self.init(
            version: version, size: Int64(bitPattern: size), modificationTime: hasTime ? Int64(bitPattern: time) : nil,
            crc32c: hasCRC ? UInt32(crc) : nil, crc64nvme: hasCRC64 ? crc64 : nil)
    }

    /// Whether a checksum of the whole object is known.
    var hasChecksum: Bool { crc32c != nil || crc64nvme != nil }
}

/// A local file's CRC-32C and the identity it was read at.
struct CachedChecksum: Sendable, Hashable {
    var size: Int64
    var modificationTime: Int64
    var changeTime: Int64
    var crc32c: UInt32
    /// Read only when an object to compare with has no CRC-32C but a CRC64NVME.
    var crc64nvme: UInt64?

    var encoded: [UInt8] {
        var writer = RecordWriter(capacity: 32)
        writer.varint(UInt64(bitPattern: size))
        writer.varint(UInt64(bitPattern: modificationTime))
        writer.varint(UInt64(bitPattern: changeTime))
        writer.varint(UInt64(crc32c))
        writer.bool(crc64nvme != nil)
        writer.varint(crc64nvme ?? 0)
        return writer.bytes
    }

    init(size: Int64, modificationTime: Int64, changeTime: Int64, crc32c: UInt32, crc64nvme: UInt64? = nil) {
        self.size = size
        self.modificationTime = modificationTime
        self.changeTime = changeTime
        self.crc32c = crc32c
        self.crc64nvme = crc64nvme
    }

    init?(decoding bytes: [UInt8]) {
        var reader = RecordReader(bytes)
        guard let size = reader.varint(), let time = reader.varint(), let change = reader.varint(), let crc = reader.varint(),
            crc <= UInt64(UInt32.max), let has64 = reader.bool(), let crc64 = reader.varint(), reader.isAtEnd
        else { return nil }
        self.init(
            size: Int64(bitPattern: size), modificationTime: Int64(bitPattern: time), changeTime: Int64(bitPattern: change),
            crc32c: UInt32(crc), crc64nvme: has64 ? crc64 : nil)
    }
}

/// Where a sync is; stored, so a killed sync goes on from there.
enum SyncStage: UInt8, Sendable, Comparable {
    case listingSource = 0
    case listingDestination = 1
    case deciding = 2
    case copying = 3
    case deleting = 4
    case done = 5

    static func < (a: SyncStage, b: SyncStage) -> Bool { a.rawValue < b.rawValue }
}

enum SyncSide: UInt8 {
    case source = 1
    case destination = 2
}

/// The sync's reads and writes. Writes are their own transactions, written
/// on the caller's thread (LMDB serialises them with the job store's group
/// commits): a page of a listing and its cursor, a batch of decisions, are
/// each one transaction, so a kill leaves either all of it or none.
extension StateStore {
    // MARK: Keys

    /// `key`'s bytes, or for a key too long for LMDB its first 400 bytes, a 0
    /// and its SHA-256: an order both sides share (what a merge needs),
    /// the key itself kept in the value.
    static func syncKey(_ key: String) -> [UInt8] {
        let bytes = Array(key.utf8)
        if bytes.count <= 440 { return bytes }
        return Array(bytes.prefix(400)) + [0] + Array(SHA256.hash(data: bytes))
    }

    static func place(_ target: String) -> [UInt8] {
        Array(SHA256.hash(data: Array("xfer-sync-place\0\(target)".utf8)).prefix(8))
    }

    private func stateKey(_ job: JobID, _ name: String) -> [UInt8] { Self.jobPrefix(job) + Array(name.utf8) }

    private func writing(_ body: (LMDBTransaction) throws -> Void) throws(XferError) {
        do {
            try env.write { txn in try body(txn) }
        } catch let error as XferError {
            throw error
        } catch {
            throw .stateUnavailable("cannot write state in \(directory): \(error)")
        }
    }

    // MARK: Stage and settings

    func syncValue(_ job: JobID, _ name: String) throws(XferError) -> [UInt8]? {
        try reading { txn in try txn.get(syncDBs.state, stateKey(job, name)) }
    }

    func setSyncValues(_ job: JobID, _ values: [(String, [UInt8])]) throws(XferError) {
        try writing { txn in
            for (name, value) in values { try txn.put(syncDBs.state, stateKey(job, name), value) }
        }
    }

    func syncStage(_ job: JobID) throws(XferError) -> SyncStage? {
        try syncValue(job, "stage").flatMap { $0.first }.flatMap(SyncStage.init(rawValue:))
    }

    func setSyncStage(_ job: JobID, _ stage: SyncStage) throws(XferError) {
        try setSyncValues(job, [("stage", [stage.rawValue])])
    }

    // MARK: Listings

    /// One batch of a side's listing, with where the listing goes on (nil
    /// at its end), in one transaction.
    func putSyncEntries(_ job: JobID, side: SyncSide, _ entries: [SyncEntry], cursor: (name: String, value: String?)?) throws(XferError) {
        let prefix = Self.jobPrefix(job) + [side.rawValue]
        try writing { txn in
            for entry in entries { try txn.put(syncDBs.entries, prefix + Self.syncKey(entry.key), entry.encoded) }
            if let cursor {
                try txn.put(syncDBs.state, stateKey(job, cursor.name), Array((cursor.value ?? "").utf8))
            }
        }
    }

    /// Up to `limit` entries of a side, after `after` (an LMDB key from a
    /// previous page; nil: from the start), in key order, with each one's LMDB key.
    func syncEntries(_ job: JobID, side: SyncSide, after: [UInt8]?, limit: Int) throws(XferError) -> [(key: [UInt8], entry: SyncEntry)] {
        let prefix = Self.jobPrefix(job) + [side.rawValue]
        return try reading { txn in
            var result: [(key: [UInt8], entry: SyncEntry)] = []
            try txn.forEach(syncDBs.entries, prefix: prefix, from: after.map { prefix + $0 }) { key, value in
                let sortKey = Array(key[prefix.count...])
                if let after, sortKey == after { return true }
                guard let entry = SyncEntry(decoding: value) else { throw unreadable("a sync listing entry of job \(job)") }
                result.append((sortKey, entry))
                return result.count < limit
            }
            return result
        }
    }

    // MARK: Deletes

    func putSyncDeletes(_ job: JobID, _ entries: [SyncEntry]) throws(XferError) {
        let prefix = Self.jobPrefix(job)
        try writing { txn in
            for entry in entries { try txn.put(syncDBs.deletes, prefix + Self.syncKey(entry.key), entry.encoded) }
        }
    }

    func syncDeletes(_ job: JobID, limit: Int) throws(XferError) -> [SyncEntry] {
        let prefix = Self.jobPrefix(job)
        return try reading { txn in
            var result: [SyncEntry] = []
            try txn.forEach(syncDBs.deletes, prefix: prefix) { _, value in
                guard let entry = SyncEntry(decoding: value) else { throw unreadable("a planned delete of job \(job)") }
                result.append(entry)
                return result.count < limit
            }
            return result
        }
    }

    func countSyncDeletes(_ job: JobID) throws(XferError) -> Int {
        let prefix = Self.jobPrefix(job)
        return try reading { txn in
            var count = 0
            try txn.forEach(syncDBs.deletes, prefix: prefix) { _, _ in
                count += 1
                return true
            }
            return count
        }
    }

    /// A delete done (or left): gone from the plan, and what was known of the object with it.
    func removeSyncDelete(_ job: JobID, _ entry: SyncEntry, place: [UInt8]) throws(XferError) {
        try writing { txn in
            try txn.delete(syncDBs.deletes, Self.jobPrefix(job) + Self.syncKey(entry.key))
            try txn.delete(syncDBs.objects, place + Self.syncKey(entry.key))
        }
    }

    // MARK: Knowledge

    func knownObject(place: [UInt8], key: String) throws(XferError) -> KnownObject? {
        try reading { txn in
            try txn.get(syncDBs.objects, place + Self.syncKey(key)).flatMap(KnownObject.init(decoding:))
        }
    }

    /// Where a re-run splits its listing of `place` (`SyncKeyRanges`): keys
    /// xfer knows there, read in order, keys only. A key too long to be its
    /// own LMDB key (see `syncKey`; only those hold a 0) is passed over.
    func syncKeyRanges(place: [UInt8]) throws(XferError) -> SyncKeyRanges? {
        try reading { txn in
            var splitter = SyncKeyRanges.Splitter()
            try txn.forEach(syncDBs.objects, prefix: place) { key, _ in
                let bytes = key[place.count...]
                if !bytes.contains(0), let text = String(validating: bytes, as: UTF8.self) { splitter.add(text) }
                return true
            }
            return splitter.ranges
        }
    }

    func putKnownObjects(place: [UInt8], _ objects: [(key: String, object: KnownObject)]) throws(XferError) {
        guard !objects.isEmpty else { return }
        try writing { txn in
            for (key, object) in objects { try txn.put(syncDBs.objects, place + Self.syncKey(key), object.encoded) }
        }
    }

    func cachedChecksum(device: UInt64, inode: UInt64) throws(XferError) -> CachedChecksum? {
        try reading { txn in
            try txn.get(syncDBs.checksums, Self.inodeKey(device, inode)).flatMap(CachedChecksum.init(decoding:))
        }
    }

    func putCachedChecksums(_ checksums: [(device: UInt64, inode: UInt64, checksum: CachedChecksum)]) throws(XferError) {
        guard !checksums.isEmpty else { return }
        try writing { txn in
            for item in checksums { try txn.put(syncDBs.checksums, Self.inodeKey(item.device, item.inode), item.checksum.encoded) }
        }
    }

    private static func inodeKey(_ device: UInt64, _ inode: UInt64) -> [UInt8] {
        (0..<8).map { UInt8((device >> UInt64(56 - 8 * $0)) & 0xff) } + (0..<8).map { UInt8((inode >> UInt64(56 - 8 * $0)) & 0xff) }
    }
}
