import XCTest

@testable import Xfer

/// The sync's pure parts: every decision (`SyncDecider`), the times kept in
/// metadata, the shares of keys, the selection of listed keys.
final class SyncDecisionTests: XCTestCase {
    private typealias Side = SyncDecider.Side

    private func decide(_ source: Side?, _ destination: Side?, mode: SyncMode = .sizeAndTime, deletes: Bool = false) -> (SyncAction, SyncReason) {
        let decision = SyncDecider.decide(key: "k", source: source, destination: destination, mode: mode, deletes: deletes)
        return (decision.action, decision.reason)
    }

    func testOneSidedKeys() {
        XCTAssertTrue(decide(Side(size: 1), nil) == (.copy, .new))
        XCTAssertTrue(decide(nil, Side(size: 1)) == (.keep, .notInSource))
        XCTAssertTrue(decide(nil, Side(size: 1), deletes: true) == (.delete, .notInSource))
    }

    func testSizeDecidesFirstInEveryMode() {
        for mode in SyncMode.allCases {
            XCTAssertTrue(decide(Side(size: 1, modificationTime: 5), Side(size: 2, modificationTime: 5, crc32c: 1), mode: mode) == (.copy, .sizeDiffers))
        }
        XCTAssertTrue(decide(Side(size: 1, modificationTime: 5), Side(size: 1, modificationTime: 9), mode: .sizeOnly) == (.skip, .sameSize))
    }

    func testTimesKeptDecideToTheNanosecond() {
        XCTAssertTrue(decide(Side(size: 1, modificationTime: 5), Side(size: 1, modificationTime: 5)) == (.skip, .sameSizeAndTime))
        XCTAssertTrue(decide(Side(size: 1, modificationTime: 5), Side(size: 1, modificationTime: 6)) == (.copy, .modificationTimeDiffers))
        // Older kept time: still another file (a restore from backup is a change too).
        XCTAssertTrue(decide(Side(size: 1, modificationTime: 7), Side(size: 1, modificationTime: 6)) == (.copy, .modificationTimeDiffers))
    }

    func testWithoutAKeptTimeTheStoresOwnTimeDecidesAsAwsDoes() {
        XCTAssertTrue(decide(Side(size: 1, modificationTime: 5), Side(size: 1, storedAt: 5)) == (.skip, .destinationNotOlder))
        XCTAssertTrue(decide(Side(size: 1, modificationTime: 6), Side(size: 1, storedAt: 5)) == (.copy, .sourceNewer))
        XCTAssertTrue(decide(Side(size: 1, modificationTime: 6), Side(size: 1)) == (.copy, .sourceNewer))
    }

    func testChecksumsNeverGuessEqual() {
        XCTAssertTrue(decide(Side(size: 1, crc32c: 7), Side(size: 1, crc32c: 7), mode: .checksum) == (.skip, .sameChecksum))
        XCTAssertTrue(decide(Side(size: 1, crc32c: 7), Side(size: 1, crc32c: 8), mode: .checksum) == (.copy, .checksumDiffers))
        XCTAssertTrue(decide(Side(size: 1, crc32c: 7), Side(size: 1), mode: .checksum) == (.copy, .noChecksumOnDestination))
        // Same times do not make a checksum mode skip.
        XCTAssertTrue(
            decide(Side(size: 1, modificationTime: 5, crc32c: 7), Side(size: 1, modificationTime: 5), mode: .checksum)
                == (.copy, .noChecksumOnDestination))
        XCTAssertTrue(decide(Side(size: 1, crc64nvme: 9), Side(size: 1, crc64nvme: 9), mode: .checksum) == (.skip, .sameChecksum))
        XCTAssertTrue(decide(Side(size: 1, crc64nvme: 9), Side(size: 1, crc64nvme: 8), mode: .checksum) == (.copy, .checksumDiffers))
        // CRC-32C first: both sides have it, it decides.
        XCTAssertTrue(decide(Side(size: 1, crc32c: 1, crc64nvme: 9), Side(size: 1, crc32c: 1, crc64nvme: 8), mode: .checksum) == (.skip, .sameChecksum))
        XCTAssertTrue(decide(Side(size: 1, md5: [1]), Side(size: 1, md5: [1]), mode: .checksum) == (.skip, .sameChecksum))
        XCTAssertTrue(decide(Side(size: 1, md5: [1]), Side(size: 1, md5: [2]), mode: .checksum) == (.copy, .checksumDiffers))
    }

