/// A pull reader of the XML that S3-compatible stores and STS answer with: elements, their
/// text, nothing more. Written for those documents instead of Foundation's `XMLParser`, which
/// brings libxml2, full Foundation and its ICU data into a static binary.
///
/// What it reads: an optional UTF-8 byte-order mark, `<?…?>` declarations and processing
/// instructions, comments, elements (attributes are checked for shape and skipped; a
/// namespace prefix stays part of the name, as `XMLParser` gives it without namespace
/// processing), text with the five predefined entities and character references, and CDATA.
/// What it refuses, by stopping with `isWellFormed` false: a `<!DOCTYPE` (no store sends one,
/// and entity definitions are how XML is made to explode), an unknown entity, a mismatched or
/// missing end tag, text or a second element outside the root, elements nested deeper than
/// `maximumDepth`, and bytes that are not UTF-8.
struct XMLEvents {
    enum Event: Equatable {
        case start(String)
        case text(String)
        case end(String)
    }

    /// Deeper than any S3 or STS answer (STS's are five levels).
    static let maximumDepth = 32

    private let bytes: [UInt8]
    private var index = 0
    private var open: [String] = []
    private var sawRoot = false
    private var failed = false
    private var pending: Event?

    /// Whether every byte was read without fault, and the root element closed.
    var isWellFormed: Bool { !failed && sawRoot && open.isEmpty && index >= bytes.count }

    init(_ bytes: [UInt8]) {
        self.bytes = bytes
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { index = 3 }
    }

    /// The next event; nil at the end of the document or at the first fault.
    mutating func next() -> Event? {
        if let event = pending {
            pending = nil
            return event
        }
        while !failed, index < bytes.count {
            if bytes[index] != UInt8(ascii: "<") {
                guard let text = readText() else { return fail() }
                if open.isEmpty {
                    // Outside the root, only whitespace.
                    guard text.allSatisfy(\.isWhitespace) else { return fail() }
                    continue
                }
                if !text.isEmpty { return .text(text) }
                continue
            }
            if starts(with: "<?") {
                guard skip(past: "?>") else { return fail() }
            } else if starts(with: "<!--") {
                guard skip(past: "-->") else { return fail() }
            } else if starts(with: "<![CDATA[") {
                guard !open.isEmpty else { return fail() }
                index += 9
                let start = index
                guard skip(past: "]]>") else { return fail() }
                guard let text = utf8(bytes[start..<(index - 3)]) else { return fail() }
                if !text.isEmpty { return .text(text) }
            } else if starts(with: "</") {
                index += 2
                guard let name = readName(), let last = open.last, last == name else { return fail() }
                skipSpaces()
                guard index < bytes.count, bytes[index] == UInt8(ascii: ">") else { return fail() }
                index += 1
                open.removeLast()
                return .end(name)
            } else if starts(with: "<!") {
                return fail()  // <!DOCTYPE and the like
            } else {
                index += 1
                guard !(open.isEmpty && sawRoot), open.count < Self.maximumDepth, let name = readName(),
                    let selfClosing = skipAttributes()
                else { return fail() }
                sawRoot = true
                if selfClosing {
                    pending = .end(name)
                } else {
                    open.append(name)
                }
                return .start(name)
            }
        }
        return nil
    }

    private mutating func fail() -> Event? {
        failed = true
        return nil
    }

    private func starts(with prefix: StaticString) -> Bool {
        let count = prefix.utf8CodeUnitCount
        guard index + count <= bytes.count else { return false }
        return prefix.withUTF8Buffer { bytes[index..<(index + count)].elementsEqual($0) }
    }

    /// Moves past the next `terminator`; false when there is none.
    private mutating func skip(past terminator: StaticString) -> Bool {
        while index < bytes.count {
            if starts(with: terminator) {
                index += terminator.utf8CodeUnitCount
                return true
            }
            index += 1
        }
        return false
    }

    private mutating func skipSpaces() {
        while index < bytes.count, Self.isSpace(bytes[index]) { index += 1 }
    }

    private static func isSpace(_ byte: UInt8) -> Bool {
        byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D
    }

    private mutating func readName() -> String? {
        let start = index
        while index < bytes.count {
            let byte = bytes[index]
            if Self.isSpace(byte) || byte == UInt8(ascii: ">") || byte == UInt8(ascii: "/") || byte == UInt8(ascii: "=")
                || byte == UInt8(ascii: "<") || byte == UInt8(ascii: "&") || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "'")
            {
                break
            }
            index += 1
        }
        guard index > start else { return nil }
        return utf8(bytes[start..<index])
    }

    /// Past a start tag's attributes and its `>` or `/>`: whether it closed itself; nil when
    /// the tag is malformed.
    private mutating func skipAttributes() -> Bool? {
        while true {
            let hadSpace = index < bytes.count && Self.isSpace(bytes[index])
            skipSpaces()
            guard index < bytes.count else { return nil }
            if bytes[index] == UInt8(ascii: ">") {
                index += 1
                return false
            }
            if starts(with: "/>") {
                index += 2
                return true
            }
            guard hadSpace, readName() != nil else { return nil }
            skipSpaces()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "=") else { return nil }
            index += 1
            skipSpaces()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") || bytes[index] == UInt8(ascii: "'") else { return nil }
            let quote = bytes[index]
            index += 1
            while index < bytes.count, bytes[index] != quote {
                guard bytes[index] != UInt8(ascii: "<") else { return nil }
                index += 1
            }
            guard index < bytes.count else { return nil }
            index += 1
        }
    }

    /// Text up to the next `<`, entities decoded; nil for an unknown entity or bytes that are
    /// not UTF-8.
    private mutating func readText() -> String? {
        var out: [UInt8] = []
        while index < bytes.count, bytes[index] != UInt8(ascii: "<") {
            let byte = bytes[index]
            guard byte == UInt8(ascii: "&") else {
                out.append(byte)
                index += 1
                continue
            }
            guard let semicolon = bytes[index...].prefix(12).firstIndex(of: UInt8(ascii: ";")) else { return nil }
            let name = bytes[(index + 1)..<semicolon]
            index = semicolon + 1
            switch String(decoding: name, as: UTF8.self) {
            case "amp": out.append(UInt8(ascii: "&"))
            case "lt": out.append(UInt8(ascii: "<"))
            case "gt": out.append(UInt8(ascii: ">"))
            case "quot": out.append(UInt8(ascii: "\""))
            case "apos": out.append(UInt8(ascii: "'"))
            case let reference where reference.hasPrefix("#"):
                let digits = reference.dropFirst()
                let value = digits.hasPrefix("x") ? UInt32(digits.dropFirst(), radix: 16) : UInt32(digits, radix: 10)
                guard let value, value != 0, let scalar = Unicode.Scalar(value) else { return nil }
                out.append(contentsOf: Array(String(Character(scalar)).utf8))
            default:
                return nil
            }
        }
        return utf8(out[...])
    }

    private func utf8(_ slice: ArraySlice<UInt8>) -> String? {
        let text = String(decoding: slice, as: UTF8.self)
        return text.utf8.elementsEqual(slice) ? text : nil
    }
}
