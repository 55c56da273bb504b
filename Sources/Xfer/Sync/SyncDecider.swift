/// Every sync decision, made in this one place from what is known of both
/// sides (pure: Tests/XferTests/SyncDeciderTests.swift).
///
/// The rules, in order:
/// - only in the source: copy; only on the destination: delete when asked,
///   else keep;
/// - sizes differ: copy (every mode);
/// - `sizeOnly`: skip;
/// - `checksum`: the CRC-32Cs decide; a destination without one is copied
///   (then it has one), never guessed equal — CRC-32C first, then CRC64NVME
///   (what S3 keeps for new objects since 2025) — unless its ETag is the MD5
///   of its bytes, which is compared with the file's then;
/// - `sizeAndTime`: the time kept with the destination (the source's time
///   when it was copied) decides, to the nanosecond; without one, the
///   destination's own time (an object's `LastModified`) not older than the
///   source's is the same (as `aws s3 sync` decides), older is copied.
enum SyncDecider {
    /// What is known of one side's key when deciding.
    struct Side: Sendable, Hashable {
        var size: Int64
        /// The source's modification time; on the destination, the time kept
        /// with it (nil when none is).
        var modificationTime: Int64?
        /// The destination's own time (when the store last wrote it).
        var storedAt: Int64?
        var crc32c: UInt32?
        var crc64nvme: UInt64?
        /// The MD5 of the bytes: a local file's when read, an object's when its
        /// ETag is one (stored in one part, not encrypted with a key service).
        var md5: [UInt8]?

        init(
            size: Int64, modificationTime: Int64? = nil, storedAt: Int64? = nil, crc32c: UInt32? = nil, crc64nvme: UInt64? = nil,
            md5: [UInt8]? = nil
        ) {
            self.crc64nvme = crc64nvme
            self.size = size
            self.modificationTime = modificationTime
            self.storedAt = storedAt
            self.crc32c = crc32c
            self.md5 = md5
        }
    }

    /// Whether deciding `key` needs more than sizes: then the caller finds
    /// the times or checksums first (a description, a read of the file).
    static func needsDetail(source: Side?, destination: Side?, mode: SyncMode) -> Bool {
        guard let source, let destination, source.size == destination.size else { return false }
        return mode != .sizeOnly
    }

    static func decide(key: String, source: Side?, destination: Side?, mode: SyncMode, deletes: Bool) -> SyncDecision {
        func decision(_ action: SyncAction, _ reason: SyncReason) -> SyncDecision {
            SyncDecision(key: key, action: action, reason: reason, sourceSize: source?.size, destinationSize: destination?.size)
        }
        guard let source else { return decision(deletes ? .delete : .keep, .notInSource) }
        guard let destination else { return decision(.copy, .new) }
        if source.size != destination.size { return decision(.copy, .sizeDiffers) }
        switch mode {
        case .sizeOnly:
            return decision(.skip, .sameSize)
        case .checksum:
            if let theirs = destination.crc32c, let ours = source.crc32c {
                return ours == theirs ? decision(.skip, .sameChecksum) : decision(.copy, .checksumDiffers)
            }
            if let theirs = destination.crc64nvme, let ours = source.crc64nvme {
                return ours == theirs ? decision(.skip, .sameChecksum) : decision(.copy, .checksumDiffers)
            }
            // No CRC kept with the object (another tool wrote it): its ETag, when an MD5.
            if let theirs = destination.md5, let ours = source.md5 {
                return ours == theirs ? decision(.skip, .sameChecksum) : decision(.copy, .checksumDiffers)
            }
            return decision(.copy, .noChecksumOnDestination)
        case .sizeAndTime:
            let ours = source.modificationTime ?? 0
            if let kept = destination.modificationTime {
                return kept == ours ? decision(.skip, .sameSizeAndTime) : decision(.copy, .modificationTimeDiffers)
            }
            guard let stored = destination.storedAt else { return decision(.copy, .sourceNewer) }
            return ours <= stored ? decision(.skip, .destinationNotOlder) : decision(.copy, .sourceNewer)
        }
    }
}
