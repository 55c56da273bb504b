import Foundation
import XCTest
import XferTestSupport

/// Clients that hold the receiver's connections without finishing what they send (issue 42, item
/// 2): half a request head, a keep-alive connection left idle, a body that stops mid-way, more
/// connections than `--max-connections`. Real sockets from CLI/Tests/Tools/slowclient.py, which
/// waits for the receiver to close each connection (end of stream or reset) and says when that
/// happened: every wait is bounded by the timeout under test plus slack, and every close is
/// asserted, neither early nor late. The receiver's descriptors (/proc/PID/fd) are counted before
/// and after each attack: nothing may leak.
///
/// `XFER_HALF_OPEN_CONNECTIONS` sets how many half-open connections the first test opens (1,000;
/// `make test-half-open`: 10,000, at the default limits but a head timeout that lets them all be
/// held at once, where /health must answer within 100 ms).
final class SlowClientTests: XCTestCase {
    var work: TemporaryDirectory!

    override func setUp() {
        work = TemporaryDirectory("xfer-slow-clients")
    }

    override func tearDown() {
        work = nil
    }

    /// How late a close may come after its timeout: the receiver's timer fires on time, but a
    /// debug build on a busy machine accepts a flood of connections late (its clock starts then).
    private let slack = 5.0

    private static let tool = repositoryRoot + "/CLI/Tests/Tools/slowclient.py"

    /// Runs slowclient.py to its end; its last line, parsed.
    private func slowClient(_ arguments: [String]) throws -> [String: Any] {
        let child = try ChildProcess(executable: "/usr/bin/python3", arguments: [Self.tool] + arguments)
        let lines = child.readRemaining()
        XCTAssertEqual(child.wait(), 0, child.standardError)
        return try parsed(try XCTUnwrap(lines.last, "slowclient.py said nothing: \(child.standardError)"))
    }

