import Foundation

/// Where job state lives: `--state`, else `$XFER_STATE_DIR`, else
/// `$XDG_STATE_HOME/xfer`, else `~/.local/state/xfer`.
enum StateLocation {
    static func resolve(_ explicit: String?) -> String {
        let environment = ProcessInfo.processInfo.environment
        if let explicit, !explicit.isEmpty { return explicit }
        if let value = environment["XFER_STATE_DIR"], !value.isEmpty { return value }
        if let value = environment["XDG_STATE_HOME"], !value.isEmpty {
            return (value as NSString).appendingPathComponent("xfer")
        }
        let home = environment["HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? NSHomeDirectory()
        return (home as NSString).appendingPathComponent(".local/state/xfer")
    }
}
