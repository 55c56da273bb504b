/// Trimming and a backward search, written once over the standard library, so that no module
/// needs full Foundation (whose ICU data is most of a static binary) for them. The two trims
/// xfer applies: HTTP's optional whitespace, and whitespace in what people type or files hold.
extension StringProtocol {
    /// Without leading and trailing spaces and horizontal tabs: RFC 9110's optional whitespace
    /// (OWS) around a header field's value or a list element.
    public func trimmingSpacesAndTabs() -> String {
        trimming { $0 == " " || $0 == "\t" }
    }

    /// Without leading and trailing whitespace of any kind, line ends included (Unicode's
    /// White_Space, as `Character.isWhitespace` says): a line of a token file, an answer's body.
    public func trimmingWhitespace() -> String {
        trimming(\.isWhitespace)
    }

    /// Without the leading and trailing characters `isTrimmed` accepts.
    public func trimming(_ isTrimmed: (Character) -> Bool) -> String {
        guard let first = firstIndex(where: { !isTrimmed($0) }) else { return "" }
        let last = lastIndex(where: { !isTrimmed($0) })!
        return String(self[first...last])
    }
}

extension StringProtocol {
    /// The range of the last occurrence of `other` (Foundation's `range(of:options: .backwards)`);
    /// nil when there is none or `other` is empty.
    public func lastRange(of other: some StringProtocol) -> Range<Index>? {
        guard !other.isEmpty else { return nil }
        var start = endIndex
        while start > startIndex {
            start = index(before: start)
            if self[start...].hasPrefix(other) {
                return start..<index(start, offsetBy: other.count)
            }
        }
        return nil
    }
}

// `text.contains("x")` in a module where any dependency has loaded full Foundation binds to
// Foundation's generic `StringProtocol.contains(_:)`, and one such call puts full Foundation
// and its ICU data into the static `xfer` (issue 44). These concrete overloads are chosen over
// that generic one, and answer as Foundation's did: by characters, and false for "".
extension String {
    /// Whether `other` occurs in this string; false when `other` is empty.
    @inlinable
    public func contains(_ other: String) -> Bool {
        !other.isEmpty && firstRange(of: other) != nil
    }
}

extension Substring {
    /// Whether `other` occurs in this substring; false when `other` is empty.
    @inlinable
    public func contains(_ other: String) -> Bool {
        !other.isEmpty && firstRange(of: other) != nil
    }
}
