import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import XCTest
import XferReceiver

/// `GET /health` for load balancers and probes: 200 while the receiver can take uploads,
/// 503 with a reason once its root directory is gone.
final class HealthRoutesTests: XCTestCase {
    /// An application's context, as the mounted routes' tests have it.
    typealias Context = MountedRoutesTests.AppContext

    func testHealthyWhileTheRootIsWritableAndUnavailableOnceItIsGone() async throws {
        let root = NSTemporaryDirectory() + "xfer-health-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: root) }
        let routes = try await ReceiverRoutes.open(ReceiverConfiguration(root: root), logger: Logger(label: "test"))
        let router = Router(context: Context.self)
        routes.register([.health], on: router)
        try await Application(router: router).test(.router) { client in
            try await client.execute(uri: "/health", method: .get) { response in
                XCTAssertEqual(response.status, .ok)
                XCTAssertEqual(String(buffer: response.body), #"{"status":"ok","storage":"disk"}"#)
            }
            try await client.execute(uri: "/health", method: .head) { response in
                XCTAssertEqual(response.status, .ok)
            }
            try FileManager.default.removeItem(atPath: root)
            try await client.execute(uri: "/health", method: .get) { response in
                XCTAssertEqual(response.status, .serviceUnavailable)
                XCTAssertTrue(String(buffer: response.body).contains("the root directory is gone"), String(buffer: response.body))
            }
        }
    }
}
