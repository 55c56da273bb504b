import Foundation

#if canImport(FoundationXML)
    import FoundationXML
#endif

/// The few XML documents S3 (and STS) answer with, read into flat records:
/// their answers are shallow, so "the text of each element, by name, under
/// its parent record" is all the backend needs.
package struct S3XML {
    /// The document's root element name ("Error", "ListPartsResult", ...).
    package var root: String = ""
    /// Text of the root's direct children, by element name.
    package var fields: [String: String] = [:]
    /// Records: one per element named in `recordNames` (e.g. every `Part`), each its children's text.
    package var records: [[String: String]] = []
    /// Text of every element without children, at any depth, by name (the
    /// last wins): for STS, whose answers nest their few fields deeper
    /// (`AssumeRoleResponse/AssumeRoleResult/Credentials/AccessKeyId`).
    package var leaves: [String: String] = [:]

    /// Nil when `bytes` is not well-formed XML, or stops before its root
    /// element closes (an answer cut short, which Foundation's parser
    /// does not always call an error).
    package init?(_ bytes: [UInt8], recordNames: Set<String> = []) {
        let reader = Reader(recordNames: recordNames)
        let parser = XMLParser(data: Data(bytes))
        parser.delegate = reader
        guard parser.parse(), reader.closedRoot, let root = reader.root else { return nil }
        self.root = root
        self.fields = reader.fields
        self.records = reader.records
        self.leaves = reader.leaves
    }

    /// `value` with `&`, `<`, `>` and `"` escaped, for building request bodies.
    package static func escaped(_ value: String) -> String {
        var out = ""
        for character in value {
            switch character {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            default: out.append(character)
            }
        }
        return out
    }

    private final class Reader: NSObject, XMLParserDelegate {
        let recordNames: Set<String>
        var root: String?
        var fields: [String: String] = [:]
        var records: [[String: String]] = []
        /// Whether the root element's end was read.
        var closedRoot = false
        var leaves: [String: String] = [:]
        private var path: [String] = []
        /// Whether each open element has had a child element.
        private var hasChildren: [Bool] = []
        private var text = ""
        private var record: [String: String]?

        init(recordNames: Set<String>) { self.recordNames = recordNames }

        func parser(
            _ parser: XMLParser, didStartElement name: String, namespaceURI: String?, qualifiedName: String?,
            attributes: [String: String] = [:]
        ) {
            if root == nil { root = name }
            if path.count == 1, recordNames.contains(name) { record = [:] }
            if !hasChildren.isEmpty { hasChildren[hasChildren.count - 1] = true }
            path.append(name)
            hasChildren.append(false)
            text = ""
        }

        func parser(_ parser: XMLParser, foundCharacters string: String) { text += string }

        func parser(_ parser: XMLParser, didEndElement name: String, namespaceURI: String?, qualifiedName: String?) {
            path.removeLast()
            if path.isEmpty { closedRoot = true }
            if hasChildren.removeLast() == false { leaves[name] = text }
            if path.count == 1 {
                if recordNames.contains(name), let finished = record {
                    records.append(finished)
                    record = nil
                } else {
                    fields[name] = text
                }
            } else if path.count == 2, record != nil {
                record?[name] = text
            }
            text = ""
        }
    }
}
