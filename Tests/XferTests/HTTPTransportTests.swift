import Foundation
import Synchronization
import Testing
import XferTestSupport
@testable import Xfer

/// Tests of `HTTPTransport` against a real HTTP server on 127.0.0.1 (a small
/// Python script, embedded below so the test target needs no resources).
///
/// Nothing here sleeps to synchronise: when a test needs a request to be in
/// flight it asks the fixture (`/await`) to answer once the server has seen
/// that request arrive.
@Suite struct HTTPTransportTests {

    // MARK: Requests and responses

    @Test func getSendsCustomHeadersAndParsesTheResponse() async throws {
        let server = try Fixtures.http.get()
        let transport = try makeTransport()
        defer { transport.shutdown() }

        let request = HTTPRequest(method: .get, url: server.url("/echo?x=1"), headers: [
            "X-Custom": "  hello world ",
            "Authorization": "Bearer not-a-real-token",
            "X-Empty": "",
        ])
        let response = try await transport.send(request)

        #expect(response.status == 200)
        #expect(response.isSuccess)
        #expect(response.headers["content-type"] == "application/json")
        #expect(response.headers["Content-Length"] == String(response.body.count))
        let echo = try Echo(response)
        #expect(echo.method == "GET")
        #expect(echo.path == "/echo?x=1")
        #expect(echo.header("X-Custom") == "hello world")
        #expect(echo.header("Authorization") == "Bearer not-a-real-token")
        #expect(echo.header("X-Empty") == "")
        #expect(echo.header("User-Agent") == "xfer/0.1")
        #expect(echo.header("Expect") == nil)
        #expect(echo.header("Content-Length") == nil)
        #expect(echo.length == 0)
    }

    @Test func postSendsAJSONBodyWithExactLength() async throws {
        let server = try Fixtures.http.get()
        let transport = try makeTransport()
        defer { transport.shutdown() }

        let json = #"{"name":"chunk-7","size":1048576}"#
        let response = try await transport.send(HTTPRequest(
            method: .post, url: server.url("/echo"),
            headers: ["Content-Type": "application/json"],
            body: RequestBody(Array(json.utf8))
        ))

        #expect(response.status == 200)
        let echo = try Echo(response)
        #expect(echo.method == "POST")
        #expect(echo.body == json)
        #expect(echo.length == json.utf8.count)
        #expect(echo.header("Content-Length") == String(json.utf8.count))
        #expect(echo.header("Content-Type") == "application/json")
        #expect(echo.header("Transfer-Encoding") == nil)
    }

    @Test func postWithoutContentTypeIsNotLabelledAsAForm() async throws {
        let server = try Fixtures.http.get()
        let transport = try makeTransport()
        defer { transport.shutdown() }

        let response = try await transport.send(HTTPRequest(
            method: .post, url: server.url("/echo"), body: RequestBody(Array("a=b".utf8))
        ))
        let echo = try Echo(response)
        #expect(echo.body == "a=b")
        #expect(echo.header("Content-Type") == nil)
    }

    @Test func patchStreamsEverySegmentIntact() async throws {
        let server = try Fixtures.http.get()
        let transport = try makeTransport { $0.maximumResponseBodySize = 8 << 20 }
        defer { transport.shutdown() }

        var generator = SplitMix64(seed: 42)
        let large = (0..<(3 << 20)).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
        let before = Array("--boundary\r\nContent-Type: application/octet-stream\r\n\r\n".utf8)
        let chunk = large + [0] + Array(repeating: 0xAB, count: 70_000)
        let after = Array("\r\n--boundary--\r\n".utf8)
        let expected = before + chunk + after
        let body = RequestBody(chunk: ChunkPayload(index: 0, offset: 0, bytes: chunk), before: before, after: after)
        let response = try await transport.send(HTTPRequest(method: .patch, url: server.url("/mirror"), body: body))

        #expect(response.status == 200)
        #expect(response.headers["X-Received-Length"] == String(expected.count))
        #expect(response.headers["X-Saw-Transfer-Encoding"] == "")
        // Bodies over 1 MiB make curl send "Expect: 100-continue" unless told not to.
        #expect(response.headers["X-Saw-Expect"] == "")
        #expect(response.headers["X-Saw-Method"] == "PATCH")
        #expect(response.body.count == expected.count)
        #expect(response.body == expected)
        #expect(transport.bodyBytesSent == expected.count)
    }

    /// A chunk's body is read from its file as it is sent. A file cut short
    /// or written to while its range is read fails the request before its
    /// body is complete (the server never gets a whole body of mixed bytes),
    /// and says so as the file's problem, not the network's.
    @Test(arguments: [FileMischief.truncate, .overwrite])
    func aFileChangedMidRequestFailsTheRequest(_ mischief: FileMischief) async throws {
        let server = try Fixtures.http.get()
        let transport = try makeTransport { $0.maximumResponseBodySize = 8 << 20 }
        defer { transport.shutdown() }
        let size = 3 << 20
        let path = temporaryFile("midrequest", size: size)
        defer { try? FileManager.default.removeItem(atPath: path) }
        let file = MeddledFile(try LocalFile(path: path), mischief: mischief)
        let chunk = ChunkPayload(index: 0, source: ChunkBytes(file: file, offset: 0, length: size))
        let request = HTTPRequest(method: .patch, url: server.url("/mirror"), body: RequestBody(chunk: chunk))
        let failure: TransportError
        do {
            let response = try await transport.send(request)
            Issue.record("expected the file's change, got HTTP \(response.status)")
            return
        } catch let error as TransportError {
            failure = error
        }
        guard case .localFile(let fileError) = failure, fileError.kind == .fileChanged, let changed = fileError.path else {
            Issue.record("expected the file's change, got \(failure)")
            return
        }
        #expect(changed == path)
        #expect(transport.bodyBytesSent < size, "the body was not sent whole")
    }

