import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import XCTest

@testable import XferReceiver

/// The routes the storage core alone serves (patch, whole downloads), run on every storage the route
/// tests can reach: in memory (the core and nothing else) and on disk. The object store's run is
/// the end-to-end suites' (`XFER_TEST_STORAGE=ceph`): these tests start no store.
final class CoreRoutesOverStoragesTests: XCTestCase {
    private var root = ""

    override func setUpWithError() throws {
        root = NSTemporaryDirectory() + "xfer-core-routes-" + UUID().uuidString
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: root)
    }

    enum Kind: CaseIterable { case memory, disk }

    private func storage(_ kind: Kind) async throws -> StorageComposer {
        switch kind {
        case .memory:
            return StorageComposer(composing: MemoryStorage())
        case .disk:
            let disk = try await DiskStorage.open(
                root: root + "/disk", threadPool: .singleton, memory: UploadsInMemory(limits: ReceiverLimits()), expireAfter: nil,
                logger: Logger(label: "test"))
            return StorageComposer(composing: disk)
        }
    }

    private func app(_ kind: Kind) async throws -> some ApplicationProtocol {
        let routes = try await ReceiverRoutes.open(
            try await storage(kind), configuration: ReceiverConfiguration(root: root), logger: Logger(label: "test"))
        let router = Router(context: ReceiverContext.self)
        routes.register(on: router)
        return Application(router: router)
    }

    private static let contentRange = HTTPField.Name("Content-Range")!
    private static let contentMD5 = HTTPField.Name("Content-MD5")!

    private static func json(_ buffer: ByteBuffer) throws -> [String: Any] {
        try XCTUnwrap(JSONSerialization.jsonObject(with: Data(buffer: buffer)) as? [String: Any])
    }

    /// Chunks out of order, one sent again, one refused for its digest, completion refused while
    /// one is missing, then the file downloaded whole and by range, then deleted.
    func testPatchUploadAndDownloadOnEveryStorage() async throws {
        let file = ByteBuffer(bytes: (0..<2500).map { UInt8(truncatingIfNeeded: $0 &* 7) })
        for kind in Kind.allCases {
            let app = try await app(kind)
            try await app.test(.router) { client in
                let created = try await client.execute(
                    uri: "/uploads", method: .post, body: ByteBuffer(string: #"{"fileName":"dir/a.bin","size":2500,"chunkSize":1000}"#)
                ) { response in
                    XCTAssertEqual(response.status, .created, "\(kind)")
                    return try Self.json(response.body)
                }
                let id = try XCTUnwrap(created["uploadId"] as? String)
                func send(_ chunk: Int, _ bytes: ByteBuffer? = nil, md5: String? = nil) async throws -> HTTPResponse.Status {
                    let first = (chunk - 1) * 1000
                    let body = bytes ?? file.getSlice(at: first, length: min(1000, 2500 - first))!
                    var headers: HTTPFields = [Self.contentRange: "bytes \(first)-\(first + body.readableBytes - 1)/2500"]
                    if let md5 { headers[Self.contentMD5] = md5 }
                    return try await client.execute(uri: "/uploads/\(id)/chunks/\(chunk)", method: .patch, headers: headers, body: body) {
                        $0.status
                    }
                }
                let third = Data(file.getBytes(at: 2000, length: 500)!)
                let wrongMD5 = Data(Insecure.MD5.hash(data: Data(third.reversed()))).base64EncodedString()
                let status3 = try await send(3, md5: wrongMD5)
                XCTAssertEqual(status3, .unprocessableContent, "\(kind): a body that is not its digest counts for nothing")
                let rightMD5 = Data(Insecure.MD5.hash(data: third)).base64EncodedString()
                let sent3 = try await send(3, md5: rightMD5)
                XCTAssertEqual(sent3, .noContent, "\(kind)")
                let sent1 = try await send(1)
                XCTAssertEqual(sent1, .noContent, "\(kind)")
                let again1 = try await send(1)
                XCTAssertEqual(again1, .noContent, "\(kind): a chunk sent again")
                let short = try await send(2, ByteBuffer(string: "short"))
                XCTAssertEqual(short, .badRequest, "\(kind): a body shorter than its chunk")

                try await client.execute(uri: "/uploads/\(id)/complete", method: .post) { response in
                    XCTAssertEqual(response.status, .conflict, "\(kind): chunk 2 is missing")
                    XCTAssertEqual(try Self.json(response.body)["missing"] as? [Int], [2], "\(kind)")
                }
                try await client.execute(uri: "/uploads/\(id)", method: .get) { response in
                    XCTAssertEqual(response.status, .ok, "\(kind)")
                    XCTAssertEqual(try Self.json(response.body)["received"] as? [Int], [1, 3], "\(kind)")
                }
                let sent2 = try await send(2)
                XCTAssertEqual(sent2, .noContent, "\(kind)")
                let url = try await client.execute(uri: "/uploads/\(id)/complete", method: .post) { response in
                    XCTAssertEqual(response.status, .ok, "\(kind)")
                    let answer = try Self.json(response.body)
                    if let sha256 = answer["sha256"] as? String {
                        XCTAssertEqual(sha256, SHA256.hash(data: Data(buffer: file)).map { String(format: "%02x", $0) }.joined(), "\(kind)")
                    }
                    return try XCTUnwrap(answer["url"] as? String)
                }
                let download = try XCTUnwrap(URL(string: url)?.path)
                try await client.execute(uri: download, method: .get) { response in
                    XCTAssertEqual(response.status, .ok, "\(kind)")
                    XCTAssertEqual(response.body, file, "\(kind): the file byte for byte")
                }
                // The disk reads ranges (`PublishedRangeReading`); the core alone answers the whole file.
                try await client.execute(uri: download, method: .get, headers: [.range: "bytes=999-1001"]) { response in
                    switch kind {
                    case .disk:
                        XCTAssertEqual(response.status, .partialContent)
                        XCTAssertEqual(response.body, file.getSlice(at: 999, length: 3))
                    case .memory:
                        XCTAssertEqual(response.status, .ok)
                        XCTAssertEqual(response.body, file)
                        XCTAssertNil(response.headers[.acceptRanges])
                    }
                }
                try await client.execute(uri: "/uploads/\(id)", method: .delete) { XCTAssertEqual($0.status, .noContent, "\(kind)") }
                try await client.execute(uri: download, method: .get) { XCTAssertEqual($0.status, .notFound, "\(kind): gone with its upload") }
                try await client.execute(uri: "/uploads/\(id)", method: .get) { XCTAssertEqual($0.status, .notFound, "\(kind)") }
            }
        }
    }
}
