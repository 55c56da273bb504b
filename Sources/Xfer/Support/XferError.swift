/// What went wrong, in words a user can act on.
///
/// An error is a value with named fields, so that the library can add one
/// (a path, a job, a cause) without breaking a program that reads the
/// others. `kind` says which kind of outcome it is; each kind is one a
/// caller handles differently, and new kinds may be added in a minor
/// version: switch over `kind` with a `default:` (or `@unknown default:`).
///
/// The library speaks no front end: `message` says what happened, and
/// `remedy` what can be done about it, as a value each front end phrases in
/// its own terms (the CLI names its flags). `description` joins the two in
/// plain words; `exitCode` is the conventional status a command-line
/// program ends with (the `xfer` command uses it).
public struct XferError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The kind of outcome. Kinds may be added: switch with a `default:`.
    public enum Kind: String, Sendable, Hashable, CaseIterable {
        /// Bad usage or input: a missing file, a malformed URL, an absurd option.
        case invalidInput
        /// A local file differs from when the job began (`path`, `reason`).
        case fileChanged
        /// A local file of the job cannot be read: gone, unreadable, not a
        /// regular file (`path`, `reason`).
        case fileUnreadable
        /// The state directory cannot be used.
        case stateUnavailable
        /// Another live process holds the job (`job`, `holderProcessID`).
        case jobLocked
        /// No job with this id (or id prefix) is in the state store.
        case unknownJob
        /// The transfer stopped on an error retries did not fix. State is
        /// kept; unless the remedy says otherwise, running the job again resumes it.
        case transferFailed
        /// The server answered something that contradicts the protocol.
        case verificationFailed
        /// Stopped by a signal or by `cancel()`; state is committed.
        case interrupted

        /// The exit status a command-line program conventionally ends with:
        /// 1 the transfer failed, 2 bad input, 3 the state cannot be used,
        /// 130 interrupted (128 + SIGINT). The `xfer` command uses these.
        public var exitCode: Int32 {
            switch self {
            case .invalidInput, .fileChanged, .unknownJob: return 2
            case .stateUnavailable, .jobLocked: return 3
            case .transferFailed, .verificationFailed, .fileUnreadable: return 1
            case .interrupted: return 130
            }
        }
    }

    /// What a user can do about an error. Remedies may be added: switch with a `default:`.
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

    /// Which kind of outcome this is.
    public var kind: Kind
    /// What happened, in one line, without what to do about it. Holds no secret.
    public var message: String
    /// What can be done about it, if anything the user does would help.
    public var remedy: Remedy?
    /// The local file concerned (`fileChanged`, `fileUnreadable`).
    public var path: String?
    /// The cause alone, without the path or the words `message` puts
    /// around it: what differs (`fileChanged`), why the file cannot be read
    /// (`fileUnreadable`), what failed (`transferFailed`,
    /// `verificationFailed`, `stateUnavailable`).
    public var reason: String?
    /// The job concerned (`jobLocked`).
    public var job: JobID?
    /// The process holding the job, when known (`jobLocked`).
    public var holderProcessID: Int32?

    /// An error of `kind` saying `message`; the factories below fill the
    /// message and fields of each kind the way the engine does.
    public init(
        _ kind: Kind, message: String, remedy: Remedy? = nil, path: String? = nil, reason: String? = nil,
        job: JobID? = nil, holderProcessID: Int32? = nil
    ) {
        self.kind = kind
        self.message = message
        self.remedy = remedy
        self.path = path
        self.reason = reason
        self.job = job
        self.holderProcessID = holderProcessID
    }

    /// The exit status a command-line program conventionally ends with (`Kind.exitCode`).
    public var exitCode: Int32 { kind.exitCode }

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

// MARK: Making errors of each kind

extension XferError {
    /// Bad usage or input.
    public static func invalidInput(_ message: String, remedy: Remedy? = nil) -> XferError {
        XferError(.invalidInput, message: message, remedy: remedy)
    }

    /// `path` differs from when the job began; `detail` says how.
    public static func fileChanged(path: String, detail: String) -> XferError {
        XferError(
            .fileChanged, message: "\(path) changed since this job began (\(detail))", remedy: .startOver, path: path,
            reason: detail)
    }

    /// `path` cannot be read, for `reason`.
    public static func fileUnreadable(path: String, reason: String) -> XferError {
        XferError(.fileUnreadable, message: "cannot read \(path): \(reason)", path: path, reason: reason)
    }

    /// The state directory cannot be used.
    public static func stateUnavailable(_ message: String, remedy: Remedy? = nil) -> XferError {
        XferError(.stateUnavailable, message: "state store unusable: \(message)", remedy: remedy, reason: message)
    }

    /// `job` is held by process `pid` (nil when unknown).
    public static func jobLocked(job: JobID, pid: Int32?) -> XferError {
        let holder = pid.map { "pid \($0)" } ?? "another process"
        return XferError(
            .jobLocked, message: "state for job \(job) is locked by \(holder)", remedy: .waitForHolder, job: job,
            holderProcessID: pid)
    }

    /// No job `id` in the state store.
    public static func unknownJob(_ id: String) -> XferError {
        XferError(.unknownJob, message: "no job '\(id)' in this state directory", remedy: .listJobs)
    }

    /// The transfer stopped on an error retries did not fix.
    public static func transferFailed(_ message: String, remedy: Remedy = .runAgain) -> XferError {
        XferError(.transferFailed, message: "transfer failed: \(message)", remedy: remedy, reason: message)
    }

    /// The server answered something that contradicts the protocol.
    public static func verificationFailed(_ message: String, remedy: Remedy? = nil) -> XferError {
        XferError(.verificationFailed, message: "verification failed: \(message)", remedy: remedy, reason: message)
    }

    /// Stopped by a signal or by `cancel()`.
    public static let interrupted = XferError(.interrupted, message: "interrupted", remedy: .runAgain)
}
