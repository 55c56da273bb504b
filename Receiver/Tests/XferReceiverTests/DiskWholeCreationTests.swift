import Foundation
import Hummingbird
import Logging
import NIOCore
import XCTest
import XferPrimitives

@testable import XferReceiver

/// A creation whose body is the whole (small) upload is made, completed and published in one sync
/// round (`DiskOffsetUploads.create` with a body). What a crash can leave of that round: a killed
/// process leaves every write in the page cache (same boot: loaded as it is); a crash of the
/// machine can keep the record and lose bytes (another boot: checked, and dropped when torn).
final class DiskWholeCreationTests: XCTestCase {
    private var root = ""
    private let thisBoot = "0123456789abcdef0123456789abcdef"
    private let path = RelativePath.validated("d/a.bin")!

    override func setUpWithError() throws {
        root = NSTemporaryDirectory() + "xfer-whole-" + UUID().uuidString
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: root)
    }

    private func open(boot: String? = nil) async throws -> DiskStorage {
        try await DiskStorage.open(
            root: root, threadPool: .singleton, memory: UploadsInMemory(limits: ReceiverLimits()), expireAfter: nil,
            bootID: boot ?? thisBoot, logger: Logger(label: "test"))
    }

    private func create(
        _ storage: DiskStorage, _ protocolName: String = "ietf", bytes: String, length: Int? = nil,
        info: OffsetUploadInfo = .defaultSingle
    ) async throws -> (any OffsetUpload, OffsetWriteResult) {
        try await storage.offsetUploads(protocolName: protocolName).create(
            path: path, length: length ?? bytes.utf8.count, info: info, body: RequestBody(buffer: ByteBuffer(string: bytes)),
            limit: length ?? bytes.utf8.count, declaredLength: bytes.utf8.count, check: nil, announce: { _ in })
    }

    private func names(of id: String) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: root + "/uploads").filter { $0.hasPrefix(id) }.sorted()
    }

    /// A file created whole is a file of its own: `downloads/<id>.<name>` (`Publication.file`).
    private func published(_ id: String) -> String { root + "/downloads/" + id + ".a.bin" }

    func testAWholeCreationIsOneRoundAndItsFinishReportsOnce() async throws {
        let storage = try await open()
        let before = storage.syncRounds
        let (upload, result) = try await create(storage, bytes: "hello, world")
        XCTAssertEqual(result, .stored(offset: 12))
        XCTAssertEqual(storage.syncRounds - before, 1, "creation, bytes, completion and publication share one round")
        XCTAssertEqual(try names(of: upload.id), [upload.id + ".log"], "the default info needs no file of its own")
        XCTAssertEqual(try String(contentsOfFile: published(upload.id), encoding: .utf8), "hello, world")
        let first = try await upload.exclusively { try await upload.finish() }
        let second = try await upload.exclusively { try await upload.finish() }
        XCTAssertEqual([first, second], [true, false], "the completion is reported by one finish")
    }

    /// Loaded again by a receiver of the same boot (after a SIGKILL, say): complete, at its length,
    /// with its info, for both protocols.
    func testAWholeCreationLoadsCompleteAfterARestart() async throws {
        let tusInfo = OffsetUploadInfo(role: .single, metadata: "filename YS5iaW4=", concat: nil, partials: [])
        var ids: [(String, String, OffsetUploadInfo)] = []
        do {
            let storage = try await open()
            ids.append(("ietf", try await create(storage, bytes: "hello").0.id, .defaultSingle))
            ids.append(("tus", try await create(storage, "tus", bytes: "hello", info: tusInfo).0.id, tusInfo))
        }
        let storage = try await open()
        for (protocolName, id, info) in ids {
            let upload = try await XCTUnwrapAsync(try await storage.offsetUploads(protocolName: protocolName).upload(id: id))
            let offset = await upload.currentOffset
            XCTAssertEqual(offset, 5, protocolName)
            XCTAssertEqual(upload.info, info, protocolName)
            let crc = await upload.currentCRC
            XCTAssertEqual(crc, CRC32C.of(Array("hello".utf8)), protocolName)
            let finished = try await upload.exclusively { try await upload.finish() }
            XCTAssertFalse(finished, "\(protocolName): completed before the restart")
        }
    }

    /// Killed after the record and before the rename: the next load publishes it.
    func testARecordWhoseFileWasNotPublishedIsPublishedByTheLoad() async throws {
        let id: String
        do {
            let storage = try await open()
            id = try await create(storage, bytes: "hello").0.id
        }
        try FileManager.default.moveItem(atPath: published(id), toPath: root + "/uploads/\(id).data")
        let storage = try await open(boot: "ffffffffffffffffffffffffffffffff")
        let upload = try await XCTUnwrapAsync(try await storage.offsetUploads(protocolName: "ietf").upload(id: id))
        let offset = await upload.currentOffset
        XCTAssertEqual(offset, 5)
        XCTAssertEqual(try String(contentsOfFile: published(id), encoding: .utf8), "hello", "checked against its record, then published")
    }

    /// A crash of the machine during the round kept the record and lost the bytes: the next boot
    /// finds the file does not match and drops the upload (nobody was told of it); one whose
    /// bytes match loads complete.
    func testAfterAnotherBootATornFileIsDroppedAndAWholeOneKept() async throws {
        let torn: String
        let whole: String
        do {
            let storage = try await open()
            torn = try await create(storage, bytes: "hello").0.id
            whole = try await create(storage, bytes: "world").0.id
        }
        try Data("hel\0\0".utf8).write(to: URL(fileURLWithPath: published(torn)))

        let sameBoot = try await open()
        let stillThere = try await sameBoot.offsetUploads(protocolName: "ietf").upload(id: torn)
        XCTAssertNotNil(stillThere, "the same boot lost nothing of the round: no check")

        let storage = try await open(boot: "ffffffffffffffffffffffffffffffff")
        let dropped = try await storage.offsetUploads(protocolName: "ietf").upload(id: torn)
        XCTAssertNil(dropped)
        XCTAssertEqual(try names(of: torn), [])
        XCTAssertFalse(FileManager.default.fileExists(atPath: published(torn)))
        let kept = try await XCTUnwrapAsync(try await storage.offsetUploads(protocolName: "ietf").upload(id: whole))
        let offset = await kept.currentOffset
        XCTAssertEqual(offset, 5)
        // Checked once: the log now holds a mark of this boot, so later loads need no check.
        let log = try String(contentsOfFile: root + "/uploads/\(whole).log", encoding: .utf8)
        XCTAssertTrue(log.hasSuffix("\n*ffffffffffffffffffffffffffffffff;"), log)
    }

    /// A body that is not the whole upload (cut, or shorter than the length) leaves what the
    /// longer way leaves: the creation, its info file and the offset reached, durable.
    func testACutBodyLeavesTheUploadAtItsOffset() async throws {
        let id: String
        do {
            let storage = try await open()
            let body = AsyncThrowingStream<ByteBuffer, any Error> { continuation in
                continuation.yield(ByteBuffer(string: "hel"))
                continuation.finish(throwing: CancellationError())
            }
            let (upload, result) = try await storage.offsetUploads(protocolName: "ietf").create(
                path: path, length: 5, info: .defaultSingle, body: body, limit: 5, declaredLength: 5, check: nil, announce: { _ in })
            XCTAssertEqual(result, .failed(.interrupted(offset: 3)))
            id = upload.id
            XCTAssertTrue(try names(of: id).contains(id + ".offset.json"))
        }
        let storage = try await open(boot: "ffffffffffffffffffffffffffffffff")
        let upload = try await XCTUnwrapAsync(try await storage.offsetUploads(protocolName: "ietf").upload(id: id))
        let offset = await upload.currentOffset
        XCTAssertEqual(offset, 3)
        let more = try await upload.exclusively {
            try await upload.write(RequestBody(buffer: ByteBuffer(string: "lo")), at: 3, limit: 5, declaredLength: 2, check: nil)
        }
        XCTAssertEqual(more, .stored(offset: 5))
    }

    /// Published by one rename: no directory in `downloads/` (what cost a small file two `mkdir`s),
    /// the whole path kept in its meta and its URL, and gone with its upload on deletion.
    func testAFileCreatedWholeIsAFileOfItsOwnAndGoesWithItsUpload() async throws {
        let storage = try await open()
        let (upload, _) = try await create(storage, bytes: "hello")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: root + "/downloads"), [upload.id + ".a.bin"])
        XCTAssertEqual(upload.path.text, "d/a.bin")
        let log = try String(contentsOfFile: root + "/uploads/\(upload.id).log", encoding: .utf8)
        XCTAssertTrue(log.hasPrefix(#"{"chunkSize":5,"fileName":"d/a.bin","formatVersion":1,"protocolName":"ietf","publication":"file","#), log)

        // Loaded by a fresh receiver, it is still found there (downloads read the meta's publication).
        let again = try await open()
        let loaded = try await XCTUnwrapAsync(try await again.offsetUploads(protocolName: "ietf").upload(id: upload.id))
        XCTAssertEqual(loaded.path.text, "d/a.bin")
        let deleted = try await again.offsetUploads(protocolName: "ietf").delete(id: upload.id)
        XCTAssertTrue(deleted)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: root + "/downloads"), [])
        XCTAssertEqual(try names(of: upload.id), [])
    }

    /// A name too long for `<id>.<name>` within a file name's 255 bytes keeps a directory of its own.
    func testANameTooLongForAFileOfItsOwnKeepsADirectory() async throws {
        let storage = try await open()
        let long = String(repeating: "n", count: 255 - UploadID.length)  // one byte past the limit with the dot
        let longPath = RelativePath.validated("d/" + long)!
        let (upload, result) = try await storage.offsetUploads(protocolName: "ietf").create(
            path: longPath, length: 5, info: .defaultSingle, body: RequestBody(buffer: ByteBuffer(string: "hello")),
            limit: 5, declaredLength: 5, check: nil, announce: { _ in })
        XCTAssertEqual(result, .stored(offset: 5))
        XCTAssertEqual(try String(contentsOfFile: root + "/downloads/\(upload.id)/d/" + long, encoding: .utf8), "hello")
        XCTAssertEqual(Publication.forFileCreatedWhole(name: String(long.dropLast())), .file)
    }
}