    /// The next chunk's read-ahead starts at a mark inside this chunk's send
    /// (`ChunkBytes.whenSent(upTo:)`): once, when the bytes read reach it.
    @Test func anActionAtAMarkOfTheBodyRunsOnceWhenTheSendReachesIt() async throws {
        let server = try Fixtures.http.get()
        let transport = try makeTransport { $0.maximumResponseBodySize = 8 << 20 }
        defer { transport.shutdown() }
        let size = 3 << 20
        let path = temporaryFile("mark", size: size)
        defer { try? FileManager.default.removeItem(atPath: path) }
        let file = CountedFile(try LocalFile(path: path))
        let bytes = ChunkBytes(file: file, offset: 0, length: size)
        let seen = Mutex<[Int]>([])
        bytes.whenSent(upTo: size / 2) { seen.withLock { $0.append(file.bytesRead.load(ordering: .relaxed)) } }
        let request = HTTPRequest(method: .patch, url: server.url("/mirror"), body: RequestBody(chunk: ChunkPayload(index: 0, source: bytes)))
        let response = try await transport.send(request)
        #expect(response.body.count == size)
        let readAtTheMark = seen.withLock { $0 }
        #expect(readAtTheMark.count == 1, "the action ran once")
        #expect(readAtTheMark.allSatisfy { $0 >= size / 2 && $0 < size }, "at the mark, before the last byte: \(readAtTheMark)")
    }

    @Test func putWithEmptyBodySendsZeroContentLength() async throws {
        let server = try Fixtures.http.get()
        let transport = try makeTransport()
        defer { transport.shutdown() }

        let echo = try Echo(try await transport.send(HTTPRequest(method: .put, url: server.url("/echo"))))
        #expect(echo.method == "PUT")
        #expect(echo.header("Content-Length") == "0")
        #expect(echo.header("Transfer-Encoding") == nil)
    }

    @Test func deleteWithoutBodyUsesTheCustomVerb() async throws {
        let server = try Fixtures.http.get()
        let transport = try makeTransport()
        defer { transport.shutdown() }

        let echo = try Echo(try await transport.send(HTTPRequest(method: .delete, url: server.url("/echo"))))
        #expect(echo.method == "DELETE")
        #expect(echo.header("Content-Length") == nil)
    }

    @Test func headDoesNotWaitForTheAdvertisedBody() async throws {
        let server = try Fixtures.http.get()
        let transport = try makeTransport()
        defer { transport.shutdown() }

        let response = try await transport.send(HTTPRequest(method: .head, url: server.url("/head")))
        #expect(response.status == 200)
        #expect(response.headers["X-Head"] == "yes")
        #expect(response.headers["Content-Length"] == "1234")
        #expect(response.body.isEmpty)
    }

    @Test func errorStatusIsAResponseWithItsHeaders() async throws {
        let server = try Fixtures.http.get()
        let transport = try makeTransport()
        defer { transport.shutdown() }

        let response = try await transport.send(HTTPRequest(method: .get, url: server.url("/status?code=503")))
        #expect(response.status == 503)
        #expect(!response.isSuccess)
        #expect(response.headers["Retry-After"] == "7")
        #expect(response.headers.values(for: "x-multi") == ["a", "b"])
        #expect(response.text == "unavailable")
    }

    @Test func onlyTheFinalResponsesHeadersAreKept() async throws {
        let server = try Fixtures.http.get()
        let transport = try makeTransport()
        defer { transport.shutdown() }

        let response = try await transport.send(HTTPRequest(method: .get, url: server.url("/interim")))
        #expect(response.status == 200)
        #expect(response.headers["X-Final"] == "yes")
        #expect(response.headers["X-Interim"] == nil)
        #expect(response.headers["Link"] == nil)
        #expect(response.text == "final")
    }

    @Test func foldedAndPaddedHeaderValuesAreNormalised() async throws {
        let server = try Fixtures.http.get()
        let transport = try makeTransport()
        defer { transport.shutdown() }

        let response = try await transport.send(HTTPRequest(method: .get, url: server.url("/folded")))
        #expect(response.headers["X-Folded"] == "first second")
        #expect(response.headers["X-Spaced"] == "padded value")
        #expect(response.text == "ok")
    }

    @Test func redirectsAreReturnedNotFollowed() async throws {
        let server = try Fixtures.http.get()
        let transport = try makeTransport()
        defer { transport.shutdown() }

        let response = try await transport.send(HTTPRequest(method: .get, url: server.url("/redirect")))
        #expect(response.status == 302)
        #expect(response.headers["Location"] == "/echo")
    }

    @Test func lineBreaksInHeaderValuesCannotInjectHeaders() async throws {
        let server = try Fixtures.http.get()
        let transport = try makeTransport()
        defer { transport.shutdown() }

        let echo = try Echo(try await transport.send(HTTPRequest(
            method: .get, url: server.url("/echo"),
            headers: ["X-Custom": "a\r\nX-Injected: 1", "Bad Name": "x", "Content-Length": "999"]
        )))
        #expect(echo.header("X-Injected") == nil)
        #expect(echo.header("X-Custom") == "a  X-Injected: 1")
        #expect(echo.header("Bad Name") == nil)
        #expect(echo.header("Content-Length") == nil)
    }

    @Test func sequentialRequestsReuseTheConnection() async throws {
        let server = try Fixtures.http.get()
        let transport = try makeTransport()
        defer { transport.shutdown() }

        let first = try Echo(try await transport.send(HTTPRequest(method: .get, url: server.url("/echo"))))
        let second = try Echo(try await transport.send(HTTPRequest(
            method: .post, url: server.url("/echo"), body: RequestBody(Array("x".utf8))
        )))
        #expect(first.clientPort == second.clientPort)
    }

