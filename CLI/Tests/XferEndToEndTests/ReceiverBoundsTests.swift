import Foundation
import XCTest
import XferPrimitives
import XferTestSupport

/// What a client can make `xfer serve` hold is bounded by what it sent: declared-huge uploads cost
/// what their requests carried, answers listing missing chunks stay small, a receiver that holds
/// all it may answers 503 with `Retry-After` instead of growing, a concatenation cannot repeat a
/// partial, and unfinished uploads nobody touches expire — never one a request is sending to.
/// A real `xfer serve` process, its memory read from /proc.
final class ReceiverBoundsTests: XCTestCase {
    var work: TemporaryDirectory!

    override func setUpWithError() throws {
        work = TemporaryDirectory("xfer-bounds")
    }

    override func tearDown() {
        work = nil
    }

    /// The attack: 20 uploads declaring 2^24 one-byte chunks, each sent one chunk with a
    /// CRC-32C digest. It took a receiver from 45 MB to 1.44 GB when every upload had a bitmap and
    /// a CRC table for its declared chunks; its completion answered 140 MB of JSON.
    func testDeclaringHugeUploadsCostsWhatWasSent() throws {
        try SuiteStorage.requireDisk("over the object store patch answers chunks of at least 8 MiB, so no such upload exists")
        let server = try ServeProcess(root: work.file("server"))
        let declared = 1 << 24
        let before = try residentBytes(of: server)
        var ids: [String] = []
        for index in 0..<20 {
            let body = try JSONSerialization.data(withJSONObject: ["fileName": "huge-\(index)", "size": declared, "chunkSize": 1])
            let created = try curlRequest("POST", server.url + "/uploads", headers: ["Content-Type: application/json"], body: body, in: work)
            XCTAssertEqual(created.status, 201, created.text)
            let answer = try json(created.body)
            XCTAssertEqual(answer["chunkSize"] as? Int, 1)
            let id = try XCTUnwrap(answer["uploadId"] as? String)
            let byte = Data([UInt8(index)])
            let chunk = 5000
            let sent = try curlRequest(
                "PATCH", server.url + "/uploads/\(id)/chunks/\(chunk)",
                headers: [
                    "Content-Type: application/octet-stream", "Content-Range: bytes \(chunk - 1)-\(chunk - 1)/\(declared)",
                    "Content-Digest: crc32c=:\(crcBase64(byte)):",
                ], body: byte, in: work)
            XCTAssertEqual(sent.status, 204, sent.text)
            ids.append(id)
        }
        let after = try residentBytes(of: server)
        XCTAssertLessThan(after, 64 << 20, "the receiver holds \(after >> 20) MiB after the attack")
        XCTAssertLessThan(after - before, 16 << 20, "the attack grew the receiver by \((after - before) >> 20) MiB")

        // The missing chunks: two runs, in an answer of a few hundred bytes; never over 64 KiB.
        let completed = try curlRequest("POST", server.url + "/uploads/\(ids[0])/complete", in: work)
        XCTAssertEqual(completed.status, 409, completed.text)
        XCTAssertLessThanOrEqual(completed.body.count, 64 << 10)
        let missing = try json(completed.body)
        XCTAssertEqual(missing["missingCount"] as? Int, declared - 1)
        XCTAssertEqual(missing["missingRanges"] as? [[Int]], [[1, 4999], [5001, declared]])
        XCTAssertEqual((missing["missing"] as? [Int])?.count, 1000, "the first missing chunks, for clients that predate the runs")
        let status = try json(try curlRequest("GET", server.url + "/uploads/\(ids[0])", in: work).body)
        XCTAssertEqual(status["receivedRanges"] as? [[Int]], [[5000, 5000]])
        XCTAssertEqual(status["received"] as? [Int], [5000])
    }

