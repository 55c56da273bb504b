import Testing

@testable import Xfer

/// The pure parts that a request's cost was taken out of (issue 46): each must keep the rules of
/// what it replaced.
@Suite struct RequestCostTests {
    private func line(_ name: String, _ value: String) -> (HeaderLine.Made, String) {
        var bytes: [UInt8] = [1, 2, 3]  // left over from an earlier field: must not survive
        let made = HeaderLine.make(name: name, value: value, into: &bytes)
        guard made == .line else { return (made, "") }
        #expect(bytes.last == 0, "curl is handed a C string")
        return (made, String(decoding: bytes.dropLast(), as: UTF8.self))
    }

    @Test func headerLinesKeepTheRulesOfEveryField() {
        #expect(line("Upload-Length", "4096") == (.line, "Upload-Length: 4096"))
        #expect(line(" \tX-Trimmed\t ", "  a b  \t") == (.line, "X-Trimmed: a b"))
        // An empty value, or one of blanks only, is curl's "Name;" (sent empty); "Name:" would remove it.
        #expect(line("X-Empty", "") == (.line, "X-Empty;"))
        #expect(line("X-Empty", " \t ") == (.line, "X-Empty;"))
        // Line breaks and NUL cannot end the line early: they are spaces, trimmed at the ends.
        #expect(line("X-Custom", "a\r\nX-Injected: 1") == (.line, "X-Custom: a  X-Injected: 1"))
        #expect(line("X-Custom", "\r\na\0b\n") == (.line, "X-Custom: a b"))
        #expect(line("X-Custom", "\r\n") == (.line, "X-Custom;"))
        #expect(line("X~Odd!#$%&'*+.^_`|", "1") == (.line, "X~Odd!#$%&'*+.^_`|: 1"))
        // Not tokens, or the framing the transport owns: not sent.
        #expect(line("Bad Name", "x").0 == .skipped)
        #expect(line("", "x").0 == .skipped)
        #expect(line(" \t", "x").0 == .skipped)
        #expect(line("X:Colon", "x").0 == .skipped)
        #expect(line("content-LENGTH", "999").0 == .skipped)
        #expect(line("Transfer-Encoding", "chunked").0 == .skipped)
        #expect(line("Content-Lengthy", "1") == (.line, "Content-Lengthy: 1"))
        // Text beyond ASCII goes the way of characters, where a character can be several bytes.
        #expect(line("X-Name", "café").0 == .notASCII)
        #expect(line("X-Ñame", "x").0 == .notASCII)
    }
}
