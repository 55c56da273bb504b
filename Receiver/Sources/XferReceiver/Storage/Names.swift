import XferPrimitives
/// Upload ids double as directory names, so anything that reaches the disk must match this exact shape.
enum UploadID {
    static let length = 32

    /// 127 random bits in 32 lowercase hex digits. The first digit's top bit says how the upload
    /// was stored: set for one stored whole by the request that created it (`isStoredWhole`).
    static func generate(storedWhole: Bool = false) -> String {
        var generator = SystemRandomNumberGenerator()
        let digits = Array("0123456789abcdef".utf8)
        var bytes = [UInt8]()
        bytes.reserveCapacity(length)
        for word in 0..<(length / 16) {
            var value = generator.next() as UInt64
            for digit in 0..<16 {
                var nibble = Int(value & 0xF)
                // The first digit's top bit is the flag; its other three stay random (a third
                // `getrandom` call for them cost one more system call an upload).
                if word == 0, digit == 0 { nibble = nibble & 0x7 | (storedWhole ? 0x8 : 0) }
                bytes.append(digits[nibble])
                value >>= 4
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Whether `id` (valid) names an upload stored whole by the request that created it: an
    /// object store keeps such an upload's state in its file's metadata, not in a state object
    /// (`ObjectOffsetUploads`), and only these ids are worth looking for there.
    static func isStoredWhole(_ id: some StringProtocol) -> Bool {
        guard let first = id.utf8.first else { return false }
        return first >= UInt8(ascii: "8")
    }

    /// Anything else (`..`, `/`, uppercase, percent escapes) is refused before it can name a path.
    static func isValid(_ candidate: some StringProtocol) -> Bool {
        candidate.utf8.count == length
            && candidate.utf8.allSatisfy(Hex.isLowercaseDigit)
    }
}

/// Where a client's file lands under its upload's download directory: a path relative to the
/// directory the user named, '/'-separated (`photos/2024/IMG 01.jpg`). Every protocol's name goes
/// through `RelativePath.parse`; what it accepts can only name a place inside `downloads/<id>/`.
struct RelativePath: Sendable, Equatable {
    /// Linux's NAME_MAX, in bytes of UTF-8.
    static let maximumComponentLength = 255
    /// Linux's PATH_MAX, in bytes of UTF-8.
    static let maximumLength = 4096

    /// Each non-empty, not `.` nor `..`, without `/`, NUL or control characters, at most 255 bytes.
    let components: [String]

    private init(components: [String]) {
        self.components = components
    }

    /// A path this receiver checked and recorded (`text`), read back without checking again.
    init(stored text: String) {
        // On bytes, as `parse` split it: a '/' followed by a combining mark is one Character.
        self.init(
            components: text.utf8.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: true).map {
                String(decoding: $0, as: UTF8.self)
            })
    }

    /// `components` joined with '/': the path below `downloads/<id>/`, and what `meta.json` keeps.
    var text: String { components.joined(separator: "/") }

    /// The file's own name (the last component).
    var name: String { components[components.count - 1] }

    /// `/downloads/<id>/` + this: every component percent-encoded on its own, joined by '/'.
    var encoded: String { components.map(PercentEncoding.encode).joined(separator: "/") }

    enum Problem: Error, Equatable {
        case empty
        case absolute
        case emptyComponent
        case dotComponent
        case controlCharacter
        case componentTooLong
        case tooLong
        case separator
        case invalidUTF8

        /// One line, for the client: `field` names what carried the path.
        func message(_ field: String) -> String {
            switch self {
            case .empty: "\(field) must not be empty"
            case .absolute: "\(field) must be a relative path: it must not start with '/'"
            case .emptyComponent: "\(field) must not hold an empty path component ('//' or a trailing '/')"
            case .dotComponent: "\(field) must not hold a '.' or '..' path component"
            case .controlCharacter: "\(field) must not hold NUL, control or bidirectional formatting characters"
            case .separator: "\(field) must not hold '/' inside a name"
            case .invalidUTF8: "\(field) must be UTF-8"
            case .componentTooLong: "\(field) has a path component longer than \(RelativePath.maximumComponentLength) bytes"
            case .tooLong: "\(field) is longer than \(RelativePath.maximumLength) bytes"
            }
        }
    }

    /// The path a client named, or why it names no safe place.
    ///
    /// A name without '/' is read as clients always sent names, so old clients keep working: when
    /// it holds '\' (a Windows path, `C:\x\y.txt`) only what follows the last '\' counts. In
    /// a name with '/' a '\' is an ordinary character of its component, as Linux allows.
    static func parse(_ text: String) -> Result<RelativePath, Problem> {
        guard !text.isEmpty else { return .failure(.empty) }
        guard text.utf8.count <= maximumLength else { return .failure(.tooLong) }
        let slash = UInt8(ascii: "/")
        let bytes = Array(text.utf8)
        var pieces: [ArraySlice<UInt8>]
        // Split on bytes, never on Characters: a '/' followed by a combining mark is one Character,
        // and splitting on Characters would leave that '/' inside a component.
        if bytes.contains(slash) {
            guard bytes[0] != slash else { return .failure(.absolute) }
            pieces = bytes.split(separator: slash, omittingEmptySubsequences: false)
        } else {
            // The legacy reading of a plain name: its last non-empty '\'-separated piece.
            guard let last = bytes.split(separator: UInt8(ascii: "\\"), omittingEmptySubsequences: true).last else {
                return .failure(.empty)
            }
            pieces = [last]
        }
        for piece in pieces {
            if let problem = problem(ofComponent: piece) { return .failure(problem) }
        }
        // Cut at ASCII bytes only, so every piece is still valid UTF-8.
        return .success(RelativePath(components: pieces.map { String(decoding: $0, as: UTF8.self) }))
    }

    /// `parse` as an optional, for callers that only need yes or no.
    static func validated(_ text: String) -> RelativePath? {
        try? parse(text).get()
    }

    /// Whether `component` is one component as `parse` accepts them (which also means: no '/').
    static func isValidComponent(_ component: String) -> Bool {
        problem(ofComponent: Array(component.utf8)[...]) == nil
    }

    /// The one check of a component, on its UTF-8 bytes and Unicode scalars, never on
    /// `Character`s: every name of every protocol and both storages goes through it.
    static func problem(ofComponent component: ArraySlice<UInt8>) -> Problem? {
        if component.isEmpty { return .emptyComponent }
        if component.elementsEqual([UInt8(ascii: ".")]) || component.elementsEqual([UInt8(ascii: "."), UInt8(ascii: ".")]) {
            return .dotComponent
        }
        if component.count > maximumComponentLength { return .componentTooLong }
        if component.contains(where: { $0 == UInt8(ascii: "/") }) { return .separator }
        if component.contains(where: { $0 < 0x20 || $0 == 0x7F }) { return .controlCharacter }
        // Bytes that are not UTF-8 name no file a client can ask for again by URL.
        guard let text = String(validating: component, as: UTF8.self) else { return .invalidUTF8 }
        if component.contains(where: { $0 >= 0x80 }), text.unicodeScalars.contains(where: isInvisibleControl) { return .controlCharacter }
        return nil
    }

    /// C1 controls and the bidirectional formatting characters: invisible in a name, the latter
    /// reorder how it is shown (`photo\u{202E}gpj.exe` reads as `photoexe.jpg`), so a file list
    /// an application shows could lie about what was stored.
    private static func isInvisibleControl(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x80...0x9F, 0x061C, 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069: true
        default: false
        }
    }
}

enum FileNames {
    /// The last path component of a name, for the places that keep one name and no path (tus's
    /// `filename` metadata without `relativePath`, `PUT /raw/{name}`); nil when nothing safe is left.
    ///
    /// Clients send paths from Windows too, hence `\`. Split on bytes, never on `Character`s: a
    /// `/` followed by a combining mark is one `Character`, and splitting on those left
    /// `..%2F%CC%81x` whole, a name that climbed out of its directory. Control bytes become `_`;
    /// what is left must pass `RelativePath`'s one component check. Everything else, including
    /// non-ASCII names such as "视频 01.mp4", is kept byte for byte so the name round-trips
    /// through the URL.
    static func lastComponent(_ name: String) -> String? {
        let separators: Set<UInt8> = [UInt8(ascii: "/"), UInt8(ascii: "\\")]
        guard let last = Array(name.utf8).split(omittingEmptySubsequences: true, whereSeparator: separators.contains).last else {
            return nil
        }
        let cleaned = last.map { $0 < 0x20 || $0 == 0x7F ? UInt8(ascii: "_") : $0 }
        guard RelativePath.problem(ofComponent: cleaned[...]) == nil else { return nil }
        // Cut and replaced at ASCII bytes only: still the UTF-8 it was.
        return String(decoding: cleaned, as: UTF8.self)
    }
}

