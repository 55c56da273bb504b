import FoundationEssentials

/// How a sync tells whether a file and the object (or file) of the same
/// name are the same.
public enum SyncMode: String, Sendable, Hashable, CaseIterable {
    /// Size and modification time: the source's time kept with the copy
    /// (an object's `mtime` metadata, a local file's own time), so a
    /// re-run does not send again what only looks newer.
    case sizeAndTime
    /// Size, then a full-object checksum of both sides — CRC-32C, else
    /// CRC64NVME, else an ETag that is an MD5: the local file's read at
    /// ISA-L's speed and cached by its identity, the object's as the store
    /// or xfer kept it.
    case checksum
    /// Size alone.
    case sizeOnly
}

/// What a sync does with one key.
public enum SyncAction: String, Sendable, Hashable {
    /// Sent (or fetched): new, or different on the destination.
    case copy
    /// The same on both sides: left alone.
    case skip
    /// Only on the destination, and deletes were asked for.
    case delete
    /// Only on the destination, kept (no deletes asked for).
    case keep
}

/// Why a sync decided what it did, as `--dry-run` and `--json` say it.
public enum SyncReason: String, Sendable, Hashable {
    case new = "not on the destination"
    case sizeDiffers = "size differs"
    case modificationTimeDiffers = "modification time differs"
    case sourceNewer = "same size, source newer (no time kept on the destination)"
    case destinationNotOlder = "same size, destination not older (no time kept on it)"
    case checksumDiffers = "checksum differs"
    case noChecksumOnDestination = "same size, no checksum on the destination to compare"
    case sameSizeAndTime = "same size and modification time"
    case sameChecksum = "same size and checksum"
    case sameSize = "same size"
    case notInSource = "not in the source"
}

/// One key's decision.
public struct SyncDecision: Sendable, Hashable {
    /// The path below the source and the destination ('/'-separated).
    public var key: String
    public var action: SyncAction
    public var reason: SyncReason
    /// The source's size, when the source has the key.
    public var sourceSize: Int64?
    /// The destination's size, when the destination has the key.
    public var destinationSize: Int64?

    public init(key: String, action: SyncAction, reason: SyncReason, sourceSize: Int64?, destinationSize: Int64?) {
        self.key = key
        self.action = action
        self.reason = reason
        self.sourceSize = sourceSize
        self.destinationSize = destinationSize
    }
}

/// How many keys a plan put under each action.
public struct SyncTally: Sendable, Hashable {
    public var copies = 0
    public var copyBytes: Int64 = 0
    public var skips = 0
    public var deletes = 0
    /// Only on the destination and kept.
    public var kept = 0

    public init() {}

    mutating func count(_ decision: SyncDecision) {
        switch decision.action {
        case .copy:
            copies += 1
            copyBytes += decision.sourceSize ?? 0
        case .skip: skips += 1
        case .delete: deletes += 1
        case .keep: kept += 1
        }
    }
}

/// What a sync does besides copying.
public struct SyncOptions: Sendable {
    /// How equality is decided.
    public var mode: SyncMode = .sizeAndTime
    /// Delete what the destination holds and the source does not — only
    /// after every copy succeeded, and none after any error.
    public var deletes = false
    /// With `deletes`: refuse to delete anything when the plan would delete
    /// more than this many keys.
    public var maximumDeletes: Int?
    /// Which files (and keys) take part: `--include`/`--exclude`, matched
    /// against the path below the source and the destination alike.
    public var selection = FileSelection()
    /// Plan, report every decision, change nothing (the plan is dropped).
    public var dryRun = false
    /// Forget an unfinished sync of the same source and destination and plan
    /// anew.
    public var restart = false
    /// Take part only in the keys of this share (`SyncShard`): N machines
    /// each syncing share K of N together sync every key exactly once.
    public var shard: SyncShard?
    /// Take only the paths this file names (one per line, relative to the
    /// source directory), instead of walking it: a manifest split among
    /// workers. Keys the destination holds beyond it are left alone, so
    /// deletes cannot go with it.
    public var filesFrom: String?
    /// Keep what the sync replaces or deletes on the destination: moved
    /// (into a directory, hard-linked before a replacement) or copied
    /// server-side (into a store, `ObjectBackingUp`) to the same relative
    /// path under this directory or target, before it is replaced or
    /// deleted. A backup already there is replaced. It must not overlap the
    /// destination; into a directory, it must be on the same file system.
    public var backupDirectory: String?
    /// Called with every decision as the plan is made, in key order, on the
    /// planning task: what `--dry-run` and `--json` print. A slow handler
    /// slows the plan; nothing is queued.
    public var decisions: (@Sendable (SyncDecision) -> Void)?