    /// The most gaps a client can leave: every other chunk of a file makes the missing list as
    /// long as it can be; the answer still lists at most 2,000 runs and 1,000 numbers.
    func testAnAnswerListingMissingChunksStaysUnder64KiB() throws {
        try SuiteStorage.requireDisk("over the object store patch answers chunks of at least 8 MiB")
        let server = try ServeProcess(root: work.file("server"))
        let size = 9000
        let body = try JSONSerialization.data(withJSONObject: ["fileName": "gaps", "size": size, "chunkSize": 1])
        let id = try XCTUnwrap(try json(try curlRequest("POST", server.url + "/uploads", headers: ["Content-Type: application/json"], body: body, in: work).body)["uploadId"] as? String)
        // Every other chunk, through one curl (a config of requests, kept alive).
        let config = work.file("chunks.conf")
        var lines: [String] = []
        let byte = work.file("byte")
        try Data("x".utf8).write(to: URL(fileURLWithPath: byte))
        for chunk in stride(from: 2, through: size, by: 2) {
            lines += [
                "url = \"\(server.url)/uploads/\(id)/chunks/\(chunk)\"", "request = \"PATCH\"", "upload-file = \"\(byte)\"",
                "header = \"Content-Range: bytes \(chunk - 1)-\(chunk - 1)/\(size)\"", "header = \"Content-Type: application/octet-stream\"",
                "output = \"/dev/null\"", "write-out = \"%{http_code}\\n\"", "next",
            ]
        }
        try lines.dropLast().joined(separator: "\n").write(toFile: config, atomically: true, encoding: .utf8)
        let curl = try ChildProcess(executable: "/usr/bin/curl", arguments: ["-sS", "-K", config])
        let codes = curl.readRemaining()
        XCTAssertEqual(curl.wait(), 0, curl.standardError)
        XCTAssertEqual(codes.filter { $0 == "204" }.count, size / 2, "every chunk stored")
        let completed = try curlRequest("POST", server.url + "/uploads/\(id)/complete", in: work)
        XCTAssertEqual(completed.status, 409)
        XCTAssertLessThanOrEqual(completed.body.count, 64 << 10, "\(completed.body.count) bytes")
        let missing = try json(completed.body)
        XCTAssertEqual(missing["missingCount"] as? Int, size / 2)
        XCTAssertEqual((missing["missingRanges"] as? [[Int]])?.count, 2000)
        XCTAssertEqual((missing["missingRanges"] as? [[Int]])?.first, [1, 1])
    }

    /// A receiver holding as many uploads in memory as it may, each held by a request (a body
    /// that has not ended), refuses a new one with 503 and Retry-After, and takes it once they
    /// are let go: memory does not grow with what clients open.
    func testAFullReceiverAnswers503UntilUploadsAreLetGo() throws {
        let server = try ServeProcess(root: work.file("server"), extraArguments: ["--max-uploads-in-memory", "2"])
        var held: [OpenRequest] = []
        for _ in 0..<2 {
            let created = try tusCreate(server, length: 100)
            XCTAssertEqual(created.status, 201, created.text)
            let path = try XCTUnwrap(URL(string: try XCTUnwrap(created.headers["location"]))?.path)
            // A PATCH whose body stops after 10 of its 100 bytes: the request holds the upload.
            held.append(try OpenRequest(port: server.port, head: "PATCH \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nTus-Resumable: 1.0.0\r\n"
                + "Upload-Offset: 0\r\nContent-Type: application/offset+octet-stream\r\nContent-Length: 100\r\n\r\n", body: Data(count: 10)))
        }
        let refused = try waitFor("a creation refused while both uploads are held") { () -> CurlReply? in
            let reply = try self.tusCreate(server, length: 100)
            return reply.status == 503 ? reply : nil
        }
        XCTAssertEqual(refused.headers["retry-after"], "5")
        XCTAssertTrue(refused.text.contains("uploads in memory"), refused.text)
        for request in held { request.close() }
        // The cut bodies end their requests; the uploads are no longer held, so they give way.
        _ = try waitFor("a creation taken once the uploads are let go") { () -> CurlReply? in
            let reply = try self.tusCreate(server, length: 100)
            return reply.status == 201 ? reply : nil
        }
    }

    /// tus's final upload names each partial once, and not more than 1,000 of them: a list that
    /// repeats one would make the receiver copy it again and again for one short request.
    func testAConcatenationNamesEachPartialOnce() throws {
        let server = try ServeProcess(root: work.file("server"))
        let partial = try tusCreate(server, length: 0, extra: ["Upload-Concat: partial"])
        XCTAssertEqual(partial.status, 201, partial.text)
        let url = try XCTUnwrap(partial.headers["location"])
        let repeated = try curlRequest(
            "POST", server.url + "/files/", headers: ["Tus-Resumable: 1.0.0", "Upload-Concat: final;" + Array(repeating: url, count: 3).joined(separator: " ")],
            in: work)
        XCTAssertEqual(repeated.status, 400, repeated.text)
        XCTAssertTrue(repeated.text.contains("more than once"), repeated.text)
        let fine = try curlRequest("POST", server.url + "/files/", headers: ["Tus-Resumable: 1.0.0", "Upload-Concat: final;" + url], in: work)
        XCTAssertEqual(fine.status, 201, fine.text)
    }

    // MARK: Expiry

