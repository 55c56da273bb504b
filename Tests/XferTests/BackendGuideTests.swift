import Foundation
import XCTest

/// Docs/backend-guide.md shows the example backend in full; this keeps the
/// guide's copy the code that is built and tested.
final class BackendGuideTests: XCTestCase {
    func testTheGuideShowsTheExampleBackendWordForWord() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let guide = try String(contentsOf: root.appendingPathComponent("Docs/backend-guide.md"), encoding: .utf8)
        let code = try String(
            contentsOf: root.appendingPathComponent("Examples/CustomBackend/Sources/CWBackend/CWBackend.swift"), encoding: .utf8)
        let marker = "BackendGuideTests fails when they differ. -->\n```swift\n"
        let start = try XCTUnwrap(guide.range(of: marker), "the guide lost the marker before the example")
        let end = try XCTUnwrap(guide.range(of: "\n```\n", range: start.upperBound..<guide.endIndex))
        XCTAssertEqual(String(guide[start.upperBound..<end.lowerBound]) + "\n", code)
    }
}