    public init() {}
}

/// One share of a sync's keys: key `k` belongs to share
/// `FNV-1a-64(UTF-8 of k) mod count` (0-based), the same on every machine
/// and in every run, whatever else the keys are.
public struct SyncShard: Sendable, Hashable, CustomStringConvertible {
    /// 0-based: 0 ..< count.
    public let index: Int
    public let count: Int

    /// - Throws: `.invalidInput` unless 0 ≤ index < count.
    public init(index: Int, count: Int) throws(XferError) {
        guard count >= 1, index >= 0, index < count else {
            throw .invalidInput("a shard is K/N with 0 ≤ K < N, not \(index)/\(count)")
        }
        self.index = index
        self.count = count
    }

    /// Reads `K/N`.
    public init(parsing text: String) throws(XferError) {
        let parts = text.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2, let index = Int(parts[0]), let count = Int(parts[1]) else {
            throw .invalidInput("a shard is K/N (e.g. 0/4), not '\(text.prefix(40))'")
        }
        try self.init(index: index, count: count)
    }

    public var description: String { "\(index)/\(count)" }

    /// Whether `key` is this share's.
    public func contains(_ key: String) -> Bool {
        count == 1 || Int(Self.hash(key) % UInt64(count)) == index
    }

    /// FNV-1a, 64 bits, over the key's UTF-8 bytes.
    public static func hash(_ key: String) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in key.utf8 {
            hash ^= UInt64(byte)
            hash = hash &* 0x0000_0100_0000_01b3
        }
        return hash
    }
}

/// How a sync ended.
public struct SyncReport: Sendable {
    /// The sync's job id (`xfer list`, `status`, `cancel`).
    public var job: JobID
    /// The plan's counts.
    public var tally: SyncTally
    /// The copies' report; nil when nothing was copied (or in a dry run).
    public var transfer: JobReport?
    /// Keys deleted from the destination.
    public var deleted: Int
    /// A dry run: nothing was changed.
    public var dryRun: Bool
    /// Objects (or files) kept under `SyncOptions.backupDirectory` by this
    /// run before they were replaced or deleted.
    public var backedUp = 0

    public init(job: JobID, tally: SyncTally, transfer: JobReport?, deleted: Int, dryRun: Bool) {
        self.job = job
        self.tally = tally
        self.transfer = transfer
        self.deleted = deleted
        self.dryRun = dryRun
    }
}

/// What a running sync reports.
public enum SyncEvent: Sendable {
    /// Listing goes on: how many keys each side has shown so far.
    case listing(Listing)
    /// The plan is made (or was, by a run this one resumes).
    case planned(Planned)
    /// An event of the copies, as a push or a pull reports it.
    case transfer(TransferEvent)
    /// Deleting starts.
    case deleting(Deleting)
    /// A key was deleted from the destination.
    case deleted(Deleted)
    /// The sync ended well.
    case completed(SyncReport)
    /// The sync stopped on an error; running it again goes on.
    case failed(XferError)

    public struct Listing: Sendable, Hashable {
        public var sourceKeys: Int
        public var destinationKeys: Int
    }

    public struct Planned: Sendable, Hashable {
        public var job: JobID
        public var tally: SyncTally
        /// The plan comes from an earlier run (this run resumes it).
        public var resumed: Bool
        /// Keys described one by one while planning (what xfer did not
        /// know of them from an earlier sync): the requests a plan cost
        /// beyond the listing's pages. 0 for a resumed plan.
        public var described: Int
    }

