/// What went wrong, in words a user can act on. The cases are coarse on
/// purpose: each is one kind of outcome a caller handles differently (the
/// CLI gives each its own exit code, in XferCLI).
public enum XferError: Error, Sendable, Hashable, CustomStringConvertible {
    /// Bad usage or input: a missing file, a malformed URL, an absurd option.
    case invalidInput(String)
    /// A local file differs from when the job began.
    case fileChanged(path: String, detail: String)
    /// A local file of the job cannot be read (gone, unreadable, not a regular file).
    case fileUnreadable(path: String, reason: String)
    /// The state directory cannot be used.
    case stateUnavailable(String)
    /// Another live process holds this job.
    case jobLocked(job: JobID, pid: Int32?)
    /// No job with this id (or id prefix) is in the state store.
    case unknownJob(String)
    /// The transfer stopped on an error retries did not fix. State is kept.
    case transferFailed(String)
    /// The server answered something that contradicts the protocol.
    case verificationFailed(String)
    /// Stopped by a signal or by `cancel()`; state is committed.
    case interrupted

    /// One actionable line for users, never holding a secret.
    public var description: String {
        switch self {
        case .invalidInput(let message):
            return message
        case .fileChanged(let path, let detail):
            return "\(path) changed since this job began (\(detail)); re-run with --restart to send it again from the start"
        case .fileUnreadable(let path, let reason):
            return "cannot read \(path): \(reason)"
        case .stateUnavailable(let message):
            return "state store unusable: \(message)"
        case .jobLocked(let job, let pid):
            let holder = pid.map { "pid \($0)" } ?? "another process"
            return "state for job \(job) is locked by \(holder); wait for it to finish or stop it"
        case .unknownJob(let id):
            return "no job '\(id)' in this state directory; 'xfer list --all' shows the jobs it holds"
        case .transferFailed(let message):
            // A message that already says what to do next keeps its own advice.
            if message.contains("--restart") { return "transfer failed: \(message)" }
            return "transfer failed: \(message) (state kept; re-run the same command to resume)"
        case .verificationFailed(let message):
            return "verification failed: \(message)"
        case .interrupted:
            return "interrupted; state saved, re-run the same command to resume"
        }
    }
}
