import Crypto
import Foundation
import XCTest
import XferPrimitives
import XferTestSupport

/// `xfer serve` speaking tus 1.0 at `/files/`: the official Python client
/// (tuspy) uploads to a real `xfer serve` process, which is SIGKILLed and
/// restarted mid-upload; the protocol's refusals are checked with curl.
final class TusReceiverTests: XCTestCase {
    var work: TemporaryDirectory!
    var server: ServeProcess!
    let chunk = 256 * 1024

    override func setUpWithError() throws {
        work = TemporaryDirectory("xfer-tus-serve")
        server = try ServeProcess(root: work.file("server"))
    }

    override func tearDown() {
        server = nil
        work = nil
    }

    private var creation: String { server.url + "/files/" }

    /// tuspy (through Tests/Tools/tustool.py) uploads `file`; returns the upload's URL.
    private func tuspy(_ file: String, options: [String] = []) throws -> String {
        let python = try pythonTool(venv: "venv-tus")
        let child = try ChildProcess(
            executable: python,
            arguments: [packageRoot + "/Tests/Tools/tustool.py", "upload", creation, file, String(chunk)] + options)
        let lines = child.readRemaining()
        XCTAssertEqual(child.wait(), 0, "tuspy failed: \(child.standardError)")
        return try XCTUnwrap(lines.last, "tuspy printed no URL: \(child.standardError)")
    }

    func testTuspyUploadsAreServedIdentical() throws {
        let cases: [(name: String, size: Int, options: [String])] = [
            ("empty.bin", 0, []),
            ("small.bin", 1000, ["--checksum"]),
            ("chunked.bin", 5 * chunk + 17, ["--checksum"]),
            ("plain.bin", 3 * chunk, []),
        ]
        for (index, item) in cases.enumerated() {
            let file = work.file(item.name)
            try makeTestFile(at: file, size: item.size, seed: UInt64(index + 1))
            let url = try tuspy(file, options: item.options)
            XCTAssertTrue(url.hasPrefix(creation), url)
            XCTAssertEqual(try downloadSHA256(url, into: work), try sha256sum(file), item.name)
            let head = try tus("HEAD", url)
            XCTAssertEqual(head.status, 200)
            XCTAssertEqual(head.headers["upload-offset"], String(item.size))
            XCTAssertEqual(head.headers["upload-length"], String(item.size))
            XCTAssertEqual(head.headers["tus-resumable"], "1.0.0")
            // tuspy sends the name as metadata; the receiver hands it back unchanged.
            let metadata = try XCTUnwrap(head.headers["upload-metadata"], item.name)
            XCTAssertTrue(metadata.contains("filename " + Data(item.name.utf8).base64EncodedString()), metadata)
        }
    }

    func testTuspyResumesAfterTheReceiverIsKilledAndRestarted() throws {
        let file = work.file("resumed.bin")
        let size = 7 * chunk + 3
        try makeTestFile(at: file, size: size, seed: 9)
        // A client that went away after three chunks.
        let url = try tuspy(file, options: ["--checksum", "--stop-at", String(3 * chunk)])

        // The receiver dies without warning and comes back on the same port.
        let port = server.port, root = server.root
        server.child.kill(SIGKILL)
        XCTAssertEqual(server.child.wait(), 128 + SIGKILL)
        server = try ServeProcess(root: root, port: port)

        // Every acknowledged byte survived the kill.
        XCTAssertEqual(try tus("HEAD", url).headers["upload-offset"], String(3 * chunk))
        XCTAssertEqual(try tuspy(file, options: ["--checksum", "--resume", url]), url)
        XCTAssertEqual(try downloadSHA256(url, into: work), try sha256sum(file))
        // Only the missing bytes crossed the wire the second time.
        XCTAssertEqual(int(try getJSON(server.url + "/stats")["payloadBytesReceived"]), size - 3 * chunk)
    }