    /// A kept connection the server closes while it waits (parked in the transport's epoll set)
    /// leaves the set and is not used again: every next request gets a connection of its own.
    @Test func aKeptConnectionTheServerClosedIsNotUsedAgain() async throws {
        let server = try Fixtures.http.get()
        let transport = try makeTransport()
        defer { transport.shutdown() }

        var ports: Set<String> = []
        for _ in 0..<20 {
            let response = try await transport.send(HTTPRequest(method: .get, url: server.url("/close-after")))
            #expect(response.status == 200)
            ports.insert(String(decoding: response.body, as: UTF8.self))
        }
        #expect(ports.count == 20)
        // And the transport goes on: a request to a connection that stays open.
        _ = try Echo(try await transport.send(HTTPRequest(method: .get, url: server.url("/echo"))))
    }

    @Test func fiftyConcurrentRequestsAllComplete() async throws {
        let server = try Fixtures.http.get()
        let transport = try makeTransport()
        defer { transport.shutdown() }

        let bodies = try await withThrowingTaskGroup(of: (Int, String).self) { group in
            for index in 0..<50 {
                group.addTask {
                    let payload = "request-\(index)-" + String(repeating: "z", count: index * 100)
                    let response = try await transport.send(HTTPRequest(
                        method: .post, url: server.url("/echo?i=\(index)"),
                        headers: ["Content-Type": "text/plain"], body: RequestBody(Array(payload.utf8))
                    ))
                    #expect(response.status == 200)
                    return (index, try Echo(response).body)
                }
            }
            var bodies: [Int: String] = [:]
            for try await (index, body) in group {
                bodies[index] = body
            }
            return bodies
        }
        #expect(bodies.count == 50)
        for index in 0..<50 {
            #expect(bodies[index] == "request-\(index)-" + String(repeating: "z", count: index * 100))
        }
    }

    @Test func tasksOnTheTransportsThreadSendConcurrently() async throws {
        let server = try Fixtures.http.get()
        let transport = try makeTransport()
        defer { transport.shutdown() }

        // Every child runs on the loop thread (the executor a job's steps
        // prefer). Three requests wait until a fourth, sent after them, has
        // reached the server: only sends that leave while others are in
        // flight on the same thread can answer them (else 504 after 30 s).
        let key = UUID().uuidString
        let statuses = try await withTaskExecutorPreference(transport.executor) {
            try await withThrowingTaskGroup(of: Int?.self) { group in
                for _ in 0..<3 {
                    group.addTask {
                        try await transport.send(HTTPRequest(method: .get, url: server.url("/await?key=\(key)&event=arrived&count=1"))).status
                    }
                }
                group.addTask {
                    _ = try? await transport.send(HTTPRequest(method: .get, url: server.url("/stall?key=\(key)")))
                    return nil
                }
                var statuses: [Int] = []
                while statuses.count < 3, let status = try await group.next() {
                    if let status { statuses.append(status) }
                }
                group.cancelAll()
                return statuses
            }
        }
        #expect(statuses == [200, 200, 200])
    }

    @Test func tasksPreferringAStoppedTransportStillRun() async throws {
        let server = try Fixtures.http.get()
        let transport = try makeTransport()
        let key = UUID().uuidString
        let stalled = Task(executorPreference: transport.executor) { () -> TransportError? in
            var failure: TransportError?
            do throws(TransportError) {
                _ = try await transport.send(HTTPRequest(method: .get, url: server.url("/stall?key=\(key)")))
            } catch {
                failure = error
            }
            // Resumed after the loop stopped: this part runs on the global executor.
            await Task.yield()
            return failure
        }
        try await server.waitFor(key: key, event: "arrived", count: 1)
        transport.shutdown()
        #expect(await stalled.value == .cancelled)
        let later = await Task(executorPreference: transport.executor) { 42 }.value
        #expect(later == 42)
    }

    // MARK: Errors

    @Test func refusedConnectionIsCouldNotConnect() async throws {
        let server = try Fixtures.http.get()
        let transport = try makeTransport()
        defer { transport.shutdown() }

        // A port the fixture bound and closed again, so nothing listens on it.
        let port = try #require(Int(try await transport.send(HTTPRequest(method: .get, url: server.url("/unused-port"))).text))
        do {
            let response = try await transport.send(HTTPRequest(method: .get, url: "http://127.0.0.1:\(port)/x?token=SECRET"))
            Issue.record("expected a connect failure, got status \(response.status)")
        } catch {
            guard case .couldNotConnect(let host, let errorPort, let reason) = error else {
                Issue.record("expected couldNotConnect, got \(error)")
                return
            }
            #expect(host == "127.0.0.1")
            #expect(errorPort == port)
            #expect(reason == "Connection refused")
            #expect(error.isRetryable)
            #expect(error.description == "could not connect to 127.0.0.1:\(port) (Connection refused)")
        }
    }

    @Test func unknownHostIsCouldNotResolve() async throws {
        let transport = try makeTransport()
        defer { transport.shutdown() }

        do {
            let response = try await transport.send(HTTPRequest(method: .get, url: "http://no-such-host.invalid/x"))
            Issue.record("expected a resolve failure, got status \(response.status)")
        } catch {
            #expect(error == .couldNotResolve(host: "no-such-host.invalid"))
            #expect(error.isRetryable)
        }
    }

