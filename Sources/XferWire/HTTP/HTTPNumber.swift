/// The decimal numbers HTTP headers carry (tus's `Upload-Offset`, the draft's sf-integers):
/// read one way for every protocol.
enum HTTPNumber {
    /// ASCII digits only, at most `maximumDigits` of them (below `Int.max`'s 19: no overflow),
    /// spaces and tabs around allowed; nil for anything else (a sign, a fraction, junk).
    static func nonNegative(_ text: some StringProtocol, maximumDigits: Int) -> Int? {
        let digits = trimmed(text).utf8
        guard (1...maximumDigits).contains(digits.count), digits.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) })
        else { return nil }
        return digits.reduce(0) { $0 * 10 + Int($1 - UInt8(ascii: "0")) }
    }

    /// Without surrounding spaces and tabs (HTTP's OWS), with no Foundation bridging (every
    /// request reads several of these).
    static func trimmed(_ text: some StringProtocol) -> Substring {
        var slice = Substring(text)
        while let first = slice.first, first == " " || first == "\t" { slice.removeFirst() }
        while let last = slice.last, last == " " || last == "\t" { slice.removeLast() }
        return slice
    }
}
