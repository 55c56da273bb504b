import ArgumentParser
import Foundation
import Metrics
import Prometheus
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

    @Option(help: "Require 'Authorization: Bearer TOKEN' on every request but /health and the upload page (never printed). Also read from $XFER_AUTH_TOKEN.")
    var authToken: String?

    @Option(name: .customLong("tls-cert"), help: ArgumentHelp(
        "Speak HTTPS with this certificate (PEM; the server's first, then its chain); with --tls-key.", valueName: "FILE"))
    var tlsCertificate: String?

    @Option(name: .customLong("tls-key"), help: ArgumentHelp("The private key of --tls-cert (PEM, unencrypted).", valueName: "FILE"))
    var tlsKey: String?

    @Option(name: .customLong("hook-url"), help: ArgumentHelp(
        "POST each upload's events here (pre-create, which may refuse it; post-finish; post-terminate) as JSON.", valueName: "URL"))
    var hookURL: String?

    @Option(name: .customLong("hooks-dir"), help: ArgumentHelp(
        "Run DIR/pre-create, DIR/post-finish, DIR/post-terminate (those that exist) with each event's JSON on standard input; instead of --hook-url.",
        valueName: "DIR"))
    var hooksDirectory: String?

    @Option(name: .customLong("hook-timeout"), help: ArgumentHelp(
        "How long a hook call may take (default 5s); a pre-create that takes longer refuses the upload.", valueName: "DURATION"))
    var hookTimeout: DurationArgument?

    @Option(name: .customLong("cors-origin"), help: ArgumentHelp(
        "Let pages of this origin upload from a browser (repeatable; * for any page).", valueName: "ORIGIN"))
    var corsOrigins: [String] = []

    @Flag(name: .customLong("no-upload-page"), help: "Do not serve the upload page at / (browsers then upload only from pages of --cors-origin).")
    var noUploadPage = false

    // Faults, held answers and the like, for tests only (hidden; XFER_TEST_HOOKS=1).
    @OptionGroup var testing: ServeTestSwitches

    /// `30s`, `0.5s`: a duration as its flags are written.
    private static func text(_ duration: Duration) -> String {
        let (seconds, attoseconds) = duration.components
        return attoseconds == 0 ? "\(seconds)s" : "\(Double(seconds) + Double(attoseconds) / 1e18)s"
    }

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
            if let claimLifetime = try testing.claimDuration() { store.claimLifetime = claimLifetime }
            if let expireAfter {
                guard expireAfter.duration > .zero else { throw XferError.invalidInput("--expire-after must be longer than 0") }
                store.expireAfter = expireAfter.duration
            }
            do {
                try store.validate()
            } catch {
                let ratio = ObjectStoreLocation.expiryToClaimLifetimeRatio
                throw XferError.invalidInput(
                    "--expire-after must be at least \(ratio) times the \(Self.text(store.claimLifetime)) an append's claim holds (\(Self.text(store.claimLifetime * ratio))), so that no upload being written expires")
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
        let switches = try testing.switches()
        if let token = authToken ?? ProcessInfo.processInfo.environment["XFER_AUTH_TOKEN"] {
            guard !token.isEmpty, !token.unicodeScalars.contains(where: { $0.value < 0x21 || $0.value > 0x7E }) else {
                throw XferError.invalidInput("--auth-token must be non-empty printable ASCII without spaces")
            }
            configuration.authToken = token
        }
        for origin in corsOrigins where origin != "*" {
            // What a browser sends as Origin: scheme, host and port, no path.
            guard let url = URL(string: origin), let scheme = url.scheme, ["http", "https"].contains(scheme), url.host != nil,
                url.path.isEmpty, url.query == nil
            else {
                throw XferError.invalidInput("--cors-origin expects an origin such as https://app.example.com (no path) or *, not '\(origin.prefix(80))'")
            }
        }
        configuration.corsOrigins = corsOrigins
        configuration.uploadPage = !noUploadPage
        let destination: HookSettings.Destination?
        switch (hookURL, hooksDirectory) {
        case (nil, nil):
            destination = nil
        case (let hookURL?, nil):
            guard let url = URL(string: hookURL), ["http", "https"].contains(url.scheme ?? ""), url.host != nil else {
                throw XferError.invalidInput("--hook-url must be an http(s) URL, not '\(hookURL.prefix(80))'")
            }
            destination = .url(hookURL)
        case (nil, let directory?):
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory), isDirectory.boolValue else {
                throw XferError.invalidInput("--hooks-dir must be a directory, not '\(directory.prefix(80))'")
            }
            // Absolute: the hooks are found by path whatever the receiver's working directory.
            destination = .executables(directory: URL(fileURLWithPath: directory).standardizedFileURL.path)
        case (_?, _?):
            throw XferError.invalidInput("--hook-url and --hooks-dir are two ways to the same hooks: give one")
        }
        if let destination {
            var hooks = HookSettings(destination)
            if let hookTimeout {
                guard hookTimeout.duration > .zero else { throw XferError.invalidInput("--hook-timeout must be longer than 0") }
                hooks.timeout = hookTimeout.duration
            }
            configuration.hooks = hooks
        } else if hookTimeout != nil {
            throw XferError.invalidInput("--hook-timeout is for --hook-url or --hooks-dir")
        }
        // GET /metrics in Prometheus's text format: the receiver's counters and Hummingbird's
        // request latencies, through the swift-metrics facade bootstrapped here, once.
        let registry = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
        configuration.metrics = MetricsExposition(contentType: "text/plain; version=0.0.4; charset=utf-8") { registry.emitToBuffer() }
        switch (tlsCertificate, tlsKey) {
        case (nil, nil): break
        case (let certificate?, let key?):
            let files = TLSFiles(certificateChain: certificate, privateKey: key)
            // Read now: a bad file is bad input, said before anything listens.
            do { _ = try files.serverConfiguration() } catch { throw XferError.invalidInput(error.description) }
            configuration.tls = files
        default:
            throw XferError.invalidInput("--tls-cert and --tls-key go together")
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