    @Test func oversizedResponseIsRejected() async throws {
        let server = try Fixtures.http.get()
        let transport = try makeTransport { $0.maximumResponseBodySize = 1000 }
        defer { transport.shutdown() }

        let atLimit = try await transport.send(HTTPRequest(method: .get, url: server.url("/bytes?n=1000")))
        #expect(atLimit.body.count == 1000)
        do {
            let response = try await transport.send(HTTPRequest(method: .get, url: server.url("/bytes?n=5000")))
            Issue.record("expected responseTooLarge, got \(response.body.count) bytes")
        } catch {
            #expect(error == .responseTooLarge(limit: 1000))
            #expect(!error.isRetryable)
        }
    }

    @Test(arguments: [
        "ftp://user:hunter2@example.com/file?token=SECRET",
        "http://exa mple.com/upload?token=SECRET#SECRET",
        "not a url?token=SECRET",
        "/relative/path?token=SECRET",
    ])
    func invalidURLIsRejectedWithoutLeakingSecrets(url: String) async throws {
        let transport = try makeTransport()
        defer { transport.shutdown() }

        do {
            let response = try await transport.send(HTTPRequest(method: .get, url: url))
            Issue.record("expected invalidURL, got status \(response.status)")
        } catch {
            guard case .invalidURL = error else {
                Issue.record("expected invalidURL, got \(error)")
                return
            }
            #expect(!error.description.contains("SECRET"))
            #expect(!error.description.contains("hunter2"))
            #expect(!error.isRetryable)
        }
    }

