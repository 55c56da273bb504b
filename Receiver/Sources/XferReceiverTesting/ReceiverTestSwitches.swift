@_spi(Testing) import XferReceiver

/// How a receiver under test misbehaves on purpose, as a client must survive: injected HTTP
/// faults, answers withheld (or requests left unread) until the client goes away, failed merges,
/// a chunk size of the server's choosing. `xfer serve`'s test switches (`--faults`, `--hold`,
/// `--stall`, `--fail-merge`, `--patch-chunk-size`) are these.
public struct ReceiverTestSwitches: Sendable {
    /// Misbehave on a seeded share of state-changing requests.
    public var faults: FaultPlan? = nil
    /// `PATH` or `PATH@N`: the Nth request to PATH is processed, then its answer withheld until
    /// the client goes away.
    public var holds: [String] = []
    /// `PATH` or `PATH@N`: the Nth request to PATH is withheld before it is processed (its body
    /// unread) until the client goes away.
    public var stalls: [String] = []
    /// Called when a request is being withheld ("held POST /path #N", or "stalled POST /path #N"),
    /// so that a test knows the moment has come without guessing with a sleep.
    public var onHold: (@Sendable (String) -> Void)? = nil
    /// multipart: merges that fail, discarding the file's fragments.
    public var failMerge: MergeFailurePlan? = nil
    /// patch: the chunk size every creation is answered, whatever the client asked.
    public var patchChunkSize: Int? = nil
    /// patch: no file whole with its creation (JSON creations only, as receivers before them).
    public var patchJSONOnly = false

    public init() {}

    /// A test switch that cannot be understood, in the words of the option that gave it.
    public struct Invalid: Error, CustomStringConvertible {
        public let description: String
    }

    /// The receiver's hooks for these switches. Throws `Invalid` for a hold or stall that is not
    /// `/PATH` or `/PATH@N`.
    func hooks() throws(Invalid) -> ReceiverTestHooks {
        var hooks = ReceiverTestHooks()
        var rules: [HoldRule] = []
        for text in holds {
            guard let rule = HoldRule(text) else { throw Invalid(description: "--hold expects /PATH or /PATH@N, not '\(text)'") }
            rules.append(rule)
        }
        for text in stalls {
            guard let rule = HoldRule(text, beforeProcessing: true) else {
                throw Invalid(description: "--stall expects /PATH or /PATH@N, not '\(text)'")
            }
            rules.append(rule)
        }
        if !rules.isEmpty {
            hooks.middleware.append(HoldMiddleware(rules: rules, onHold: onHold ?? { _ in }))
        }
        if let faults {
            hooks.middleware.append(FaultMiddleware(plan: faults))
        }
        if let failMerge {
            let failures = MergeFailures(plan: failMerge)
            hooks.failsMerge = { id, index in await failures.fails(id, index: index) }
        }
        hooks.patchChunkSize = patchChunkSize
        hooks.patchJSONOnly = patchJSONOnly
        return hooks
    }
}

extension Receiver {
    /// A receiver that misbehaves as `switches` say. Throws `ReceiverTestSwitches.Invalid` for a
    /// switch that cannot be understood.
    public init(configuration: ReceiverConfiguration, testing switches: ReceiverTestSwitches) throws(ReceiverTestSwitches.Invalid) {
        self.init(configuration: configuration, testHooks: try switches.hooks())
    }
}