    func testDiscoveryAndCoreRefusals() throws {
        let options = try tus("OPTIONS", creation, version: nil)
        XCTAssertEqual(options.status, 204)
        XCTAssertEqual(options.headers["tus-version"], "1.0.0")
        let extensions = Set((options.headers["tus-extension"] ?? "").split(separator: ",").map(String.init))
        XCTAssertTrue(
            extensions.isSuperset(of: ["creation", "creation-with-upload", "termination", "checksum", "concatenation"]),
            "\(extensions)")
        // The cheapest first: a client taking the first it knows sends CRC-32C.
        XCTAssertEqual(options.headers["tus-checksum-algorithm"], "crc32c,sha1,sha256,md5")
        XCTAssertNotNil(options.headers["tus-max-size"].flatMap(Int.init))

        // Another protocol version (or none, on a request that changes state) is refused first.
        let unversioned = try tus("POST", creation, headers: ["Upload-Length: 10"], version: nil)
        XCTAssertEqual(unversioned.status, 412)
        XCTAssertEqual(unversioned.headers["tus-version"], "1.0.0")
        XCTAssertEqual(try tus("POST", creation, headers: ["Upload-Length: 10"], version: "0.2.2").status, 412)
        XCTAssertEqual(try tus("POST", creation).status, 400, "no Upload-Length")
        XCTAssertEqual(try tus("POST", creation, headers: ["Upload-Length: -1"]).status, 400)
        XCTAssertEqual(try tus("POST", creation, headers: ["Upload-Length: 10", "Upload-Metadata: bad key !!"]).status, 400)

        let created = try tus("POST", creation, headers: ["Upload-Length: 10"])
        XCTAssertEqual(created.status, 201)
        let url = try XCTUnwrap(created.headers["location"])
        XCTAssertTrue(url.hasPrefix(creation), url)

        let head = try tus("HEAD", url)
        XCTAssertEqual(head.headers["upload-offset"], "0")
        XCTAssertEqual(head.headers["cache-control"], "no-store")
        XCTAssertEqual(try tus("GET", url).status, 409, "an unfinished upload is not served")

        let data = Data("0123456789".utf8)
        let wrongOffset = try patch(url, offset: 5, data.prefix(3))
        XCTAssertEqual(wrongOffset.status, 409)
        XCTAssertEqual(wrongOffset.headers["upload-offset"], "0")
        XCTAssertEqual(try tus("PATCH", url, headers: ["Upload-Offset: 0", "Content-Type: text/plain"], body: data).status, 415)
        // A body that does not match its checksum is dropped whole.
        XCTAssertEqual(try patch(url, offset: 0, data.prefix(4), checksum: "sha1 " + sha1Base64(Data("nope".utf8))).status, 460)
        XCTAssertEqual(try tus("HEAD", url).headers["upload-offset"], "0")
        XCTAssertEqual(try patch(url, offset: 0, data.prefix(4), checksum: "md4 AAAA").status, 400, "unknown algorithm")

        let stored = try patch(url, offset: 0, data.prefix(4), checksum: "sha1 " + sha1Base64(data.prefix(4)))
        XCTAssertEqual(stored.status, 204)
        XCTAssertEqual(stored.headers["upload-offset"], "4")
        XCTAssertEqual(try patch(url, offset: 4, data + data).status, 413, "past Upload-Length")
        XCTAssertEqual(try tus("HEAD", url).headers["upload-offset"], "4")
        XCTAssertEqual(try patch(url, offset: 4, data.suffix(6), checksum: "crc32c " + crc32cBase64(data.prefix(6))).status, 460)
        XCTAssertEqual(try patch(url, offset: 4, data.suffix(6), checksum: "crc32c AAAA").status, 400, "a CRC-32C is 4 bytes")
        XCTAssertEqual(try tus("HEAD", url).headers["upload-offset"], "4")
        let checked = try patch(url, offset: 4, data.suffix(6), checksum: "crc32c " + crc32cBase64(data.suffix(6)))
        XCTAssertEqual(checked.headers["upload-offset"], "10")
        let download = try tus("GET", url)
        XCTAssertEqual(download.status, 200)
        XCTAssertEqual(download.body, data)

        XCTAssertEqual(try tus("DELETE", url).status, 204)
        XCTAssertEqual(try tus("HEAD", url).status, 404)
        XCTAssertEqual(try patch(url, offset: 10, Data()).status, 404)
        XCTAssertEqual(try tus("DELETE", url).status, 404)
        XCTAssertEqual(try tus("HEAD", creation + "no-such-upload").status, 404)
    }