    @Test func unsupportedSchemeShowsOnlySchemeHostPortAndPath() throws {
        #expect(throws: TransportError.invalidURL("ftp://example.com:21/dir/file (only http and https are supported)")) {
            _ = try TransportURL(parsing: "ftp://user:hunter2@example.com/dir/file?token=SECRET")
        }
        let target = try TransportURL(parsing: "https://user:pw@Example.com/a/b?sig=abc#frag")
        #expect(target.redacted == "https://example.com:443/a/b")
        #expect(target.secrets.contains("sig=abc"))
    }

    // MARK: Timeouts and cancellation

    @Test func cancellingAnInFlightRequestThrowsCancelledPromptly() async throws {
        let server = try Fixtures.http.get()
        let transport = try makeTransport()
        defer { transport.shutdown() }
        let key = UUID().uuidString

        let stalled = Task { try await transport.send(HTTPRequest(method: .get, url: server.url("/stall?key=\(key)"))) }
        try await server.waitFor(key: key, event: "arrived", count: 1)

        let clock = ContinuousClock()
        let start = clock.now
        stalled.cancel()
        let result = await stalled.result
        #expect(clock.now - start < .seconds(5))
        #expect(transportError(result) == .cancelled)
        // The handle was removed from curl, which closed the connection.
        try await server.waitFor(key: key, event: "departed", count: 1)
    }

    @Test func cancellingBeforeSendingNeverTouchesTheNetwork() async throws {
        let server = try Fixtures.http.get()
        let transport = try makeTransport()
        defer { transport.shutdown() }

        let task = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await transport.send(HTTPRequest(method: .post, url: server.url("/echo"), body: RequestBody([1, 2, 3])))
        }
        #expect(transportError(await task.result) == .cancelled)
        #expect(transport.bodyBytesSent == 0)
    }

    @Test func stalledTransferIsAbandonedByTheLowSpeedLimit() async throws {
        let server = try Fixtures.http.get()
        let transport = try makeTransport { $0.lowSpeedTime = .seconds(1) }
        defer { transport.shutdown() }
        let key = UUID().uuidString

        let clock = ContinuousClock()
        let start = clock.now
        do {
            let response = try await transport.send(HTTPRequest(method: .get, url: server.url("/stall?key=\(key)")))
            Issue.record("expected a timeout, got status \(response.status)")
        } catch {
            guard case .timedOut = error else {
                Issue.record("expected timedOut, got \(error)")
                return
            }
            #expect(error.isRetryable)
        }
        #expect(clock.now - start < .seconds(10))
        try await server.waitFor(key: key, event: "departed", count: 1)
    }

    @Test func requestTimeoutCapsTheWholeRequest() async throws {
        let server = try Fixtures.http.get()
        let transport = try makeTransport { $0.requestTimeout = .milliseconds(300) }
        defer { transport.shutdown() }

        do {
            let response = try await transport.send(HTTPRequest(method: .get, url: server.url("/stall?key=\(UUID().uuidString)")))
            Issue.record("expected a timeout, got status \(response.status)")
        } catch {
            guard case .timedOut = error else {
                Issue.record("expected timedOut, got \(error)")
                return
            }
        }
    }

    // MARK: One request on the calling thread

    /// `BlockingHTTPClient` configures curl as the transport does: the same
    /// headers and exact body reach the server, errors and timeouts read the same.
    @Test func aBlockingClientSendsOneRequestAsTheTransportWould() throws {
        let server = try Fixtures.http.get()
        let client = BlockingHTTPClient()
        let form = "Action=AssumeRole&Version=2011-06-15"
        let response = try client.send(HTTPRequest(
            method: .post, url: server.url("/echo"),
            headers: ["Content-Type": "application/x-www-form-urlencoded", "X-Amz-Date": "20300101T000000Z"],
            body: RequestBody(Array(form.utf8))))
        #expect(response.status == 200)
        let echo = try Echo(response)
        #expect(echo.method == "POST")
        #expect(echo.body == form)
        #expect(echo.header("Content-Length") == String(form.utf8.count))
        #expect(echo.header("X-Amz-Date") == "20300101T000000Z")
        #expect(echo.header("User-Agent") == "xfer/0.1")
        #expect(echo.header("Expect") == nil)

        let put = try client.send(HTTPRequest(method: .put, url: server.url("/echo"), headers: ["X-Token-Ttl": "60"]))
        #expect(try Echo(put).method == "PUT")
        #expect(try Echo(put).length == 0)
    }

    /// What a job reports as sent is what curl took to send: an attempt
    /// that never connected counts nothing, a body sent counts whole
    /// (inline small bodies and streamed large ones alike).
    @Test func theCounterHearsOfBytesCurlSentOnly() async throws {
        let server = try Fixtures.http.get()
        let transport = try makeTransport { $0.maximumResponseBodySize = 8 << 20 }
        defer { transport.shutdown() }
        let port = try #require(Int(try await transport.send(HTTPRequest(method: .get, url: server.url("/unused-port"))).text))
        let counter = TransferByteCounter()
        let large = [UInt8](repeating: 7, count: 2 << 20)
        await #expect(throws: TransportError.self) {
            try await transport.send(
                HTTPRequest(method: .put, url: "http://127.0.0.1:\(port)/x", body: RequestBody(large)), counting: counter)
        }
        await #expect(throws: TransportError.self) {
            try await transport.send(
                HTTPRequest(method: .put, url: "http://127.0.0.1:\(port)/x", body: RequestBody(Array("abc".utf8))), counting: counter)
        }
        #expect(counter.value == 0, "neither a streamed nor an inline body reached the wire")
        _ = try await transport.send(HTTPRequest(method: .patch, url: server.url("/mirror"), body: RequestBody(large)), counting: counter)
        _ = try await transport.send(HTTPRequest(method: .post, url: server.url("/echo"), body: RequestBody(Array("a=b".utf8))), counting: counter)
        #expect(counter.value == large.count + 3)
    }

    @Test func aBlockingClientFailsAsTheTransportDoes() async throws {
        let server = try Fixtures.http.get()
        let transport = try makeTransport()
        defer { transport.shutdown() }
        let port = try #require(Int(try await transport.send(HTTPRequest(method: .get, url: server.url("/unused-port"))).text))
        #expect(throws: TransportError.couldNotConnect(host: "127.0.0.1", port: port, reason: "Connection refused")) {
            try BlockingHTTPClient().send(HTTPRequest(method: .get, url: "http://127.0.0.1:\(port)/x?token=SECRET"))
        }
        var options = TransportOptions()
        options.requestTimeout = .milliseconds(300)
        do {
            let response = try BlockingHTTPClient(options: options).send(
                HTTPRequest(method: .get, url: server.url("/stall?key=\(UUID().uuidString)")))
            Issue.record("expected a timeout, got status \(response.status)")
        } catch {
            guard case .timedOut = error else {
                Issue.record("expected timedOut, got \(error)")
                return
            }
        }
    }

    /// As many requests as one job may keep in flight reach one host at
    /// once: the transport's cap per host used to be 8, below that.
    @Test func asManyRequestsAsAJobMayAskForReachOneHostAtOnce() async throws {
        let server = try Fixtures.http.get()
        let transport = try makeTransport()
        defer { transport.shutdown() }
        let key = UUID().uuidString
        let stalled = (0..<TransferOptions.maximumConcurrency).map { _ in
            Task { try await transport.send(HTTPRequest(method: .get, url: server.url("/stall?key=\(key)"))) }
        }
        try await server.waitFor(key: key, event: "arrived", count: TransferOptions.maximumConcurrency)
        for task in stalled { task.cancel() }
        for task in stalled { _ = await task.result }
    }

    @Test func shutdownFailsInFlightRequestsAndLaterSends() async throws {
        let server = try Fixtures.http.get()
        let transport = try makeTransport()
        let key = UUID().uuidString

        let stalled = (0..<3).map { _ in
            Task { try await transport.send(HTTPRequest(method: .get, url: server.url("/stall?key=\(key)"))) }
        }
        try await server.waitFor(key: key, event: "arrived", count: 3)

        let clock = ContinuousClock()
        let start = clock.now
        transport.shutdown()
        for task in stalled {
            #expect(transportError(await task.result) == .cancelled)
        }
        #expect(clock.now - start < .seconds(5))
        try await server.waitFor(key: key, event: "departed", count: 3)

        transport.shutdown()
        do {
            let response = try await transport.send(HTTPRequest(method: .get, url: server.url("/echo")))
            Issue.record("expected cancelled after shutdown, got status \(response.status)")
        } catch {
            #expect(error == .cancelled)
        }
    }

    // MARK: TLS

    @Test(.enabled(if: Fixtures.canMakeCertificates))
    func tlsIsVerifiedByDefault() async throws {
        let server = try Fixtures.https.get()
        let strict = try makeTransport()
        defer { strict.shutdown() }
        do {
            let response = try await strict.send(HTTPRequest(method: .get, url: server.url("/echo")))
            Issue.record("expected a TLS failure for a self-signed certificate, got status \(response.status)")
        } catch {
            guard case .tls = error else {
                Issue.record("expected tls, got \(error)")
                return
            }
            #expect(!error.isRetryable)
        }

        let trusting = try makeTransport { $0.caCertificatePath = server.certificatePath }
        defer { trusting.shutdown() }
        #expect(try await trusting.send(HTTPRequest(method: .get, url: server.url("/echo"))).status == 200)

        let unverified = try makeTransport { $0.verifyTLS = false }
        defer { unverified.shutdown() }
        #expect(try await unverified.send(HTTPRequest(method: .get, url: server.url("/echo"))).status == 200)
    }

    // MARK: The engine's requests outside any job

    /// `TransferEngine.send` (xfer uploads' requests) retries as a job's
    /// steps do: a transient answer again, each attempt built afresh, until
    /// the policy gives up; a refusal at once.
    @Test func engineRequestsOutsideJobsAreRetriedAsAJobsAre() async throws {
        let server = try Fixtures.http.get()
        let directory = TemporaryDirectory("xfer-send")
        let engine = try TransferEngine(stateDirectory: directory.path)
        // No waiting: the fixture's Retry-After (7 s) is capped to nothing.
        let policy = RetryPolicy(maximumAttempts: 3, initialDelay: .zero, maximumRetryAfter: .zero)
        func exchange(_ code: Int) -> Exchange<Int> {
            Exchange(HTTPRequest(method: .get, url: server.url("/status?code=\(code)"))) { response throws(BackendError) in
                switch response.status {
                case 503: throw .transient("ask: HTTP 503")
                case 403: throw .rejected("ask: HTTP 403")
                default: return response.status
                }
            }
        }
        var built = 0
        var retries: [Int] = []
        await #expect(throws: XferError.transferFailed("ask: HTTP 503 (gave up after 3 attempts)")) {
            try await engine.send("ask", retry: policy, onRetry: { attempt, _, _ in retries.append(attempt) }) { () throws(BackendError) in
                built += 1
                return exchange(503)
            }
        }
        #expect(built == 3)
        #expect(retries == [1, 2])

        built = 0
        await #expect(throws: XferError.transferFailed("ask: HTTP 403")) {
            try await engine.send("ask", retry: policy) { () throws(BackendError) in
                built += 1
                return exchange(403)
            }
        }
        #expect(built == 1)
        #expect(try await engine.send("ask", retry: policy) { () throws(BackendError) in exchange(204) } == 204)
        await #expect(throws: XferError.self) {
            try await engine.send("ask", retry: RetryPolicy(maximumAttempts: 0)) { () throws(BackendError) in exchange(204) }
        }
    }

    /// An exchange with exchanges after it (`Exchange.then`, multipart's sources): each made
    /// from the outcome before it and retried on its own, the last one's outcome returned.
    @Test func engineRequestsFollowTheExchangesAfterThemEachRetriedOnItsOwn() async throws {
        let server = try Fixtures.http.get()
        let directory = TemporaryDirectory("xfer-send-then")
        let engine = try TransferEngine(stateDirectory: directory.path)
        let policy = RetryPolicy(maximumAttempts: 3, initialDelay: .zero, maximumRetryAfter: .zero)
        @Sendable func ask(_ code: Int) -> HTTPRequest { HTTPRequest(method: .get, url: server.url("/status?code=\(code)")) }
        let secondMade = Mutex(0)
        var firstMade = 0
        let statuses = try await engine.send("ask", retry: policy) { () throws(BackendError) -> Exchange<[Int]> in
            firstMade += 1
            var first = Exchange(ask(200)) { response throws(BackendError) in [response.status] }
            first.then = { got throws(BackendError) in
                // The second request fails once (transient), then answers.
                let attempt = secondMade.withLock { count in
                    count += 1
                    return count
                }
                var second = Exchange(ask(attempt == 1 ? 503 : 201)) { response throws(BackendError) in
                    if response.status == 503 { throw .transient("ask: HTTP 503") }
                    return got + [response.status]
                }
                second.then = { got throws(BackendError) in .answer(got + [0]) }
                return .send(second)
            }
            return first
        }
        #expect(statuses == [200, 201, 0])
        #expect(firstMade == 1, "the first request is not sent again for the second's failure")
        #expect(secondMade.withLock { $0 } == 2)
    }

    // MARK: Pure values

    @Test func errorsDescribeThemselvesOnOneLine() {
        #expect(TransportError.couldNotResolve(host: "example.invalid").description == "could not resolve host example.invalid")
        #expect(TransportError.responseTooLarge(limit: 10).description == "response body larger than 10 bytes")
        #expect(TransportError.cancelled.description == "request cancelled")
        #expect(TransportError.timedOut("x").isRetryable)
        #expect(TransportError.network("x").isRetryable)
        #expect(TransportError.couldNotResolve(host: "h").isRetryable)
        #expect(!TransportError.tls("x").isRetryable)
        #expect(!TransportError.invalidURL("x").isRetryable)
        #expect(!TransportError.cancelled.isRetryable)
    }

    @Test func durationsRoundUpForCurl() {
        #expect(Duration.seconds(15).roundedUpMilliseconds == 15_000)
        #expect(Duration.microseconds(1).roundedUpMilliseconds == 1)
        #expect(Duration.zero.roundedUpMilliseconds == 0)
        #expect(Duration.milliseconds(1500).roundedUpSeconds == 2)
        #expect(Duration.seconds(30).roundedUpSeconds == 30)
    }

    @Test func bodySeekingRewindsAcrossSegments() {
        let request = HTTPRequest(method: .put, url: "http://h/", body: RequestBody(chunk: ChunkPayload(index: 0, offset: 0, bytes: []), before: [1, 2], after: [3, 4, 5]))
        let context = TransferContext(request: request, id: 1, responseLimit: 0, bodyBytesSent: TransferByteCounter())
        var buffer = [UInt8](repeating: 0, count: 4)
        let firstRead = buffer.withUnsafeMutableBytes { context.readBody(into: $0) }
        #expect(firstRead == .bytes(4))
        #expect(buffer == [1, 2, 3, 4])
        #expect(context.seekBody(to: 3))
        let secondRead = buffer.withUnsafeMutableBytes { context.readBody(into: $0) }
        #expect(secondRead == .bytes(2))
        #expect(buffer.prefix(2) == [4, 5])
        #expect(context.seekBody(to: 5))
        #expect(buffer.withUnsafeMutableBytes { context.readBody(into: $0) } == .bytes(0))
        #expect(!context.seekBody(to: 6))
    }

    /// Under a rate limit the body goes out only as far as the allowance
    /// granted; without one the request pauses and joins the budget's queue.
    @Test func throttledBodyReadsPauseWithoutAllowance() {
        let request = HTTPRequest(method: .put, url: "http://h/", body: RequestBody(chunk: ChunkPayload(index: 0, offset: 0, bytes: [1, 2, 3, 4, 5, 6]), before: [], after: []))
        let throttle = SendThrottle(rate: 1 << 20)
        let sent = TransferByteCounter()
        let context = TransferContext(request: request, id: 7, responseLimit: 0, bodyBytesSent: sent, throttle: throttle)
        var buffer = [UInt8](repeating: 0, count: 8)
        #expect(buffer.withUnsafeMutableBytes { context.readBody(into: $0) } == .paused)
        #expect(throttle.budget.isAnyoneWaiting)
        let grants = throttle.budget.grants(at: .now)
        #expect(grants == [SendBudget.Grant(request: 7, bytes: 6)], "a grant is never more than the body still needs")
        context.allowance = 4
        #expect(buffer.withUnsafeMutableBytes { context.readBody(into: $0) } == .bytes(4))
        #expect(buffer.prefix(4) == [1, 2, 3, 4])
        #expect(buffer.withUnsafeMutableBytes { context.readBody(into: $0) } == .paused)
        context.allowance = 10
        #expect(buffer.withUnsafeMutableBytes { context.readBody(into: $0) } == .bytes(2))
        #expect(buffer.withUnsafeMutableBytes { context.readBody(into: $0) } == .bytes(0), "the end of the body needs no allowance")
        #expect(sent.value == 6)
    }
}

