import Xfer

/// The CLI's exit codes (Docs/cli.md): the library's conventional ones
/// (`XferError.Kind.exitCode`), named where the CLI ends without an error.
enum ExitStatus {
    static let success: Int32 = 0
    static let transferFailed = XferError.Kind.transferFailed.exitCode
    static let badInput = XferError.Kind.invalidInput.exitCode
    static let stateUnusable = XferError.Kind.stateUnavailable.exitCode
    static let interrupted = XferError.Kind.interrupted.exitCode
}

/// How the CLI reports a library error: one line that says what happened
/// and what to type about it (its exit code is the library's `exitCode`).
extension XferError {
    /// The error's message and its remedy, in the CLI's own terms.
    var line: String {
        guard let remedy else { return message }
        switch remedy {
        case .runAgain: return "\(message) (state kept; re-run the same command to resume)"
        case .startOver: return "\(message); re-run with --restart to send it again from the start"
        case .useAnotherStateDirectory: return "\(message); pass --state DIR to use another state directory"
        case .listJobs: return "\(message); 'xfer list --all' shows the jobs it holds"
        case .waitForHolder: return "\(message); wait for it to finish or stop it"
        }
    }
}

extension SkipReason {
    /// The reason in the CLI's terms: a link not followed names the flag that follows it.
    var line: String {
        self == .symbolicLinkNotFollowed ? "\(description) (use --follow-symlinks)" : description
    }
}
