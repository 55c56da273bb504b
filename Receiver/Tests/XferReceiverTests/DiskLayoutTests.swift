import Foundation
import Hummingbird
import Logging
import NIOCore
import XCTest

@testable import XferReceiver

/// The disk layout names files after what they hold, not after protocols; a root an earlier
/// receiver left (`<id>.tus.json`, `<id>.ietf.json`) still loads, and deleting an upload leaves
/// none of its files behind.
final class DiskLayoutTests: XCTestCase {
    private var root = ""

    override func setUpWithError() throws {
        root = NSTemporaryDirectory() + "xfer-layout-" + UUID().uuidString
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: root)
    }

    private func open() async throws -> DiskStorage {
        try await DiskStorage.open(
            root: root, threadPool: .singleton, memory: UploadsInMemory(limits: ReceiverLimits()), expireAfter: nil,
            logger: Logger(label: "test"))
    }

    /// Every file of upload `id` below the root (its working files and its published ones).
    private func files(of id: String) throws -> [String] {
        let uploads = try FileManager.default.contentsOfDirectory(atPath: root + "/uploads").filter { $0.hasPrefix(id) }
        let downloads = try FileManager.default.contentsOfDirectory(atPath: root + "/downloads").filter { $0.hasPrefix(id) }
        return uploads + downloads
    }

    /// An offset upload of `protocolName` with `bytes` of its `length` written.
    private func started(_ storage: DiskStorage, _ protocolName: String, length: Int, bytes: String) async throws -> String {
        let uploads = storage.offsetUploads(protocolName: protocolName)
        let upload = try await uploads.create(
            path: RelativePath.validated("a.bin")!, length: length, info: OffsetUploadInfo(role: .single, metadata: "k dg==", concat: nil, partials: []))
        let result = try await upload.exclusively {
            try await upload.write(RequestBody(buffer: ByteBuffer(string: bytes)), at: 0, limit: length, declaredLength: nil, check: nil)
        }
        _ = result
        return upload.id
    }

    func testOffsetUploadFilesNameNoProtocol() async throws {
        let storage = try await open()
        for protocolName in ["tus", "ietf"] {
            let id = try await started(storage, protocolName, length: 10, bytes: "hello")
            let names = try files(of: id).map { $0.dropFirst(id.count + 1) }
            XCTAssertTrue(names.contains("offset.json"), "\(names)")
            XCTAssertFalse(names.contains { $0.contains(protocolName) }, "\(protocolName): \(names)")
        }
    }

    /// A root as receivers before `offset.json` left it: the info under the protocol's name.
    func testAnUploadOfTheEarlierLayoutLoadsAndDeletesWhole() async throws {
        for protocolName in ["tus", "ietf"] {
            let id: String
            do {
                let storage = try await open()
                id = try await started(storage, protocolName, length: 10, bytes: "hello")
            }
            try FileManager.default.moveItem(atPath: root + "/uploads/\(id).offset.json", toPath: root + "/uploads/\(id).\(protocolName).json")

            let reopened = try await open()
            let uploads = reopened.offsetUploads(protocolName: protocolName)
            let upload = try await XCTUnwrapAsync(try await uploads.upload(id: id), "\(protocolName): the earlier layout loads")
            let offset = await upload.currentOffset
            XCTAssertEqual(offset, 5)
            XCTAssertEqual(upload.info.metadata, "k dg==")
            let asAnother = try await reopened.offsetUploads(protocolName: protocolName == "tus" ? "ietf" : "tus").upload(id: id)
            XCTAssertNil(asAnother, "another protocol's routes do not find it")

            let deleted = try await uploads.delete(id: id)
            XCTAssertTrue(deleted)
            XCTAssertEqual(try files(of: id), [], "\(protocolName): every file of the upload goes")
        }
    }

    /// A completed offset upload, deleted through the core: its working files and its published file go.
    func testDeletingACompletedUploadLeavesNothing() async throws {
        let storage = try await open()
        let id = try await started(storage, "ietf", length: 5, bytes: "hello")
        let upload = try await XCTUnwrapAsync(try await storage.offsetUploads(protocolName: "ietf").upload(id: id))
        try await upload.exclusively { _ = try await upload.finish() }
        XCTAssertFalse(try files(of: id).isEmpty)
        let deleted = try await storage.delete(id: id)
        XCTAssertTrue(deleted)
        XCTAssertEqual(try files(of: id), [])
    }

    /// The expiry sweep reads `uploads/` a name at a time (it keeps every completed upload's
    /// log): among thousands of logs it finds the one unfinished upload nobody touched, takes
    /// it, and leaves every log alone.
    func testTheSweepFindsTheUnfinishedUploadAmongCompletedLogs() async throws {
        let storage = try await DiskStorage.open(
            root: root, threadPool: .singleton, memory: UploadsInMemory(limits: ReceiverLimits()), expireAfter: .seconds(60),
            logger: Logger(label: "test"))
        let idle = try await started(storage, "ietf", length: 10, bytes: "hello")
        let young = try await started(storage, "tus", length: 10, bytes: "hi")
        var logs: [String] = []
        for _ in 0..<3000 {
            let name = UploadID.generate() + ".log"
            XCTAssertTrue(FileManager.default.createFile(atPath: root + "/uploads/" + name, contents: Data("{}\n".utf8)))
            logs.append(name)
        }
        // Untouched for two minutes: its files' times put back.
        let past = Date(timeIntervalSinceNow: -120)
        for name in try FileManager.default.contentsOfDirectory(atPath: root + "/uploads") where name.hasPrefix(idle) {
            try FileManager.default.setAttributes([.modificationDate: past], ofItemAtPath: root + "/uploads/" + name)
        }
        await storage.dropIdle()
        await storage.expire()

        XCTAssertEqual(try files(of: idle), [], "the unfinished upload nobody touched expired")
        XCTAssertFalse(try files(of: young).isEmpty, "an upload written a moment ago stays")
        let left = Set(try FileManager.default.contentsOfDirectory(atPath: root + "/uploads"))
        XCTAssertTrue(left.isSuperset(of: logs), "every completed upload's log stays")
    }

    /// A body of `PUT /raw` a crash cut short (`.partial-*`) goes at the next start; the files
    /// stored whole beside it stay.
    func testAStartRemovesCutRawBodiesAndKeepsStoredFiles() async throws {
        try FileManager.default.createDirectory(atPath: root + "/raw", withIntermediateDirectories: true)
        for name in [".partial-1", ".partial-2", "kept.bin", "partial-not.bin"] {
            XCTAssertTrue(FileManager.default.createFile(atPath: root + "/raw/" + name, contents: Data("x".utf8)))
        }
        _ = try await open()
        XCTAssertEqual(Set(try FileManager.default.contentsOfDirectory(atPath: root + "/raw")), ["kept.bin", "partial-not.bin"])
    }

    /// `FileSystemOps.forEachName`: every name once, without `.` and `..`; nothing for a
    /// directory that is not there.
    func testForEachNameGivesEveryNameOnce() throws {
        try FileManager.default.createDirectory(atPath: root + "/names/sub", withIntermediateDirectories: true)
        let names = ["a", ".hidden", "é.txt", String(repeating: "n", count: 255)]
        for name in names { XCTAssertTrue(FileManager.default.createFile(atPath: root + "/names/" + name, contents: nil)) }
        var seen: [String] = []
        FileSystemOps.forEachName(in: root + "/names") { seen.append(String(decoding: $0, as: UTF8.self)) }
        XCTAssertEqual(seen.sorted(), (names + ["sub"]).sorted())
        var none = 0
        FileSystemOps.forEachName(in: root + "/missing") { _ in none += 1 }
        XCTAssertEqual(none, 0)
    }

    /// An id says whether its upload was stored whole by its first digit's top bit, and keeps the
    /// other 127 bits random: every first digit of its half occurs, and no id twice.
    func testAnUploadIDCarriesItsStoredWholeBitAndIsOtherwiseRandom() {
        var firstDigits: [Bool: Set<UInt8>] = [true: [], false: []]
        var seen = Set<String>()
        for index in 0..<2_000 {
            let storedWhole = index % 2 == 0
            let id = UploadID.generate(storedWhole: storedWhole)
            XCTAssertTrue(UploadID.isValid(id), id)
            XCTAssertEqual(UploadID.isStoredWhole(id), storedWhole, id)
            XCTAssertTrue(seen.insert(id).inserted, id)
            firstDigits[storedWhole]!.insert(id.utf8.first!)
        }
        XCTAssertEqual(firstDigits[false], Set("01234567".utf8))
        XCTAssertEqual(firstDigits[true], Set("89abcdef".utf8))
    }
}

/// `XCTUnwrap` of an async expression's value.
func XCTUnwrapAsync<T>(_ value: @autoclosure () async throws -> T?, _ message: String = "", file: StaticString = #filePath, line: UInt = #line)
    async throws -> T
{
    let resolved = try await value()
    return try XCTUnwrap(resolved, message, file: file, line: line)
}