// MARK: - Helpers

enum FileMischief: Sendable, CustomStringConvertible {
    case truncate, overwrite
    var description: String { self == .truncate ? "truncated" : "overwritten" }
}

/// A real file whose bytes are changed on disk right after its first read,
/// as by another program while a chunk of it is sent.
private final class MeddledFile: BodyFile, @unchecked Sendable {
    // @unchecked: `done` is only touched on the transport's loop thread.
    private let file: LocalFile
    private let mischief: FileMischief
    private var done = false

    init(_ file: LocalFile, mischief: FileMischief) {
        self.file = file
        self.mischief = mischief
    }

    var path: String { file.path }

    func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws(XferError) -> Int {
        let count = try file.read(into: buffer, at: offset)
        if !done {
            done = true
            let handle = FileHandle(forWritingAtPath: file.path)!
            switch mischief {
            case .truncate: try? handle.truncate(atOffset: 4096)
            case .overwrite:
                try? handle.seek(toOffset: UInt64(1 << 20))
                handle.write(Data(repeating: 0x00, count: 16))
            }
            try? handle.close()
        }
        return count
    }

    func checkUnchanged() throws(XferError) { try file.checkUnchanged() }
}

/// A real file that counts the bytes read from it.
private final class CountedFile: BodyFile, Sendable {
    private let file: LocalFile
    let bytesRead = Atomic<Int>(0)