    public struct Deleting: Sendable, Hashable {
        public var count: Int
    }

    public struct Deleted: Sendable, Hashable {
        public var key: String
    }
}

/// A key a store holds, as a sync sees it.
public struct StoredObject: Sendable, Hashable {
    /// The path below the sync's destination ('/'-separated).
    public var relativePath: String
    public var size: Int64
    /// What identifies this version (an ETag, unquoted), if the store says.
    public var version: String?
    /// When the store last wrote it, in nanoseconds since 1970.
    public var lastModifiedNanoseconds: Int64?
    /// The modification time of the file it was made from, as kept with it
    /// (S3: `x-amz-meta-mtime`, as rclone keeps it), in nanoseconds since 1970.
    /// Only a description (`ObjectSyncing.describeObject`) says; a listing does not.
    public var modificationTimeNanoseconds: Int64?
    /// Its full-object CRC-32C, when a description said.
    public var crc32c: UInt32?
    /// Its full-object CRC64NVME (what S3 keeps for new objects since 2025), when a description said.
    public var crc64nvme: UInt64?
    /// The `FileContext.writeToken` of the write that made it, when a
    /// description said: how a sync recognises its own write whose answer
    /// was lost (its retry then finds its condition failed).
    public var writeToken: String?

    public init(
        relativePath: String, size: Int64, version: String?, lastModifiedNanoseconds: Int64? = nil,
        modificationTimeNanoseconds: Int64? = nil, crc32c: UInt32? = nil, crc64nvme: UInt64? = nil, writeToken: String? = nil
    ) {
        self.crc64nvme = crc64nvme
        self.relativePath = relativePath
        self.size = size
        self.version = version
        self.lastModifiedNanoseconds = lastModifiedNanoseconds
        self.modificationTimeNanoseconds = modificationTimeNanoseconds
        self.crc32c = crc32c
        self.writeToken = writeToken
    }
}

/// One page of a sync destination's listing, in key order.
public struct StoredObjectPage: Sendable, Hashable {
    public var objects: [StoredObject]
    /// Where the next page starts; nil after the last.
    public var next: String?

    public init(objects: [StoredObject], next: String?) {
        self.objects = objects
        self.next = next
    }
}

/// What a conditional delete found.
public enum DeletionOutcome: Sendable, Hashable {
    /// Deleted (or already gone).
    case deleted
    /// Another version is there now: left alone.
    case changed
}

/// What a sync asks of a write, carried in a file's handles and read by a
/// backend that adopts `ObjectSyncing`.
public enum WriteCondition: Sendable, Hashable {
    /// Only if nothing is at the key (`If-None-Match: *`).
    case absent
    /// Only if the key still holds this version (`If-Match`).
    case version(String)
}

/// A backend a directory can be synced to: one that lists what its target
/// holds, describes one key, deletes one key conditionally, and honours a
/// file's `writeCondition` and keeps its `modificationTimeNanoseconds` with
/// each object it writes. Resolved once, when a sync starts.
///
/// Sans-IO like every step: each method describes a request and reads its
/// answer; the engine sends, signs, retries.
public protocol ObjectSyncing: UploadBackend {
    /// One page of the keys under the job's target, in the store's key order
    /// (UTF-8 bytes, as S3 lists), after `cursor` (nil: the first page).
    func listObjects(after cursor: String?, in job: JobContext) throws(BackendError) -> Exchange<StoredObjectPage>

    /// What is at `relativePath` now, with the modification time and
    /// checksum kept with it; nil when nothing is.
    func describeObject(at relativePath: String, in job: JobContext) throws(BackendError) -> Exchange<StoredObject?>

    /// Deletes `object` if it is still the version listed (where the store
    /// honours the condition).
    func deleteObject(_ object: StoredObject, in job: JobContext) throws(BackendError) -> Exchange<DeletionOutcome>
}

