import ArgumentParser
import Foundation
import Xfer
import XferReceiver
import XferReceiverTesting
import XferS3

struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Run the reference receiver, speaking every built-in protocol.",
        discussion: "The first line on stdout is `listening on http://HOST:PORT`.")

    @Option(help: "Port to listen on; 0 picks a free one.")
    var port: Int = 0

    @Option(help: "Directory for received state and files (with --storage s3://..., unused).")
    var root: String?

    @Option(help: ArgumentHelp(
        "Where uploads live: disk (under --root, the default) or s3://BUCKET[/PREFIX], an S3-compatible store any number of receivers may share (with --endpoint, --region, --addressing, --profile as push's).",
        valueName: "disk|s3://BUCKET[/PREFIX]"))
    var storage: String?

    @OptionGroup var s3Server: S3ServerArguments
    @OptionGroup var profile: AWSProfileArgument

    @Option(help: ArgumentHelp("Seconds an append's claim on an upload in an object store holds without renewal (for tests).", visibility: .hidden))
    var claimLifetime: Double?

    @Option(help: ArgumentHelp(
        "With --storage s3://: drop an unfinished upload nobody touched for this long (90s, 30m, 24h, 7d), aborting its multipart upload (default: keep it until deleted).",
        valueName: "DURATION"))
    var expireAfter: DurationArgument?

    @Option(help: "Address to bind (loopback unless told otherwise).")
    var host: String = "127.0.0.1"

    @Option(help: "Largest request body of file bytes (a chunk, fragment, block or tus PATCH) accepted.")
    var maxChunkSize: ByteSize = ByteSize(bytes: ReceiverConfiguration(root: "").maximumChunkSize)

    @Option(help: "Largest file accepted; bigger ones are refused before any byte is stored.")
    var maxUploadSize: ByteSize = ByteSize(bytes: ReceiverConfiguration(root: "").maximumUploadSize)

    @Option(help: "Answer this chunk size to patch clients instead of theirs (for testing).")
    var patchChunkSize: ByteSize?

    @Option(name: .customLong("hold"), help: ArgumentHelp(
        "Test hook: process the Nth request to PATH (PATH or PATH@N; PATH ending in * matches every path it begins), then withhold its answer; prints 'held ...'.",
        visibility: .hidden))
    var holds: [String] = []

    @Option(name: .customLong("stall"), help: ArgumentHelp(
        "Test hook: withhold the Nth request to PATH (PATH or PATH@N) without processing it; prints 'stalled ...'.",
        visibility: .hidden))
    var stalls: [String] = []

    @Option(name: .customLong("fail-merge"), help: ArgumentHelp(
        "Test hook (multipart): fail the first N merge checks (isFinish.do) of every file, or with N@INDEX only of the file at INDEX (0-based) in its source; a failed file's fragments are discarded.",
        valueName: "N[@INDEX]"))
    var failMerge: String?

    @Option(help: "Require 'Authorization: Bearer TOKEN' on every request (never printed). Also read from $XFER_AUTH_TOKEN.")
    var authToken: String?

    @Option(name: .customLong("faults"), help: ArgumentHelp(
        "Test hook: misbehave on a share of non-GET requests, e.g. 503=0.1,429=0.05,reset=0.05,stall=0.02,truncate=0.05,garble=0.05,digest=0.01,damage=0.05.",
        valueName: "KIND=P,..."))
    var faults: String?

    @Option(name: .customLong("fault-seed"), help: "Seed for --faults; the same seed repeats the same decisions.")
    var faultSeed: UInt64 = 0

    @Flag(name: .customLong("fault-downloads"), help: "Test hook: --faults also hits GET /downloads/ (503, 429; reset and truncate cut the body halfway).")
    var faultDownloads = false

    mutating func run() async throws {
        guard (0...65535).contains(port) else { throw XferError.invalidInput("--port must be between 0 and 65535") }
        var configuration = ReceiverConfiguration(root: root ?? "")
        switch storage {
        case nil, "disk":
            guard root != nil else { throw XferError.invalidInput("--root is required (the directory uploads are stored under), unless --storage s3://BUCKET") }
        case let text? where text.hasPrefix("s3://"):
            let location: S3Location
            do {
                location = try S3Location(parsing: text)
            } catch {
                throw XferError.invalidInput("--storage: \(error.description)")
            }
            let aws = try profile.configuration()
            var store = ObjectStoreLocation(
                bucket: location.bucket, prefix: location.prefix, configuration: aws,
                endpoint: try s3Server.endpoint(region: s3Server.region ?? aws.region), region: s3Server.region)
            if let claimLifetime {
                guard claimLifetime > 0 else { throw XferError.invalidInput("--claim-lifetime must be positive") }
                store.claimLifetime = .milliseconds(Int(claimLifetime * 1000))
            }
            if let expireAfter {
                guard expireAfter.duration > .zero else { throw XferError.invalidInput("--expire-after must be longer than 0") }
                store.expireAfter = expireAfter.duration
            }
            configuration.objectStore = store
        case let text?:
            throw XferError.invalidInput("--storage must be disk or s3://BUCKET[/PREFIX], not '\(text.prefix(60))'")
        }
        if storage?.hasPrefix("s3://") != true, !s3Server.isEmpty || profile.profile != nil || expireAfter != nil {
            throw XferError.invalidInput("--endpoint, --region, --addressing, --profile and --expire-after are for --storage s3://...")
        }
        configuration.host = host
        configuration.port = port
        guard maxChunkSize.bytes >= 1 else { throw XferError.invalidInput("--max-chunk-size must be at least 1 byte") }
        guard maxUploadSize.bytes >= 0 else { throw XferError.invalidInput("--max-upload-size must not be negative") }
        configuration.maximumChunkSize = maxChunkSize.bytes
        configuration.maximumUploadSize = maxUploadSize.bytes
        // The test switches, XferReceiverTesting's: never part of a production configuration.
        var switches = ReceiverTestSwitches()
        if let patchChunkSize {
            guard patchChunkSize.bytes > 0 else { throw XferError.invalidInput("--patch-chunk-size must be positive") }
            switches.patchChunkSize = patchChunkSize.bytes
        }
        switches.holds = holds
        switches.stalls = stalls
        switches.onHold = { line in
            Terminal.out(line)
            Terminal.flush()
        }
        if let failMerge {
            guard let plan = MergeFailurePlan(failMerge) else {
                throw XferError.invalidInput("--fail-merge expects N or N@INDEX (N >= 1, INDEX >= 0), not '\(failMerge)'")
            }
            switches.failMerge = plan
        }
        if let token = authToken ?? ProcessInfo.processInfo.environment["XFER_AUTH_TOKEN"] {
            guard !token.isEmpty, !token.unicodeScalars.contains(where: { $0.value < 0x21 || $0.value > 0x7E }) else {
                throw XferError.invalidInput("--auth-token must be non-empty printable ASCII without spaces")
            }
            configuration.authToken = token
        }
        if let faults {
            guard var plan = FaultPlan(faults, seed: faultSeed) else {
                throw XferError.invalidInput(
                    "--faults expects KIND=P[,KIND=P...] with KIND one of \(FaultKind.allCases.map(\.rawValue).joined(separator: ", ")) and probabilities adding up to at most 1, not '\(faults)'")
            }
            plan.faultsDownloads = faultDownloads
            switches.faults = plan
        } else if faultDownloads {
            throw XferError.invalidInput("--fault-downloads goes with --faults")
        }
        var isDirectory: ObjCBool = false
        if let root, FileManager.default.fileExists(atPath: root, isDirectory: &isDirectory), !isDirectory.boolValue {
            throw XferError.invalidInput("--root \(root) exists and is not a directory")
        }
        let receiver: Receiver
        do {
            receiver = try Receiver(configuration: configuration, testing: switches)
        } catch {
            throw XferError.invalidInput(error.description)
        }
        do {
            try await receiver.run { url in
                Terminal.out("listening on \(url)")
                Terminal.flush()
            }
        } catch {
            throw XferError.invalidInput("cannot serve on \(host):\(port): \(Receiver.reason(for: error))")
        }
    }
}