    /// Unfinished uploads nobody touches go, with their files, after `--expire-after`; completed
    /// ones stay. tus offers `expiration` and says when (`Upload-Expires`); the IETF draft's
    /// `Upload-Limit` carries `expires`.
    func testUnfinishedUploadsExpireOnDiskAndSayWhen() throws {
        try SuiteStorage.requireDisk("it lists the receiver's directory (ObjectStorageTests covers expiry over the store)")
        let server = try ServeProcess(root: work.file("server"), extraArguments: ["--expire-after", "2s"])
        let options = try curlRequest("OPTIONS", server.url + "/files/", headers: ["Tus-Resumable: 1.0.0"], in: work)
        XCTAssertTrue(options.headers["tus-extension"]?.split(separator: ",").contains("expiration") == true, "\(options.headers)")

        let tus = try tusCreate(server, length: 100)
        XCTAssertEqual(tus.status, 201)
        let expires = try XCTUnwrap(tus.headers["upload-expires"], "\(tus.headers)")
        let when = try XCTUnwrap(httpDate(expires), expires)
        XCTAssertEqual(when.timeIntervalSinceNow, 2, accuracy: 2)
        let tusURL = try XCTUnwrap(tus.headers["location"])
        let patched = try curlRequest(
            "PATCH", tusURL, headers: ["Tus-Resumable: 1.0.0", "Upload-Offset: 0", "Content-Type: application/offset+octet-stream"],
            body: Data(count: 10), in: work)
        XCTAssertEqual(patched.status, 204)
        XCTAssertNotNil(patched.headers["upload-expires"])

        let ietf = try curlRequest(
            "POST", server.url + "/resumable/a.bin", headers: ["Upload-Draft-Interop-Version: 8", "Upload-Complete: ?0", "Upload-Length: 50"],
            body: Data(count: 5), in: work)
        XCTAssertEqual(ietf.status, 201, ietf.text)
        XCTAssertTrue(ietf.headers["upload-limit"]?.contains("expires=2") == true, "\(ietf.headers)")

        let body = try JSONSerialization.data(withJSONObject: ["fileName": "p.bin", "size": 3, "chunkSize": 1])
        let patch = try json(try curlRequest("POST", server.url + "/uploads", headers: ["Content-Type: application/json"], body: body, in: work).body)
        let patchID = try XCTUnwrap(patch["uploadId"] as? String)
        XCTAssertEqual(try curlRequest(
            "PATCH", server.url + "/uploads/\(patchID)/chunks/1", headers: ["Content-Type: application/octet-stream", "Content-Range: bytes 0-0/3"],
            body: Data("a".utf8), in: work).status, 204)

        // A multipart source preloaded and never sent to: its record goes too, once nothing of
        // it is unfinished.
        let preloaded = try curlRequest(
            "POST", server.url + "/fileSection/preLoad.do", headers: ["Content-Type: application/x-www-form-urlencoded"],
            body: Data("sourceId=idle-source&fileCount=3".utf8), in: work)
        XCTAssertEqual(preloaded.status, 200, preloaded.text)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: work.file("server/sources")).count, 1)

        let done = try tusCreate(server, length: 4, body: Data("done".utf8))
        XCTAssertEqual(done.status, 201)
        XCTAssertNil(done.headers["upload-expires"], "a complete upload does not expire")
        let doneURL = try XCTUnwrap(done.headers["location"])

        // Gone, each: the server forgets them within the expiry and its sweep.
        _ = try waitFor("the unfinished uploads expired", timeout: 30) { () -> Bool? in
            let tusGone = try curlRequest("HEAD", tusURL, headers: ["Tus-Resumable: 1.0.0"], in: self.work).status == 404
            let patchGone = try curlRequest("GET", server.url + "/uploads/\(patchID)", in: self.work).status == 404
            let ietfGone = try curlRequest("HEAD", try XCTUnwrap(ietf.headers["location"]), in: self.work).status == 404
            let sourcesGone = (try? FileManager.default.contentsOfDirectory(atPath: self.work.file("server/sources")))?.isEmpty == true
            return tusGone && patchGone && ietfGone && sourcesGone ? true : nil
        }
        let left = try FileManager.default.contentsOfDirectory(atPath: work.file("server/uploads"))
        let doneID = storedID(doneURL.split(separator: "/").last ?? "")
        XCTAssertTrue(left.allSatisfy { $0.hasPrefix(doneID) }, "only the completed upload's files are left: \(left)")
        XCTAssertEqual(try curlRequest("GET", doneURL, headers: ["Tus-Resumable: 1.0.0"], in: work).text, "done")
    }

    /// A request sending to an upload keeps it alive, however long its body takes: a PATCH whose
    /// body pauses for three times the expiry still completes the upload.
    func testAnUploadARequestIsSendingToNeverExpires() throws {
        try SuiteStorage.requireDisk("the object store's claim keeps its own uploads alive (ObjectStorageTests)")
        let server = try ServeProcess(root: work.file("server"), extraArguments: ["--expire-after", "2s"])
        let created = try tusCreate(server, length: 100)
        let url = try XCTUnwrap(created.headers["location"])
        let path = try XCTUnwrap(URL(string: url)?.path)
        let request = try OpenRequest(port: server.port, head: "PATCH \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nTus-Resumable: 1.0.0\r\n"
            + "Upload-Offset: 0\r\nContent-Type: application/offset+octet-stream\r\nContent-Length: 100\r\n\r\n", body: Data(count: 40))
        // The pause is what is tested: three expiries, and so at least three sweeps, go by.
        Thread.sleep(forTimeInterval: 6)
        try request.send(Data(count: 60))
        let answer = try request.readAnswer()
        XCTAssertTrue(answer.hasPrefix("HTTP/1.1 204"), answer)
        XCTAssertTrue(answer.lowercased().contains("upload-offset: 100"), answer)
        request.close()
        XCTAssertEqual(try curlRequest("GET", url, headers: ["Tus-Resumable: 1.0.0"], in: work).body.count, 100)
    }

    // MARK: Helpers

    private func tusCreate(_ server: ServeProcess, length: Int, body: Data? = nil, extra: [String] = []) throws -> CurlReply {
        var headers = ["Tus-Resumable: 1.0.0", "Upload-Length: \(length)"] + extra
        if body != nil { headers.append("Content-Type: application/offset+octet-stream") }
        return try curlRequest("POST", server.url + "/files/", headers: headers, body: body, in: work)
    }

    private func json(_ data: Data) throws -> [String: Any] {
        try XCTUnwrap(try JSONSerialization.jsonObject(with: data) as? [String: Any], String(decoding: data, as: UTF8.self))
    }

    private func crcBase64(_ bytes: Data) -> String {
        let crc = CRC32C.of(Array(bytes))
        return Data([UInt8(crc >> 24), UInt8(crc >> 16 & 0xFF), UInt8(crc >> 8 & 0xFF), UInt8(crc & 0xFF)]).base64EncodedString()
    }

    private func httpDate(_ text: String) -> Date? {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return formatter.date(from: text)
    }

    /// The receiver's resident memory (VmRSS).
    private func residentBytes(of server: ServeProcess) throws -> Int {
        let status = try String(contentsOfFile: "/proc/\(server.child.pid)/status", encoding: .utf8)
        let line = try XCTUnwrap(status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") })
        let kib = try XCTUnwrap(Int(line.split(separator: " ", omittingEmptySubsequences: true)[1]))
        return kib << 10
    }
}