    init(_ file: LocalFile) { self.file = file }

    var path: String { file.path }

    func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws(XferError) -> Int {
        let count = try file.read(into: buffer, at: offset)
        bytesRead.add(count, ordering: .relaxed)
        return count
    }

    func checkUnchanged() throws(XferError) { try file.checkUnchanged() }
}

/// A new file of `size` bytes in the temporary directory; the caller removes it.
private func temporaryFile(_ name: String, size: Int) -> String {
    let path = FileManager.default.temporaryDirectory.appendingPathComponent("xfer-\(name)-\(UUID().uuidString)").path
    FileManager.default.createFile(atPath: path, contents: Data(repeating: 0x5A, count: size))
    return path
}

private func makeTransport(_ configure: (inout TransportOptions) -> Void = { _ in }) throws -> HTTPTransport {
    var options = TransportOptions()
    configure(&options)
    return try HTTPTransport(options: options)
}

private func transportError(_ result: Result<HTTPResponse, any Error>) -> TransportError? {
    guard case .failure(let error) = result else { return nil }
    return error as? TransportError
}

/// What the fixture's /echo route saw.
private struct Echo: Decodable {
    var method: String
    var path: String
    var headers: [[String]]
    var length: Int
    var body: String
    var clientPort: Int

    init(_ response: HTTPResponse) throws {
        self = try JSONDecoder().decode(Echo.self, from: Data(response.body))
    }

    func header(_ name: String) -> String? {
        headers.first { $0.first?.lowercased() == name.lowercased() }?.last
    }
}

/// A deterministic generator, so a failing body comparison can be replayed.
private struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

private enum Fixtures {
    static let http = Result { try FixtureServer.start() }

    static let canMakeCertificates = FileManager.default.isExecutableFile(atPath: "/usr/bin/openssl")

    static let https = Result { () throws -> FixtureServer in
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("xfer-transport-tests-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let certificate = directory.appendingPathComponent("cert.pem").path
        let key = directory.appendingPathComponent("key.pem").path
        let openssl = Process()
        openssl.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        openssl.arguments = [
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", key, "-out", certificate, "-days", "2",
            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
        ]
        openssl.standardOutput = FileHandle.nullDevice
        openssl.standardError = FileHandle.nullDevice
        try openssl.run()
        openssl.waitUntilExit()
        guard openssl.terminationStatus == 0 else { throw FixtureError.certificateGenerationFailed }
        return try FixtureServer.start(tls: (certificate: certificate, key: key))
    }
}

private enum FixtureError: Error {
    case serverDidNotStart
    case certificateGenerationFailed
    case awaitTimedOut(String)
}

/// A Python HTTP server on 127.0.0.1, port chosen by the OS. It exits when
/// its stdin closes, i.e. when the test process ends.
///
/// `@unchecked Sendable`: every property is immutable after `start`; the
/// process and pipe are held only to keep the child's stdin open.
private final class FixtureServer: @unchecked Sendable {
    let port: Int
    let scheme: String
    let certificatePath: String?
    private let process: Process
    private let stdin: Pipe

