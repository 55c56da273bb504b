import Foundation
import XCTest

/// Docs/backend-guide.md is the only thing a newcomer reads: it shows the
/// example backend and its tests word for word, and names every public
/// symbol of the testing product and every case and field of the values a
/// program switches over. These checks fail when the code grows past it.
final class BackendGuideTests: XCTestCase {
    private static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    private static func read(_ path: String) throws -> String {
        try String(contentsOf: root.appendingPathComponent(path), encoding: .utf8)
    }

    func testTheGuideShowsTheExampleBackendAndItsTestsWordForWord() throws {
        let guide = try Self.read("Docs/backend-guide.md")
        for (path, marker) in [
            ("Examples/CustomBackend/Sources/CWBackend/CWBackend.swift", "CWBackend/CWBackend.swift,\n     word for word"),
            ("Examples/CustomBackend/Tests/CWBackendTests/CWBackendTests.swift", "CWBackendTests/CWBackendTests.swift,\n     word for word"),
        ] {
            let code = try Self.read(path)
            let comment = try XCTUnwrap(guide.range(of: marker), "the guide lost the marker before \(path)")
            let start = try XCTUnwrap(guide.range(of: "-->\n```swift\n", range: comment.upperBound..<guide.endIndex))
            let end = try XCTUnwrap(guide.range(of: "\n```\n", range: start.upperBound..<guide.endIndex))
            XCTAssertEqual(String(guide[start.upperBound..<end.lowerBound]) + "\n", code, path)
        }
    }

    /// Every public function of the testing product by its full name
    /// (`file(for:index:…)`), every property, type and case by its name.
    func testTheGuideNamesEveryPublicSymbolOfTheTestingProduct() throws {
        let guide = try Self.read("Docs/backend-guide.md")
        let source = try Self.read("Sources/XferBackendTesting/BackendTesting.swift")
        let symbols = PublicSymbols(source)
        XCTAssertGreaterThan(symbols.functions.count, 10, "the scan found the functions")
        for function in symbols.functions { XCTAssertTrue(guide.contains(function), "the guide does not name \(function)") }
        for name in symbols.names { XCTAssertTrue(guide.contains(name), "the guide does not name \(name)") }
    }

