import Dispatch
import FoundationEssentials
import XferPrimitives

/// One run of a hook executable (`xfer serve --hooks-dir`): the event's JSON on its standard
/// input, its standard output read back, a deadline. `ExternalProgram` does the spawning, with
/// what a server needs of a child it did not write: its own process group (a deadline kills the
/// hook and whatever it started), none of the receiver's descriptors, default signals, the
/// input written before it starts. Here: what a hook is given and what it may answer.
/// - an environment of its own (`environment(event:receiver:)`): a few harmless variables of
///   the receiver's, never its credentials;
/// - at most `outputLimit` bytes of answer (as for a hook URL); past them it is killed.
/// The blocking waits run on a dispatch thread, never on an event loop.
enum HookProcess {
    struct Outcome: Sendable {
        /// The exit status; nil when a signal ended it.
        var exitStatus: Int32?
        /// At most `outputLimit` bytes of what it wrote to standard output.
        var output: String
    }

    enum Failure: Error, CustomStringConvertible {
        case cannotStart(String)
        case timedOut(Duration)
        case tooMuchOutput

        var description: String {
            switch self {
            case .cannotStart(let reason): "the hook could not be started: \(reason)"
            case .timedOut(let timeout): "the hook took longer than \(timeout)"
            case .tooMuchOutput: "the hook printed more than \(outputLimit) bytes"
            }
        }
    }

    static let outputLimit = 64 << 10

    /// The receiver's variables a hook gets: where programs are, whose home, language and
    /// time zone — nothing that could hold a credential. Besides these, `LC_*` and `XFER_HOOK_*`
    /// (what the operator means hooks to have: `XFER_HOOK_SCANNER_URL=… xfer serve …`).
    ///
    /// An allow-list, not a deny-list: a receiver's environment holds credentials under names
    /// no list can know in advance (`AWS_CONTAINER_AUTHORIZATION_TOKEN`, a platform's own), and
    /// a hook is a program the receiver did not write.
    static let passedVariables: Set<String> = ["PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR"]
    static let passedPrefixes = ["LC_", "XFER_HOOK_"]
    /// When the receiver has no PATH, the hook gets this one (a shell script's `#!/bin/bash` and
    /// the commands in it must be found).
    static let defaultPath = "/usr/local/bin:/usr/bin:/bin"

    /// The environment of a hook run for `event`: the allowed variables of `receiver`, and
    /// `XFER_HOOK_EVENT` naming the event.
    static func environment(event: String, receiver: [String: String] = ProcessInfo.processInfo.environment) -> [String] {
        var chosen = receiver.filter { name, _ in passedVariables.contains(name) || passedPrefixes.contains { name.hasPrefix($0) } }
        if chosen["PATH"] == nil { chosen["PATH"] = defaultPath }
        chosen["XFER_HOOK_EVENT"] = event
        return chosen.keys.sorted().map { "\($0)=\(chosen[$0]!)" }
    }

    static func run(_ executable: String, input: String, environment: [String], timeout: Duration) async throws -> Outcome {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async {
                continuation.resume(with: Result { try runBlocking(executable, input: Array(input.utf8), environment: environment, timeout: timeout) })
            }
        }
    }

    private static func runBlocking(_ executable: String, input: [UInt8], environment: [String], timeout: Duration) throws -> Outcome {
        let outcome: ExternalProgram.Outcome
        do {
            outcome = try ExternalProgram.run(
                executable, input: .bytes(input), environment: environment, ownProcessGroup: true, timeout: timeout,
                outputLimit: outputLimit)
        } catch {
            switch error {
            case .cannotStart(let reason): throw Failure.cannotStart(reason)
            case .timedOut(let timeout): throw Failure.timedOut(timeout)
            }
        }
        if outcome.exceededOutputLimit { throw Failure.tooMuchOutput }
        return Outcome(exitStatus: outcome.exitStatus, output: String(decoding: outcome.output, as: UTF8.self))
    }
}
