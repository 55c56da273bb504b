import HTTPTypes

/// What a GET or HEAD of a stored file asks beyond the file itself: a byte range (`Range`,
/// `If-Range`) and preconditions on its version (`If-Match`, `If-None-Match`), as RFC 9110
/// sections 13 and 14 define them, for a file that never changes under its URL.
///
/// Whatever cannot be honoured exactly is ignored rather than refused: RFC 9110 lets a server
/// answer any range request with the whole file, which every download client takes, while a
/// refusal of a header it merely failed to understand would stop one. So are ignored: several
/// ranges (one file a part is all a resuming client asks; multipart/byteranges would be a second
/// body format for nothing), a malformed range, a unit other than bytes, a `Range` of a HEAD
/// (range handling is defined for GET only, and a HEAD then tells the whole file's length), and
/// any range of an empty file (RFC 9110 calls a suffix range of it satisfiable, yet no
/// `Content-Range` can name a part of zero bytes).
///
/// The dates of `If-Modified-Since` and `If-Unmodified-Since` are never compared: a file has no
/// modification date that all receivers sharing a store would agree on, so none is sent, and RFC
/// 9110 has those fields ignored then. For the same reason a date in `If-Range` never matches.
struct RangeRequest: Equatable, Sendable {
    /// How the request is answered.
    enum Answer: Equatable, Sendable {
        /// 200 with the whole file.
        case whole
        /// 206 with these bytes (inclusive offsets, within the file).
        case partial(ClosedRange<Int>)
        /// 304: the client's copy, named by `If-None-Match`, is this version.
        case notModified
        /// 412: `If-Match` names another version.
        case preconditionFailed
        /// 416: the range starts at or past the end.
        case unsatisfiable
    }

    /// Nil when there is none or it is ignored (see above).
    var range: ByteRangeSpec?
    var ifMatch: EntityTagCondition?
    var ifNoneMatch: EntityTagCondition?
    var ifRange: IfRangeValidator?

    init(
        range: ByteRangeSpec? = nil, ifMatch: EntityTagCondition? = nil, ifNoneMatch: EntityTagCondition? = nil,
        ifRange: IfRangeValidator? = nil
    ) {
        self.range = range
        self.ifMatch = ifMatch
        self.ifNoneMatch = ifNoneMatch
        self.ifRange = ifRange
    }

    init(method: HTTPRequest.Method, headers: HTTPFields) {
        // List fields sent on several lines are one list (RFC 9110, 5.3); a Range is not a list
        // of fields, so two of them are as malformed as one that cannot be read.
        let ranges = headers[values: .range]
        if method == .get, ranges.count == 1 { range = ByteRangeSpec(header: ranges[0]) }
        let ifMatches = headers[values: .ifMatch]
        if !ifMatches.isEmpty { ifMatch = EntityTagCondition(header: ifMatches.joined(separator: ",")) }
        let ifNoneMatches = headers[values: .ifNoneMatch]
        if !ifNoneMatches.isEmpty { ifNoneMatch = EntityTagCondition(header: ifNoneMatches.joined(separator: ",")) }
        let ifRanges = headers[values: .ifRange]
        if !ifRanges.isEmpty { ifRange = ifRanges.count == 1 ? IfRangeValidator(header: ifRanges[0]) : .other }
    }

    /// The answer for a file of `size` bytes whose version is `etag`, in RFC 9110's order of
    /// evaluation (13.2.2).
    func answer(etag: EntityTag, size: Int) -> Answer {
        if let ifMatch, !ifMatch.matches(etag, weak: false) { return .preconditionFailed }
        if let ifNoneMatch, ifNoneMatch.matches(etag, weak: true) { return .notModified }
        guard let range, size > 0 else { return .whole }
        if let ifRange, !ifRange.matches(etag) { return .whole }
        guard let bytes = range.bytes(inFileOf: size) else { return .unsatisfiable }
        return .partial(bytes)
    }
}

/// The one range of a `Range: bytes=…` (RFC 9110, 14.1.1), before the file's size is known.
enum ByteRangeSpec: Equatable, Sendable {
    /// `bytes=first-` (`last` nil) or `bytes=first-last`.
    case from(Int, through: Int?)
    /// `bytes=-n`: the last n bytes.
    case suffix(Int)

    /// Nil for anything but exactly one valid range in bytes.
    init?(header: String) {
        guard let equals = header.utf8.firstIndex(of: UInt8(ascii: "=")),
            header[..<equals].lowercased() == "bytes"
        else { return nil }
        // A list may hold empty elements, which count for nothing (RFC 9110, 5.6.1.2).
        let specs = header[header.index(after: equals)...].split(separator: ",").map(trimmingWhitespace).filter { !$0.isEmpty }
        guard specs.count == 1 else { return nil }
        let spec = specs[0]
        guard let dash = spec.utf8.firstIndex(of: UInt8(ascii: "-")) else { return nil }
        let first = spec[..<dash]
        let last = spec[spec.index(after: dash)...]
        if first.isEmpty {
            guard let length = decimal(last) else { return nil }
            self = .suffix(length)
            return
        }
        guard let start = decimal(first) else { return nil }
        if last.isEmpty {
            self = .from(start, through: nil)
            return
        }
        guard let end = decimal(last), end >= start else { return nil }
        self = .from(start, through: end)
    }