    private func parsed(_ line: String) throws -> [String: Any] {
        try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], line)
    }

    /// The descriptors a client can make the receiver hold: its connections (TCP sockets on its
    /// port, told apart from those it opens itself to an object store by /proc/PID/net/tcp) and
    /// its files. Not what the process makes once, lazily (event loops' and timers' descriptors,
    /// a store client's pool).
    private func descriptors(of server: ServeProcess) throws -> Int {
        let pid = server.child.pid
        var localPorts: [String: Int] = [:]
        for table in ["tcp", "tcp6"] {
            // Read to its end: /proc files say they are empty.
            let text = FileHandle(forReadingAtPath: "/proc/\(pid)/net/\(table)").map { String(decoding: $0.readDataToEndOfFile(), as: UTF8.self) } ?? ""
            for line in text.split(separator: "\n").dropFirst() {
                let fields = line.split(separator: " ")
                guard fields.count > 9, let port = fields[1].split(separator: ":").last.flatMap({ Int($0, radix: 16) }) else { continue }
                localPorts[String(fields[9])] = port
            }
        }
        let directory = "/proc/\(pid)/fd"
        return try FileManager.default.contentsOfDirectory(atPath: directory).filter { name in
            guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: directory + "/" + name) else { return false }
            if target.hasPrefix("/") { return true }
            guard target.hasPrefix("socket:[") else { return false }
            return localPorts[String(target.dropFirst(8).dropLast())] == server.port
        }.count
    }

    /// Asserts that the receiver holds no more descriptors than `before` once it has seen the last
    /// connections go (it closes its side when it reads their end): waits for that, bounded.
    private func assertNoDescriptorLeft(by server: ServeProcess, before: Int, file: StaticString = #filePath, line: UInt = #line) throws {
        let deadline = Date() + 10
        while try descriptors(of: server) > before, Date() < deadline { usleep(20_000) }
        XCTAssertLessThanOrEqual(try descriptors(of: server), before, "connections or files left after the attack", file: file, line: line)
    }

    private func seconds(_ value: Any?) -> Double { (value as? NSNumber)?.doubleValue ?? -1 }

    // MARK: Half-open and idle connections

    func testHalfOpenConnectionsAreClosedWithinTheHeadTimeoutWhileHealthAnswers() throws {
        let count = Int(ProcessInfo.processInfo.environment["XFER_HALF_OPEN_CONNECTIONS"] ?? "") ?? 1_000
        let long = count >= 10_000
        // Long enough for a debug build to accept all of them before the first is closed, so
        // that they are held at once while /health is asked (~300 a second on 2 busy cores).
        let timeout = long ? 60.0 : 8.0
        let server = try ServeProcess(root: work.file("server"), extraArguments: ["--header-timeout", "\(Int(timeout))s"])
        let before = try descriptors(of: server)
        let result = try slowClient(["half-open", String(server.port), String(count), String(timeout * 2 + 60), String(server.child.pid)])
        print("\(count) half-open connections, --header-timeout \(Int(timeout))s, \(before) descriptors before: \(result)")

        XCTAssertEqual(int(result["closed"]), count, "every half-open connection closed by the receiver: \(result)")
        // Closed by the head timeout, not before (the default limit holds this many; at 10,000 the
        // few past it are pushed out early by newer ones, as they should be).
        if !long { XCTAssertGreaterThanOrEqual(seconds(result["firstClosedAfter"]), timeout - 0.1, "\(result)") }
        XCTAssertLessThanOrEqual(seconds(result["lastClosedAfter"]), timeout + slack + (long ? 30 : 0), "\(result)")
        let probes = try XCTUnwrap(result["healthMs"] as? [NSNumber], "\(result)").map(\.doubleValue)
        XCTAssertEqual(probes.count, 5)
        // Liveness here (speed is the bench's), except the long form's bar from the issue.
        XCTAssertLessThan(probes.max() ?? .infinity, long ? 100 : 1_000, "/health while \(count) connections are held: \(probes) ms")
        XCTAssertGreaterThanOrEqual(int(result["receiverDescriptorsWhileHeld"]), before + min(count, 1_000), "held at once: \(result)")
        try assertNoDescriptorLeft(by: server, before: before)
    }

    func testIdleKeepAliveConnectionsAreClosedAfterTheIdleTimeout() throws {
        let server = try ServeProcess(root: work.file("server"), extraArguments: ["--idle-timeout", "2s", "--header-timeout", "1s"])
        let before = try descriptors(of: server)
        // Each asks /health once on a kept-alive connection, then says nothing: the idle timeout
        // (2 s), not the head timeout (1 s), closes it.
        let result = try slowClient(["idle", String(server.port), "50", "30"])
        XCTAssertEqual(int(result["closed"]), 50, "\(result)")
        XCTAssertGreaterThanOrEqual(seconds(result["firstClosedAfter"]), 1.9, "\(result)")
        XCTAssertLessThanOrEqual(seconds(result["lastClosedAfter"]), 2 + slack, "\(result)")
        try assertNoDescriptorLeft(by: server, before: before)
    }

    // MARK: Stalled bodies

    private let upload = Data((0..<100_000).map { UInt8($0 % 251) })

    /// A request of `length` body bytes (`upload`'s from `offset`) that sends `sent` of them and
    /// stops; returns once they are sent (the child then waits for the receiver to close the
    /// connection), with the Location of a 104 a creation got.
    @discardableResult
    private func stalledRequest(
        _ method: String, _ url: String, from offset: Int = 0, length: Int, sent: Int, headers: [String], location: UnsafeMutablePointer<String?>? = nil
    ) throws -> ChildProcess {
        let path = try XCTUnwrap(URL(string: url)).path
        let port = try XCTUnwrap(URL(string: url)?.port)
        let child = try ChildProcess(
            executable: "/usr/bin/python3",
            arguments: [Self.tool, "stall", String(port), method, path, String(offset), String(length), String(sent), "60"] + headers)
        let stalled = try parsed(try XCTUnwrap(child.readLine(), child.standardError))
        XCTAssertEqual(stalled["stalled"] as? Int, sent)
        location?.pointee = stalled["location"] as? String
        return child
    }

    /// Waits until the receiver has read `bytes` body bytes in all (`GET /stats`): the stalled
    /// request's bytes arrived, so what a cut keeps of them is known. Bounded.
    private func waitUntilReceived(_ bytes: Int, by server: ServeProcess) throws {
        let deadline = Date() + 20
        while int(try getJSON(server.url + "/stats")["payloadBytesReceived"]) < bytes {
            guard Date() < deadline else { return XCTFail("the receiver never read \(bytes) body bytes") }
            usleep(20_000)
        }
    }

    /// Times `body`, in seconds.
    private func timed<T>(_ body: () throws -> T) rethrows -> (T, Double) {
        let start = Date()
        let value = try body()
        return (value, Date().timeIntervalSince(start))
    }

    func testAStalledTusPatchDelaysNeitherHEADNorTheResumingPatch() throws {
        // A stall shorter than its timeout (60 s by default; 4 s here so that the test also sees
        // the cut) must not hold up the upload's other requests.
        let server = try ServeProcess(root: work.file("server"), extraArguments: ["--body-timeout", "4s"])
        let tus = ["Tus-Resumable: 1.0.0"]
        let created = try curlRequest("POST", server.url + "/files/", headers: tus + ["Upload-Length: \(upload.count)"], in: work)
        XCTAssertEqual(created.status, 201, created.text)
        // Counted once the storage is in use: an object store's client starts its threads lazily.
        let before = try descriptors(of: server)
        let url = try XCTUnwrap(created.headers["location"])
        let patchHeaders = tus + ["Upload-Offset: 0", "Content-Type: application/offset+octet-stream"]

        // 1. A PATCH that stops after 40,000 of its 100,000 bytes.
        let stalled = try stalledRequest("PATCH", url, length: upload.count, sent: 40_000, headers: patchHeaders)
        try waitUntilReceived(40_000, by: server)
        // HEAD answers at once, while the body is still stalled, the offset acknowledged so far.
        let (head, headTook) = try timed { try curlRequest("HEAD", url, headers: tus, in: work) }
        XCTAssertEqual(head.status, 200)
        XCTAssertEqual(head.headers["upload-offset"], "0", "nothing of the stalled body is acknowledged yet")
        XCTAssertLessThan(headTook, 2, "HEAD waited \(headTook) s behind a stalled body")
        // The body timeout closes the stalled connection, not earlier, not much later.
        let cut = try parsed(try XCTUnwrap(stalled.readLine(), stalled.standardError))
        XCTAssertEqual(stalled.wait(), 0, stalled.standardError)
        XCTAssertEqual(int(cut["closed"]), 1, "\(cut)")
        XCTAssertGreaterThanOrEqual(seconds(cut["firstClosedAfter"]), 3.9, "\(cut)")
        XCTAssertLessThanOrEqual(seconds(cut["firstClosedAfter"]), 4 + slack, "\(cut)")
        // The offset is what the cut body kept, durably: what arrived on disk, nothing on an object store.
        let kept = SuiteStorage.keepsWhatArrivedOfACutBody ? 40_000 : 0
        XCTAssertEqual(try curlRequest("HEAD", url, headers: tus, in: work).headers["upload-offset"], String(kept))

        // 2. Another PATCH stops after 30,000 more bytes; the client gives up on it and resumes
        // from the acknowledged offset: its PATCH takes over at once, before the body timeout.
        let second = try stalledRequest("PATCH", url, from: kept, length: upload.count - kept, sent: 30_000, headers: tus + [
            "Upload-Offset: \(kept)", "Content-Type: application/offset+octet-stream",
        ])
        try waitUntilReceived(40_000 + 30_000, by: server)
        let (resumed, resumeTook) = try timed {
            try curlRequest("PATCH", url, headers: tus + ["Upload-Offset: \(kept)", "Content-Type: application/offset+octet-stream"],
                body: upload[kept...], in: work)
        }
        XCTAssertLessThan(resumeTook, 3, "the resuming PATCH waited \(resumeTook) s behind a stalled one")
        let secondCut = try parsed(try XCTUnwrap(second.readLine(), second.standardError))
        XCTAssertEqual(second.wait(), 0)
        XCTAssertLessThan(seconds(secondCut["firstClosedAfter"]), 3.9, "the stalled PATCH was cut by the one that took over: \(secondCut)")
        if SuiteStorage.keepsWhatArrivedOfACutBody {
            // The cut request kept what it had (as tusd saves a released request's bytes): the
            // offset moved under the resuming PATCH, which says so; the client goes on from there.
            XCTAssertEqual(resumed.status, 409, resumed.text)
            XCTAssertEqual(resumed.headers["upload-offset"], "70000")
            let rest = try curlRequest("PATCH", url, headers: tus + ["Upload-Offset: 70000", "Content-Type: application/offset+octet-stream"],
                body: upload[70_000...], in: work)
            XCTAssertEqual(rest.status, 204, rest.text)
        } else {
            XCTAssertEqual(resumed.status, 204, resumed.text)
        }
        XCTAssertEqual(try curlRequest("GET", url, headers: tus, in: work).body, upload, "the file is what was sent, byte for byte")
        try assertNoDescriptorLeft(by: server, before: before)
    }

    func testAStalledIETFAppendIsCutByTheResumingHEADWhichAnswersAtOnce() throws {
        let server = try ServeProcess(root: work.file("server"), extraArguments: ["--body-timeout", "30s"])
        let ietf = ["Upload-Draft-Interop-Version: 8"]
        let created = try curlRequest(
            "POST", server.url + "/resumable/stalled.bin", headers: ietf + ["Upload-Complete: ?0", "Upload-Length: \(upload.count)"],
            body: Data(), in: work)
        XCTAssertEqual(created.status, 201, created.text)
        let before = try descriptors(of: server)
        let url = try XCTUnwrap(created.headers["location"])

        // An append stalls after 40,000 of its 60,000 bytes, as a phone's whose network went away.
        let stalled = try stalledRequest(
            "PATCH", url, length: 60_000, sent: 40_000,
            headers: ietf + ["Upload-Offset: 0", "Upload-Complete: ?0", "Content-Type: application/partial-upload"])
        try waitUntilReceived(40_000, by: server)
        // The phone's offset retrieval: answered at once (the stall would last 30 s), after the
        // stalled append was ended and settled, with the offset the next append must send.
        let (head, took) = try timed { try curlRequest("HEAD", url, headers: ietf, in: work) }
        XCTAssertLessThan(took, 3, "HEAD waited \(took) s behind a stalled append")
        XCTAssertEqual(head.status, 204)
        let kept = SuiteStorage.keepsWhatArrivedOfACutBody ? 40_000 : 0
        XCTAssertEqual(head.headers["upload-offset"], String(kept), "what the cut append kept, durably")
        let cut = try parsed(try XCTUnwrap(stalled.readLine(), stalled.standardError))
        XCTAssertEqual(stalled.wait(), 0)
        XCTAssertLessThan(seconds(cut["firstClosedAfter"]), 10, "the stalled append's connection was closed by the HEAD: \(cut)")
        // That offset is accepted by the next append, as the draft requires.
        let rest = try curlRequest(
            "PATCH", url, headers: ietf + ["Upload-Offset: \(kept)", "Upload-Complete: ?1", "Content-Type: application/partial-upload"],
            body: upload[kept...], in: work)
        XCTAssertEqual(rest.status, 201, rest.text)
        XCTAssertEqual(try curlRequest("GET", url, headers: ietf, in: work).body, upload, "the file is what was sent, byte for byte")
        try assertNoDescriptorLeft(by: server, before: before)
    }

    /// URLSession's way: a creation carrying the whole file, whose 104 named the upload, stalls mid-body
    /// (the phone lost its network). Its offset retrieval is answered at once, with what the cut
    /// creation kept, and the rest is accepted from there. Over the object store this is the
    /// creation stored whole (one object), whose state only exists once its body failed.
    func testAStalledIETFCreationIsCutByTheResumingHEAD() throws {
        let server = try ServeProcess(root: work.file("server"), extraArguments: ["--body-timeout", "30s"])
        var location: String?
        let stalled = try stalledRequest(
            "POST", server.url + "/resumable/whole.bin", length: upload.count, sent: 40_000,
            headers: ["Upload-Draft-Interop-Version: 8", "Upload-Complete: ?1"], location: &location)
        // Its path: the host a Location names is not this test's business.
        let url = server.url + (try XCTUnwrap(location.flatMap(URL.init(string:))?.path, "the 104 named the upload"))
        try waitUntilReceived(40_000, by: server)
        let ietf = ["Upload-Draft-Interop-Version: 8"]
        let (head, took) = try timed { try curlRequest("HEAD", url, headers: ietf, in: work) }
        XCTAssertLessThan(took, 3, "HEAD waited \(took) s behind a stalled creation")
        XCTAssertEqual(head.status, 204, head.text)
        let kept = SuiteStorage.keepsWhatArrivedOfACutBody ? 40_000 : 0
        XCTAssertEqual(head.headers["upload-offset"], String(kept))
        XCTAssertNotNil(stalled.readLine(), stalled.standardError)
        XCTAssertEqual(stalled.wait(), 0)
        let rest = try curlRequest(
            "PATCH", url, headers: ietf + ["Upload-Offset: \(kept)", "Upload-Complete: ?1", "Content-Type: application/partial-upload"],
            body: upload[kept...], in: work)
        XCTAssertEqual(rest.status, 201, rest.text)
        XCTAssertEqual(try curlRequest("GET", url, headers: ietf, in: work).body, upload, "the file is what was sent, byte for byte")
    }

    /// Small creations that bring their whole file and stall mid-body (IETF, tus's creation with
    /// upload): each holds its connection and one file, its data file, not its log too. The
    /// connection limit's descriptor budget (`ConnectionGuard.defaultMaximum`, half the process's
    /// descriptors) counts one file a connection; a creation that kept its log open through the
    /// body held two, and clients stalling many could have run the receiver out of descriptors.
    func testStalledSmallCreationsHoldOneFileEach() throws {
        let server = try ServeProcess(root: work.file("server"), extraArguments: ["--body-timeout", "60s"])
        // Counted once the storage is in use (a first upload), as the other attacks are.
        let warm = try curlRequest("POST", server.url + "/resumable/warm.bin", headers: ["Upload-Draft-Interop-Version: 8", "Upload-Complete: ?1"],
            body: Data("warm".utf8), in: work)
        XCTAssertEqual(warm.status, 201, warm.text)
        let before = try descriptors(of: server)
        let count = 40, length = 4096, sent = 1000
        let kinds: [(path: String, headers: [String])] = [
            ("/resumable/stalled-{i}.bin", ["Upload-Draft-Interop-Version: 8", "Upload-Complete: ?1"]),
            ("/files/", ["Tus-Resumable: 1.0.0", "Upload-Length: \(length)", "Content-Type: application/offset+octet-stream"]),
        ]
        var stallers: [ChildProcess] = []
        var received = 0
        for kind in kinds {
            let child = try ChildProcess(
                executable: "/usr/bin/python3",
                arguments: [Self.tool, "stall-many", String(server.port), String(count), "POST", kind.path, String(length), String(sent), "60"]
                    + kind.headers)
            stallers.append(child)
            XCTAssertEqual(int(try parsed(try XCTUnwrap(child.readLine(), child.standardError))["stalled"]), count)
            received += count * sent
            // Every body is being written into its data file.
            try waitUntilReceived(received + 4, by: server)
            let held = try descriptors(of: server) - before
            XCTAssertGreaterThanOrEqual(held, count * (stallers.count), "each stalled creation holds its connection")
            XCTAssertLessThanOrEqual(held, 2 * count * stallers.count, "a stalled creation holds one file besides its connection")
        }
        for child in stallers {
            child.kill(SIGTERM)
            _ = child.wait()
        }
        try assertNoDescriptorLeft(by: server, before: before)
    }

    /// The body clock runs only while the receiver waits for bytes it asked for: a body it is not
    /// reading (its handler busy or waiting, NIO's backpressure holding reads) is not a stalled
    /// client. `--stall` withholds the request unread; it is still open after twice the timeout.
    func testABodyTheReceiverIsNotReadingIsNotCut() throws {
        let server = try ServeProcess(root: work.file("server"), extraArguments: ["--body-timeout", "1s", "--stall", "/raw/unread.bin"])
        let child = try ChildProcess(
            executable: "/usr/bin/python3", arguments: [Self.tool, "unread", String(server.port), "/raw/unread.bin", String(64 << 20), "3"])
        XCTAssertEqual(server.child.readLine(), "stalled PUT /raw/unread.bin #1")
        let blocked = try parsed(try XCTUnwrap(child.readLine(), child.standardError))
        XCTAssertLessThan(int(blocked["blocked"]), 64 << 20, "the receiver stopped reading: \(blocked)")
        let result = try parsed(try XCTUnwrap(child.readLine(), child.standardError))
        XCTAssertEqual(child.wait(), 0, child.standardError)
        XCTAssertEqual(int(result["closed"]), 0, "cut although the receiver, not the client, was the one not reading: \(result)")
    }

    /// A download whose client reads nothing holds its connection and its file only for the body
    /// timeout: the connection, unwritable that long, is closed (seen from the receiver's side:
    /// its descriptors, since a client that reads nothing cannot see the close).
    func testAnAnswerNobodyReadsIsCutAtTheBodyTimeout() throws {
        let server = try ServeProcess(root: work.file("server"), extraArguments: ["--body-timeout", "2s"])
        let tus = ["Tus-Resumable: 1.0.0"]
        let file = Data(count: 32 << 20)
        let created = try curlRequest(
            "POST", server.url + "/files/", headers: tus + ["Upload-Length: \(file.count)", "Content-Type: application/offset+octet-stream"],
            body: file, in: work)
        XCTAssertEqual(created.status, 201, created.text)
        let path = try XCTUnwrap(URL(string: try XCTUnwrap(created.headers["location"]))).path
        let before = try descriptors(of: server)
        let started = Date()
        let reader = try ChildProcess(executable: "/usr/bin/python3", arguments: [Self.tool, "unread-answer", String(server.port), path, "60"])
        XCTAssertNotNil(reader.readLine(), reader.standardError)
        defer { reader.kill(SIGTERM); reader.wait() }
        // Held while the answer waits for the client (its connection, and the file it reads).
        let held = Date() + 10
        while try descriptors(of: server) <= before, Date() < held { usleep(20_000) }
        XCTAssertGreaterThan(try descriptors(of: server), before, "the download is under way")
        let deadline = Date() + 2 + slack
        while try descriptors(of: server) > before, Date() < deadline { usleep(20_000) }
        let took = Date().timeIntervalSince(started)
        XCTAssertLessThanOrEqual(try descriptors(of: server), before, "the connection nobody reads was closed, its file with it")
        XCTAssertGreaterThanOrEqual(took, 1.9, "not before the body timeout")
    }

    // MARK: The connection limit

    func testAtMaxConnectionsTheLongestIdleGivesWayAndBusyOnesAreKept() throws {
        let server = try ServeProcess(root: work.file("server"), extraArguments: ["--max-connections", "20", "--body-timeout", "30s"])
        let before = try descriptors(of: server)

        // 25 half-open connections and 5 probes at a limit of 20: the oldest half-open ones give
        // way at once (their head timeout is 30 s), and every probe is answered.
        let flood = try slowClient(["half-open", String(server.port), "25", "3"])
        XCTAssertGreaterThanOrEqual(int(flood["closed"]), 5, "pushed out by newer connections: \(flood)")
        XCTAssertLessThan(seconds(flood["lastClosedAfter"]), 3, "\(flood)")
        XCTAssertEqual((flood["healthMs"] as? [Any])?.count, 5, "\(flood)")

        // 20 connections busy with a request (a body under way): a 21st is closed at once.
        let busy = try ChildProcess(executable: "/usr/bin/python3", arguments: [Self.tool, "busy", String(server.port), "20", "60"])
        XCTAssertEqual(try parsed(try XCTUnwrap(busy.readLine(), busy.standardError))["busy"] as? Int, 20)
        let deadline = Date() + 20
        while try descriptors(of: server) < before + 20 {
            guard Date() < deadline else { break }
            usleep(20_000)
        }
        XCTAssertEqual(try descriptors(of: server), before + 20, "the busy connections pushed out the half-open ones")
        let refused = try runToEnd("/usr/bin/curl", ["-sS", "-m", "10", "-o", "/dev/null", "-w", "%{http_code}", server.url + "/health"])
        XCTAssertNotEqual(refused.status, 0, "a connection past the limit, every other busy, is closed unanswered")
        XCTAssertEqual(refused.stdout.joined(), "000")
        XCTAssertLessThanOrEqual(try descriptors(of: server), before + 20)

        // Once they end, the receiver answers again.
        busy.kill(SIGTERM)
        XCTAssertEqual(busy.wait(), 0, busy.standardError)
        let answered = try runToEnd("/usr/bin/curl", ["-sS", "-m", "10", "--retry", "5", "--retry-all-errors", "--retry-delay", "1", server.url + "/health"])
        XCTAssertEqual(answered.status, 0, answered.stderr)
        XCTAssertTrue(answered.stdout.joined().contains("\"ok\""), "\(answered.stdout)")
        try assertNoDescriptorLeft(by: server, before: before)
    }

    // MARK: Bad values

    func testBadTimeoutsAndLimitsAreOneLineErrors() throws {
        let root = work.file("server")
        let rows: [([String], String)] = [
            (["--header-timeout", "0"], "--header-timeout must be longer than 0"),
            (["--idle-timeout", "0s"], "--idle-timeout must be longer than 0"),
            (["--body-timeout", "soon"], "--body-timeout"),
            (["--body-timeout", "-1s"], "--body-timeout"),
            (["--tls-handshake-timeout", "5s"], "--tls-handshake-timeout is for --tls-cert"),
            (["--max-connections", "0"], "--max-connections must be between 1 and"),
            (["--max-connections", "100000000"], "--max-connections must be between 1 and"),
            (["--max-connections", "many"], "--max-connections"),
        ]
        for (arguments, fragment) in rows {
            let result = try runXfer(["serve", "--root", root] + arguments)
            XCTAssertEqual(result.status, 2, "\(arguments): \(result.stderr)")
            XCTAssertEqual(result.stderr.split(separator: "\n").count, 1, "\(arguments): one line, got \(result.stderr)")
            XCTAssertTrue(result.stderr.contains(fragment), "\(arguments): expected '\(fragment)' in \(result.stderr)")
            XCTAssertTrue(result.stdout.isEmpty, "\(arguments): \(result.stdout)")
        }
    }
}
