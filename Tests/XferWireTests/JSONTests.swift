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
