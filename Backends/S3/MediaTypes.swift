import FoundationEssentials

/// The media type of a file name's extension, from the system's table
/// (`/etc/mime.types`, Debian's `media-types` package: maintained there,
/// not here). Without the table every object is `application/octet-stream`.
enum MediaTypes {
    static let fallback = "application/octet-stream"

    /// `type` for a name ending in `.ext` (case-insensitive), else the fallback.
    static func type(forFileNamed name: String) -> String {
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return fallback }
        let ext = name[name.index(after: dot)...].lowercased()
        return table[ext] ?? fallback
    }

    /// Read once, on first use.
    static let table: [String: String] = parse((try? String(contentsOfFile: "/etc/mime.types", encoding: .utf8)) ?? "")

    /// Lines `type ext ext…`; `#` starts a comment. The first type to name an extension wins.
    static func parse(_ text: String) -> [String: String] {
        var table: [String: String] = [:]
        for line in text.split(whereSeparator: \.isNewline) {
            let fields = line.prefix { $0 != "#" }.split(whereSeparator: { $0 == " " || $0 == "\t" })
            guard let type = fields.first, type.contains("/"), fields.count > 1 else { continue }
            for ext in fields.dropFirst() where table[ext.lowercased()] == nil {
                table[ext.lowercased()] = String(type)
            }
        }
        return table
    }
}
