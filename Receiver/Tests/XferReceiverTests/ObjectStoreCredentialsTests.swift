import Foundation
import Hummingbird
import HummingbirdTesting
import NIOCore
import Synchronization
import XCTest
import XferReceiver

/// The store's credentials as the receiver finds them (`ObjectStoreLocation.resolveConfiguration`):
/// the AWS chain of XferS3Core, its HTTP requests sent by the receiver's AsyncHTTPClient, not the
/// engine's curl (which the receiver does not link). Against a container credentials endpoint
/// served on 127.0.0.1.
final class ObjectStoreCredentialsTests: XCTestCase {
    /// No shared files, no instance metadata: only what each test sets is a source.
    private static func environment(_ extra: [String: String]) -> [String: String] {
        let nowhere = NSTemporaryDirectory() + "xfer-no-aws-" + UUID().uuidString
        return [
            "HOME": nowhere, "AWS_SHARED_CREDENTIALS_FILE": nowhere + "/credentials", "AWS_CONFIG_FILE": nowhere + "/config",
            "AWS_EC2_METADATA_DISABLED": "true",
        ].merging(extra) { _, new in new }
    }

    func testContainerCredentialsAreFetchedWithTheReceiversClient() async throws {
        let authorizations = Authorizations()
        let router = Router()
        router.get("/v2/credentials") { request, _ -> Response in
            authorizations.seen.withLock { $0.append(request.headers[.authorization] ?? "(none)") }
            let body = #"{"AccessKeyId": "ASIACONTAINER", "SecretAccessKey": "s3cr3t", "Token": "tok", "Expiration": "2099-01-01T00:00:00Z"}"#
            return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: body)))
        }
        try await Application(router: router).test(.live) { client in
            let port = try XCTUnwrap(client.port)
            let aws = try ObjectStoreLocation.resolveConfiguration(
                environment: Self.environment([
                    "AWS_CONTAINER_CREDENTIALS_FULL_URI": "http://127.0.0.1:\(port)/v2/credentials",
                    "AWS_CONTAINER_AUTHORIZATION_TOKEN": "the-token",
                ]))
            XCTAssertEqual(aws.credentials.accessKeyID, "ASIACONTAINER")
            XCTAssertEqual(aws.credentials.sessionToken, "tok")
            XCTAssertEqual(aws.source, "container credentials at http://127.0.0.1:\(port)/v2/credentials")
            XCTAssertEqual(authorizations.seen.withLock { $0 }, ["the-token"], "one request, with the token")
        }
    }

    func testAnEndpointThatRefusesIsAOneLineErrorNamingIt() async throws {
        let router = Router()
        router.get("/v2/credentials") { _, _ -> Response in
            Response(status: .forbidden, body: .init(byteBuffer: ByteBuffer(string: #"{"code": "Denied", "message": "no role"}"#)))
        }
        try await Application(router: router).test(.live) { client in
            let port = try XCTUnwrap(client.port)
            XCTAssertThrowsError(
                try ObjectStoreLocation.resolveConfiguration(
                    environment: Self.environment(["AWS_CONTAINER_CREDENTIALS_FULL_URI": "http://127.0.0.1:\(port)/v2/credentials"]))
            ) { error in
                let text = "\(error)"
                XCTAssertTrue(text.contains("container credentials at http://127.0.0.1:\(port)/v2/credentials"), text)
                XCTAssertTrue(text.contains("403"), text)
                XCTAssertFalse(text.contains("\n"), text)
            }
        }
    }

    /// What an endpoint sends is held up to 64 KiB: a longer answer fails as it passes the limit.
    func testAnAnswerLargerThanAMetadataEndpointGivesIsRefused() async throws {
        let router = Router()
        router.get("/v2/credentials") { _, _ -> Response in
            Response(status: .ok, body: .init(byteBuffer: ByteBuffer(repeating: UInt8(ascii: " "), count: 1 << 20)))
        }
        try await Application(router: router).test(.live) { client in
            let port = try XCTUnwrap(client.port)
            XCTAssertThrowsError(
                try ObjectStoreLocation.resolveConfiguration(
                    environment: Self.environment(["AWS_CONTAINER_CREDENTIALS_FULL_URI": "http://127.0.0.1:\(port)/v2/credentials"]))
            ) { error in
                XCTAssertTrue("\(error)".contains("larger than 65536 bytes"), "\(error)")
            }
        }
    }
}

/// The `Authorization` headers the endpoint was sent, in order.
private final class Authorizations: Sendable {
    let seen = Mutex<[String]>([])
}
