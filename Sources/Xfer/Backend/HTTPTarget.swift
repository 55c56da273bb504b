import FoundationEssentials
import XferPrimitives

/// The `--to` form most protocols take: the server's root URL.
public enum HTTPTarget {
    /// `target` as an http(s) URL with a host and without a trailing slash.
    /// The message never repeats the URL's query (it may hold secrets).
    public static func normalized(_ target: String) throws(BackendError) -> String {
        let trimmed = target.trimmingSpacesAndTabs()
        guard let components = URLComponents(string: trimmed),
            let scheme = components.scheme?.lowercased(), scheme == "http" || scheme == "https",
            let host = components.host, !host.isEmpty,
            components.fragment == nil
        else {
            let shown = trimmed.split(separator: "?", maxSplits: 1).first.map(String.init) ?? ""
            throw .rejected("'\(shown)' is not a usable URL; expected http(s)://HOST[:PORT][/PATH]")
        }
        if let port = components.port, !(1...65535).contains(port) {
            throw .rejected("port \(port) is out of range in the target URL")
        }
        var normalized = trimmed
        while normalized.hasSuffix("/") { normalized.removeLast() }
        return normalized
    }
}
