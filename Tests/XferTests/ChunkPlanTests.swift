import XCTest

@testable import Xfer

final class ChunkPlanTests: XCTestCase {
    func testExactMultipleHasNoShortChunk() {
        let plan = ChunkPlan(fileSize: 4 << 20, chunkSize: 1 << 20)
        XCTAssertEqual(plan.count, 4)
        XCTAssertEqual(plan.length(of: 3), 1 << 20)
        XCTAssertEqual(plan.range(of: 3), Int64(3 << 20)..<Int64(4 << 20))
    }

    func testLastChunkHoldsTheRest() {
        let plan = ChunkPlan(fileSize: 10, chunkSize: 4)
        XCTAssertEqual(plan.count, 3)
        XCTAssertEqual((0..<3).map(plan.length(of:)), [4, 4, 2])
        XCTAssertEqual((0..<3).map(plan.offset(of:)), [0, 4, 8])
    }

    func testEmptyFile() {
        XCTAssertEqual(ChunkPlan(fileSize: 0, chunkSize: 4).count, 0)
        let announced = ChunkPlan(fileSize: 0, chunkSize: 4, emptyFileHasOneChunk: true)
        XCTAssertEqual(announced.count, 1)
        XCTAssertEqual(announced.length(of: 0), 0)
    }

    func testChunksCoverTheFileWithoutGapsOrOverlap() {
        for (size, chunk) in [(1, 1), (7, 3), (1_000_003, 65_536), (64 << 30, 64 << 10)] as [(Int64, Int)] {
            let plan = ChunkPlan(fileSize: size, chunkSize: chunk)
            XCTAssertEqual(plan.offset(of: 0), 0)
            XCTAssertEqual(plan.range(of: plan.count - 1).upperBound, size)
            if plan.count > 1 {
                XCTAssertEqual(plan.range(of: 0).upperBound, plan.range(of: 1).lowerBound)
            }
        }
    }

    func testHugeFileCountDoesNotOverflow() {
        let plan = ChunkPlan(fileSize: 64 << 30, chunkSize: 64 << 10)
        XCTAssertEqual(plan.count, 1_048_576)
    }
}

final class ChunkSetTests: XCTestCase {
    func testInsertRemoveAndMissing() {
        var set = ChunkSet(capacity: 130)
        XCTAssertEqual(set.firstMissing(), 0)
        for i in 0..<130 where i != 64 && i != 129 { set.insert(i) }
        XCTAssertEqual(set.count, 128)
        XCTAssertEqual(set.missing, [64, 129])
        XCTAssertEqual(set.firstMissing(from: 65), 129)
        set.insert(64)
        set.insert(129)
        XCTAssertTrue(set.isComplete)
        XCTAssertNil(set.firstMissing())
        set.remove(0)
        XCTAssertEqual(set.firstMissing(), 0)
    }

    func testSegmentsRoundTrip() {
        var set = ChunkSet(capacity: 20_000)
        for i in stride(from: 0, to: 20_000, by: 7) { set.insert(i) }
        var copy = ChunkSet(capacity: 20_000)
        for segment in 0..<set.segmentCount {
            copy.loadSegment(segment, from: set.segmentBytes(segment))
        }
        XCTAssertEqual(copy, set)
    }

    func testCorruptSegmentCannotMarkChunksBeyondCapacity() {
        var set = ChunkSet(capacity: 10)
        set.loadSegment(0, from: [UInt8](repeating: 0xff, count: 1024))
        XCTAssertEqual(set.count, 10)
        XCTAssertTrue(set.isComplete)
    }
}

final class RetryPolicyTests: XCTestCase {
    func testDelaysGrowExponentiallyUpToTheCap() {
        let policy = RetryPolicy(maximumAttempts: 10, initialDelay: .milliseconds(100), maximumDelay: .seconds(2))
        XCTAssertEqual(policy.delay(after: 1, unit: 1), .milliseconds(100))
        XCTAssertEqual(policy.delay(after: 2, unit: 1), .milliseconds(200))
        XCTAssertEqual(policy.delay(after: 4, unit: 1), .milliseconds(800))
        XCTAssertEqual(policy.delay(after: 9, unit: 1), .seconds(2))
    }

