#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#else
import Darwin
#endif

/// The user's home directory, found the way shell tools find it (aws-cli,
/// ssh, git): `$HOME` when it is set and not empty, else the password
/// entry's. Containers, CI runners and `sudo -E` point `HOME` elsewhere than
/// the password entry on purpose; `~/.aws` and xfer's own state follow it.
public enum HomeDirectory {
    /// The home directory for `environment` (the process's own, by default).
    public static func path(environment: [String: String]) -> String {
        if let home = environment["HOME"], !home.isEmpty { return home }
        return passwordEntryHome() ?? "/"
    }

    /// The home directory of the process's own environment.
    public static var current: String {
        if let value = getenv("HOME"), value.pointee != 0 { return String(cString: value) }
        return passwordEntryHome() ?? "/"
    }

    private static func passwordEntryHome() -> String? {
        guard let entry = getpwuid(getuid()), let directory = entry.pointee.pw_dir else { return nil }
        let home = String(cString: directory)
        return home.isEmpty ? nil : home
    }
}
