/// What went wrong, in words a user can act on. The cases are coarse on
/// purpose: each is one kind of outcome a caller handles differently (the
/// CLI gives each its own exit code, in XferCLI).
///
/// The library speaks no front end: `message` says what happened, and
/// `remedy` what can be done about it, as a value each front end phrases in
/// its own terms (the CLI names its flags). `description` joins the two in
/// plain words.
public enum XferError: Error, Sendable, Hashable, CustomStringConvertible {
    /// Bad usage or input: a missing file, a malformed URL, an absurd option.
    case invalidInput(String, remedy: Remedy? = nil)
    /// A local file differs from when the job began.
    case fileChanged(path: String, detail: String)
    /// A local file of the job cannot be read (gone, unreadable, not a regular file).
    case fileUnreadable(path: String, reason: String)
    /// The state directory cannot be used.
    case stateUnavailable(String, remedy: Remedy? = nil)
    /// Another live process holds this job.
    case jobLocked(job: JobID, pid: Int32?)
    /// No job with this id (or id prefix) is in the state store.
    case unknownJob(String)
    /// The transfer stopped on an error retries did not fix. State is kept;
    /// unless the remedy says otherwise, running the job again resumes it.
    case transferFailed(String, remedy: Remedy = .runAgain)
    /// The server answered something that contradicts the protocol.
    case verificationFailed(String, remedy: Remedy? = nil)
    /// Stopped by a signal or by `cancel()`; state is committed.
    case interrupted

    /// What a user can do about an error.
    public enum Remedy: Sendable, Hashable {
        /// Run the same job again: it continues from its saved state.
        case runAgain
        /// Start the job over, discarding its saved progress: what was
        /// sent is sent again from the start.
        case startOver
        /// Use another state directory (this one cannot serve).
        case useAnotherStateDirectory
        /// Look at the jobs the state directory holds.
        case listJobs
        /// Wait for the process holding the job to end, or stop it.
        case waitForHolder
    }

    /// What happened, in one line, without what to do about it.
    public var message: String {
        switch self {
        case .invalidInput(let message, _):
            return message
        case .fileChanged(let path, let detail):
            return "\(path) changed since this job began (\(detail))"
        case .fileUnreadable(let path, let reason):
            return "cannot read \(path): \(reason)"
        case .stateUnavailable(let message, _):
            return "state store unusable: \(message)"
        case .jobLocked(let job, let pid):
            let holder = pid.map { "pid \($0)" } ?? "another process"
            return "state for job \(job) is locked by \(holder)"
        case .unknownJob(let id):
            return "no job '\(id)' in this state directory"
        case .transferFailed(let message, _):
            return "transfer failed: \(message)"
        case .verificationFailed(let message, _):
            return "verification failed: \(message)"
        case .interrupted:
            return "interrupted"
        }
    }

    /// What can be done about it, if anything the user does would help.
    public var remedy: Remedy? {
        switch self {
        case .invalidInput(_, let remedy), .stateUnavailable(_, let remedy), .verificationFailed(_, let remedy):
            return remedy
        case .transferFailed(_, let remedy):
            return remedy
        case .fileChanged:
            return .startOver
        case .fileUnreadable:
            return nil
        case .jobLocked:
            return .waitForHolder
        case .unknownJob:
            return .listJobs
        case .interrupted:
            return .runAgain
        }
    }

    /// One actionable line for users, never holding a secret: the message
    /// and, in plain words, the remedy.
    public var description: String {
        guard let remedy else { return message }
        switch remedy {
        case .runAgain: return "\(message) (state kept; run the job again to resume)"
        case .startOver: return "\(message); start the job over to send it again from the start"
        case .useAnotherStateDirectory: return "\(message); use another state directory"
        case .listJobs: return "\(message); list the jobs to see which it holds"
        case .waitForHolder: return "\(message); wait for it to finish or stop it"
        }
    }
}
