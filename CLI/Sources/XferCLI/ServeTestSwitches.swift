import ArgumentParser
import FoundationEssentials
import Xfer
import XferReceiver
import XferReceiverTesting

/// The receiver's test switches (XferReceiverTesting's faults, held and
/// stalled answers, failed merges, a forced chunk size, short claims): what
/// the end-to-end tests, the torture and the benchmarks make `xfer serve` do
/// on purpose. They are not part of the production command: hidden from its
/// help, man page and completions, and refused unless the environment says
/// `XFER_TEST_HOOKS=1` (the tests' harness sets it for every process it starts).
struct ServeTestSwitches: ParsableArguments {
    static let environmentVariable = "XFER_TEST_HOOKS"

    @Option(help: ArgumentHelp("Seconds an append's claim on an upload in an object store holds without renewal.", visibility: .private))
    var claimLifetime: Double?

    @Option(help: ArgumentHelp("Answer this chunk size to patch clients instead of theirs.", visibility: .private))
    var patchChunkSize: ByteSize?

    @Flag(name: .customLong("patch-json-only"), help: ArgumentHelp(
        "Patch: create uploads from JSON only (no file whole with its creation), as receivers before it.", visibility: .private))
    var patchJSONOnly = false

    @Option(name: .customLong("hold"), help: ArgumentHelp(
        "Process the Nth request to PATH (PATH or PATH@N; PATH ending in * matches every path it begins), then withhold its answer; prints 'held ...'.",
        visibility: .private))
    var holds: [String] = []

    @Option(name: .customLong("stall"), help: ArgumentHelp(
        "Withhold the Nth request to PATH (PATH or PATH@N) without processing it; prints 'stalled ...'.", visibility: .private))
    var stalls: [String] = []

    @Option(name: .customLong("fail-merge"), help: ArgumentHelp(
        "Multipart: fail the first N merge checks (isFinish.do) of every file, or with N@INDEX only of the file at INDEX (0-based) in its source.",
        valueName: "N[@INDEX]", visibility: .private))
    var failMerge: String?

    @Option(name: .customLong("faults"), help: ArgumentHelp(
        "Misbehave on a share of non-GET requests, e.g. 503=0.1,429=0.05,reset=0.05,stall=0.02,truncate=0.05,garble=0.05,digest=0.01,damage=0.05.",
        valueName: "KIND=P,...", visibility: .private))
    var faults: String?

    @Option(name: .customLong("fault-seed"), help: ArgumentHelp("Seed for --faults; the same seed repeats the same decisions.", visibility: .private))
    var faultSeed: UInt64 = 0

    @Flag(name: .customLong("fault-downloads"), help: ArgumentHelp(
        "--faults also hits GET /downloads/ (503, 429; reset and truncate cut the body halfway).", visibility: .private))
    var faultDownloads = false

    /// The switches given, by their flags.
    var used: [String] {
        var flags: [String] = []
        if claimLifetime != nil { flags.append("--claim-lifetime") }
        if patchChunkSize != nil { flags.append("--patch-chunk-size") }
        if patchJSONOnly { flags.append("--patch-json-only") }
        if !holds.isEmpty { flags.append("--hold") }
        if !stalls.isEmpty { flags.append("--stall") }
        if failMerge != nil { flags.append("--fail-merge") }
        if faults != nil { flags.append("--faults") }
        if faultSeed != 0 { flags.append("--fault-seed") }
        if faultDownloads { flags.append("--fault-downloads") }
        return flags
    }

    /// The receiver's test switches; throws when one is given outside a test
    /// environment, or is malformed.
    func switches(environment: [String: String] = ProcessInfo.processInfo.environment) throws(XferError) -> ReceiverTestSwitches {
        var switches = ReceiverTestSwitches()
        if let first = used.first, environment[Self.environmentVariable] != "1" {
            throw .invalidInput("\(first) is a test switch of xfer serve; it works only with \(Self.environmentVariable)=1 in the environment")
        }
        if let patchChunkSize {
            guard patchChunkSize.bytes > 0 else { throw .invalidInput("--patch-chunk-size must be positive") }
            switches.patchChunkSize = patchChunkSize.bytes
        }
        switches.patchJSONOnly = patchJSONOnly
        switches.holds = holds
        switches.stalls = stalls
        switches.onHold = { line in
            Terminal.out(line)
            Terminal.flush()
        }
        if let failMerge {
            guard let plan = MergeFailurePlan(failMerge) else {
                throw .invalidInput("--fail-merge expects N or N@INDEX (N >= 1, INDEX >= 0), not '\(failMerge)'")
            }
            switches.failMerge = plan
        }
        if let faults {
            guard var plan = FaultPlan(faults, seed: faultSeed) else {
                throw .invalidInput(
                    "--faults expects KIND=P[,KIND=P...] with KIND one of \(FaultKind.allCases.map(\.rawValue).joined(separator: ", ")) and probabilities adding up to at most 1, not '\(faults)'")
            }
            plan.faultsDownloads = faultDownloads
            switches.faults = plan
        } else if faultDownloads {
            throw .invalidInput("--fault-downloads goes with --faults")
        }
        return switches
    }

    /// How long a claim holds in an object store, when a test shortens it.
    func claimDuration() throws(XferError) -> Duration? {
        guard let claimLifetime else { return nil }
        guard claimLifetime > 0 else { throw .invalidInput("--claim-lifetime must be positive") }
        return .milliseconds(Int(claimLifetime * 1000))
    }
}
