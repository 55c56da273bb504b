import Foundation
import Hummingbird
import Logging
import NIOCore
import XCTest
import XferPrimitives

@testable import XferReceiver

/// A PATCH of a tus or IETF upload on disk makes its bytes and its offset's record durable in one
/// sync round (`DiskOffsetUpload.recordInItsRound`). What a crash can leave of that round: a
/// killed process leaves both in the page cache (same boot: loaded as they are); a crash of the
/// machine can keep the record and lose bytes (another boot: the last record's bytes are read
/// back, and the record is voided when they differ).
final class DiskOffsetRoundTests: XCTestCase {
    private var root = ""
    private let thisBoot = "0123456789abcdef0123456789abcdef"
    private let path = RelativePath.validated("d/a.bin")!

    override func setUpWithError() throws {
        root = NSTemporaryDirectory() + "xfer-offset-round-" + UUID().uuidString
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: root)
    }

    private func open(boot: String? = nil) async throws -> DiskStorage {
        try await DiskStorage.open(
            root: root, threadPool: .singleton, memory: UploadsInMemory(limits: ReceiverLimits()), expireAfter: nil,
            bootID: boot ?? thisBoot, logger: Logger(label: "test"))
    }

    private func patch(_ upload: any OffsetUpload, _ bytes: String, at offset: Int) async throws -> OffsetWriteResult {
        try await upload.exclusively {
            try await upload.write(
                RequestBody(buffer: ByteBuffer(string: bytes)), at: offset, limit: bytes.utf8.count, declaredLength: bytes.utf8.count,
                check: nil)
        }
    }

    private func load(_ storage: DiskStorage, _ id: String) async throws -> (offset: Int?, crc: UInt32?) {
        let upload = try await XCTUnwrapAsync(try await storage.offsetUploads(protocolName: "ietf").upload(id: id))
        return (await upload.currentOffset, await upload.currentCRC)
    }

    private func offsetLog(_ id: String) throws -> String {
        try String(contentsOfFile: root + "/uploads/\(id).offset.log", encoding: .utf8)
    }

    /// "hello" in two PATCHes, each one round; the records carry this boot.
    private func twoPatches() async throws -> String {
        let storage = try await open()
        let upload = try await storage.offsetUploads(protocolName: "ietf").create(path: path, length: 10, info: .defaultSingle)
        for (bytes, offset) in [("hel", 0), ("lo", 3)] {
            let before = storage.syncRounds
            let result = try await patch(upload, bytes, at: offset)
            XCTAssertEqual(result, .stored(offset: offset + bytes.utf8.count))
            XCTAssertEqual(storage.syncRounds - before, 1, "a PATCH's bytes and its record share one round")
        }
        return upload.id
    }

    private let crcOfHel = CRC32C.of(Array("hel".utf8))
    private let crcOfHello = CRC32C.of(Array("hello".utf8))

    func testAPatchIsOneRoundAndItsRecordCarriesTheBoot() async throws {
        let id = try await twoPatches()
        XCTAssertEqual(
            try offsetLog(id),
            "\n3~\(CRC32.hex(crcOfHel))*\(thisBoot);\n5~\(CRC32.hex(crcOfHello))*\(thisBoot);")
    }

    /// After another boot the last record's bytes are read back: they match, so the offset holds,
    /// and nothing is written.
    func testAfterAnotherBootWholeBytesKeepTheOffset() async throws {
        let id = try await twoPatches()
        let logBefore = try offsetLog(id)
        let storage = try await open(boot: "ffffffffffffffffffffffffffffffff")
        let loaded = try await load(storage, id)
        XCTAssertEqual(loaded.offset, 5)
        XCTAssertEqual(loaded.crc, crcOfHello)
        XCTAssertEqual(try offsetLog(id), logBefore)
    }

    /// The machine went down in the second PATCH's round, which kept its record and not all its
    /// bytes: the same boot trusts the page cache; another boot reads them back, voids the record
    /// (durably: the upload goes on from 3), and the resumed PATCH is recorded and checked anew.
    func testAfterAnotherBootATornLastPatchIsVoidedAndResumed() async throws {
        let id = try await twoPatches()
        let data = try FileHandle(forWritingTo: URL(fileURLWithPath: root + "/uploads/\(id).data"))
        try data.seek(toOffset: 3)
        try data.write(contentsOf: Data([0, 0]))
        try data.close()

        let sameBoot = try await load(try await open(), id)
        XCTAssertEqual(sameBoot.offset, 5, "the same boot lost nothing of the round: no check")

        let otherBoot = "ffffffffffffffffffffffffffffffff"
        var storage = try await open(boot: otherBoot)
        let loaded = try await load(storage, id)
        XCTAssertEqual(loaded.offset, 3)
        XCTAssertEqual(loaded.crc, crcOfHel)
        let voided = try offsetLog(id)
        XCTAssertTrue(voided.hasSuffix(";\n!;"), voided)

        // Voided for good: a third boot has nothing to check and loads 3 too.
        storage = try await open(boot: "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee")
        let third = try await load(storage, id)
        XCTAssertEqual(third.offset, 3)
        let upload = try await XCTUnwrapAsync(try await storage.offsetUploads(protocolName: "ietf").upload(id: id))
        let resumed = try await patch(upload, "lo", at: 3)
        XCTAssertEqual(resumed, .stored(offset: 5))

        storage = try await open(boot: "dddddddddddddddddddddddddddddddd")
        let reloaded = try await load(storage, id)
        XCTAssertEqual(reloaded.offset, 5, "a record lower than the voided one reads")
        XCTAssertEqual(reloaded.crc, crcOfHello)
    }

    func testRecordsAreReadWithTheirMarksAndVoids() {
        var records = OffsetRecords(size: 100)
        XCTAssertTrue(records.read("10~0000000a"))
        XCTAssertNil(records.unconfirmed(thisBoot: "b"), "synced before its record: nothing to check")
        XCTAssertTrue(records.read("20~00000014*a"))
        XCTAssertEqual(records.unconfirmed(thisBoot: "a"), nil, "this boot's page cache holds it")
        XCTAssertEqual(records.unconfirmed(thisBoot: "b"), OffsetRecords.Check(from: 10, to: 20, crcBefore: 10, crc: 20))
        XCTAssertEqual(records.unconfirmed(thisBoot: nil), OffsetRecords.Check(from: 10, to: 20, crcBefore: 10, crc: 20))
        XCTAssertTrue(records.read("!"))
        XCTAssertEqual(records.offset, 10)
        XCTAssertEqual(records.crc, 10)
        XCTAssertNil(records.unconfirmed(thisBoot: "b"))
        XCTAssertFalse(records.read("!"), "a void voids one record, not two")
        XCTAssertTrue(records.read("15~0000000f*a"), "lower than the voided record, not than the offset")
        XCTAssertEqual(records.offset, 15)

        var unreadable = OffsetRecords(size: 100)
        XCTAssertFalse(unreadable.read("!"), "nothing to void")
        XCTAssertFalse(unreadable.read("10*a"), "a mark needs a CRC to check by")
        XCTAssertFalse(unreadable.read("10~0000000a*"), "a mark names a boot")
        XCTAssertFalse(unreadable.read("101~0000000a"), "past the length")

        // Concatenated (no CRC): a later mark has nothing to check against and is not written so.
        var concatenated = OffsetRecords(size: 100)
        XCTAssertTrue(concatenated.read("100"))
        XCTAssertNil(concatenated.crc)
        XCTAssertNil(concatenated.unconfirmed(thisBoot: "b"))
    }
}
