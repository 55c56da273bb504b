/// The few path operations xfer does on strings, with the meaning of Foundation's `NSString`
/// path methods (which only full Foundation has): `/` is the one separator, a trailing `/` is
/// not a component, and nothing touches the filesystem.
public enum PathText {
    /// `path` and `component` joined by exactly one `/` (`"dir/" + "db"` is `dir/db`).
    public static func appending(_ component: String, to path: String) -> String {
        if path.isEmpty { return component }
        if component.isEmpty { return path }
        // By scalars, not Characters: `xfer list` makes two of these a job, and walking a
        // reversed view of Characters was a third of its time with 10,000 jobs.
        let head = path.unicodeScalars
        var end = head.endIndex
        while end > head.startIndex {
            let before = head.index(before: end)
            guard head[before] == "/" else { break }
            end = before
        }
        let tail = component.unicodeScalars
        var start = tail.startIndex
        while start < tail.endIndex, tail[start] == "/" { start = tail.index(after: start) }
        return String(Substring(head[..<end])) + "/" + String(Substring(tail[start...]))
    }

    /// The last component (`/a/b/` → `b`, `/` → `/`, `` → ``).
    public static func lastComponent(of path: String) -> String {
        let trimmed = path.reversed().drop { $0 == "/" }
        if trimmed.isEmpty { return path.isEmpty ? "" : "/" }
        return String(String(trimmed.prefix { $0 != "/" }).reversed())
    }

    /// `path` without its last component (`/a/b` → `/a`, `/a` → `/`, `a` → ``, `a/b/` → `a`).
    public static func deletingLastComponent(of path: String) -> String {
        var characters = Substring(path)
        while characters.count > 1, characters.hasSuffix("/") { characters = characters.dropLast() }
        guard let slash = characters.lastIndex(of: "/") else { return "" }
        var parent = characters[..<slash]
        while parent.count > 1, parent.hasSuffix("/") { parent = parent.dropLast() }
        return parent.isEmpty ? "/" : String(parent)
    }

    /// The extension of the last component, without its dot (`a.tar.gz` → `gz`); empty when
    /// there is none, or when the only dot starts the name (`.bashrc`).
    public static func pathExtension(of path: String) -> String {
        let name = lastComponent(of: path)
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return "" }
        return String(name[name.index(after: dot)...])
    }
}