    func testPartialUploadsConcatenateInTheOrderListed() throws {
        let first = Data((0..<3000).map { UInt8(truncatingIfNeeded: $0) })
        let second = Data((0..<5000).map { UInt8(truncatingIfNeeded: $0 &* 7) })
        // creation-with-upload: a partial made and filled by one request.
        let a = try tus("POST", creation, headers: [
            "Upload-Length: \(first.count)", "Upload-Concat: partial",
            "Content-Type: application/offset+octet-stream", "Upload-Checksum: sha1 \(sha1Base64(first))",
        ], body: first)
        XCTAssertEqual(a.status, 201)
        XCTAssertEqual(a.headers["upload-offset"], String(first.count))
        let b = try tus("POST", creation, headers: ["Upload-Length: \(second.count)", "Upload-Concat: partial"])
        let aURL = try XCTUnwrap(a.headers["location"]), bURL = try XCTUnwrap(b.headers["location"])

        // A partial not yet finished cannot be concatenated.
        let early = try tus("POST", creation, headers: ["Upload-Concat: final;\(bURL) \(aURL)"])
        XCTAssertEqual(early.status, 400, early.text)
        XCTAssertEqual(try patch(bURL, offset: 0, second).status, 204)
        XCTAssertEqual(try tus("POST", creation, headers: ["Upload-Concat: final;\(aURL) \(creation)nope"]).status, 404)

        let final = try tus("POST", creation, headers: [
            "Upload-Concat: final;\(bURL) \(aURL)",
            "Upload-Metadata: filename " + Data("joined.bin".utf8).base64EncodedString(),
        ])
        XCTAssertEqual(final.status, 201, final.text)
        let url = try XCTUnwrap(final.headers["location"])
        let head = try tus("HEAD", url)
        XCTAssertEqual(head.headers["upload-offset"], String(first.count + second.count))
        XCTAssertEqual(head.headers["upload-concat"], "final;\(bURL) \(aURL)")
        let download = try tus("GET", url)
        XCTAssertEqual(download.body, second + first)
        XCTAssertTrue(download.headers["content-disposition"]?.contains("joined.bin") == true)
        XCTAssertEqual(try patch(url, offset: first.count + second.count, Data("x".utf8)).status, 403, "a final upload takes no PATCH")
    }

    func testACutBodyKeepsWhatArrivedUnlessItCarriesAChecksum() throws {
        let data = Data((0..<1000).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        for checksummed in [false, true] {
            let url = try XCTUnwrap(try tus("POST", creation, headers: ["Upload-Length: 1000"]).headers["location"])
            let before = int(try getJSON(server.url + "/stats")["payloadBytesReceived"])
            var headers = ["Upload-Offset: 0", "Content-Type: application/offset+octet-stream", "Content-Length: 1000"]
            if checksummed { headers.append("Upload-Checksum: sha1 \(sha1Base64(data))") }
            try sendAndHangUp(url, headers: headers, body: data.prefix(400))
            // Wait for the receiver, not for a guessed time: until it has read the 400 bytes.
            let deadline = Date().addingTimeInterval(30)
            while int(try getJSON(server.url + "/stats")["payloadBytesReceived"]) < before + 400, Date() < deadline {
                usleep(20_000)
            }
            // The cut request holds the upload until it is recorded, so the next PATCH sees its outcome.
            let kept = checksummed || !SuiteStorage.keepsWhatArrivedOfACutBody ? 0 : 400
            let rest = try patch(url, offset: kept, data.suffix(from: kept))
            XCTAssertEqual(rest.status, 204, "checksummed \(checksummed): \(rest.text)")
            XCTAssertEqual(rest.headers["upload-offset"], "1000")
            XCTAssertEqual(try tus("GET", url).body, data)
        }
    }

    /// A PATCH whose connection closes after part of its body: a client that died mid-request.
    private func sendAndHangUp(_ url: String, headers: [String], body: Data) throws {
        try sendRequestAndHangUp("PATCH", url, headers: ["Tus-Resumable: 1.0.0"] + headers, body: body, in: work)
    }

    // MARK: curl

    private func patch(_ url: String, offset: Int, _ data: Data, checksum: String? = nil) throws -> CurlReply {
        var headers = ["Upload-Offset: \(offset)", "Content-Type: application/offset+octet-stream"]
        if let checksum { headers.append("Upload-Checksum: \(checksum)") }
        return try tus("PATCH", url, headers: headers, body: data)
    }

    /// One request with curl; `Tus-Resumable` is sent unless `version` is nil.
    private func tus(
        _ method: String, _ url: String, headers: [String] = [], body: Data? = nil, version: String? = "1.0.0"
    ) throws -> CurlReply {
        try curlRequest(method, url, headers: (version.map { ["Tus-Resumable: \($0)"] } ?? []) + headers, body: body, in: work)
    }

    private func crc32cBase64(_ data: Data) -> String {
        Data(CRC32.bigEndianBytes(CRC32C.of(Array(data)))).base64EncodedString()
    }

    private func sha1Base64(_ data: Data) -> String {
        Data(Insecure.SHA1.hash(data: data)).base64EncodedString()
    }
}
