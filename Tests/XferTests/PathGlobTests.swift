import XCTest

@testable import Xfer

/// `--include` / `--exclude` patterns: every piece of the syntax, where a
/// pattern applies, and the malformed ones.
final class PathGlobTests: XCTestCase {
    private func assertMatches(
        _ pattern: String, _ paths: [String], isDirectory: Bool = false, file: StaticString = #filePath, line: UInt = #line
    ) throws {
        let glob = try PathGlob(pattern)
        for path in paths {
            XCTAssertTrue(glob.matches(path, isDirectory: isDirectory), "'\(pattern)' should match '\(path)'", file: file, line: line)
        }
    }

    private func assertMisses(
        _ pattern: String, _ paths: [String], isDirectory: Bool = false, file: StaticString = #filePath, line: UInt = #line
    ) throws {
        let glob = try PathGlob(pattern)
        for path in paths {
            XCTAssertFalse(glob.matches(path, isDirectory: isDirectory), "'\(pattern)' should not match '\(path)'", file: file, line: line)
        }
    }

    func testStarMatchesWithinOneComponent() throws {
        try assertMatches("*.jpg", ["a.jpg", ".jpg", "x/y/a.jpg", "a.b.jpg"])
        try assertMisses("*.jpg", ["a.jpeg", "a.jpg/x", "a.JPG"])
        try assertMatches("photos/*", ["photos/a", "photos/.hidden"])
        try assertMisses("photos/*", ["photos/a/b", "x/photos/a", "photos"])
        try assertMatches("a*b*c", ["abc", "aXbYc", "x/aXXbYYc"])
    }

    func testDoubleStarCrossesDirectories() throws {
        try assertMatches("a/**", ["a/b", "a/b/c", "a/"])
        try assertMisses("a/**", ["a", "b/a/c"])
        try assertMatches("a/**/b", ["a/b", "a/x/b", "a/x/y/b"])
        try assertMisses("a/**/b", ["a/xb", "ab", "a/x/bc"])
        try assertMatches("**/*.jpg", ["a.jpg", "x/a.jpg", "x/y/a.jpg"])
        try assertMisses("**/b", ["xb", "x/xb"])
        try assertMatches("x/a**b", ["x/ab", "x/a/c/b"], isDirectory: false)
        try assertMatches("**", ["a", "a/b/c"])
    }

    func testQuestionMarkIsOneCharacterButNotASlash() throws {
        try assertMatches("?.txt", ["a.txt", "x/é.txt"])
        try assertMisses("?.txt", ["ab.txt", ".txt"])
        try assertMisses("x/a?b", ["x/a/b", "x/ab"])
        try assertMatches("x/a?b", ["x/acb"])
    }

    func testClasses() throws {
        try assertMatches("file[abc]", ["filea", "filec"])
        try assertMisses("file[abc]", ["filed", "file", "fileab"])
        try assertMatches("[a-z]9", ["q9"])
        try assertMisses("[a-z]9", ["Q9", "09"])
        try assertMatches("[!abc]x", ["dx", "éx"])
        try assertMisses("[!abc]x", ["ax", "x"])
        try assertMatches("[^abc]x", ["dx"])
        try assertMatches("[]a]", ["]", "a"])
        try assertMatches("[!]]", ["x"])
        try assertMisses("[!]]", ["]"])
        try assertMatches("[\\]\\-]", ["]", "-"])
        try assertMatches("[a-]", ["-", "a"])
        try assertMatches("[à-ü]", ["é"])
        try assertMisses("a[/]b", ["a/b"], isDirectory: false)
        try assertMisses("a[!x]b", ["a/b"])
    }

    func testAlternatives() throws {
        try assertMatches("*.{jpg,png,gif}", ["a.jpg", "b.png", "x/c.gif"])
        try assertMisses("*.{jpg,png,gif}", ["a.bmp", "a.{jpg,png,gif}"])
        try assertMatches("{a,{b,c}d}", ["a", "bd", "cd"])
        try assertMisses("{a,{b,c}d}", ["b", "ad"])
        try assertMatches("report{,.bak}", ["report", "report.bak"])
        try assertMatches("{[0-9],x}?", ["1a", "xa"])
        try assertMatches("a}b,c", ["a}b,c"], isDirectory: false)
        // Each alternative is classified on its own.
        let mixed = try PathGlob("{*.tmp,build/}")
        XCTAssertTrue(mixed.matches("x/y/z.tmp"))
        XCTAssertTrue(mixed.matches("build", isDirectory: true))
        XCTAssertTrue(mixed.matches("x/build", isDirectory: true), "a trailing slash does not anchor")
        XCTAssertFalse(mixed.matches("build"), "build/ matches directories only")
    }

    func testBackslashEscapes() throws {
        try assertMatches("a\\*b", ["a*b"])
        try assertMisses("a\\*b", ["aXb"])
        try assertMatches("\\?\\[\\{\\}\\,\\\\", ["?[{},\\"])
        try assertMisses("\\?", ["a"])
        try assertMatches("\\{a,b\\}", ["{a,b}"])
    }