    func testJitterStaysWithinTheBound() {
        let policy = RetryPolicy(initialDelay: .milliseconds(100))
        XCTAssertEqual(policy.delay(after: 3, unit: 0), .zero)
        XCTAssertEqual(policy.delay(after: 3, unit: 0.5), .milliseconds(200))
        for _ in 0..<100 {
            let delay = policy.delay(after: 3)
            XCTAssertGreaterThanOrEqual(delay, .zero)
            XCTAssertLessThanOrEqual(delay, .milliseconds(400))
        }
    }

    func testRetryAfterWinsButIsCapped() {
        let policy = RetryPolicy(maximumRetryAfter: .seconds(60))
        XCTAssertEqual(policy.delay(after: 1, retryAfter: .seconds(7), unit: 0.1), .seconds(7))
        XCTAssertEqual(policy.delay(after: 1, retryAfter: .seconds(86_400), unit: 0.1), .seconds(60))
    }

    /// A retry's reason says why, not what again: "send chunk 8/10 of f.bin:
    /// send chunk 8/10 of f.bin: could not connect" was the printed line.
    func testTheRetryReasonDoesNotRepeatTheOperation() async throws {
        let operation = "send chunk 8/10 of f.bin"
        let policy = RetryPolicy(maximumAttempts: 3, initialDelay: .milliseconds(1), maximumDelay: .milliseconds(1))
        var reasons: [String] = []
        var attempts = 0
        let value = try await RetryLoop.run(operation, policy: policy, onRetry: { _, _, reason in reasons.append(reason) }) {
            attempts += 1
            switch attempts {
            case 1: throw BackendError.transient("\(operation): could not connect")
            case 2: throw BackendError.transient("the server is busy")
            default: return 7
            }
        }
        XCTAssertEqual(value, 7)
        XCTAssertEqual(reasons, ["could not connect", "the server is busy"])
    }

    func testAttemptCap() {
        let policy = RetryPolicy(maximumAttempts: 3)
        XCTAssertTrue(policy.allowsRetry(after: 1))
        XCTAssertTrue(policy.allowsRetry(after: 2))
        XCTAssertFalse(policy.allowsRetry(after: 3))
        XCTAssertFalse(RetryPolicy(maximumAttempts: 0).allowsRetry(after: 1))
    }

    func testRetryAfterHeaderParsing() {
        XCTAssertEqual(HTTPResponse(status: 429, headers: ["Retry-After": "3"]).retryAfter, .seconds(3))
        XCTAssertNil(HTTPResponse(status: 429, headers: ["Retry-After": "soon"]).retryAfter)
        let past = HTTPResponse(status: 503, headers: ["Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"])
        XCTAssertEqual(past.retryAfter, .zero)
    }

    func testStatusClassification() {
        func kind(_ status: Int) -> String {
            do {
                try HTTPResponse(status: status).require(200, for: "x")
                return "ok"
            } catch {
                if case .transient = error { return "transient" }
                return "rejected"
            }
        }
        XCTAssertEqual(kind(200), "ok")
        XCTAssertEqual(kind(503), "transient")
        XCTAssertEqual(kind(500), "transient")
        XCTAssertEqual(kind(408), "transient")
        XCTAssertEqual(kind(429), "transient")
        XCTAssertEqual(kind(400), "rejected")
        XCTAssertEqual(kind(403), "rejected")
        XCTAssertEqual(kind(204), "rejected", "only the statuses listed")
    }

    /// A 413 names what was too large (the body: its chunk), besides the server's words.
    func testATooLargeBodyIsNamed() {
        let refusal = HTTPResponse(status: 413, headers: ["Content-Type": "text/plain"], body: Array("Request Entity Too Large".utf8))
            .unexpectedStatus("send chunk 1/3 of a.bin")
        guard case .rejected(let message, _) = refusal else { return XCTFail("\(refusal)") }
        XCTAssertEqual(
            message,
            "send chunk 1/3 of a.bin: HTTP 413, the server refuses a request body this large: Request Entity Too Large")
    }

    /// `require` looks at the status alone: a 204 with no body passes when 204 is listed.
    func testRequireAcceptsAListedStatusWhateverTheBody() throws {
        XCTAssertNoThrow(try HTTPResponse(status: 204, body: []).require(200, 204, for: "x"))
        XCTAssertNoThrow(try HTTPResponse(status: 200, body: Array("not json".utf8)).require(200, for: "x"))
    }
}