    private init(port: Int, scheme: String, certificatePath: String?, process: Process, stdin: Pipe) {
        self.port = port
        self.scheme = scheme
        self.certificatePath = certificatePath
        self.process = process
        self.stdin = stdin
    }

    func url(_ pathAndQuery: String) -> String {
        "\(scheme)://127.0.0.1:\(port)\(pathAndQuery)"
    }

    /// Returns once the server has seen `count` `event`s ("arrived" or
    /// "departed") of /stall requests tagged `key`. Uses its own transport
    /// with default options, so the one under test cannot disturb the wait.
    func waitFor(key: String, event: String, count: Int) async throws {
        let observer = try makeTransport()
        defer { observer.shutdown() }
        let response = try await observer.send(HTTPRequest(
            method: .get, url: url("/await?key=\(key)&event=\(event)&count=\(count)")
        ))
        guard response.status == 200 else { throw FixtureError.awaitTimedOut("\(event) \(count)") }
    }

    static func start(tls: (certificate: String, key: String)? = nil) throws -> FixtureServer {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "-u", "-c", fixtureScript] + (tls.map { [$0.certificate, $0.key] } ?? [])
        let stdin = Pipe()
        let stdout = Pipe()
        process.standardInput = stdin
        process.standardOutput = stdout
        try process.run()

        var output = Data()
        while !output.contains(UInt8(ascii: "\n")) {
            let chunk = stdout.fileHandleForReading.availableData
            guard !chunk.isEmpty else { throw FixtureError.serverDidNotStart }
            output.append(chunk)
        }
        let line = String(decoding: output, as: UTF8.self).split(separator: "\n").first ?? ""
        guard let port = Int(line.trimmingCharacters(in: .whitespaces)) else { throw FixtureError.serverDidNotStart }
        return FixtureServer(
            port: port, scheme: tls == nil ? "http" : "https", certificatePath: tls?.certificate,
            process: process, stdin: stdin
        )
    }
}

private let fixtureScript = #"""
import hashlib, json, os, select, socket, ssl, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit, parse_qs

events = {}
condition = threading.Condition()

def note(key, event):
    with condition:
        events[(key, event)] = events.get((key, event), 0) + 1
        condition.notify_all()

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, body=b"", headers=()):
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def handle_any(self):
        url = urlsplit(self.path)
        query = {name: values[0] for name, values in parse_qs(url.query).items()}
        if self.headers.get("Transfer-Encoding"):
            self.reply(400, b"unexpected Transfer-Encoding")
            self.close_connection = True
            return
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        route = url.path
        if route == "/echo":
            document = {
                "method": self.command, "path": self.path, "headers": self.headers.items(),
                "length": len(body), "sha256": hashlib.sha256(body).hexdigest(),
                "clientPort": self.client_address[1], "body": body.decode("utf-8", "replace"),
            }
            self.reply(200, json.dumps(document).encode(), [("Content-Type", "application/json")])
        elif route == "/mirror":
            self.reply(200, body, [
                ("X-Received-Length", str(len(body))),
                ("X-Saw-Method", self.command),
                ("X-Saw-Expect", self.headers.get("Expect", "")),
                ("X-Saw-Transfer-Encoding", self.headers.get("Transfer-Encoding", "")),
            ])
        elif route == "/status":
            self.reply(int(query["code"]), b"unavailable", [("Retry-After", "7"), ("X-Multi", "a"), ("X-Multi", "b")])
        elif route == "/head":
            self.send_response(200)
            self.send_header("Content-Length", "1234")
            self.send_header("X-Head", "yes")
            self.end_headers()
        elif route == "/bytes":
            self.reply(200, b"x" * int(query["n"]))
        elif route == "/interim":
            self.wfile.write(b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\nX-Interim: yes\r\n\r\n")
            self.reply(200, b"final", [("X-Final", "yes")])
        elif route == "/folded":
            self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Folded: first\r\n   second\r\nX-Spaced: \t padded value  \r\nContent-Length: 2\r\n\r\nok")
        elif route == "/close-after":
            # Answers as if the connection stayed open (no `Connection: close`), then closes it:
            # the client keeps a connection the server has dropped.
            self.reply(200, str(self.client_address[1]).encode())
            self.close_connection = True
        elif route == "/redirect":
            self.reply(302, b"", [("Location", "/echo")])
        elif route == "/stall":
            # Never answers; returns when the client goes away (or after 120 s).
            key = query["key"]
            note(key, "arrived")
            try:
                while True:
                    readable, _, _ = select.select([self.connection], [], [], 120)
                    if not readable or not self.connection.recv(65536):
                        break
            except OSError:
                pass
            note(key, "departed")
            self.close_connection = True
        elif route == "/await":
            key, event, count = query["key"], query["event"], int(query["count"])
            with condition:
                seen = condition.wait_for(lambda: events.get((key, event), 0) >= count, timeout=30)
            self.reply(200 if seen else 504, b"seen" if seen else b"not seen")
        elif route == "/unused-port":
            probe = socket.socket()
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
            probe.close()
            self.reply(200, str(port).encode())
        else:
            self.reply(404, b"no such route")

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = handle_any

class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

server = Server(("127.0.0.1", 0), Handler)
if len(sys.argv) > 2:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(sys.argv[1], sys.argv[2])
    server.socket = context.wrap_socket(server.socket, server_side=True)
print(server.server_address[1], flush=True)

def exit_with_parent():
    sys.stdin.buffer.read()
    os._exit(0)

threading.Thread(target=exit_with_parent, daemon=True).start()
server.serve_forever()
"""#
