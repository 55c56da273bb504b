import Foundation
import XCTest
import XferPrimitives

/// The string, path, date and process helpers that replaced full Foundation in the shipped
/// modules (issue 44: Foundation's ICU data was most of the static binary). Where Foundation
/// had the same operation, the helper is held to Foundation's answer on the same inputs.
final class FoundationFreePrimitivesTests: XCTestCase {
    // Not "a", "a/" or "//": this toolchain's Foundation traps on the first two in
    // `deletingLastPathComponent` and answers "" for the last (Darwin's answers "/"); those are
    // held to Apple's documented answers below instead.
    private let paths = [
        "", "/", "/a", "/a/", "/a/b", "/a/b/", "a/b", "a/b/c.txt", "/a/b.tar.gz", ".bashrc",
        "/x/.bashrc", "dir/file.", "a.b/c", "/a//b", "./a", "../a/b", "é/ü.txt", "a b/c d.e f",
    ]

    func testPathTextAgreesWithNSString() {
        for path in paths {
            let ns = path as NSString
            XCTAssertEqual(PathText.lastComponent(of: path), ns.lastPathComponent, "lastComponent of '\(path)'")
            XCTAssertEqual(PathText.deletingLastComponent(of: path), ns.deletingLastPathComponent, "deletingLastComponent of '\(path)'")
            XCTAssertEqual(PathText.pathExtension(of: path), ns.pathExtension, "pathExtension of '\(path)'")
            for component in ["db", "x.lock", "locks"] {
                XCTAssertEqual(PathText.appending(component, to: path), ns.appendingPathComponent(component), "'\(path)' + '\(component)'")
            }
        }
        XCTAssertEqual(PathText.deletingLastComponent(of: "a"), "")
        XCTAssertEqual(PathText.deletingLastComponent(of: "a/"), "")
        XCTAssertEqual(PathText.lastComponent(of: "a/"), "a")
        XCTAssertEqual(PathText.lastComponent(of: "//"), "/")
        XCTAssertEqual(PathText.deletingLastComponent(of: "//"), "/")
        XCTAssertEqual(PathText.appending("db", to: "a//"), "a/db")
    }

    func testPercentEncodingRoundTripsAndRefusesWhatFoundationRefuses() {
        let texts = ["plain", "a b", "ü/ß?#%&=+", "日本語", "", "~-._", "100%"]
        for text in texts {
            let encoded = PercentEncoding.encode(text)
            XCTAssertTrue(encoded.utf8.allSatisfy { PercentEncoding.isUnreserved($0) || $0 == UInt8(ascii: "%") }, encoded)
            XCTAssertEqual(PercentEncoding.decode(encoded), text)
            let unreserved = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
            XCTAssertEqual(encoded, text.addingPercentEncoding(withAllowedCharacters: unreserved), text)
        }
        for bad in ["%", "%4", "%zz", "%FF", "%C3", "a%2"] {
            XCTAssertNil(PercentEncoding.decode(bad), bad)
            XCTAssertNil(bad.removingPercentEncoding, "Foundation refuses '\(bad)' too")
        }
        XCTAssertEqual(PercentEncoding.decodeForm("a+b%2Bc"), "a b+c")
    }

    func testTrimmingAndLastRange() {
        XCTAssertEqual(" \t a b \t".trimmingSpacesAndTabs(), "a b")
        XCTAssertEqual("\n a\u{00A0}\r\n".trimmingWhitespace(), "a")
        XCTAssertEqual(" \n\t".trimmingWhitespace(), "")
        XCTAssertEqual("\n x".trimmingSpacesAndTabs(), "\n x", "a line break is not HTTP's optional whitespace")
        let text = "a at b at c"
        XCTAssertEqual(text.lastRange(of: " at ").map { String(text[$0.upperBound...]) }, "c")
        XCTAssertNil(text.lastRange(of: "zz"))
        XCTAssertNil(text.lastRange(of: ""))
        XCTAssertEqual("aaa".lastRange(of: "aa").map { "aaa".distance(from: "aaa".startIndex, to: $0.lowerBound) }, 1)
    }

    func testHTTPDatesInAllThreeFormsAgreeWithFoundation() {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        for text in ["Sun, 06 Nov 1994 08:49:37 GMT", "Tue, 29 Feb 2028 23:59:59 GMT", "Thu, 01 Jan 1970 00:00:00 GMT"] {
            XCTAssertEqual(HTTPAnswerRules.date(text), formatter.date(from: text), text)
        }
        let expected = Date(timeIntervalSince1970: 784_111_777)
        XCTAssertEqual(HTTPAnswerRules.date("Sunday, 06-Nov-94 08:49:37 GMT"), expected)
        XCTAssertEqual(HTTPAnswerRules.date("Sun Nov  6 08:49:37 1994"), expected)
        XCTAssertEqual(HTTPAnswerRules.date("  Sun, 06 Nov 1994 08:49:37 GMT "), expected)
        for bad in [
            "", "Sun, 06 Nov 1994 08:49:37", "Sun, 31 Feb 1994 08:49:37 GMT", "Sun, 06 Foo 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 24:00:00 GMT", "Sun, 6 Nov 1994 08:49:37 GMT", "Sun, 06 Nov 1994 08:49 GMT",
            "Sun, 06 Nov 1994 08:49:37 PST", "tomorrow", String(repeating: "9", count: 100_000),
        ] {
            XCTAssertNil(HTTPAnswerRules.date(bad), bad.prefix(40).description)
        }
        XCTAssertEqual(HTTPAnswerRules.retryAfter("Sun, 06 Nov 1994 08:49:47 GMT", now: expected), .seconds(10))
        XCTAssertEqual(HTTPAnswerRules.retryAfter(" 7 "), .seconds(7))
    }

