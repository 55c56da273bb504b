/// A filter pattern for `--include` / `--exclude`, matched against a path
/// relative to the directory pushed ('/'-separated).
///
/// - `*` any run of characters but `/`; `?` one character but `/`;
///   `**` any run including `/`, and `**/` also no directory at all;
///   `[abc]`, `[a-z]`, `[!abc]` classes; `{a,b}` alternatives; `\` escapes.
/// - A pattern without `/` matches a name at any depth (`*.jpg` matches
///   `a.jpg` and `x/y/a.jpg`), as rclone's filters do; one with `/` is
///   anchored at the directory pushed (a leading `/` means the same).
/// - A pattern ending in `/` matches directories only.
///
/// Matching is on Unicode scalars and case-sensitive, like the file system.
public struct PathGlob: Sendable, Hashable, CustomStringConvertible {
    /// The pattern as given.
    public let description: String
    /// Matches the last component only (the pattern has no `/`).
    let matchesName: Bool
    let directoriesOnly: Bool
    /// The pattern with its alternatives expanded.
    private let alternatives: [[Token]]

    enum Token: Sendable, Hashable {
        case literal(Unicode.Scalar)
        case one
        case star
        /// `**`
        case anything
        /// `**/`: nothing, or anything that ends in `/`.
        case directories
        case set([ClosedRange<UInt32>], negated: Bool)
    }

    /// At most this many alternatives after expanding `{}`: a bound on the
    /// work one pattern can cause.
    static let maximumAlternatives = 256

    /// Parses `pattern`; a malformed one is `.invalidInput` with a one-line reason.
    public init(_ pattern: String) throws(XferError) {
        description = pattern
        var body = Array(pattern.unicodeScalars)
        guard !body.isEmpty else { throw .invalidInput("an empty --include/--exclude pattern matches nothing; remove it") }
        directoriesOnly = body.count > 1 && body.last == "/" && !(body.count >= 2 && body[body.count - 2] == "\\")
        if directoriesOnly { body.removeLast() }
        if body.first == "/" { body.removeFirst() }
        matchesName = !Self.containsSeparator(body) && pattern.unicodeScalars.first != "/"
        let expanded = try Self.expand(body, pattern: pattern)
        var alternatives: [[Token]] = []
        for alternative in expanded { alternatives.append(try Self.tokens(alternative, pattern: pattern)) }
        self.alternatives = alternatives
    }

    /// Whether `relativePath` (of a directory when `isDirectory`) matches.
    public func matches(_ relativePath: String, isDirectory: Bool = false) -> Bool {
        if directoriesOnly && !isDirectory { return false }
        var subject = Array(relativePath.unicodeScalars)
        if matchesName, let slash = subject.lastIndex(of: "/") { subject = Array(subject[(slash + 1)...]) }
        return alternatives.contains { Self.match($0[...], subject[...]) }
    }

    // MARK: Parsing

    private static func containsSeparator(_ scalars: [Unicode.Scalar]) -> Bool {
        var escaped = false
        for scalar in scalars {
            if escaped { escaped = false; continue }
            if scalar == "\\" { escaped = true; continue }
            if scalar == "/" { return true }
        }
        return false
    }

    /// `{a,b}` expanded into whole patterns (nested braces included).
    private static func expand(_ scalars: [Unicode.Scalar], pattern: String) throws(XferError) -> [[Unicode.Scalar]] {
        var index = 0
        var escaped = false
        var inClass = false
        while index < scalars.count {
            let scalar = scalars[index]
            if escaped {
                escaped = false
            } else if scalar == "\\" {
                escaped = true
            } else if inClass {
                if scalar == "]" { inClass = false }
            } else if scalar == "[" {
                inClass = true
            } else if scalar == "{" {
                // Find the matching brace and the top-level commas.
                var depth = 0
                var commas: [Int] = []
                var end: Int?
                var j = index
                var esc = false
                while j < scalars.count {
                    let c = scalars[j]
                    if esc {
                        esc = false
                    } else if c == "\\" {
                        esc = true
                    } else if c == "{" {
                        depth += 1
                    } else if c == "}" {
                        depth -= 1
                        if depth == 0 { end = j; break }
                    } else if c == ",", depth == 1 {
                        commas.append(j)
                    }
                    j += 1
                }
                guard let end else { throw .invalidInput("the pattern '\(pattern)' has a '{' without its '}'") }
                let head = Array(scalars[..<index])
                let tail = Array(scalars[(end + 1)...])
                var bounds = [index] + commas + [end]
                var result: [[Unicode.Scalar]] = []
                for k in 0..<(bounds.count - 1) {
                    let part = Array(scalars[(bounds[k] + 1)..<bounds[k + 1]])
                    for expanded in try expand(head + part + tail, pattern: pattern) {
                        result.append(expanded)
                        guard result.count <= maximumAlternatives else {
                            throw .invalidInput("the pattern '\(pattern)' has more than \(maximumAlternatives) alternatives")
                        }
                    }
                }
                bounds.removeAll()
                return result
            }
            index += 1
        }
        if inClass { throw .invalidInput("the pattern '\(pattern)' has a '[' without its ']'") }
        return [scalars]
    }

