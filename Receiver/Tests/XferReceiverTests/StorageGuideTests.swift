import Foundation
import XCTest

/// Docs/storage-guide.md shows the example storage word for word and names every requirement of
/// the core and every capability: these checks fail when the code grows past it.
final class StorageGuideTests: XCTestCase {
    /// The repository's root (this file is Receiver/Tests/XferReceiverTests/StorageGuideTests.swift).
    private static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent()

    private static func read(_ path: String) throws -> String {
        try String(contentsOf: root.appendingPathComponent(path), encoding: .utf8)
    }

    func testTheGuideShowsTheExampleStorageWordForWord() throws {
        let guide = try Self.read("Docs/storage-guide.md")
        let path = "Receiver/Sources/XferReceiver/Storage/Memory/MemoryStorage.swift"
        let code = try Self.read(path)
        let comment = try XCTUnwrap(guide.range(of: "Memory/MemoryStorage.swift,\n     word for word"), "the guide lost the marker")
        let start = try XCTUnwrap(guide.range(of: "-->\n```swift\n", range: comment.upperBound..<guide.endIndex))
        let end = try XCTUnwrap(guide.range(of: "\n```\n", range: start.upperBound..<guide.endIndex))
        XCTAssertEqual(String(guide[start.upperBound..<end.lowerBound]) + "\n", code, path)
    }

    /// Every requirement of `UploadStorage` and `ChunkedUpload` has its row, and the core stays
    /// small: tusd's `DataStore` and `Upload` have six between them, ours at most ten.
    func testTheGuideNamesEveryRequirementOfTheCore() throws {
        let guide = try Self.read("Docs/storage-guide.md")
        let source = try Self.read("Receiver/Sources/XferReceiver/Storage/UploadStorage.swift")
        var total: [String] = []
        for name in ["UploadStorage", "ChunkedUpload"] {
            let body = try XCTUnwrap(Self.body(of: "protocol \(name)", in: source))
            let requirements = Self.requirements(in: body)
            XCTAssertGreaterThan(requirements.count, 3, "the scan found \(name)'s requirements")
            for requirement in requirements { XCTAssertTrue(guide.contains("`\(requirement)"), "the guide does not name \(name).\(requirement)") }
            total += requirements.map { "\(name).\($0)" }
        }
        XCTAssertLessThanOrEqual(total.count, 10, "the core: \(total)")
    }

    /// Every capability of the composer has its row.
    func testTheGuideNamesEveryCapability() throws {
        let guide = try Self.read("Docs/storage-guide.md")
        let composer = try Self.read("Receiver/Sources/XferReceiver/Storage/Capabilities/StorageComposer.swift")
        let cases = try XCTUnwrap(composer.range(of: #"case offsetUploads[^\n]*"#, options: .regularExpression))
        let names = composer[cases].dropFirst("case ".count).split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
        XCTAssertGreaterThan(names.count, 5)
        for name in names { XCTAssertTrue(guide.contains("| `\(name)`"), "the guide has no row for the capability \(name)") }
    }

    /// The names of a protocol body's requirements (`func name(`, `var name:`).
    private static func requirements(in body: String) -> [String] {
        var names: [String] = []
        for line in body.split(separator: "\n") {
            let text = line.trimmingCharacters(in: .whitespaces)
            guard !text.hasPrefix("//") else { continue }
            for keyword in ["func ", "var "] where text.hasPrefix(keyword) {
                let rest = text.dropFirst(keyword.count)
                names.append(String(rest.prefix { $0.isLetter || $0.isNumber }))
            }
        }
        return names
    }

    /// The text between the braces of the declaration that starts with `head`.
    private static func body(of head: String, in source: String) -> String? {
        guard let start = source.range(of: head), let open = source[start.upperBound...].firstIndex(of: "{") else { return nil }
        var depth = 0
        var index = open
        while index < source.endIndex {
            if source[index] == "{" { depth += 1 }
            if source[index] == "}" {
                depth -= 1
                if depth == 0 { return String(source[source.index(after: open)..<index]) }
            }
            index = source.index(after: index)
        }
        return nil
    }
}