    /// The bytes it names of a file of `size` bytes; nil when it names none (416).
    func bytes(inFileOf size: Int) -> ClosedRange<Int>? {
        guard size > 0 else { return nil }
        switch self {
        case .from(let first, let last):
            guard first < size else { return nil }
            return first...min(last ?? size - 1, size - 1)
        case .suffix(let length):
            guard length > 0 else { return nil }
            return max(0, size - length)...(size - 1)
        }
    }
}

/// An entity tag (RFC 9110, 8.8.3).
struct EntityTag: Equatable, Sendable {
    var isWeak: Bool
    /// Between the quotes.
    var opaque: String

    init(_ opaque: String, weak: Bool = false) {
        isWeak = weak
        self.opaque = opaque
    }

    /// As an `ETag` field carries it.
    var field: String { (isWeak ? "W/\"" : "\"") + opaque + "\"" }

    /// Strong comparison: both strong and the same; weak comparison: the same, either weak.
    func matches(_ other: EntityTag, weak: Bool) -> Bool {
        opaque == other.opaque && (weak || (!isWeak && !other.isWeak))
    }

    /// The tags of a list (`#entity-tag`); nil when it is malformed.
    static func list(_ header: Substring) -> [EntityTag]? {
        var tags: [EntityTag] = []
        var rest = header.utf8[...]
        while true {
            while let byte = rest.first, byte == UInt8(ascii: ",") || isWhitespace(byte) { rest = rest.dropFirst() }
            guard !rest.isEmpty else { return tags }
            var weak = false
            if rest.starts(with: "W/".utf8) {
                weak = true
                rest = rest.dropFirst(2)
            }
            guard rest.first == UInt8(ascii: "\"") else { return nil }
            rest = rest.dropFirst()
            guard let close = rest.firstIndex(of: UInt8(ascii: "\"")) else { return nil }
            let opaque = rest[..<close]
            // etagc: visible ASCII but the quote, or obs-text.
            guard opaque.allSatisfy({ $0 == 0x21 || ($0 >= 0x23 && $0 != 0x7F) }) else { return nil }
            tags.append(EntityTag(String(Substring(opaque)), weak: weak))
            rest = rest[rest.index(after: close)...]
            while let byte = rest.first, isWhitespace(byte) { rest = rest.dropFirst() }
            guard rest.isEmpty || rest.first == UInt8(ascii: ",") else { return nil }
        }
    }
}

/// `If-Match` or `If-None-Match`: `*`, or a list of tags.
enum EntityTagCondition: Equatable, Sendable {
    /// `*`: any current version, and a stored file always has one.
    case any
    case tags([EntityTag])

    /// A malformed list names no version: an `If-Match` then fails (the client's condition cannot
    /// be shown to hold), an `If-None-Match` does not stop the answer.
    init(header: String) {
        let trimmed = trimmingWhitespace(Substring(header))
        self = trimmed == "*" ? .any : .tags(EntityTag.list(trimmed) ?? [])
    }

    func matches(_ etag: EntityTag, weak: Bool) -> Bool {
        switch self {
        case .any: true
        case .tags(let tags): tags.contains { $0.matches(etag, weak: weak) }
        }
    }
}

/// `If-Range`: a tag, or a date (or anything unreadable), which never matches here.
enum IfRangeValidator: Equatable, Sendable {
    case tag(EntityTag)
    case other

    init(header: String) {
        let trimmed = trimmingWhitespace(Substring(header))
        if let tags = EntityTag.list(trimmed), tags.count == 1 {
            self = .tag(tags[0])
        } else {
            self = .other
        }
    }

    /// Strong comparison (RFC 9110, 13.1.5): a weak tag never lets a range through, since two
    /// versions it stands for may differ in the bytes asked for.
    func matches(_ etag: EntityTag) -> Bool {
        switch self {
        case .tag(let tag): tag.matches(etag, weak: false)
        case .other: false
        }
    }
}

private func isWhitespace(_ byte: UInt8) -> Bool {
    byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t")
}

private func trimmingWhitespace(_ text: Substring) -> Substring {
    var utf8 = text.utf8[...]
    while let first = utf8.first, isWhitespace(first) { utf8 = utf8.dropFirst() }
    while let last = utf8.last, isWhitespace(last) { utf8 = utf8.dropLast() }
    return Substring(utf8)
}

/// ASCII digits only (no sign, no space), saturating at `Int.max`: a position too large for an
/// `Int` is past the end of any file, which is what it means.
private func decimal(_ text: Substring) -> Int? {
    guard !text.isEmpty else { return nil }
    var value = 0
    for byte in text.utf8 {
        guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
        let (times, overflow) = value.multipliedReportingOverflow(by: 10)
        let (sum, overflowAgain) = times.addingReportingOverflow(Int(byte - UInt8(ascii: "0")))
        value = overflow || overflowAgain ? Int.max : sum
    }
    return value
}
