/// A filter pattern for `--include` / `--exclude`, matched against a path
/// relative to the directory pushed ('/'-separated). The syntax is the one
/// rclone and .gitignore users already type, so their patterns carry over.
///
/// Syntax:
/// - `*` any run of characters but `/`; `?` one character but `/`.
/// - `**` any run of characters, `/` included. As a whole component (`**/`)
///   it also matches no directory at all: `**/*.jpg` matches `a.jpg` as well
///   as `x/y/a.jpg`.
/// - `[abc]`, `[a-z]`, `[!abc]` (or `[^abc]`): one character, never `/`, in
///   (or not in) the class. A `]` right after `[` or `[!` is a member.
/// - `{a,b,c}`: any one of the alternatives, which may hold all of the above
///   and nest. Outside braces, `,` and `}` are ordinary characters.
/// - `\` makes the next character literal, inside a class too.
///
/// What a pattern is matched against:
/// - Without a `/`, the last component, at any depth (`*.jpg` matches `a.jpg`
///   and `x/y/a.jpg`), as rclone does: the common case needs no `**/`.
/// - With a `/`, the whole relative path: the pattern is anchored at the
///   directory pushed. A leading `/` only anchors (`/a.jpg` is the top-level
///   `a.jpg` alone).
/// - Ending in `/`, directories only (`cache/`), and so every path below a
///   directory that matches: `--exclude cache/` prunes such directories,
///   `--include photos/` takes every file inside them.
/// - Each `{}` alternative is classified on its own, so `{*.tmp,build/}`
///   means the name pattern `*.tmp` or the directory `build`.
///
/// Matching is on Unicode scalars, case-sensitive and without Unicode
/// normalization, like the file system's own names. It runs a set of states
/// over the pattern instead of backtracking, so no pattern can make a match
/// cost more than the path's length times the pattern's.
public struct PathGlob: Sendable, Hashable, CustomStringConvertible {
    /// The pattern as given (kept with the job, so a resume parses it again).
    public let description: String
    /// The pattern with its `{}` alternatives expanded.
    private let branches: [Branch]

    /// At most this many alternatives after expanding `{}`: a bound on what
    /// one pattern can cost for every path of a large tree.
    static let maximumAlternatives = 256

    /// Parses `pattern`.
    ///
    /// - Throws: `.invalidInput` with a one-line reason and the fix when the
    ///   pattern is malformed: an unclosed `[` or `{`, a trailing lone `\`, a
    ///   reversed range, or a pattern that can match nothing (empty, `/`).
    public init(_ pattern: String) throws(XferError) {
        description = pattern
        let lexemes = try Self.lex(pattern)
        let expanded = try Self.expand(lexemes, pattern: pattern)
        branches = expanded.map(Branch.init)
        guard branches.contains(where: { !$0.tokens.isEmpty }) else {
            throw Self.malformed(pattern, "matches nothing; remove it")
        }
    }

    /// Whether `relativePath` matches; `isDirectory` says what it names, for
    /// the patterns ending in `/`.
    public func matches(_ relativePath: String, isDirectory: Bool = false) -> Bool {
        branches.contains { $0.matches(relativePath[...], isDirectory: isDirectory) }
    }

    /// Whether every path below the directory `relativePath` matches, which
    /// `dir/**` says without matching `dir` itself: an exclude like that
    /// prunes the directory instead of opening it to drop all it holds.
    func matchesEverything(below relativePath: String) -> Bool {
        branches.contains { branch in
            guard let prefix = branch.contentsPrefix else { return false }
            return Self.run(prefix, relativePath.unicodeScalars[...])
        }
    }

    private static func malformed(_ pattern: String, _ problem: String) -> XferError {
        .invalidInput("the include or exclude pattern '\(pattern)' \(problem)")
    }

    // MARK: Parsing

    /// What the pattern's characters mean before `{}` is expanded.
    private enum Lexeme: Hashable {
        case scalar(Unicode.Scalar)
        case star
        case one
        case set([ClosedRange<UInt32>], negated: Bool)
        case open
        case comma
        case close
    }

    /// One step of the matcher.
    enum Token: Sendable, Hashable {
        case literal(Unicode.Scalar)
        /// `?`
        case one
        /// `[...]`
        case set([ClosedRange<UInt32>], negated: Bool)
        /// `*`: any run without `/`.
        case star
        /// `**`: any run.
        case anything
        /// Either the next token or the one `skip` ahead: `**/` is
        /// `fork(3), anything, literal("/")`, so "no directory" is the
        /// skip and "some directories" must end in a `/`.
        case fork(skip: Int)
    }

