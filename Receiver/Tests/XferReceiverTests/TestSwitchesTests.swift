import XCTest
import XferReceiver
@testable import XferReceiverTesting

/// The test switches live in XferReceiverTesting and are checked when a receiver is made from them.
final class TestSwitchesTests: XCTestCase {
    func testAHoldOrStallThatNamesNoPathIsRefusedInTheOptionsWords() {
        var switches = ReceiverTestSwitches()
        switches.holds = ["upload@3"]
        XCTAssertThrowsError(try Receiver(configuration: ReceiverConfiguration(root: "/tmp/unused"), testing: switches)) { error in
            XCTAssertEqual(String(describing: error), "--hold expects /PATH or /PATH@N, not 'upload@3'")
        }
        switches.holds = ["/upload@3"]
        switches.stalls = ["/upload@0"]
        XCTAssertThrowsError(try Receiver(configuration: ReceiverConfiguration(root: "/tmp/unused"), testing: switches)) { error in
            XCTAssertEqual(String(describing: error), "--stall expects /PATH or /PATH@N, not '/upload@0'")
        }
        switches.stalls = ["/uploads/*@2"]
        XCTAssertNoThrow(try Receiver(configuration: ReceiverConfiguration(root: "/tmp/unused"), testing: switches))
    }

    /// A `*` at the end matches every path it begins; elsewhere, any characters within one segment.
    func testAStarMatchesARestOrPartOfOneSegment() throws {
        let chunk = try XCTUnwrap(HoldRule("/uploads/ab*/chunks/3@1"))
        XCTAssertTrue(chunk.matches("/uploads/ab/chunks/3"))
        XCTAssertTrue(chunk.matches("/uploads/ab0123456789/chunks/3"))
        XCTAssertFalse(chunk.matches("/uploads/abc/x/chunks/3"))
        XCTAssertFalse(chunk.matches("/uploads/abc/chunks/33"))
        XCTAssertFalse(chunk.matches("/uploads/xb/chunks/3"))
        XCTAssertTrue(try XCTUnwrap(HoldRule("/files/*")).matches("/files/x/y"))
        XCTAssertNil(HoldRule("/a*/b*"))
    }

    /// Runs repeat: the decisions are a function of seed and request number.
    func testFaultPlanIsDeterministicAndKeepsItsProportions() throws {
        let spec = "503=0.2,reset=0.1"
        let plan = try XCTUnwrap(FaultPlan(spec, seed: 7))
        let decisions = (0..<UInt64(20_000)).map { plan.fault(forRequest: $0) }
        let again = try XCTUnwrap(FaultPlan(spec, seed: 7))
        let other = try XCTUnwrap(FaultPlan(spec, seed: 8))
        XCTAssertEqual(decisions, (0..<UInt64(20_000)).map { again.fault(forRequest: $0) })
        XCTAssertNotEqual(decisions, (0..<UInt64(20_000)).map { other.fault(forRequest: $0) })
        XCTAssertEqual(Double(decisions.filter { $0 == .unavailable }.count) / 20_000, 0.2, accuracy: 0.02)
        XCTAssertEqual(Double(decisions.filter { $0 == .reset }.count) / 20_000, 0.1, accuracy: 0.02)
        XCTAssertEqual(Double(decisions.filter { $0 == nil }.count) / 20_000, 0.7, accuracy: 0.02)
    }
}