    func testAPatternWithoutASlashMatchesTheNameAtAnyDepth() throws {
        try assertMatches("node_modules", ["node_modules", "a/node_modules", "a/b/node_modules"], isDirectory: true)
        try assertMisses("node_modules", ["node_modules/x", "node_modules2"], isDirectory: true)
    }

    func testAPatternWithASlashIsAnchored() throws {
        try assertMatches("a/b.txt", ["a/b.txt"])
        try assertMisses("a/b.txt", ["x/a/b.txt"])
        try assertMatches("/top.txt", ["top.txt"])
        try assertMisses("/top.txt", ["x/top.txt"])
        try assertMatches("/*.txt", ["a.txt"])
        try assertMisses("/*.txt", ["x/a.txt"])
    }

    func testATrailingSlashMatchesDirectoriesAndWhatIsBelowThem() throws {
        let cache = try PathGlob("cache/")
        XCTAssertTrue(cache.matches("cache", isDirectory: true))
        XCTAssertTrue(cache.matches("x/cache", isDirectory: true))
        XCTAssertFalse(cache.matches("cache"), "a file named cache")
        XCTAssertTrue(cache.matches("cache/a"))
        XCTAssertTrue(cache.matches("x/cache/y/z"))
        XCTAssertFalse(cache.matches("cachex/y"))
        XCTAssertFalse(cache.matches("x/cache.txt"))
        let anchored = try PathGlob("a/cache/")
        XCTAssertTrue(anchored.matches("a/cache/f"))
        XCTAssertFalse(anchored.matches("x/a/cache/f"))
    }

    func testEverythingBelowADirectory() throws {
        let build = try PathGlob("build/**")
        XCTAssertTrue(build.matchesEverything(below: "build"))
        XCTAssertFalse(build.matchesEverything(below: "x/build"))
        XCTAssertFalse(build.matches("build", isDirectory: true))
        XCTAssertTrue(try PathGlob("**/build/**").matchesEverything(below: "x/y/build"))
        XCTAssertTrue(try PathGlob("**/build/**").matchesEverything(below: "build"))
        XCTAssertFalse(try PathGlob("build/*").matchesEverything(below: "build"))
        XCTAssertFalse(try PathGlob("build/**/").matchesEverything(below: "build"), "directories only: build's own files stay")
    }

    func testNonASCIIAndCase() throws {
        try assertMatches("照片/*.mp4", ["照片/视频 01.mp4"])
        try assertMatches("视频 ??.mp4", ["照片/视频 01.mp4"])
        try assertMatches("[照相]片/**", ["照片/视频 01.mp4"])
        try assertMisses("*.JPG", ["a.jpg"])
        // No normalization: a decomposed é is two scalars.
        try assertMisses("?", ["e\u{301}"])
        try assertMatches("??", ["e\u{301}"])
    }

    func testPathologicalPatternsStayCheap() throws {
        // Backtracking would take ages on this; the state set takes microseconds.
        let glob = try PathGlob("*a*a*a*a*a*a*a*a*a*a*b")
        XCTAssertFalse(glob.matches(String(repeating: "a", count: 4000)))
        XCTAssertTrue(try PathGlob("/**a**a**a**a**a**b").matches(String(repeating: "a/", count: 500) + "b"))
        // More than 64 tokens.
        let long = String(repeating: "ab/", count: 40) + "*.txt"
        XCTAssertTrue(try PathGlob(long).matches(String(repeating: "ab/", count: 40) + "x.txt"))
        XCTAssertFalse(try PathGlob(long).matches(String(repeating: "ab/", count: 39) + "x.txt"))
    }

    func testMalformedPatternsAreOneLineErrors() {
        let cases: [(String, String)] = [
            ("[abc", "the include or exclude pattern '[abc' has a '[' without its ']' (write '\\[' for a literal '[')"),
            ("a[!", "has a '[' without its ']'"),
            ("[]", "has a '[' without its ']'"),
            ("[a\\", "has a '[' without its ']'"),
            ("{a,b", "the include or exclude pattern '{a,b' has a '{' without its '}' (write '\\{' for a literal '{')"),
            ("{a,{b}", "has a '{' without its '}'"),
            ("a\\", "ends in a lone '\\' (write '\\\\' for a backslash)"),
            ("[z-a]", "has the reversed range 'z-a' (write 'a-z')"),
            ("", "matches nothing; remove it"),
            ("/", "matches nothing; remove it"),
            (String(repeating: "{a,b}", count: 9), "stands for more than 256 alternatives; split it"),
        ]
        for (pattern, message) in cases {
            XCTAssertThrowsError(try PathGlob(pattern), pattern) { error in
                guard let error = error as? XferError, error.kind == .invalidInput, case let text = error.message else { return XCTFail("\(error)") }
                XCTAssertTrue(text.contains(message), "\(pattern): \(text)")
                XCTAssertFalse(text.contains("\n"), text)
            }
        }
    }

    func testThePatternIsKeptAsGiven() throws {
        XCTAssertEqual(try PathGlob("/a/{b,c}/").description, "/a/{b,c}/")
        XCTAssertEqual(try PathGlob("*.jpg"), try PathGlob("*.jpg"))
    }
}