    func testChildProcessGivesInputAndReadsOutputAndStatus() throws {
        let outcome = try ExternalProgram.run(
            "/bin/sh", arguments: ["-c", "tr a-z A-Z; exit 3"], input: .bytes(Array("hello".utf8)), environment: ["PATH=/usr/bin:/bin"],
            ownProcessGroup: true, timeout: .seconds(30), outputLimit: 1024)
        XCTAssertEqual(String(decoding: outcome.output, as: UTF8.self), "HELLO")
        XCTAssertEqual(outcome.exitStatus, 3)
        XCTAssertNil(outcome.signal)
        XCTAssertFalse(outcome.exceededOutputLimit)
    }

    func testChildProcessPassesOnlyTheEnvironmentItIsGiven() throws {
        setenv("XFER_TEST_SECRET", "s3cr3t", 1)
        defer { unsetenv("XFER_TEST_SECRET") }
        let given = try ExternalProgram.run(
            "/bin/sh", arguments: ["-c", "echo \"[$XFER_TEST_SECRET]\""], input: .bytes([]), environment: [],
            ownProcessGroup: true, timeout: .seconds(30), outputLimit: 1024)
        XCTAssertEqual(String(decoding: given.output, as: UTF8.self), "[]\n")
        let inherited = try ExternalProgram.run(
            "/bin/sh", arguments: ["-c", "echo \"[$XFER_TEST_SECRET]\""], input: .inherited, environment: nil,
            ownProcessGroup: false, timeout: .seconds(30), outputLimit: 1024)
        XCTAssertEqual(String(decoding: inherited.output, as: UTF8.self), "[s3cr3t]\n")
    }

    func testChildProcessIsKilledAtItsDeadlineWithWhatItStarted() {
        let started = ContinuousClock.now
        // The background `sleep` holds the output pipe open: only killing the group ends it.
        XCTAssertThrowsError(
            try ExternalProgram.run(
                "/bin/sh", arguments: ["-c", "sleep 60 & sleep 60"], input: .bytes([]), environment: ["PATH=/usr/bin:/bin"],
                ownProcessGroup: true, timeout: .milliseconds(300), outputLimit: 1024)
        ) { error in
            guard case ExternalProgram.Failure.timedOut = error else { return XCTFail("\(error)") }
        }
        XCTAssertLessThan(ContinuousClock.now - started, .seconds(30))
    }

    func testChildProcessPastItsOutputLimitIsStopped() throws {
        let outcome = try ExternalProgram.run(
            "/bin/sh", arguments: ["-c", "yes xfer"], input: .bytes([]), environment: ["PATH=/usr/bin:/bin"], ownProcessGroup: true,
            timeout: .seconds(60), outputLimit: 4096)
        XCTAssertTrue(outcome.exceededOutputLimit)
        XCTAssertEqual(outcome.output.count, 4096)
        XCTAssertEqual(outcome.signal, SIGKILL)
    }

    func testChildProcessThatCannotStartSaysWhy() {
        XCTAssertThrowsError(
            try ExternalProgram.run(
                "/nonexistent/hook", input: .bytes([]), environment: [], ownProcessGroup: true, timeout: .seconds(5), outputLimit: 16)
        ) { error in
            guard case ExternalProgram.Failure.cannotStart(let reason) = error else { return XCTFail("\(error)") }
            XCTAssertEqual(reason, String(cString: strerror(ENOENT)))
        }
        XCTAssertThrowsError(
            try ExternalProgram.run(
                "/bin/cat", input: .bytes([UInt8](repeating: 0, count: ExternalProgram.inputLimit + 1)), environment: [],
                ownProcessGroup: true, timeout: .seconds(5), outputLimit: 16))
    }

    func testDetachedThreadRuns() {
        let ran = expectation(description: "ran")
        DetachedThread.start { ran.fulfill() }
        wait(for: [ran], timeout: 30)
    }

    func testSystemErrorReasonNamesTheSystemsReason() {
        do {
            _ = try Data(contentsOf: URL(fileURLWithPath: "/nonexistent/file"))
            XCTFail("read a file that does not exist")
        } catch {
            XCTAssertEqual(SystemErrorReason.of(error), String(cString: strerror(ENOENT)))
        }
        XCTAssertEqual(SystemErrorReason.of(POSIXError(.EACCES)), String(cString: strerror(EACCES)))
    }
}
