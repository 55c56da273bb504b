import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import XCTest
import XferReceiver
import XferReceiverTesting

/// The receiver's routes mounted in someone else's Hummingbird application, behind its own
/// authentication, driven through the router without sockets (`.router`): what Docs/architecture.md
/// shows an app team.
final class MountedRoutesTests: XCTestCase {
    /// An application's own context, as an app would have: Hummingbird's, plus the channel.
    struct AppContext: ReceiverRequestContext {
        var coreContext: CoreRequestContextStorage
        let channel: any Channel
        init(source: ApplicationRequestContextSource) {
            coreContext = .init(source: source)
            channel = source.channel
        }
    }

    /// The application's authentication: a fixed key in a header of its own choosing.
    struct AppKeyMiddleware: RouterMiddleware {
        typealias Context = AppContext
        func handle(_ request: Request, context: AppContext, next: (Request, AppContext) async throws -> Response) async throws -> Response {
            guard request.headers[HTTPField.Name("X-App-Key")!] == "let-me-in" else { return Response(status: .forbidden) }
            return try await next(request, context)
        }
    }

    private var root = ""

    override func setUpWithError() throws {
        root = NSTemporaryDirectory() + "xfer-mounted-" + UUID().uuidString
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: root)
    }

    /// An app with its own route at /hello and the receiver's tus and ietf routes behind its key.
    private func makeApp(_ protocols: Set<UploadProtocol> = [.tus, .ietf]) async throws -> some ApplicationProtocol {
        let receiver = try await ReceiverRoutes.open(ReceiverConfiguration(root: root), logger: Logger(label: "test"))
        let router = Router(context: AppContext.self)
        router.get("hello") { _, _ in "hi" }
        receiver.register(protocols, on: router.group().add(middleware: AppKeyMiddleware()))
        return Application(router: router)
    }

    func testTusUploadThroughTheAppsOwnAuthentication() async throws {
        let app = try await makeApp()
        let data = ByteBuffer(string: String(repeating: "tus bytes ", count: 1000))
        try await app.test(.router) { client in
            // The app's middleware decides who may send.
            var refused = appKey
            refused[HTTPField.Name("X-App-Key")!] = "guess"
            refused[.tusResumable] = "1.0.0"
            refused[.uploadLength] = String(data.readableBytes)
            try await client.execute(uri: "/files/", method: .post, headers: refused) { response in
                XCTAssertEqual(response.status, .forbidden)
            }
            var create = appKey
            create[.tusResumable] = "1.0.0"
            create[.uploadLength] = String(data.readableBytes)
            let location = try await client.execute(uri: "/files/", method: .post, headers: create) { response in
                XCTAssertEqual(response.status, .created)
                XCTAssertEqual(response.headers[.tusResumable], "1.0.0", "tus's middleware comes with its routes")
                return try XCTUnwrap(response.headers[.location])
            }
            let path = try XCTUnwrap(URL(string: location)?.path)
            var patch = appKey
            patch[.tusResumable] = "1.0.0"
            patch[.uploadOffset] = "0"
            patch[.contentType] = "application/offset+octet-stream"
            try await client.execute(uri: path, method: .patch, headers: patch, body: data) { response in
                XCTAssertEqual(response.status, .noContent)
                XCTAssertEqual(response.headers[.uploadOffset], String(data.readableBytes))
            }
            try await client.execute(uri: path, method: .get, headers: appKey) { response in
                XCTAssertEqual(response.status, .ok)
                XCTAssertEqual(response.body, data, "the upload is served back byte for byte")
            }
            // The app's own routes are untouched.
            try await client.execute(uri: "/hello", method: .get) { response in
                XCTAssertEqual(String(buffer: response.body), "hi")
            }
        }
    }

    func testIETFUploadInOneRequestAndOnlyTheMountedProtocolsAnswer() async throws {
        let app = try await makeApp([.ietf])
        let data = ByteBuffer(string: String(repeating: "ietf bytes ", count: 700))
        try await app.test(.router) { client in
            var create = appKey
            create[.uploadComplete] = "?1"
            create[.uploadDraftInteropVersion] = "8"
            let location = try await client.execute(uri: "/resumable/photos/a.bin", method: .post, headers: create, body: data) { response in
                XCTAssertEqual(response.status, .created)
                XCTAssertEqual(response.headers[.uploadComplete], "?1")
                XCTAssertEqual(response.headers[.uploadDraftInteropVersion], "8", "the draft's version echo comes with its routes")
                return try XCTUnwrap(response.headers[.location])
            }
            let path = try XCTUnwrap(URL(string: location)?.path)
            try await client.execute(uri: path, method: .head, headers: appKey) { response in
                XCTAssertEqual(response.status, .noContent)
                XCTAssertEqual(response.headers[.uploadOffset], String(data.readableBytes))
            }
            // tus was not mounted: nothing answers under /files.
            var tus = appKey
            tus[.tusResumable] = "1.0.0"
            tus[.uploadLength] = "10"
            try await client.execute(uri: "/files/", method: .post, headers: tus) { response in
                XCTAssertEqual(response.status, .notFound)
            }
        }
    }

    /// A receiver opened again on the same root knows the uploads the first one took: the state
    /// is the storage's, not the process's.
    func testAnotherReceiverOnTheSameRootResumesAnUpload() async throws {
        let data = ByteBuffer(string: String(repeating: "0123456789", count: 300))
        let first = try await makeApp([.tus])
        let path: String = try await first.test(.router) { client in
            var create = appKey
            create[.tusResumable] = "1.0.0"
            create[.uploadLength] = String(data.readableBytes)
            let location = try await client.execute(uri: "/files/", method: .post, headers: create) { try XCTUnwrap($0.headers[.location]) }
            let path = try XCTUnwrap(URL(string: location)?.path)
            var patch = appKey
            patch[.tusResumable] = "1.0.0"
            patch[.uploadOffset] = "0"
            patch[.contentType] = "application/offset+octet-stream"
            try await client.execute(uri: path, method: .patch, headers: patch, body: data.getSlice(at: 0, length: 1000)!) { response in
                XCTAssertEqual(response.headers[.uploadOffset], "1000")
            }
            return path
        }
        let second = try await makeApp([.tus])
        try await second.test(.router) { client in
            var head = appKey
            head[.tusResumable] = "1.0.0"
            try await client.execute(uri: path, method: .head, headers: head) { response in
                XCTAssertEqual(response.status, .ok)
                XCTAssertEqual(response.headers[.uploadOffset], "1000")
            }
            var patch = head
            patch[.uploadOffset] = "1000"
            patch[.contentType] = "application/offset+octet-stream"
            try await client.execute(uri: path, method: .patch, headers: patch, body: data.getSlice(at: 1000, length: 2000)!) { response in
                XCTAssertEqual(response.status, .noContent)
                XCTAssertEqual(response.headers[.uploadOffset], "3000")
            }
            try await client.execute(uri: path, method: .get, headers: appKey) { response in
                XCTAssertEqual(response.body, data)
            }
        }
    }
}

/// The application's key, which its own middleware checks.
private let appKey: HTTPFields = [HTTPField.Name("X-App-Key")!: "let-me-in"]

extension HTTPField.Name {
    static let tusResumable = Self("Tus-Resumable")!
    static let uploadLength = Self("Upload-Length")!
    static let uploadOffset = Self("Upload-Offset")!
    static let uploadComplete = Self("Upload-Complete")!
    static let uploadDraftInteropVersion = Self("Upload-Draft-Interop-Version")!
}