/// Polls `probe` until it gives a value (at most `timeout` seconds, every 100 ms): waiting on a
/// condition the receiver brings about, never on a guess of how long it takes.
func waitFor<T>(_ what: String, timeout: TimeInterval = 20, _ probe: () throws -> T?) throws -> T {
    let deadline = Date() + timeout
    while true {
        if let value = try probe() { return value }
        guard Date() < deadline else { throw HarnessError("timed out waiting for \(what)") }
        Thread.sleep(forTimeInterval: 0.1)
    }
}

/// A request written by hand on a socket of its own and kept open: the head and part of a body
/// now, the rest (or nothing: `close`) when the test says.
final class OpenRequest {
    private let descriptor: Int32
    private var closed = false

    init(port: Int, head: String, body: Data) throws {
        descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { throw HarnessError("socket: \(errno)") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { throw HarnessError("connect: \(errno)") }
        try send(Data(head.utf8) + body)
    }

    func send(_ data: Data) throws {
        try data.withUnsafeBytes { buffer in
            var sent = 0
            while sent < buffer.count {
                let n = Glibc.send(descriptor, buffer.baseAddress! + sent, buffer.count - sent, Int32(MSG_NOSIGNAL))
                guard n > 0 else { throw HarnessError("send: \(errno)") }
                sent += n
            }
        }
    }

    /// The answer's head (up to its blank line), read with a 10 s limit.
    func readAnswer() throws -> String {
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var received = Data()
        var buffer = [UInt8](repeating: 0, count: 4096)
        while !received.contains("\r\n\r\n".data(using: .utf8)!) {
            let n = recv(descriptor, &buffer, buffer.count, 0)
            guard n > 0 else { break }
            received.append(contentsOf: buffer[0..<n])
        }
        return String(decoding: received, as: UTF8.self)
    }

    func close() {
        guard !closed else { return }
        closed = true
        Glibc.close(descriptor)
    }

    deinit { close() }
}

private extension Data {
    func contains(_ other: Data) -> Bool { range(of: other) != nil }
}
