import Xfer

/// The CLI's exit codes (Docs/cli.md). They are the CLI's, not the library's:
/// a program using the library decides what each error means to it.
enum ExitStatus {
    static let success: Int32 = 0
    static let transferFailed: Int32 = 1
    static let badInput: Int32 = 2
    static let stateUnusable: Int32 = 3
    static let interrupted: Int32 = 130
}

/// How the CLI reports a library error: its exit code, and one line that
/// says what happened and what to type about it.
extension XferError {
    /// The exit code the CLI ends with on this error.
    var exitCode: Int32 {
        switch self {
        case .invalidInput, .fileChanged, .unknownJob: return ExitStatus.badInput
        case .stateUnavailable, .jobLocked: return ExitStatus.stateUnusable
        case .transferFailed, .verificationFailed, .fileUnreadable: return ExitStatus.transferFailed
        case .interrupted: return ExitStatus.interrupted
        }
    }

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
