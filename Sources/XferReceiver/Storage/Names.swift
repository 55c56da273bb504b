/// Upload ids double as directory names, so anything that reaches the disk must match this exact shape.
enum UploadID {
    static let length = 32

    static func generate() -> String {
        var generator = SystemRandomNumberGenerator()
        let digits = Array("0123456789abcdef".utf8)
        var bytes = [UInt8]()
        bytes.reserveCapacity(length)
        for _ in 0..<(length / 16) {
            var value = generator.next() as UInt64
            for _ in 0..<16 {
                bytes.append(digits[Int(value & 0xF)])
                value >>= 4
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Anything else (`..`, `/`, uppercase, percent escapes) is refused before it can name a path.
    static func isValid(_ candidate: some StringProtocol) -> Bool {
        candidate.utf8.count == length
            && candidate.utf8.allSatisfy { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains($0) }
    }
}

enum FileNames {
    /// Linux's NAME_MAX, in bytes of UTF-8.
    static let maximumLength = 255

    /// The name a client's file gets on disk, or nil when nothing safe is left of it.
    ///
    /// Only the last path component survives (clients send paths from Windows too, hence `\`), control
    /// characters and NUL become `_`, and `.`/`..` are refused. Everything else, including non-ASCII
    /// names such as "视频 01.mp4", is kept byte for byte so the name round-trips through the URL.
    static func sanitize(_ name: String) -> String? {
        guard let last = name.split(omittingEmptySubsequences: true, whereSeparator: { $0 == "/" || $0 == "\\" }).last
        else { return nil }
        let cleaned = String(
            String.UnicodeScalarView(last.unicodeScalars.map { scalar in
                scalar.value < 0x20 || scalar.value == 0x7F ? "_" : scalar
            })
        )
        guard cleaned != ".", cleaned != "..", cleaned.utf8.count <= maximumLength else { return nil }
        return cleaned
    }
}

enum PercentEncoding {
    /// Encodes everything but RFC 3986 unreserved characters, so the result is one path segment
    /// whatever the name holds (spaces, `?`, `#`, `%`, non-ASCII).
    static func encodePathSegment(_ segment: String) -> String {
        let hex = Array("0123456789ABCDEF".utf8)
        var out = [UInt8]()
        out.reserveCapacity(segment.utf8.count)
        for byte in segment.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."),
                UInt8(ascii: "_"), UInt8(ascii: "~"):
                out.append(byte)
            default:
                out.append(UInt8(ascii: "%"))
                out.append(hex[Int(byte >> 4)])
                out.append(hex[Int(byte & 0xF)])
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Nil for malformed escapes or bytes that are not UTF-8: such a segment can't name any stored file.
    static func decode(_ segment: some StringProtocol) -> String? {
        var bytes = [UInt8]()
        var iterator = segment.utf8.makeIterator()
        while let byte = iterator.next() {
            if byte == UInt8(ascii: "%") {
                guard let high = iterator.next().flatMap(hexValue), let low = iterator.next().flatMap(hexValue) else { return nil }
                bytes.append(high << 4 | low)
            } else {
                bytes.append(byte)
            }
        }
        // Decoding repairs invalid UTF-8 with U+FFFD; a result that doesn't re-encode to the same bytes was invalid.
        let decoded = String(decoding: bytes, as: UTF8.self)
        return decoded.utf8.elementsEqual(bytes) ? decoded : nil
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}

enum Hex {
    static func lowercase(_ bytes: some Sequence<UInt8>) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0xF)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}
