import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import XCTest
import XferPrimitives
import XferReceiver

/// `GET`/`HEAD /downloads/{id}/{path}` as download tools use it (curl -C -, aria2c -x 16, xfer
/// pull): ranges, tags, conditions and the file's digests, on disk storage through the router.
final class DownloadRangeTests: XCTestCase {
    private var root = ""

    override func setUpWithError() throws {
        root = NSTemporaryDirectory() + "xfer-download-range-" + UUID().uuidString
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: root)
    }

    private func makeApp() async throws -> some ApplicationProtocol {
        let receiver = try await ReceiverRoutes.open(ReceiverConfiguration(root: root), logger: Logger(label: "test"))
        let router = Router(context: ReceiverContext.self)
        receiver.register([.patch, .tus, .downloads], on: router)
        return Application(router: router)
    }

    /// The published file's download path and upload id, sent with `patch` in chunks of 4096 bytes,
    /// each with its CRC-32C in `Content-Digest` when `digests` (the receiver then keeps the
    /// combined CRC-32C and does not read the file back), else none (it hashes the file: SHA-256
    /// and CRC-32C).
    private static func publish(
        _ bytes: [UInt8], digests: Bool = false, client: some TestClientProtocol
    ) async throws -> (path: String, id: String) {
        let chunkSize = 4096
        let create = ByteBuffer(string: "{\"fileName\":\"some dir/data.bin\",\"size\":\(bytes.count),\"chunkSize\":\(chunkSize)}")
        // The upload's handle, in its URLs; the id (its first 32 hex digits) names its file.
        let handle = try await client.execute(uri: "/uploads", method: .post, body: create) { response in
            XCTAssertEqual(response.status, .created)
            let answer = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(body: response.body)) as? [String: Any])
            return try XCTUnwrap(answer["uploadId"] as? String)
        }
        let id = String(handle.prefix(32))
        for (index, start) in stride(from: 0, to: bytes.count, by: chunkSize).enumerated() {
            let chunk = Array(bytes[start..<min(start + chunkSize, bytes.count)])
            var headers: HTTPFields = [.contentRange: "bytes \(start)-\(start + chunk.count - 1)/\(bytes.count)"]
            if digests { headers[HTTPField.Name("Content-Digest")!] = "crc32c=:\(base64(CRC32.bigEndianBytes(CRC32C.of(chunk)))):" }
            let uri = "/uploads/\(handle)/chunks/\(index + 1)"
            try await client.execute(uri: uri, method: .patch, headers: headers, body: ByteBuffer(bytes: chunk)) {
                XCTAssertEqual($0.status, .noContent)
            }
        }
        let url = try await client.execute(uri: "/uploads/\(handle)/complete", method: .post) { response in
            XCTAssertEqual(response.status, .ok)
            let answer = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(body: response.body)) as? [String: Any])
            return try XCTUnwrap(answer["url"] as? String)
        }
        let path = try XCTUnwrap(URLComponents(string: url)?.percentEncodedPath)
        XCTAssertEqual(path, "/downloads/\(id)/some%20dir/data.bin")
        return (path, id)
    }

    private static func get(
        _ path: String, _ fields: [(String, String)] = [], method: HTTPRequest.Method = .get, client: some TestClientProtocol
    ) async throws -> TestResponse {
        var headers = HTTPFields()
        for (name, value) in fields { headers.append(HTTPField(name: HTTPField.Name(name)!, value: value)) }
        return try await client.execute(uri: path, method: method, headers: headers) { $0 }
    }

    private static func etag(of path: String, client: some TestClientProtocol) async throws -> String {
        let head = try await get(path, method: .head, client: client)
        return try XCTUnwrap(head.headers[.eTag])
    }

    private static func base64(_ bytes: some Sequence<UInt8>) -> String { Data(bytes).base64EncodedString() }

    /// RFC 9530's field, from the bytes themselves.
    private static func reprDigest(of bytes: [UInt8], sha256: Bool = true) -> String {
        let crc = "crc32c=:" + base64(CRC32.bigEndianBytes(CRC32C.of(bytes))) + ":"
        return sha256 ? "sha-256=:" + base64(SHA256.hash(data: bytes)) + ":, " + crc : crc
    }

    func testHeadTellsTheSizeRangesTagAndDigest() async throws {
        let app = try await makeApp()
        try await app.test(.router) { client in
            let (path, id) = try await Self.publish(data, client: client)
            let head = try await Self.get(path, method: .head, client: client)
            XCTAssertEqual(head.status, .ok)
            XCTAssertEqual(head.headers[.acceptRanges], "bytes")
            XCTAssertEqual(head.headers[.contentLength], String(data.count))
            XCTAssertEqual(head.headers[.eTag], "\"\(id)-\(CRC32.hex(CRC32C.of(data)))\"")
            XCTAssertEqual(head.headers[reprDigestName], Self.reprDigest(of: data))
            XCTAssertEqual(head.headers[.contentDisposition], "attachment; filename*=UTF-8''data.bin")
            XCTAssertEqual(head.body.readableBytes, 0)

            let whole = try await Self.get(path, client: client)
            XCTAssertEqual(whole.status, .ok)
            XCTAssertEqual(Data(body: whole.body), Data(data))
            XCTAssertEqual(whole.headers[.eTag], head.headers[.eTag])
            XCTAssertEqual(whole.headers[.acceptRanges], "bytes")
            XCTAssertEqual(whole.headers[reprDigestName], Self.reprDigest(of: data))
            XCTAssertNil(whole.headers[.contentEncoding])
            XCTAssertNil(whole.headers[.contentRange])
        }
    }

    /// Through a real connection, where NIO frames the answers: a HEAD keeps the file's length.
    func testOverARealConnection() async throws {
        let app = try await makeApp()
        try await app.test(.live) { client in
            let (path, _) = try await Self.publish(data, client: client)
            let head = try await Self.get(path, method: .head, client: client)
            XCTAssertEqual(head.status, .ok)
            XCTAssertEqual(head.headers[.contentLength], String(data.count))
            XCTAssertEqual(head.body.readableBytes, 0)
            let part = try await Self.get(path, [("Range", "bytes=4000-8191")], client: client)
            XCTAssertEqual(part.status, .partialContent)
            XCTAssertEqual(part.headers[.contentLength], "4192")
            XCTAssertEqual(Data(body: part.body), Data(data[4000...8191]))
        }
    }

    func testOneRangeIsAPartialAnswerOfExactlyThoseBytes() async throws {
        let app = try await makeApp()
        try await app.test(.router) { client in
            let (path, _) = try await Self.publish(data, client: client)
            let size = data.count
            for (range, bytes) in [
                ("bytes=100-4195", 100...4195), ("bytes=9000-", 9000...(size - 1)), ("bytes=-500", (size - 500)...(size - 1)),
                ("bytes=0-0", 0...0), ("bytes=9999-20000", 9999...9999), ("bytes=-20000", 0...(size - 1)),
            ] {
                let response = try await Self.get(path, [("Range", range)], client: client)
                XCTAssertEqual(response.status, .partialContent, range)
                XCTAssertEqual(response.headers[.contentRange], "bytes \(bytes.lowerBound)-\(bytes.upperBound)/\(size)", range)
                XCTAssertEqual(response.headers[.contentLength], String(bytes.count), range)
                XCTAssertEqual(Data(body: response.body), Data(data[bytes]), range)
                XCTAssertEqual(response.headers[.acceptRanges], "bytes")
                XCTAssertEqual(response.headers[reprDigestName], Self.reprDigest(of: data), "the whole file's digest, also on a part")
            }
        }
    }

    func testARangeStartingAtOrPastTheEndIs416() async throws {
        let app = try await makeApp()
        try await app.test(.router) { client in
            let (path, _) = try await Self.publish(data, client: client)
            for range in ["bytes=10000-", "bytes=12000-13000", "bytes=-0"] {
                let response = try await Self.get(path, [("Range", range)], client: client)
                XCTAssertEqual(response.status, .rangeNotSatisfiable, range)
                XCTAssertEqual(response.headers[.contentRange], "bytes */10000", range)
            }
        }
    }

    func testSeveralOrMalformedRangesGetTheWholeFile() async throws {
        let app = try await makeApp()
        try await app.test(.router) { client in
            let (path, _) = try await Self.publish(data, client: client)
            for range in ["bytes=0-1,5-6", "bytes=5-3", "lines=0-1", "bytes=x-"] {
                let response = try await Self.get(path, [("Range", range)], client: client)
                XCTAssertEqual(response.status, .ok, range)
                XCTAssertNil(response.headers[.contentRange], range)
                XCTAssertEqual(Data(body: response.body), Data(data), range)
            }
            // A HEAD tells the whole file's length, range or not.
            let head = try await Self.get(path, [("Range", "bytes=0-9")], method: .head, client: client)
            XCTAssertEqual(head.status, .ok)
            XCTAssertEqual(head.headers[.contentLength], String(data.count))
        }
    }

    func testIfMatchAndIfNoneMatch() async throws {
        let app = try await makeApp()
        try await app.test(.router) { client in
            let (path, _) = try await Self.publish(data, client: client)
            let etag = try await Self.etag(of: path, client: client)

            let stale = try await Self.get(path, [("If-Match", "\"not-this-version\""), ("Range", "bytes=0-9")], client: client)
            XCTAssertEqual(stale.status, .preconditionFailed)
            XCTAssertNotEqual(Data(body: stale.body), Data(data[0...9]))
            try await assertStatus(Self.get(path, [("If-Match", "W/" + etag)], client: client), .preconditionFailed, "compared strongly")

            let current = try await Self.get(path, [("If-Match", etag), ("Range", "bytes=10-19")], client: client)
            XCTAssertEqual(current.status, .partialContent)
            XCTAssertEqual(Data(body: current.body), Data(data[10...19]))
            try await assertStatus(Self.get(path, [("If-Match", "*")], client: client), .ok)

            for method in [HTTPRequest.Method.get, .head] {
                let cached = try await Self.get(path, [("If-None-Match", "\"other\", W/" + etag)], method: method, client: client)
                XCTAssertEqual(cached.status, .notModified, "compared weakly")
                XCTAssertEqual(cached.headers[.eTag], etag)
                XCTAssertEqual(cached.body.readableBytes, 0)
            }
            try await assertStatus(Self.get(path, [("If-None-Match", "\"other\"")], client: client), .ok)
        }
    }

    func testIfRangeOfAnotherVersionOrADateGetsTheWholeFile() async throws {
        let app = try await makeApp()
        try await app.test(.router) { client in
            let (path, _) = try await Self.publish(data, client: client)
            let etag = try await Self.etag(of: path, client: client)
            for validator in ["\"not-this-version\"", "W/" + etag, "Wed, 21 Oct 2015 07:28:00 GMT"] {
                let response = try await Self.get(path, [("If-Range", validator), ("Range", "bytes=100-199")], client: client)
                XCTAssertEqual(response.status, .ok, validator)
                XCTAssertEqual(Data(body: response.body), Data(data), validator)
            }
            let resumed = try await Self.get(path, [("If-Range", etag), ("Range", "bytes=100-199")], client: client)
            XCTAssertEqual(resumed.status, .partialContent)
            XCTAssertEqual(Data(body: resumed.body), Data(data[100...199]))
        }
    }

    /// The tag and digest come from what is stored: a receiver opened again on the same root (a
    /// restart) says the same, so a client resumes across it with If-Range.
    func testTagAndDigestAreTheSameAfterARestart() async throws {
        let first = try await makeApp()
        let (path, etag) = try await first.test(.router) { client in
            let (path, _) = try await Self.publish(data, client: client)
            return (path, try await Self.etag(of: path, client: client))
        }
        let second = try await makeApp()
        try await second.test(.router) { client in
            let resumed = try await Self.get(path, [("If-Range", etag), ("Range", "bytes=5000-")], client: client)
            XCTAssertEqual(resumed.status, .partialContent)
            XCTAssertEqual(resumed.headers[.eTag], etag)
            XCTAssertEqual(resumed.headers[reprDigestName], Self.reprDigest(of: data))
            XCTAssertEqual(Data(body: resumed.body), Data(data[5000...]))
        }
    }

    /// Chunks checked against their CRC-32C: the file is not read back, so its CRC-32C alone
    /// vouches for it.
    func testAFileKnownByItsCRC32COnlyHasThatDigest() async throws {
        let app = try await makeApp()
        try await app.test(.router) { client in
            let (path, id) = try await Self.publish(data, digests: true, client: client)
            let response = try await Self.get(path, [("Range", "bytes=0-99")], client: client)
            XCTAssertEqual(response.status, .partialContent)
            XCTAssertEqual(response.headers[reprDigestName], Self.reprDigest(of: data, sha256: false))
            XCTAssertEqual(response.headers[.eTag], "\"\(id)-\(CRC32.hex(CRC32C.of(data)))\"")
        }
    }

    /// No part of an empty file can be named: a range of one is ignored (RFC 9110 allows it).
    func testARangeOfAnEmptyFileGetsTheEmptyFile() async throws {
        let app = try await makeApp()
        try await app.test(.router) { client in
            let (path, _) = try await Self.publish([], client: client)
            let response = try await Self.get(path, [("Range", "bytes=0-")], client: client)
            XCTAssertEqual(response.status, .ok)
            XCTAssertEqual(response.body.readableBytes, 0)
            XCTAssertEqual(response.headers[.contentLength], "0")
            XCTAssertEqual(response.headers[reprDigestName], Self.reprDigest(of: []))
        }
    }

    /// A finished tus upload at its own URL answers ranges and conditions the same way, tagged
    /// by its id and length, and refuses in tus's form.
    func testAFinishedTusUploadAnswersRangesAtItsOwnURL() async throws {
        let app = try await makeApp()
        try await app.test(.router) { client in
            let tus: HTTPFields = [HTTPField.Name("Tus-Resumable")!: "1.0.0"]
            var create = tus
            create[HTTPField.Name("Upload-Length")!] = String(data.count)
            let location = try await client.execute(uri: "/files/", method: .post, headers: create) { try XCTUnwrap($0.headers[.location]) }
            let path = try XCTUnwrap(URL(string: location)?.path)
            let id = try XCTUnwrap(path.split(separator: "/").last.map { String($0.prefix(32)) })
            var patch = tus
            patch[HTTPField.Name("Upload-Offset")!] = "0"
            patch[.contentType] = "application/offset+octet-stream"
            try await client.execute(uri: path, method: .patch, headers: patch, body: ByteBuffer(bytes: data)) {
                XCTAssertEqual($0.status, .noContent)
            }
            let part = try await Self.get(path, [("Range", "bytes=-100")], client: client)
            XCTAssertEqual(part.status, .partialContent)
            XCTAssertEqual(part.headers[.contentRange], "bytes 9900-9999/10000")
            XCTAssertEqual(Data(body: part.body), Data(data[9900...]))
            XCTAssertEqual(part.headers[.eTag], "\"\(id)-10000\"")
            XCTAssertEqual(part.headers[.acceptRanges], "bytes")
            XCTAssertEqual(part.headers[reprDigestName], Self.reprDigest(of: data, sha256: false))
            let stale = try await Self.get(path, [("If-Match", "\"other\"")], client: client)
            XCTAssertEqual(stale.status, .preconditionFailed)
            XCTAssertEqual(stale.headers[HTTPField.Name("Tus-Resumable")!], "1.0.0")
            try await assertStatus(Self.get(path, [("Range", "bytes=10000-")], client: client), .rangeNotSatisfiable)
        }
    }
}

private func assertStatus(
    _ response: TestResponse, _ status: HTTPResponse.Status, _ message: String = "", file: StaticString = #filePath, line: UInt = #line
) {
    XCTAssertEqual(response.status, status, message, file: file, line: line)
}

extension Data {
    /// Compared as `Data`, a failure says "N bytes" instead of listing them.
    fileprivate init(body: ByteBuffer) { self.init(body.readableBytesView) }
}

private let reprDigestName = HTTPField.Name("Repr-Digest")!

/// 10,000 bytes that differ from offset to offset, so a wrong range shows.
private let data: [UInt8] = (0..<10_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 8) }
