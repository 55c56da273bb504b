import ArgumentParser
import FoundationEssentials
import XferPrimitives

/// Where job state lives: `--state`, else `$XFER_STATE_DIR`, else
/// `$XDG_STATE_HOME/xfer`, else `~/.local/state/xfer`. One option group for
/// every command that reads or writes jobs, so they all look in the same place.
struct StateLocation: ParsableArguments {
    @Option(name: .customLong("state"), help: "State directory (default: $XFER_STATE_DIR, $XDG_STATE_HOME/xfer or ~/.local/state/xfer).")
    var explicit: String?

    var directory: String {
        let environment = ProcessInfo.processInfo.environment
        if let explicit, !explicit.isEmpty { return explicit }
        if let value = environment["XFER_STATE_DIR"], !value.isEmpty { return value }
        if let value = environment["XDG_STATE_HOME"], !value.isEmpty {
            return PathText.appending("xfer", to: value)
        }
        let home = HomeDirectory.path(environment: environment)
        return PathText.appending(".local/state/xfer", to: home)
    }
}
