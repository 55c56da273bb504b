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
}
