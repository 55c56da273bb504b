import Foundation
import Hummingbird
import Logging
import NIOCore
import XCTest
import XferPrimitives
import XferWire

@testable import XferReceiver

/// A sequence block is acknowledged after one sync round: its bytes, its record in `blocks.log`
/// and the upload's own `+k~CRC*<boot id>`. A crash during the round can keep either record
/// without the other (the block then counts as not accepted and is taken again), or, a crash of
/// the machine, both without the bytes (a load under another boot reads the last block back).
final class DiskSequenceBlockTests: XCTestCase {
    private var root = ""
    private let bytes = Array("0123456789abcdefghij".utf8)

    override func setUpWithError() throws {
        root = NSTemporaryDirectory() + "xfer-sequence-" + UUID().uuidString
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: root)
    }

    private let thisBoot = "0123456789abcdef0123456789abcdef"

    private func open(boot: String? = nil) async throws -> DiskStorage {
        try await DiskStorage.open(
            root: root, threadPool: .singleton, memory: UploadsInMemory(limits: ReceiverLimits()), expireAfter: nil,
            bootID: boot ?? thisBoot, logger: Logger(label: "test"))
    }

    private func block(_ number: Int) -> [UInt8] { Array(bytes[(number - 1) * 8..<min(number * 8, bytes.count)]) }

    private func send(_ number: Int, to upload: any SequenceUpload) async throws {
        try await upload.exclusively {
            try await upload.writeAccepted(
                number, crc: CRC32.of(block(number)), body: RequestBody(buffer: ByteBuffer(bytes: block(number))), trailer: nil)
        }
    }

    /// Creates an upload of three blocks and sends the first two; returns its token and files.
    private func twoOfThree() async throws -> (token: String, uploadLog: String, blocksLog: String) {
        let storage = try await open()
        let (upload, token) = try await storage.sequenceUploads.create(
            path: RelativePath.validated("s.bin")!, size: bytes.count, blockSize: 8, suffix: "")
        for number in [1, 2] { try await send(number, to: upload) }
        let disk = try XCTUnwrap(upload.upload as? DiskUpload)
        return (token, disk.layout.log, disk.layout.file("blocks.log"))
    }

    private func reload(_ token: String, boot: String? = nil) async throws -> any SequenceUpload {
        let storage = try await open(boot: boot)
        return try await XCTUnwrapAsync(try await storage.sequenceUploads.upload(forToken: token))
    }

    private func append(_ record: String, to path: String) throws {
        try POSIXFile.appendRecords([record], to: path, creating: false)
    }

    func testABlockIsOneRoundAndTheUploadCompletes() async throws {
        let storage = try await open()
        let (upload, _) = try await storage.sequenceUploads.create(
            path: RelativePath.validated("s.bin")!, size: bytes.count, blockSize: 8, suffix: "")
        for number in 1...3 {
            let before = storage.syncRounds
            try await send(number, to: upload)
            XCTAssertEqual(storage.syncRounds - before, 1, "block \(number): its bytes and both records in one round")
            let accepted = await upload.acceptedCount
            XCTAssertEqual(accepted, number)
        }
        guard case .completed(let record) = try await upload.upload.complete() else { return XCTFail("not completed") }
        XCTAssertEqual(record.crc32c, CRC32.hex(CRC32C.of(bytes)))
    }

    /// `blocks.log` kept block 3's record, the upload's log lost its `+3`: block 3 is not
    /// accepted, is taken again, and its second record replaces the first.
    func testABlockRecordWithoutTheUploadsRecordIsNotAccepted() async throws {
        let (token, _, blocksLog) = try await twoOfThree()
        try append(SequenceBlockRecord(sequenceNo: 3, crc: CRC32.of(block(3))).text, to: blocksLog)

        let upload = try await reload(token)
        var accepted = await upload.acceptedCount
        XCTAssertEqual(accepted, 2, "the block's bytes were never acknowledged")
        try await send(3, to: upload)
        accepted = await upload.acceptedCount
        XCTAssertEqual(accepted, 3)

        let again = try await reload(token)
        accepted = await again.acceptedCount
        XCTAssertEqual(accepted, 3, "the record written again replaces the earlier one, and nothing after it is lost")
        let crc = await again.acceptedCRC(of: 3)
        XCTAssertEqual(crc, CRC32.of(block(3)))
        guard case .completed = try await again.upload.complete() else { return XCTFail("not completed") }
        let published = root + "/downloads/" + again.upload.meta.uploadId + "/s.bin"
        XCTAssertEqual(try Array(Data(contentsOf: URL(fileURLWithPath: published))), bytes)
    }

    /// The upload's log kept `+3`, `blocks.log` lost block 3's record: not accepted; sent again,
    /// its bytes are written over the same place.
    func testTheUploadsRecordWithoutTheBlockRecordIsNotAccepted() async throws {
        let (token, uploadLog, _) = try await twoOfThree()
        try append("+3", to: uploadLog)

        let upload = try await reload(token)
        var accepted = await upload.acceptedCount
        XCTAssertEqual(accepted, 2)
        try await send(3, to: upload)
        accepted = await upload.acceptedCount
        XCTAssertEqual(accepted, 3)
        accepted = try await reload(token).acceptedCount
        XCTAssertEqual(accepted, 3)
    }

    /// The machine went down in block 2's round, which kept both records and not all its bytes:
    /// the same boot trusts the page cache; another boot reads block 2 back, voids its `+2`
    /// durably, and takes it again; block 1, recorded before block 2 was written, is not read.
    func testAfterAnotherBootATornLastBlockIsTakenAgain() async throws {
        let (token, uploadLog, _) = try await twoOfThree()
        let log = try String(contentsOfFile: uploadLog, encoding: .utf8)
        XCTAssertTrue(log.hasSuffix("\n+2~\(CRC32.hex(CRC32C.of(block(2))))*\(thisBoot);"), log)
        let id = try await reload(token).upload.meta.uploadId
        let data = try FileHandle(forWritingTo: URL(fileURLWithPath: root + "/uploads/\(id)/data"))
        try data.seek(toOffset: 12)
        try data.write(contentsOf: Data([0, 0]))
        try data.close()

        var accepted = try await reload(token).acceptedCount
        XCTAssertEqual(accepted, 2, "the same boot lost nothing of the round: no check")

        let otherBoot = "ffffffffffffffffffffffffffffffff"
        let upload = try await reload(token, boot: otherBoot)
        accepted = await upload.acceptedCount
        XCTAssertEqual(accepted, 1)
        let voided = try String(contentsOfFile: uploadLog, encoding: .utf8)
        XCTAssertTrue(voided.hasSuffix(";\n-2;"), voided)
        for number in [2, 3] { try await send(number, to: upload) }
        let again = try await reload(token, boot: "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee")
        accepted = await again.acceptedCount
        XCTAssertEqual(accepted, 3, "block 3's bytes are whole: kept")
        guard case .completed = try await again.upload.complete() else { return XCTFail("not completed") }
        let published = root + "/downloads/" + id + "/s.bin"
        XCTAssertEqual(try Array(Data(contentsOf: URL(fileURLWithPath: published))), bytes)
    }

    /// Whole bytes after another boot: the last block's record holds, and nothing is written.
    func testAfterAnotherBootAWholeLastBlockIsKept() async throws {
        let (token, uploadLog, _) = try await twoOfThree()
        let before = try String(contentsOfFile: uploadLog, encoding: .utf8)
        let accepted = try await reload(token, boot: "ffffffffffffffffffffffffffffffff").acceptedCount
        XCTAssertEqual(accepted, 2)
        XCTAssertEqual(try String(contentsOfFile: uploadLog, encoding: .utf8), before)
    }

    func testChunkRecordsReadTheirMark() {
        let marked = ChunkRecord(Array("+2~0000000a*abc".utf8)[...])
        XCTAssertEqual(marked?.crc, 10)
        XCTAssertEqual(marked?.sameRoundBoot.map { Array($0) }, Array("abc".utf8))
        XCTAssertNil(ChunkRecord(Array("+2~0000000a".utf8)[...])?.sameRoundBoot)
        XCTAssertNil(ChunkRecord(Array("+2~0000000a*".utf8)[...]), "a mark names a boot")
        XCTAssertNil(ChunkRecord(Array("+2~000000a*abc".utf8)[...]))
    }

    func testBlockRecordsParse() {
        let records: [Substring] = ["1.00000001", "2.00000002", "2.00000022", "3.00000003"]
        XCTAssertEqual(SequenceBlocks.parse(records).crcs, [1, 0x22, 3], "a record again replaces what followed")
        XCTAssertFalse(SequenceBlocks.parse(records).unreadable)
        let skipping = SequenceBlocks.parse(["1.00000001", "3.00000003", "2.00000002"])
        XCTAssertEqual(skipping.crcs, [1])
        XCTAssertTrue(skipping.unreadable, "a record that skips ahead ends the reading")
        XCTAssertEqual(SequenceBlocks.parse(["1.0000001"]).crcs, [])
        var received = ChunkRanges()
        _ = received.insert(1)
        _ = received.insert(3)
        XCTAssertEqual(SequenceBlocks.accepted([1, 2, 3], received: received), 1, "only from 1, without a gap")
    }
}