    private static func tokens(_ scalars: [Unicode.Scalar], pattern: String) throws(XferError) -> [Token] {
        var tokens: [Token] = []
        var index = 0
        while index < scalars.count {
            let scalar = scalars[index]
            switch scalar {
            case "\\":
                guard index + 1 < scalars.count else {
                    throw .invalidInput("the pattern '\(pattern)' ends in a lone '\\'")
                }
                tokens.append(.literal(scalars[index + 1]))
                index += 2
                continue
            case "?":
                tokens.append(.one)
            case "*":
                if index + 1 < scalars.count, scalars[index + 1] == "*" {
                    index += 1
                    let atStart = index == 1 || scalars[index - 2] == "/"
                    if atStart, index + 1 < scalars.count, scalars[index + 1] == "/" {
                        tokens.append(.directories)
                        index += 1
                    } else {
                        tokens.append(.anything)
                    }
                } else {
                    tokens.append(.star)
                }
            case "[":
                var j = index + 1
                var negated = false
                if j < scalars.count, scalars[j] == "!" || scalars[j] == "^" {
                    negated = true
                    j += 1
                }
                var ranges: [ClosedRange<UInt32>] = []
                var first = true
                while j < scalars.count, scalars[j] != "]" || first {
                    first = false
                    var low = scalars[j]
                    if low == "\\", j + 1 < scalars.count {
                        j += 1
                        low = scalars[j]
                    }
                    if j + 2 < scalars.count, scalars[j + 1] == "-", scalars[j + 2] != "]" {
                        let high = scalars[j + 2]
                        guard low.value <= high.value else {
                            throw .invalidInput("the pattern '\(pattern)' has the reversed range \(low)-\(high)")
                        }
                        ranges.append(low.value...high.value)
                        j += 3
                    } else {
                        ranges.append(low.value...low.value)
                        j += 1
                    }
                }
                guard j < scalars.count else { throw .invalidInput("the pattern '\(pattern)' has a '[' without its ']'") }
                tokens.append(.set(ranges, negated: negated))
                index = j
            default:
                tokens.append(.literal(scalar))
            }
            index += 1
        }
        return tokens
    }

    // MARK: Matching

    /// Backtracking over the tokens; stars try the shortest run first. Paths
    /// are short (4 KiB at most), so the worst case stays small.
    private static func match(_ tokens: ArraySlice<Token>, _ subject: ArraySlice<Unicode.Scalar>) -> Bool {
        guard let token = tokens.first else { return subject.isEmpty }
        let rest = tokens.dropFirst()
        switch token {
        case .literal(let scalar):
            guard subject.first == scalar else { return false }
            return match(rest, subject.dropFirst())
        case .one:
            guard let first = subject.first, first != "/" else { return false }
            return match(rest, subject.dropFirst())
        case .set(let ranges, let negated):
            guard let first = subject.first, first != "/" else { return false }
            let inside = ranges.contains { $0.contains(first.value) }
            guard inside != negated else { return false }
            return match(rest, subject.dropFirst())
        case .star:
            var remaining = subject
            while true {
                if match(rest, remaining) { return true }
                guard let first = remaining.first, first != "/" else { return false }
                remaining = remaining.dropFirst()
            }
        case .anything:
            var remaining = subject
            while true {
                if match(rest, remaining) { return true }
                guard !remaining.isEmpty else { return false }
                remaining = remaining.dropFirst()
            }
        case .directories:
            if match(rest, subject) { return true }
            var remaining = subject
            while let slash = remaining.firstIndex(of: "/") {
                remaining = remaining[(slash + 1)...]
                if match(rest, remaining) { return true }
            }
            return false
        }
    }
}