/// A sync destination whose listing can also start after a key, not only
/// go on from a page's continuation token (S3's `start-after`): what lets a
/// re-run list its destination as key ranges at once, split at the keys it
/// saw last time. Optional: a backend without it is listed a page after the
/// other. Resolved once, when a listing starts.
public protocol KeyRangeSyncing: ObjectSyncing {
    /// One page of the keys under the job's target that sort after
    /// `relativePath` (in the store's key order, as `listObjects(after:in:)`
    /// lists), whether or not a key is there; its `next` goes on with
    /// `listObjects(after:in:)`.
    func listObjects(startingAfter relativePath: String, in job: JobContext) throws(BackendError) -> Exchange<StoredObjectPage>
}

/// A backend that copies objects of its own store server-side, for a sync
/// from one prefix to another (`xfer sync s3://A s3://B`): the bytes never
/// pass through this machine. An object up to `singleCopyLimit` is one
/// request; a larger one is a multipart upload of part copies, each part
/// recorded as it is done, so a killed copy goes on with the parts left.
/// Sans-IO as every step.
public protocol ObjectCopying: ObjectSyncing {
    /// The largest object one request copies (S3: 5 GiB).
    var singleCopyLimit: Int64 { get }

    /// Whether objects of `location` (a source's normalized prefix) can be
    /// copied into the job's target server-side (the same service).
    func canCopy(from location: String, in job: JobContext) -> Bool

    /// Copies `object` (at `location`, a source's listed location) to
    /// `relativePath` in one request, only if the source is still `version`
    /// and the destination meets `condition`; answers the new version.
    func copyObject(
        from location: String, version: String?, to relativePath: String, condition: WriteCondition?, in job: JobContext
    ) throws(BackendError) -> Exchange<String?>

    /// Starts the multipart copy to `relativePath`, keeping `modificationTimeNanoseconds`; answers the
    /// handles the parts and the completion need (committed with the file before its first part,
    /// and what `FileUploadCancelling` drops when the sync is cancelled).
    func startCopy(to relativePath: String, modificationTimeNanoseconds: Int64?, in job: JobContext) throws(BackendError)
        -> Exchange<ServerHandles>

    /// Copies bytes `range` of the source into part `number` (1-based); answers the part's receipt.
    func copyPart(
        _ number: Int, range: ClosedRange<Int64>, from location: String, version: String?, handles: ServerHandles,
        to relativePath: String, in job: JobContext
    ) throws(BackendError) -> Exchange<String>

    /// Completes the multipart copy from its parts' receipts (part 1 first), under `condition`; answers the new version.
    func finishCopy(
        handles: ServerHandles, receipts: [String], to relativePath: String, condition: WriteCondition?, in job: JobContext
    ) throws(BackendError) -> Exchange<String?>
}

/// A backend that keeps, server-side, what a sync would overwrite or
/// delete (`--backup-dir`): before an object of the target is replaced or
/// deleted, it is copied to the same relative path under a backup target of
/// the same store, as rclone's `--backup-dir` moves it. Resolved once, when
/// a sync starts. Sans-IO as every step.
public protocol ObjectBackingUp: ObjectSyncing {
    /// `backup` as this backend names a target (normalized), when the job's
    /// objects can be copied there inside the store.
    ///
    /// - Throws: `.rejected` saying why not: another endpoint, or a place
    ///   that overlaps the job's target (a later sync would delete or
    ///   overwrite the backups, or back up its own backups).
    func backupTarget(normalizing backup: String, in job: JobContext) throws(BackendError) -> String

    /// Copies the object at `relativePath` of the job's target to
    /// `relativePath` under `backup` (a target `backupTarget` answered),
    /// only if it is still `version`, keeping its metadata.
    func backUpObject(at relativePath: String, version: String?, to backup: String, in job: JobContext) throws(BackendError)
        -> Exchange<BackupOutcome>
}

/// What a backup copy found.
public enum BackupOutcome: Sendable, Hashable {
    /// Copied to the backup.
    case copied
    /// Nothing is at the key any more: nothing to keep.
    case absent
    /// Another version is there now (the copy's condition failed).
    case changed
}