    /// Every case of `TransferEvent`, `FileFinish`, `ChunkOutcome` and
    /// `XferError.Kind` has a row in section 8 naming each field of its value.
    func testTheGuideListsEveryCaseAndFieldOfEventsAnswersAndErrors() throws {
        let guide = try Self.read("Docs/backend-guide.md")
        let rows = guide.split(separator: "\n").filter { $0.hasPrefix("| ") }.map(String.init)
        func row(startingWith prefix: String) -> String? { rows.first { $0.hasPrefix(prefix) } }

        let events = try Self.read("Sources/Xfer/Engine/TransferEvent.swift")
        let eventEnum = try XCTUnwrap(Self.body(of: "public enum TransferEvent", in: events))
        let cases = Self.matches(#"(?m)^    case (\w+)\((\w+)\)"#, in: eventEnum)
        XCTAssertEqual(cases.count, 12, "the scan found the events")
        for match in cases {
            let (name, type) = (match[1], match[2])
            guard let line = row(startingWith: "| `.\(name)(\(type))` |") else {
                XCTFail("section 8 has no row for .\(name)(\(type))")
                continue
            }
            for field in Self.fields(of: type, in: events) {
                XCTAssertTrue(line.contains("`\(field)`"), ".\(name): the guide does not name its field \(field)")
            }
        }

        let backend = try Self.read("Sources/Xfer/Backend/UploadBackend.swift")
        for (type, payload) in [("FileFinish", "Completion"), ("ChunkOutcome", "Stored")] {
            let declaration = try XCTUnwrap(Self.body(of: "public enum \(type)", in: backend))
            let line = try XCTUnwrap(row(startingWith: "| `\(type)` |"), "section 8 has no row for \(type)")
            for name in Self.matches(#"(?m)^    case (\w+)"#, in: declaration).map({ $0[1] }) {
                XCTAssertTrue(line.contains("`.\(name)("), "\(type): the guide does not name .\(name)")
            }
            let fields = Self.fields(of: payload, in: declaration)
            XCTAssertFalse(fields.isEmpty)
            for field in fields {
                XCTAssertTrue(line.contains(".\(field)`"), "\(type): the guide does not name the field \(field)")
            }
        }

        let error = try Self.read("Sources/Xfer/Support/XferError.swift")
        let kinds = Self.matches(#"(?m)^        case (\w+)$"#, in: try XCTUnwrap(Self.body(of: "public enum Kind", in: error))).map { $0[1] }
        XCTAssertEqual(kinds.count, 9, "the scan found the kinds")
        for kind in kinds { XCTAssertNotNil(row(startingWith: "| `.\(kind)` |"), "section 8 has no row for the kind \(kind)") }
        let remedies = Self.matches(#"(?m)^        case (\w+)$"#, in: try XCTUnwrap(Self.body(of: "public enum Remedy", in: error))).map { $0[1] }
        for remedy in remedies { XCTAssertTrue(guide.contains("`.\(remedy)`"), "the guide does not name the remedy \(remedy)") }
        let symbols = PublicSymbols(error)
        for function in symbols.functions { XCTAssertTrue(guide.contains(function), "the guide does not name XferError's \(function)") }
        for name in symbols.names { XCTAssertTrue(guide.contains("`\(name)`") || guide.contains(name + "`"), "the guide does not name XferError's \(name)") }
    }

    // MARK: Reading Swift, as far as these checks need

    /// The text between the braces that follow `declaration`.
    static func body(of declaration: String, in text: String) -> String? {
        guard let start = text.range(of: declaration), let open = text[start.upperBound...].firstIndex(of: "{") else { return nil }
        var depth = 0
        var index = open
        while index < text.endIndex {
            if text[index] == "{" { depth += 1 }
            if text[index] == "}" {
                depth -= 1
                if depth == 0 { return String(text[text.index(after: open)..<index]) }
            }
            index = text.index(after: index)
        }
        return nil
    }

    /// The stored properties of struct `type` itself (not of the types nested in it).
    static func fields(of type: String, in text: String) -> [String] {
        let found = matches(#"(?m)^( *)public var (\w+)"#, in: body(of: "public struct \(type)", in: text) ?? "")
        let outermost = found.map { $0[1].count }.min()
        return found.filter { $0[1].count == outermost }.map { $0[2] }
    }

    static func matches(_ pattern: String, in text: String) -> [[String]] {
        let expression = try! NSRegularExpression(pattern: pattern)
        let string = text as NSString
        return expression.matches(in: text, range: NSRange(location: 0, length: string.length)).map { match in
            (0..<match.numberOfRanges).map { match.range(at: $0).location == NSNotFound ? "" : string.substring(with: match.range(at: $0)) }
        }
    }
}

/// The public declarations of a source file: functions and initialisers by
/// their full names (`take(_:of:in:)`, `ScriptedServer(_:)`), properties,
/// types and enum cases by their names.
struct PublicSymbols {
    var functions: Set<String> = []
    var names: Set<String> = []

    init(_ source: String) {
        let text = source as NSString
        let declaration = try! NSRegularExpression(
            pattern: #"public (?:static |mutating )*(func|init|var|let|struct|enum|class)\s*(\w*)"#)
        var enclosingType: [(name: String, end: Int)] = []
        for match in declaration.matches(in: source, range: NSRange(location: 0, length: text.length)) {
            let kind = text.substring(with: match.range(at: 1))
            let name = match.range(at: 2).length > 0 ? text.substring(with: match.range(at: 2)) : ""
            enclosingType.removeAll { $0.end < match.range.location }
            switch kind {
            case "struct", "enum", "class":
                names.insert(name)
                let rest = text.substring(from: match.range.location)
                if let body = BackendGuideTests.body(of: "\(kind) \(name)", in: rest) {
                    enclosingType.append((name, match.range.location + (rest as NSString).length - ((rest.components(separatedBy: body).last ?? "") as NSString).length))
                    if kind == "enum" {
                        for found in BackendGuideTests.matches(#"(?m)^    case (\w+)"#, in: body) { names.insert(found[1]) }
                    }
                }
            case "func", "init":
                let after = text.substring(from: match.range.location + match.range.length)
                guard let labels = Self.labels(after) else { continue }
                let base = kind == "init" ? (enclosingType.last?.name ?? "init") : name
                functions.insert("\(base)(\(labels.map { $0 + ":" }.joined()))")
            default:
                names.insert(name)
            }
        }
    }

    /// The argument labels of the parameter list that starts `text` (after
    /// generic parameters, if any).
    static func labels(_ text: String) -> [String]? {
        guard let open = text.firstIndex(of: "(") else { return nil }
        var depth = 0
        var current = ""
        var parameters: [String] = []
        for character in text[open...] {
            switch character {
            case "(", "[", "<":
                depth += 1
                if depth == 1 { continue }
            case ")", "]", ">":
                depth -= 1
                if depth == 0 {
                    if !current.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty { parameters.append(current) }
                    return parameters.map { parameter in
                        String(parameter.trimmingCharacters(in: .whitespacesAndNewlines).prefix { $0 != " " && $0 != ":" })
                    }
                }
            case "," where depth == 1:
                parameters.append(current)
                current = ""
                continue
            default:
                break
            }
            if depth >= 1 { current.append(character) }
        }
        return nil
    }
}
