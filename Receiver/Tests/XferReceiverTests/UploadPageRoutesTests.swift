import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import XCTest
import XferReceiver

/// The upload page's files as served: compiled in, with their types, no external assets, and a
/// content security policy that lets the page load nothing from elsewhere. (The page at work, in
/// Chromium: the command's UploadPageTests.)
final class UploadPageRoutesTests: XCTestCase {
    typealias Context = MountedRoutesTests.AppContext

    private func withPage(enabled: Bool = true, _ body: @escaping @Sendable (any TestClientProtocol) async throws -> Void) async throws {
        let root = NSTemporaryDirectory() + "xfer-page-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: root) }
        var configuration = ReceiverConfiguration(root: root)
        configuration.uploadPage = enabled
        let routes = try await ReceiverRoutes.open(configuration, logger: Logger(label: "test"))
        let router = Router(context: Context.self)
        routes.register([.uploadPage], on: router)
        try await Application(router: router).test(.router, body)
    }

    func testThePageAndItsFilesAreServedWithTheirTypesAndAPolicyThatKeepsThemToThisOrigin() async throws {
        try await withPage { client in
            for (path, type, mark) in [
                ("/", "text/html; charset=utf-8", #"<script src="/upload-page/upload.js" defer></script>"#),
                ("/upload-page/upload.js", "text/javascript; charset=utf-8", "Upload-Draft-Interop-Version"),
                ("/upload-page/upload.css", "text/css; charset=utf-8", ".drop"),
            ] {
                try await client.execute(uri: path, method: .get) { response in
                    XCTAssertEqual(response.status, .ok, path)
                    XCTAssertEqual(response.headers[.contentType], type, path)
                    let body = String(buffer: response.body)
                    XCTAssertTrue(body.contains(mark), path)
                    // Nothing fetched from anywhere else: no scheme-qualified URL in any file.
                    XCTAssertFalse(body.contains("http://") || body.contains("https://"), path)
                    let policy = response.headers[.contentSecurityPolicy] ?? ""
                    XCTAssertTrue(policy.contains("default-src 'none'") && policy.contains("connect-src 'self'"), policy)
                    XCTAssertEqual(response.headers[.xContentTypeOptions], "nosniff")
                }
                try await client.execute(uri: path, method: .head) { response in
                    XCTAssertEqual(response.status, .ok, path)
                    XCTAssertEqual(response.body.readableBytes, 0, path)
                }
            }
            try await client.execute(uri: "/upload-page/other.js", method: .get) { response in
                XCTAssertEqual(response.status, .notFound)
            }
        }
    }

    func testNoPageWhenTheConfigurationSaysSo() async throws {
        try await withPage(enabled: false) { client in
            try await client.execute(uri: "/", method: .get) { response in
                XCTAssertEqual(response.status, .notFound)
            }
        }
    }
}