    /// One `{}` alternative, ready to match.
    private struct Branch: Sendable, Hashable {
        let tokens: [Token]
        /// No `/` in the pattern: matched against the last component.
        let matchesName: Bool
        /// Ends in `/`: directories, and what is below them.
        let directoriesOnly: Bool
        /// For `X/**`, the tokens of `X`.
        let contentsPrefix: [Token]?

        init(_ lexemes: [Lexeme]) {
            var body = lexemes[...]
            var anchored = false
            while body.first == .scalar("/") {
                body.removeFirst()
                anchored = true
            }
            var directoriesOnly = false
            while body.last == .scalar("/") {
                body.removeLast()
                directoriesOnly = true
            }
            if body.contains(.scalar("/")) { anchored = true }
            let tokens = Self.tokens(body)
            self.tokens = tokens
            matchesName = !anchored
            self.directoriesOnly = directoriesOnly
            if !directoriesOnly, tokens.count >= 2, tokens.last == .anything, tokens[tokens.count - 2] == .literal("/") {
                contentsPrefix = Array(tokens.dropLast(2))
            } else {
                contentsPrefix = nil
            }
        }

        private static func tokens(_ body: ArraySlice<Lexeme>) -> [Token] {
            var tokens: [Token] = []
            var index = body.startIndex
            while index < body.endIndex {
                switch body[index] {
                case .star:
                    var end = index
                    while end < body.endIndex, body[end] == .star { end += 1 }
                    if end - index == 1 {
                        tokens.append(.star)
                    } else if index == body.startIndex || body[index - 1] == .scalar("/"),
                        end < body.endIndex, body[end] == .scalar("/")
                    {
                        tokens += [.fork(skip: 3), .anything, .literal("/")]
                        end += 1
                    } else {
                        tokens.append(.anything)
                    }
                    index = end
                    continue
                case .scalar(let scalar): tokens.append(.literal(scalar))
                case .one: tokens.append(.one)
                case .set(let ranges, let negated): tokens.append(.set(ranges, negated: negated))
                // Left after expansion: stray, hence literal.
                case .open: tokens.append(.literal("{"))
                case .comma: tokens.append(.literal(","))
                case .close: tokens.append(.literal("}"))
                }
                index += 1
            }
            return tokens
        }

        func matches(_ path: Substring, isDirectory: Bool) -> Bool {
            guard directoriesOnly else { return matchesWhole(path) }
            if isDirectory, matchesWhole(path) { return true }
            // Below a matching directory.
            let utf8 = path.utf8
            var index = utf8.startIndex
            while index < utf8.endIndex {
                if utf8[index] == UInt8(ascii: "/"), matchesWhole(path[..<index]) { return true }
                index = utf8.index(after: index)
            }
            return false
        }

        private func matchesWhole(_ path: Substring) -> Bool {
            var subject = path
            if matchesName, let slash = path.utf8.lastIndex(of: UInt8(ascii: "/")) {
                subject = path[path.utf8.index(after: slash)...]
            }
            return PathGlob.run(tokens, subject.unicodeScalars)
        }
    }

    private static func lex(_ pattern: String) throws(XferError) -> [Lexeme] {
        let scalars = Array(pattern.unicodeScalars)
        var lexemes: [Lexeme] = []
        var index = 0
        while index < scalars.count {
            switch scalars[index] {
            case "\\":
                guard index + 1 < scalars.count else {
                    throw malformed(pattern, "ends in a lone '\\' (write '\\\\' for a backslash)")
                }
                lexemes.append(.scalar(scalars[index + 1]))
                index += 1
            case "*": lexemes.append(.star)
            case "?": lexemes.append(.one)
            case "{": lexemes.append(.open)
            case ",": lexemes.append(.comma)
            case "}": lexemes.append(.close)
            case "[":
                let (set, end) = try lexClass(scalars, from: index + 1, pattern: pattern)
                lexemes.append(set)
                index = end
            case let scalar: lexemes.append(.scalar(scalar))
            }
            index += 1
        }
        return lexemes
    }

    /// The class starting after its `[`; returns it and the index of its `]`.
    private static func lexClass(
        _ scalars: [Unicode.Scalar], from start: Int, pattern: String
    ) throws(XferError) -> (Lexeme, Int) {
        let unclosed = malformed(pattern, "has a '[' without its ']' (write '\\[' for a literal '[')")
        var index = start
        var negated = false
        if index < scalars.count, scalars[index] == "!" || scalars[index] == "^" {
            negated = true
            index += 1
        }
        var ranges: [ClosedRange<UInt32>] = []
        /// One member, `\`-escaped or not, advancing past it.
        func member() throws(XferError) -> Unicode.Scalar {
            guard index < scalars.count else { throw unclosed }
            if scalars[index] == "\\" { index += 1 }
            guard index < scalars.count else { throw unclosed }
            defer { index += 1 }
            return scalars[index]
        }
        var first = true
        while true {
            guard index < scalars.count else { throw unclosed }
            if scalars[index] == "]", !first { return (.set(ranges, negated: negated), index) }
            first = false
            let low = try member()
            if index + 1 < scalars.count, scalars[index] == "-", scalars[index + 1] != "]" {
                index += 1
                let high = try member()
                guard low.value <= high.value else {
                    throw malformed(pattern, "has the reversed range '\(low)-\(high)' (write '\(high)-\(low)')")
                }
                ranges.append(low.value...high.value)
            } else {
                ranges.append(low.value...low.value)
            }
        }
    }