/// The handles a sync gives each file it copies.
enum SyncHandles {
    /// `WriteCondition.absent` as "*", `.version(V)` as V.
    static let condition = HandleKey("xfer.sync.condition")
    /// The CRC-32C the plan read from the file (8 hex digits), so the object keeps it.
    static let crc32c = HandleKey("xfer.sync.crc32c")
    /// The version (ETag) the store gave the completed object.
    static let version = HandleKey("xfer.version")
    /// A pull: the time (ns) the local file gets, the object's kept time or its store's.
    static let modificationTime = HandleKey("xfer.sync.mtime")
    /// A server-side copy: the source object's location and version.
    static let sourceLocation = HandleKey("xfer.sync.from")
    static let sourceVersion = HandleKey("xfer.sync.fromVersion")
    /// The object this file replaces was backed up (`--backup-dir`).
    static let backedUp = HandleKey("xfer.sync.backedUp")
    /// A multipart copy was started (its backend's handles are the file's).
    static let copyStarted = HandleKey("xfer.copy.started")
    /// Job: the direction of a sync job ("push").
    static let sync = HandleKey("xfer.sync")

    /// Plan handles survive a file's reset (they say what the plan saw, not
    /// what an upload holds).
    static func isPlanned(_ name: String) -> Bool { name.hasPrefix("xfer.sync.") }
}

extension FileContext {
    /// What the write of this file is conditional on, as a sync planned it.
    public var writeCondition: WriteCondition? {
        guard let value = handles[SyncHandles.condition] else { return nil }
        return value == "*" ? .absent : .version(value)
    }

    /// The CRC-32C of the whole file, when a sync read it while planning (the
    /// file is then checked unchanged before each chunk is sent).
    public var plannedCRC32C: UInt32? {
        handles[SyncHandles.crc32c].flatMap { UInt32($0, radix: 16) }
    }

    /// A sync's mark for this write, kept with the object (S3:
    /// `x-amz-meta-xfer-write`): a retry whose condition failed because the
    /// first attempt succeeded unheard is told from a real conflict by it.
    public var writeToken: String? {
        guard handles[SyncHandles.condition] != nil, let time = modificationTimeNanoseconds else { return nil }
        return "\(index).\(size).\(time)"
    }
}

extension JobRecord {
    /// A sync's job (`TransferEngine.sync`).
    var isSync: Bool { handles[SyncHandles.sync] != nil }
}

extension JobContext {
    /// A sync's job: each object written keeps its file's modification time.
    public var keepsModificationTimes: Bool { handles[SyncHandles.sync] != nil }
}

/// Modification times as S3 metadata keeps them: seconds, a dot, nine
/// digits of nanoseconds (`1700000000.123456789`), as rclone writes `mtime`.
public enum ModificationTimeText {
    public static func text(nanoseconds: Int64) -> String {
        if nanoseconds < 0 { return "-" + text(nanoseconds: nanoseconds == .min ? .max : -nanoseconds) }
        let seconds = nanoseconds / 1_000_000_000
        let digits = String(nanoseconds % 1_000_000_000)
        return "\(seconds)." + String(repeating: "0", count: max(0, 9 - digits.count)) + digits
    }

    /// Reads `text` exactly (no floating point): seconds with up to nine
    /// fractional digits; more are cut. Nil for anything else.
    public static func nanoseconds(_ text: String) -> Int64? {
        if text.hasPrefix("-") {
            let rest = String(text.dropFirst())
            return rest.hasPrefix("-") ? nil : nanoseconds(rest).map { -$0 }
        }
        let parts = text.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false)
        guard let whole = parts.first, !whole.isEmpty, whole.allSatisfy({ $0.isASCII && $0.isNumber }),
            let seconds = Int64(whole), seconds < 1 << 33
        else { return nil }
        var fraction: Int64 = 0
        if parts.count == 2 {
            let digits = parts[1].prefix(9)
            guard !digits.isEmpty, digits.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
            fraction = Int64(digits)! * Int64(pow10(9 - digits.count))
        }
        return seconds * 1_000_000_000 + fraction
    }

    private static func pow10(_ exponent: Int) -> Int {
        var value = 1
        for _ in 0..<exponent { value *= 10 }
        return value
    }
}
