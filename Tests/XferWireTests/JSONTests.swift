import Foundation
import XCTest

@testable import XferWire

final class JSONTests: XCTestCase {
    private func parse(_ text: String) throws -> JSONValue { try JSONValue.parse(Array(text.utf8)) }

    func testReadsEveryKindOfValue() throws {
        let value = try parse(
            #" { "uploadId" : "u-1", "chunkSize": 1048576, "received": [1, 2 ,3], "ok": true, "no": false, "none": null, "#
                + #""ratio": -0.5e2, "nested": {"a": [[], {}]} } "#)
        XCTAssertEqual(value["uploadId"], "u-1")
        XCTAssertEqual(value["chunkSize"]?.intValue, 1_048_576)
        XCTAssertEqual(value["received"]?.arrayValue?.compactMap(\.intValue), [1, 2, 3])
        XCTAssertEqual(value["ok"], .bool(true))
        XCTAssertEqual(value["no"], .bool(false))
        XCTAssertEqual(value["none"], .null)
        XCTAssertEqual(value["ratio"], .number(-50))
        XCTAssertEqual(value["nested"], .object(["a": .array([.array([]), .object([:])])]))
        XCTAssertEqual(try parse("0"), .number(0))
        XCTAssertEqual(try parse("\"\""), .string(""))
    }

    func testDecodesEscapesAndUnicode() throws {
        XCTAssertEqual(try parse(#""a\"b\\c\/d\b\f\n\r\t""#), .string("a\"b\\c/d\u{8}\u{c}\n\r\t"))
        XCTAssertEqual(try parse(#""\u00e9t\u00C9 ü""#), .string("étÉ ü"))
        XCTAssertEqual(try parse(#""\ud83d\ude00""#), .string("😀"), "a surrogate pair is one scalar")
        // What JSONValue writes, it reads back.
        let text: JSONValue = ["name": "naïve \"vidéo\"\n视频", "n": 12, "list": .array([.bool(true), .null, .number(1.5)])]
        XCTAssertEqual(try JSONValue.parse(text.encoded), text)
    }

    func testRefusesWhatIsNotJSON() {
        let bad = [
            "", " ", "{", "}", "[1,]", "{\"a\":1,}", "{\"a\" 1}", "{a:1}", "[1 2]", "01", "1.", ".5", "1e", "-", "+1",
            "tru", "nul", "\"open", "\"bad \\x escape\"", "\"\\ud83d alone\"", "\"\\udc00\"", "\"\\u12\"", "1 2",
            "\"tab\tinside\"", "NaN", "[1]x",
        ]
        for text in bad {
            XCTAssertThrowsError(try parse(text), "'\(text)' is not JSON")
        }
        XCTAssertThrowsError(try JSONValue.parse([0x22, 0xFF, 0x22]), "invalid UTF-8")
    }

    func testDeepNestingIsRefusedNotACrash() throws {
        let deep = String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
        XCTAssertThrowsError(try parse(deep))
        let fine = String(repeating: "[", count: 100) + String(repeating: "]", count: 100)
        XCTAssertNoThrow(try parse(fine))
    }
}

/// What the one reader refuses besides RFC 8259, and the writer's two encodings.
final class JSONLimitsTests: XCTestCase {
    func testRepeatedNamesAndHugeNumbersAreRefused() {
        XCTAssertThrowsError(try JSONValue.parse(#"{"a":1,"a":2}"#), "which one a reader keeps differs")
        XCTAssertThrowsError(try JSONValue.parse("1e999"))
        XCTAssertThrowsError(try JSONValue.parse("-1e999"))
        XCTAssertEqual(try JSONValue.parse("1e308"), .number(1e308))
        XCTAssertNil(try JSONValue.parse("1e300").intValue, "a finite number past Int is no integer")
        XCTAssertNil(try JSONValue.parse("9007199254740993").strictInteger, "past 2^53 a Double is not exact")
        XCTAssertEqual(try JSONValue.parse("-42").strictInteger, -42)
        // Integers up to 15 digits are summed from their digits, longer ones read as Doubles:
        // both must give what `Double(text)` gives.
        for text in ["0", "-0", "7", "-123456789012345", "999999999999999", "1000000000000000", "12345678901234567890", "-9007199254740993"] {
            XCTAssertEqual(try JSONValue.parse(text), .number(Double(text)!), text)
        }
        XCTAssertNil(try JSONValue.parse("\"42\"").strictInteger)
        XCTAssertEqual(try JSONValue.parse("\"42\"").intValue, 42)
    }

    func testVeryLongInputIsReadOrRefusedWithoutTrouble() throws {
        let long = "\"" + String(repeating: "a", count: 4_000_000) + "\""
        XCTAssertEqual(try JSONValue.parse(long).stringValue?.count, 4_000_000)
        XCTAssertThrowsError(try JSONValue.parse(String(repeating: "{\"a\":", count: 300_000)))
        XCTAssertThrowsError(try JSONValue.parse(String(repeating: "1", count: 1_000_000) + "x"))
        let array = "[" + Array(repeating: "1", count: 100_000).joined(separator: ",") + "]"
        XCTAssertEqual(try JSONValue.parse(array).arrayValue?.count, 100_000)
    }

    func testTheWritersEncodings() throws {
        let value: JSONValue = ["b": "é/\u{1}\n\"\\", "a": [.null, true, .number(1.5), -3, .number(1e20)]]
        let ascii = value.text(.ascii)
        XCTAssertEqual(ascii, #"{"a":[null,true,1.5,-3,1e+20],"b":"\u00e9/\u0001\n\"\\"}"#)
        XCTAssertTrue(ascii.utf8.allSatisfy { $0 < 0x80 })
        XCTAssertEqual(value.text(.utf8), #"{"a":[null,true,1.5,-3,1e+20],"b":"é/\u0001\n\"\\"}"#)
        XCTAssertEqual(try JSONValue.parse(ascii), value)
        XCTAssertEqual(try JSONValue.parse(value.text(.utf8)), value)
        XCTAssertEqual(JSONValue.number(.infinity).text(), "null", "JSON has no infinity")
        var emoji = ""
        JSONValue.writeString("😀", into: &emoji)
        XCTAssertEqual(emoji, #""\ud83d\ude00""#)
    }

    /// The receiver writes a million chunk numbers digit by digit; they must read as `String(n)` does.
    func testDecimalsMatchTheStandardLibrary() {
        for value in [0, 1, 9, 10, 99, 100, 524_288, 1_000_000, Int.max, -1, -10, Int.min + 1, Int.min] {
            var writer = JSONWriter()
            writer.integer(value)
            XCTAssertEqual(String(decoding: writer.bytes, as: UTF8.self), String(value))
        }
        var writer = JSONWriter()
        writer.array(of: [1, 2, 3])
        writer.array(ofRuns: [1...5, 7...7])
        XCTAssertEqual(String(decoding: writer.bytes, as: UTF8.self), "[1,2,3][[1,5],[7,7]]")
    }
}
