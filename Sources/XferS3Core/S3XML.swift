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

    /// Nil when `bytes` is not well-formed XML (as far as these documents go: see `XMLEvents`),
    /// or stops before its root element closes (an answer cut short).
    package init?(_ bytes: [UInt8], recordNames: Set<String> = []) {
        var reader = Reader(recordNames: recordNames)
        var events = XMLEvents(bytes)
        while let event = events.next() {
            switch event {
            case .start(let name): reader.start(name)
            case .text(let text): reader.text += text
            case .end(let name): reader.end(name)
            }
        }
        guard events.isWellFormed, reader.closedRoot, let root = reader.root else { return nil }
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

    /// Flattens the events into the records above.
    private struct Reader {
        let recordNames: Set<String>
        var root: String?
        var fields: [String: String] = [:]
        var records: [[String: String]] = []
        /// Whether the root element's end was read.
        var closedRoot = false
        var leaves: [String: String] = [:]
        var text = ""
        private var path: [String] = []
        /// Whether each open element has had a child element.
        private var hasChildren: [Bool] = []
        private var record: [String: String]?

        init(recordNames: Set<String>) { self.recordNames = recordNames }

        mutating func start(_ name: String) {
            if root == nil { root = name }
            if path.count == 1, recordNames.contains(name) { record = [:] }
            if !hasChildren.isEmpty { hasChildren[hasChildren.count - 1] = true }
            path.append(name)
            hasChildren.append(false)
            text = ""
        }

        mutating func end(_ name: String) {
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