    func testNeedsDetailOnlyForEqualSizes() {
        XCTAssertFalse(SyncDecider.needsDetail(source: Side(size: 1), destination: Side(size: 2), mode: .checksum))
        XCTAssertFalse(SyncDecider.needsDetail(source: Side(size: 1), destination: nil, mode: .checksum))
        XCTAssertFalse(SyncDecider.needsDetail(source: Side(size: 1), destination: Side(size: 1), mode: .sizeOnly))
        XCTAssertTrue(SyncDecider.needsDetail(source: Side(size: 1), destination: Side(size: 1), mode: .sizeAndTime))
    }

    func testModificationTimesAsMetadataRoundTripExactly() {
        for value: Int64 in [0, 1, 999_999_999, 1_700_000_000_123_456_789, -1, -1_500_000_000] {
            XCTAssertEqual(ModificationTimeText.nanoseconds(ModificationTimeText.text(nanoseconds: value)), value)
        }
        XCTAssertEqual(ModificationTimeText.text(nanoseconds: 1_700_000_000_000_000_001), "1700000000.000000001")
        // rclone's and others' forms.
        XCTAssertEqual(ModificationTimeText.nanoseconds("1700000000.5"), 1_700_000_000_500_000_000)
        XCTAssertEqual(ModificationTimeText.nanoseconds("1700000000"), 1_700_000_000_000_000_000)
        XCTAssertEqual(ModificationTimeText.nanoseconds("1700000000.1234567891"), 1_700_000_000_123_456_789)
        for bad in ["", ".5", "1e9", "12a", "1.", "1.x", "--1", "99999999999999999999"] {
            XCTAssertNil(ModificationTimeText.nanoseconds(bad), bad)
        }
    }

    func testSharesAreStableAndCoverEveryKeyOnce() throws {
        // FNV-1a 64's published value for "a".
        XCTAssertEqual(SyncShard.hash("a"), 0xaf63_dc4c_8601_ec8c)
        let shards = try (0..<5).map { index throws(XferError) in try SyncShard(index: index, count: 5) }
        var counts = [0, 0, 0, 0, 0]
        for index in 0..<10_000 {
            let key = "dir\(index % 7)/file-\(index).bin"
            let owners = shards.filter { $0.contains(key) }
            XCTAssertEqual(owners.count, 1, key)
            counts[owners[0].index] += 1
        }
        XCTAssertTrue(counts.allSatisfy { $0 > 1500 }, "\(counts)")
        XCTAssertThrowsError(try SyncShard(parsing: "4/4"))
        XCTAssertThrowsError(try SyncShard(parsing: "-1/4"))
        XCTAssertThrowsError(try SyncShard(parsing: "1"))
        XCTAssertEqual(try SyncShard(parsing: "3/8").description, "3/8")
    }

    func testListedKeysAreSelectedAsAWalkSelectsFiles() throws {
        let selection = try FileSelection(includes: ["*.jpg"], excludes: ["cache", "tmp/**"])
        XCTAssertTrue(selection.takesKey("a/b.jpg"))
        XCTAssertFalse(selection.takesKey("a/b.png"))
        XCTAssertFalse(selection.takesKey("cache/b.jpg"), "an excluded directory is not entered")
        XCTAssertFalse(selection.takesKey("x/cache/b.jpg"))
        XCTAssertFalse(selection.takesKey("tmp/b.jpg"))
    }

    func testAnETagIsAnMD5OnlyInItsOneForm() {
        XCTAssertEqual(SyncRun.md5(ofETag: "\"9e107d9d372bb6826bd81d3542a419d6\"")?.count, 16)
        XCTAssertNil(SyncRun.md5(ofETag: "9e107d9d372bb6826bd81d3542a419d6-2"))
        XCTAssertNil(SyncRun.md5(ofETag: "abc"))
    }

    /// A plan's settings: a backup place is part of them (another one plans anew), and the
    /// settings of a plan made before it existed still read.
    func testSettingsKeepTheBackupPlace() {
        var options = SyncOptions()
        options.deletes = true
        let without = SyncSettings(options).encoded
        XCTAssertNil(SyncSettings.decode(without)?.backupDirectory)
        XCTAssertEqual(SyncSettings.decode(without)?.deletes, true)
        options.backupDirectory = "s3://b/old"
        let with = SyncSettings(options).encoded
        XCTAssertNotEqual(with, without)
        XCTAssertEqual(SyncSettings.decode(with)?.backupDirectory, "s3://b/old")
        XCTAssertNil(SyncSettings.decode(with + [0]), "trailing bytes are no settings")
    }
}
