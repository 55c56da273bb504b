import Crypto
import Foundation
import XCTest
import XferPrimitives
import XferTestSupport


/// `xfer serve` speaking the IETF resumable uploads draft at `/resumable/`, driven by curl with
/// requests written from the draft's examples: creation (and its 104), offset retrieval, append,
/// completion, cancellation, a conflicting offset, a body cut mid-way.
final class IETFReceiverTests: XCTestCase {
    var work: TemporaryDirectory!

    override func setUp() {
        work = TemporaryDirectory("xfer-ietf-serve")
    }

    override func tearDown() {
        work = nil
    }

    private let data = Data((0..<100_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 8) })

    private func request(_ method: String, _ url: String, _ headers: [String] = [], body: Data? = nil, version: Int = 8) throws -> CurlReply {
        try curlRequest(method, url, headers: ["Upload-Draft-Interop-Version: \(version)"] + headers, body: body, in: work)
    }

    private func append(_ url: String, offset: Int, complete: Bool, _ body: Data, version: Int = 8) throws -> CurlReply {
        try request(
            "PATCH", url, ["Content-Type: application/partial-upload", "Upload-Offset: \(offset)", "Upload-Complete: \(complete ? "?1" : "?0")"],
            body: body, version: version)
    }

    func testTheDraftsExchangesFromCreationToCancellation() throws {
        let server = try ServeProcess(root: work.file("server"))
        let options = try request("OPTIONS", server.url + "/resumable/")
        XCTAssertTrue(options.headers["upload-limit"]?.contains("max-size=") == true, "\(options.headers)")

        // Creation with the first 40,000 bytes: a 104 names the upload before the body is read.
        let created = try request(
            "POST", server.url + "/resumable/photos/a.bin", ["Upload-Complete: ?0", "Upload-Length: \(data.count)"], body: data.prefix(40_000))
        XCTAssertTrue(created.statusLines.contains { $0.contains(" 104") }, "\(created.statusLines)")
        XCTAssertEqual(created.status, 201, created.text)
        XCTAssertEqual(created.headers["upload-offset"], "40000")
        XCTAssertEqual(created.headers["upload-complete"], "?0")
        XCTAssertEqual(created.headers["upload-draft-interop-version"], "8")
        let url = try XCTUnwrap(created.headers["location"])

        let head = try request("HEAD", url)
        XCTAssertEqual(head.status, 204)
        XCTAssertEqual(head.headers["upload-offset"], "40000")
        XCTAssertEqual(head.headers["upload-length"], String(data.count))
        XCTAssertEqual(head.headers["cache-control"], "no-store")

        // A conflicting offset: 409, the right offset in a header and in the problem.
        let conflict = try append(url, offset: 30_000, complete: false, data[30_000..<50_000])
        XCTAssertEqual(conflict.status, 409)
        XCTAssertEqual(conflict.headers["upload-offset"], "40000")
        let problem = try XCTUnwrap(try JSONSerialization.jsonObject(with: conflict.body) as? [String: Any])
        XCTAssertEqual(problem["type"] as? String, "https://iana.org/assignments/http-problem-types#mismatching-upload-offset")
        XCTAssertEqual(int(problem["expected-offset"]), 40_000)
        XCTAssertEqual(int(problem["provided-offset"]), 30_000)

        let middle = try append(url, offset: 40_000, complete: false, data[40_000..<70_000])
        XCTAssertEqual(middle.status, 204, middle.text)
        XCTAssertEqual(middle.headers["upload-offset"], "70000")
        let last = try append(url, offset: 70_000, complete: true, data.suffix(from: 70_000))
        XCTAssertEqual(last.status, 201, last.text)
        XCTAssertEqual(last.headers["upload-complete"], "?1")
        XCTAssertEqual(try request("GET", url).body, data)
        // The rest reads the disk storage's own records.
        guard !SuiteStorage.isObjectStore else { return }
        XCTAssertEqual(
            FileManager.default.contents(atPath: try servedFile(root: server.root, "photos/a.bin")), data, "published under the path it was created at")
        // The file's CRC-32C was kept as its four requests were written: completion did not read it back.
        let id = storedID(try XCTUnwrap(url.split(separator: "/").last))
        let log = try String(contentsOfFile: server.root + "/uploads/\(id).log", encoding: .utf8)
        let completion = try XCTUnwrap(log.split(separator: ";").first { $0.contains("=") }, log)
        var crc = CRC32C()
        data.withUnsafeBytes { crc.update($0) }
        XCTAssertEqual(completion.trimmingCharacters(in: .newlines), "=.\(data.count)." + CRC32.hex(crc.value))
        // The client lost the final answer and completes again: the same answer.
        XCTAssertEqual(try append(url, offset: data.count, complete: true, Data()).status, 201)
        XCTAssertEqual(try append(url, offset: data.count, complete: false, Data("x".utf8)).status, 400)

        XCTAssertEqual(try request("DELETE", url).status, 204)
        XCTAssertEqual(try request("HEAD", url).status, 404)
        XCTAssertEqual(try request("DELETE", url).status, 404)
    }

    /// A whole file of at most 64 KiB in its creation request gets no 104 (it costs each side a
    /// write and a wake-up a file, and such a body is sent again rather than resumed); one byte
    /// more, and the 104 names the upload before its body is read, as for any other creation.
    func testASmallWholeFileIsCreatedWithoutA104() throws {
        let server = try ServeProcess(root: work.file("server"))
        let small = data.prefix(64 << 10)
        let created = try request("POST", server.url + "/resumable/small.bin", ["Upload-Complete: ?1"], body: small)
        XCTAssertEqual(created.status, 201, created.text)
        XCTAssertFalse(created.statusLines.contains { $0.contains(" 104") }, "\(created.statusLines)")
        XCTAssertEqual(created.headers["upload-complete"], "?1")
        XCTAssertEqual(try request("GET", try XCTUnwrap(created.headers["location"])).body, small)

        let larger = data.prefix((64 << 10) + 1)
        let announced = try request("POST", server.url + "/resumable/larger.bin", ["Upload-Complete: ?1"], body: larger)
        XCTAssertEqual(announced.status, 201, announced.text)
        XCTAssertTrue(announced.statusLines.contains { $0.contains(" 104") }, "\(announced.statusLines)")
        XCTAssertEqual(try request("GET", try XCTUnwrap(announced.headers["location"])).body, larger)

        // A small first part of a larger file is announced: the rest comes in other requests.
        let part = try request("POST", server.url + "/resumable/part.bin", ["Upload-Complete: ?0", "Upload-Length: \(data.count)"], body: small)
        XCTAssertEqual(part.status, 201, part.text)
        XCTAssertTrue(part.statusLines.contains { $0.contains(" 104") }, "\(part.statusLines)")
    }

    func testInteropVersion6AndOneRequestUploadsAndWhatIsRefused() throws {
        let server = try ServeProcess(root: work.file("server"), extraArguments: ["--max-upload-size", "200000", "--auth-token", "secret-token-1"])
        let auth = "Authorization: Bearer secret-token-1"
        // The whole file in the creation request, as URLSession sends it.
        let whole = try request("POST", server.url + "/resumable/", [auth, "Upload-Complete: ?1", "Content-Disposition: inline; filename=\"w.bin\""], body: data, version: 6)
        XCTAssertEqual(whole.status, 201, whole.text)
        XCTAssertEqual(whole.headers["upload-complete"], "?1")
        XCTAssertEqual(whole.headers["upload-draft-interop-version"], "6")
        XCTAssertEqual(try curlRequest("GET", try XCTUnwrap(whole.headers["location"]), headers: [auth], in: work).body, data)

        // Discovery and the health probe need no token; everything else does.
        XCTAssertEqual(try request("OPTIONS", server.url + "/resumable/").status, 204)
        XCTAssertEqual(try request("GET", server.url + "/health").status, 200)
        XCTAssertEqual(try request("GET", server.url + "/stats").status, 401)
        XCTAssertEqual(try request("POST", server.url + "/resumable/x", ["Upload-Complete: ?1"], body: data).status, 401)
        let unsupported = try request("POST", server.url + "/resumable/x", [auth, "Upload-Complete: ?1"], body: data, version: 7)
        XCTAssertEqual(unsupported.status, 400)
        XCTAssertEqual(unsupported.headers["upload-draft-interop-version"], "8", "names the version it speaks")
        let tooLarge = try request("POST", server.url + "/resumable/x", [auth, "Upload-Complete: ?0", "Upload-Length: 300000"])
        XCTAssertEqual(tooLarge.status, 413)
        XCTAssertNotNil(tooLarge.headers["upload-limit"])
        let unknownLength = try request("POST", server.url + "/resumable/x", [auth, "Upload-Complete: ?0"])
        XCTAssertEqual(unknownLength.status, 400)
        XCTAssertTrue(unknownLength.text.contains("Upload-Length"), unknownLength.text)
        let inconsistent = try request("POST", server.url + "/resumable/x", [auth, "Upload-Complete: ?1", "Upload-Length: 5"], body: data)
        XCTAssertEqual(inconsistent.status, 400)
        XCTAssertTrue(inconsistent.text.contains("inconsistent-upload-length"), inconsistent.text)
        XCTAssertEqual(try request("POST", server.url + "/resumable/%2E%2E/x", [auth, "Upload-Complete: ?1"], body: data).status, 400)
    }

    /// What `URLSession` does (interop version 6): the whole file in the creation request, which
    /// breaks off after the 104 named the upload; then HEAD for the offset and one PATCH for the rest.
    func testAnUploadCutAfterThe104ResumesAsURLSessionResumesIt() throws {
        let server = try ServeProcess(root: work.file("server"))
        let address = try XCTUnwrap(URL(string: server.url))
        let head = "POST /resumable/video.mov HTTP/1.1\r\nHost: 127.0.0.1:\(address.port ?? 0)\r\nUpload-Draft-Interop-Version: 6\r\n"
            + "Upload-Complete: ?1\r\nContent-Type: video/quicktime\r\nContent-Length: \(data.count)\r\n\r\n"
        let interrupted = work.file("interrupted")
        try (Data(head.utf8) + data.prefix(30_000)).write(to: URL(fileURLWithPath: interrupted))
        // Sends the head and 30,000 bytes, prints the 104's Location, and goes away.
        let script = """
            import socket, sys
            connection = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
            connection.sendall(open(sys.argv[2], "rb").read())
            answer = b""
            while b"\\r\\n\\r\\n" not in answer:
                answer += connection.recv(4096)
            connection.close()
            print(answer.split(b"\\r\\n\\r\\n")[0].decode())
            """
        let child = try ChildProcess(executable: try pythonTool(venv: "venv-tus"), arguments: ["-c", script, String(address.port ?? 0), interrupted])
        let interim = child.readRemaining()
        XCTAssertEqual(child.wait(), 0, child.standardError)
        XCTAssertTrue(interim.first?.contains(" 104") == true, "\(interim)")
        let location = try XCTUnwrap(interim.first { $0.lowercased().hasPrefix("location:") }?.dropFirst("location:".count))
        let url = location.trimmingCharacters(in: .whitespacesAndNewlines)

        // The cut request holds the upload until what arrived is recorded, so HEAD sees it.
        let offset = try XCTUnwrap(Int(try request("HEAD", url, version: 6).headers["upload-offset"] ?? ""))
        XCTAssertEqual(offset, SuiteStorage.keepsWhatArrivedOfACutBody ? 30_000 : 0, "what arrived of the cut request is kept (on disk)")
        XCTAssertEqual(try request("HEAD", url, version: 6).headers["upload-length"], String(data.count), "known from Content-Length")
        let rest = try append(url, offset: offset, complete: true, data.suffix(from: offset), version: 6)
        XCTAssertEqual(rest.status, 201, rest.text)
        XCTAssertEqual(try request("GET", url, version: 6).body, data)
    }

    func testACutAppendKeepsWhatArrivedUnlessItCarriesADigest() throws {
        let server = try ServeProcess(root: work.file("server"))
        let body = data.prefix(1000)
        for digested in [false, true] {
            let created = try request("POST", server.url + "/resumable/cut.bin", ["Upload-Complete: ?0", "Upload-Length: 1000"])
            let url = try XCTUnwrap(created.headers["location"])
            let before = int(try getJSON(server.url + "/stats")["payloadBytesReceived"])
            var headers = [
                "Upload-Draft-Interop-Version: 8", "Content-Type: application/partial-upload", "Upload-Offset: 0", "Upload-Complete: ?1",
                "Content-Length: 1000",
            ]
            if digested { headers.append("Content-Digest: sha-256=:\(sha256Base64(body)):") }
            try sendRequestAndHangUp("PATCH", url, headers: headers, body: body.prefix(400), in: work)
            // Wait for the receiver, not for a guessed time: until it has read the 400 bytes.
            let deadline = Date().addingTimeInterval(30)
            while int(try getJSON(server.url + "/stats")["payloadBytesReceived"]) < before + 400, Date() < deadline { usleep(20_000) }
            // The cut request holds the upload until it is recorded, so HEAD sees its outcome.
            let kept = digested || !SuiteStorage.keepsWhatArrivedOfACutBody ? 0 : 400
            XCTAssertEqual(try request("HEAD", url).headers["upload-offset"], String(kept), "digested \(digested)")
            let rest = try append(url, offset: kept, complete: true, body.suffix(from: kept))
            XCTAssertEqual(rest.status, 201, "digested \(digested): \(rest.text)")
            XCTAssertEqual(try request("GET", url).body, body)
        }
    }
}

private func sha256Base64(_ data: Data) -> String {
    Data(SHA256.hash(data: data)).base64EncodedString()
}
