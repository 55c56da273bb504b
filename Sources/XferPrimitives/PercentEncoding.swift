/// RFC 3986 percent-encoding, written once for the engine, the backends, the receiver and the
/// command (Foundation's needs its `CharacterSet`, which a static binary pays for with ICU).
public enum PercentEncoding {
    /// `text` with every byte but RFC 3986's unreserved characters (`A-Z a-z 0-9 - . _ ~`)
    /// encoded: one path segment, query value or form field whatever it holds (spaces, `/`,
    /// `?`, `#`, `%`, `&`, `=`, non-ASCII).
    public static func encode(_ text: some StringProtocol) -> String {
        // Ids and most names need no escape: return them without building a copy.
        if text.utf8.allSatisfy(isUnreserved) { return String(text) }
        let hex = Array("0123456789ABCDEF".utf8)
        var out = [UInt8]()
        out.reserveCapacity(text.utf8.count * 3)
        for byte in text.utf8 {
            if isUnreserved(byte) {
                out.append(byte)
            } else {
                out.append(UInt8(ascii: "%"))
                out.append(hex[Int(byte >> 4)])
                out.append(hex[Int(byte & 0xF)])
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Whether `byte` is one of RFC 3986's unreserved characters.
    public static func isUnreserved(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."),
            UInt8(ascii: "_"), UInt8(ascii: "~"):
            true
        default:
            false
        }
    }

    /// `text` with its `%XX` escapes decoded; nil for a malformed escape or bytes that are not
    /// UTF-8 (such a segment can name no stored file). `+` is left alone: a form's space is the
    /// caller's rule (`decodeForm`).
    public static func decode(_ text: some StringProtocol) -> String? {
        var bytes = [UInt8]()
        bytes.reserveCapacity(text.utf8.count)
        var iterator = text.utf8.makeIterator()
        while let byte = iterator.next() {
            if byte == UInt8(ascii: "%") {
                guard let high = iterator.next().flatMap(Hex.value(of:)), let low = iterator.next().flatMap(Hex.value(of:)) else { return nil }
                bytes.append(high << 4 | low)
            } else {
                bytes.append(byte)
            }
        }
        // Decoding repairs invalid UTF-8 with U+FFFD; a result that does not re-encode to the
        // same bytes was invalid.
        let decoded = String(decoding: bytes, as: UTF8.self)
        return decoded.utf8.elementsEqual(bytes) ? decoded : nil
    }

    /// An `application/x-www-form-urlencoded` value or name decoded: `+` is a space, then
    /// `decode`.
    public static func decodeForm(_ text: some StringProtocol) -> String? {
        decode(String(text).replacing("+", with: " "))
    }
}
