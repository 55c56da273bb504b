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
}

/// `XCTUnwrap` of an async expression's value.
func XCTUnwrapAsync<T>(_ value: @autoclosure () async throws -> T?, _ message: String = "", file: StaticString = #filePath, line: UInt = #line)
    async throws -> T
{
    let resolved = try await value()
    return try XCTUnwrap(resolved, message, file: file, line: line)
}