    /// Every pattern `{}` stands for, nested braces included.
    private static func expand(_ lexemes: [Lexeme], pattern: String) throws(XferError) -> [[Lexeme]] {
        guard let open = lexemes.firstIndex(of: .open) else { return [lexemes] }
        var depth = 0
        var commas: [Int] = []
        var close: Int?
        for index in open..<lexemes.count {
            switch lexemes[index] {
            case .open: depth += 1
            case .close: depth -= 1
            case .comma where depth == 1: commas.append(index)
            default: break
            }
            if depth == 0 {
                close = index
                break
            }
        }
        guard let close else {
            throw malformed(pattern, "has a '{' without its '}' (write '\\{' for a literal '{')")
        }
        let bounds = [open] + commas + [close]
        var result: [[Lexeme]] = []
        for part in 0..<(bounds.count - 1) {
            let alternative = lexemes[..<open] + lexemes[(bounds[part] + 1)..<bounds[part + 1]] + lexemes[(close + 1)...]
            for expanded in try expand(Array(alternative), pattern: pattern) {
                result.append(expanded)
                guard result.count <= maximumAlternatives else {
                    throw malformed(pattern, "stands for more than \(maximumAlternatives) alternatives; split it")
                }
            }
        }
        return result
    }

    // MARK: Matching

    /// Whether `tokens` match all of `subject`: the set of tokens reachable
    /// so far, advanced one scalar at a time.
    static func run(_ tokens: [Token], _ subject: Substring.UnicodeScalarView) -> Bool {
        if tokens.count < UInt64.bitWidth {
            return run(tokens, subject, empty: SmallStates())
        }
        return run(tokens, subject, empty: LargeStates(count: tokens.count + 1))
    }

    private static func run<States: StateSet>(
        _ tokens: [Token], _ subject: Substring.UnicodeScalarView, empty: States
    ) -> Bool {
        var current = empty
        current.insert(0)
        closeOver(&current, tokens)
        for scalar in subject {
            var next = empty
            for index in 0..<tokens.count where current.contains(index) {
                switch tokens[index] {
                case .literal(let literal):
                    if scalar == literal { next.insert(index + 1) }
                case .one:
                    if scalar != "/" { next.insert(index + 1) }
                case .set(let ranges, let negated):
                    if scalar != "/", ranges.contains(where: { $0.contains(scalar.value) }) != negated {
                        next.insert(index + 1)
                    }
                case .star:
                    if scalar != "/" { next.insert(index) }
                case .anything:
                    next.insert(index)
                case .fork:
                    break
                }
            }
            if next.isEmpty { return false }
            closeOver(&next, tokens)
            current = next
        }
        return current.contains(tokens.count)
    }

    /// Adds what is reachable without consuming anything; every such step
    /// goes forward, so one pass in order suffices.
    private static func closeOver<States: StateSet>(_ states: inout States, _ tokens: [Token]) {
        for index in 0..<tokens.count where states.contains(index) {
            switch tokens[index] {
            case .star, .anything:
                states.insert(index + 1)
            case .fork(let skip):
                states.insert(index + 1)
                states.insert(index + skip)
            default:
                break
            }
        }
    }
}

private protocol StateSet {
    func contains(_ state: Int) -> Bool
    mutating func insert(_ state: Int)
    var isEmpty: Bool { get }
}

/// Patterns of fewer than 64 tokens (nearly all): one word, no allocation.
private struct SmallStates: StateSet {
    var bits: UInt64 = 0
    func contains(_ state: Int) -> Bool { bits & (1 << UInt64(state)) != 0 }
    mutating func insert(_ state: Int) { bits |= 1 << UInt64(state) }
    var isEmpty: Bool { bits == 0 }
}

private struct LargeStates: StateSet {
    var bits: [Bool]
    init(count: Int) { bits = Array(repeating: false, count: count) }
    func contains(_ state: Int) -> Bool { bits[state] }
    mutating func insert(_ state: Int) { bits[state] = true }
    var isEmpty: Bool { !bits.contains(true) }
}
