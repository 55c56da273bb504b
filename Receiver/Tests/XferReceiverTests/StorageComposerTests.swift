import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import NIOPosix
import XCTest

@testable import XferReceiver

/// The routes a receiver registers, and what they advertise, come from the capabilities its
/// storage declared (`StorageComposer`), resolved once: a capability taken out of the composer
/// takes its routes and its advertisement with it. Driven through the router, no sockets.
final class StorageComposerTests: XCTestCase {
    private var root = ""

    override func setUpWithError() throws {
        root = NSTemporaryDirectory() + "xfer-composer-" + UUID().uuidString
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: root)
    }

    private static let tusResumable = HTTPField.Name("Tus-Resumable")!
    private static let tusExtension = HTTPField.Name("Tus-Extension")!
    private static let uploadLength = HTTPField.Name("Upload-Length")!
    private static let uploadConcat = HTTPField.Name("Upload-Concat")!
    private static let uploadLimit = HTTPField.Name("Upload-Limit")!
    private static let uploadComplete = HTTPField.Name("Upload-Complete")!
    private static let interopVersion = HTTPField.Name("Upload-Draft-Interop-Version")!

    /// The disk storage's composer (every capability), as `ReceiverRoutes.open` resolves it.
    private func diskComposer(expireAfter: Duration? = .seconds(3600)) async throws -> StorageComposer {
        let storage = try await DiskStorage.open(
            root: root, threadPool: .singleton, memory: UploadsInMemory(limits: ReceiverLimits()), expireAfter: expireAfter,
            logger: Logger(label: "test"))
        return StorageComposer(composing: storage)
    }

    private func app(over storage: StorageComposer) async throws -> some ApplicationProtocol {
        let routes = try await ReceiverRoutes.open(storage, configuration: ReceiverConfiguration(root: root), logger: Logger(label: "test"))
        let router = Router(context: ReceiverContext.self)
        routes.register(on: router)
        return Application(router: router)
    }

    /// Status of one request with no body.
    private func status(_ app: some ApplicationProtocol, _ uri: String, _ method: HTTPRequest.Method, _ headers: HTTPFields = [:]) async throws
        -> HTTPResponse.Status
    {
        try await app.test(.router) { client in
            try await client.execute(uri: uri, method: method, headers: headers) { $0.status }
        }
    }

    func testTheDiskDeclaresEveryCapability() async throws {
        let composer = try await diskComposer()
        XCTAssertEqual(composer.capabilities, Set(StorageComposer.Capability.allCases))
        let never = try await diskComposer(expireAfter: nil)
        XCTAssertEqual(never.capabilities, Set(StorageComposer.Capability.allCases).subtracting([.expiry]), "no expiry is declared when nothing expires")
    }

    func testRemovingConcatenationRemovesItsAdvertisementAndItsRequests() async throws {
        let full = try await app(over: try await diskComposer())
        let without = try await app(over: try await diskComposer().removing(.concatenation))
        for (app, concatenates) in [(full, true), (without, false)] as [(any ApplicationProtocol, Bool)] {
            try await app.test(.router) { client in
                let extensions = try await client.execute(uri: "/files/", method: .options) { try XCTUnwrap($0.headers[Self.tusExtension]) }
                XCTAssertEqual(extensions.split(separator: ",").contains("concatenation"), concatenates, extensions)
                XCTAssertTrue(extensions.split(separator: ",").contains("creation"), extensions)
                let partial: HTTPFields = [Self.tusResumable: "1.0.0", Self.uploadLength: "10", Self.uploadConcat: "partial"]
                try await client.execute(uri: "/files/", method: .post, headers: partial) { response in
                    XCTAssertEqual(response.status, concatenates ? .created : .badRequest)
                }
                // Plain uploads are the same either way.
                let plain: HTTPFields = [Self.tusResumable: "1.0.0", Self.uploadLength: "10"]
                try await client.execute(uri: "/files/", method: .post, headers: plain) { XCTAssertEqual($0.status, .created) }
            }
        }
    }

    func testRemovingExpiryRemovesWhatSaysUploadsExpire() async throws {
        for (composer, expires) in [(try await diskComposer(), true), (try await diskComposer().removing(.expiry), false)] {
            let app = try await app(over: composer)
            try await app.test(.router) { client in
                let extensions = try await client.execute(uri: "/files/", method: .options) { try XCTUnwrap($0.headers[Self.tusExtension]) }
                XCTAssertEqual(extensions.split(separator: ",").contains("expiration"), expires, extensions)
                // The draft's answer to a creation that leaves the upload unfinished.
                let creation: HTTPFields = [Self.uploadComplete: "?0", Self.interopVersion: "8", Self.uploadLength: "10"]
                let limit = try await client.execute(uri: "/resumable/a.bin", method: .post, headers: creation, body: ByteBuffer(string: "abc")) {
                    response in
                    XCTAssertEqual(response.status, .created, String(buffer: response.body))
                    return response.headers[Self.uploadLimit] ?? ""
                }
                XCTAssertEqual(limit.contains("expires="), expires, limit)
            }
        }
    }

    /// Each protocol's routes exist exactly when the capabilities they need are declared.
    func testRemovingACapabilityRemovesItsRoutes() async throws {
        let probes: [(StorageComposer.Capability, String, HTTPRequest.Method)] = [
            (.offsetUploads, "/files/", .options),
            (.offsetUploads, "/resumable/", .options),
            (.offsetUploads, "/", .get),
            (.sequences, "/upload", .post),
            (.multipartSources, "/fileSection/preLoad.do", .post),
            (.wholeFiles, "/raw/a.bin", .put),
        ]
        let full = try await app(over: try await diskComposer())
        for (capability, uri, method) in probes {
            let served = try await status(full, uri, method)
            XCTAssertNotEqual(served, .notFound, "\(method) \(uri) with every capability")
            let without = try await app(over: try await diskComposer().removing(capability))
            let unserved = try await status(without, uri, method)
            XCTAssertEqual(unserved, .notFound, "\(method) \(uri) without \(capability)")
        }
        // patch and downloads need the core alone.
        let core = try await app(over: StorageComposer(core: try await diskComposer().core))
        let created = try await core.test(.router) { client in
            try await client.execute(uri: "/uploads", method: .post, body: ByteBuffer(string: #"{"fileName":"a","size":1,"chunkSize":1}"#)) {
                $0.status
            }
        }
        XCTAssertEqual(created, .created)
    }

    /// Without range reads a download answers a `Range` with the whole file and offers no ranges.
    func testRemovingRangeReadsRemovesRangesFromDownloads() async throws {
        for (composer, ranges) in [(try await diskComposer(), true), (try await diskComposer().removing(.rangeReads), false)] {
            let app = try await app(over: composer)
            try await app.test(.router) { client in
                let url = try await client.execute(uri: "/uploads", method: .post, body: ByteBuffer(string: #"{"fileName":"a","size":4,"chunkSize":4}"#)) {
                    response in
                    let id = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(buffer: response.body)) as? [String: Any])["uploadId"] as? String
                    return try XCTUnwrap(id)
                }
                try await client.execute(
                    uri: "/uploads/\(url)/chunks/1", method: .patch, headers: [HTTPField.Name("Content-Range")!: "bytes 0-3/4"],
                    body: ByteBuffer(string: "abcd")
                ) { XCTAssertEqual($0.status, .noContent) }
                let link = try await client.execute(uri: "/uploads/\(url)/complete", method: .post) { response in
                    let answer = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(buffer: response.body)) as? [String: Any])
                    return try XCTUnwrap(URL(string: try XCTUnwrap(answer["url"] as? String))?.path)
                }
                try await client.execute(uri: link, method: .get, headers: [.range: "bytes=1-2"]) { response in
                    XCTAssertEqual(response.status, ranges ? .partialContent : .ok)
                    XCTAssertEqual(String(buffer: response.body), ranges ? "bc" : "abcd")
                    XCTAssertEqual(response.headers[.acceptRanges], ranges ? "bytes" : nil)
                }
            }
        }
    }

    /// Without statistics, `/stats` answers zeros rather than asking the storage's type.
    func testStatsWithoutTheCapabilityAreZeros() async throws {
        let app = try await app(over: MemoryStorage().composer)
        try await app.test(.router) { client in
            try await client.execute(uri: "/stats", method: .get) { response in
                XCTAssertEqual(response.status, .ok)
                XCTAssertTrue(String(buffer: response.body).contains("\"payloadBytesReceived\":0"), String(buffer: response.body))
            }
        }
    }
}

extension MemoryStorage {
    var composer: StorageComposer { StorageComposer(composing: self) }
}
