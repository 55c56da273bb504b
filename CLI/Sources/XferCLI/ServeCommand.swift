import ArgumentParser
import FoundationEssentials
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
        discussion: "The first line on stdout is `listening on http://HOST:PORT`. " + ServeEnvironment.help)

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
        "Drop an unfinished upload nobody touched for this long (90s, 30m, 24h, 7d), with its bytes (on s3://, its multipart upload too); 0 keeps them until deleted.",
        valueName: "DURATION"))
    var expireAfter: DurationArgument = DurationArgument(argument: "24h")!

    @Option(help: ArgumentHelp(
        "Most uploads kept in memory at once; past it (every one in use) new ones get 503 and Retry-After.", valueName: "N"))
    var maxUploadsInMemory: Int = ReceiverLimits().uploadsInMemory

    @Option(help: "Address to bind (loopback unless told otherwise).")
    var host: String = "127.0.0.1"

    @Option(name: .customLong("public-url"), help: ArgumentHelp(
        "Where clients reach this receiver (https://uploads.example.com): every link it writes starts with it (default: the address it is bound to; never a request's Host).",
        valueName: "URL"))
    var publicURL: String?

    @Option(help: "Largest request body of file bytes (a chunk, fragment, block or tus PATCH) accepted.")
    var maxChunkSize: ByteSize = ByteSize(bytes: ReceiverConfiguration(root: "").maximumChunkSize)

    @Option(help: "Largest file accepted; bigger ones are refused before any byte is stored.")
    var maxUploadSize: ByteSize = ByteSize(bytes: ReceiverConfiguration(root: "").maximumUploadSize)

    @Option(help: "Require 'Authorization: Bearer TOKEN' on every request but /health and the upload page (never printed). Other local users can read a command line: prefer --auth-token-file or $XFER_AUTH_TOKEN (this warns).")
    var authToken: String?

    @Option(name: .customLong("auth-token-file"), help: ArgumentHelp(
        "Read --auth-token's token from the first line of FILE (never printed; warns when others can read FILE).", valueName: "FILE"),
        completion: .file())
    var authTokenFile: String?

    @Option(name: .customLong("tls-cert"), help: ArgumentHelp(
        "Speak HTTPS with this certificate (PEM; the server's first, then its chain); with --tls-key.", valueName: "FILE"))
    var tlsCertificate: String?

    @Option(name: .customLong("tls-key"), help: ArgumentHelp("The private key of --tls-cert (PEM, unencrypted).", valueName: "FILE"))
    var tlsKey: String?

    @Option(name: .customLong("hook-url"), help: ArgumentHelp(
        "POST each upload's events here as JSON (pre-create and pre-finish, which may refuse it; post-receive; post-finish; post-terminate).",
        valueName: "URL"))
    var hookURL: String?

    @Option(name: .customLong("hook-url-file"), help: ArgumentHelp(
        "Read --hook-url from the first line of FILE: for a URL that carries a credential (never printed).", valueName: "FILE"),
        completion: .file())
    var hookURLFile: String?

    @Option(name: .customLong("hooks-dir"), help: ArgumentHelp(
        "Run DIR/pre-create, DIR/pre-finish, DIR/post-receive, DIR/post-finish, DIR/post-terminate (those that exist) with each event's JSON on standard input; instead of --hook-url.",
        valueName: "DIR"))
    var hooksDirectory: String?

    @Option(name: .customLong("hook-timeout"), help: ArgumentHelp(
        "How long a hook call may take (default 5s); a pre-create or pre-finish that takes longer refuses the upload.", valueName: "DURATION"))
    var hookTimeout: DurationArgument?

    @Option(name: .customLong("hook-concurrency"), help: ArgumentHelp(
        "Hook calls (requests or processes) running at once at most (default 4 per core, at least 8); past it pre-* events wait up to --hook-timeout, then 503.",
        valueName: "N"))
    var hookConcurrency: Int?

    @Option(name: .customLong("hook-progress-interval"), help: ArgumentHelp(
        "Shortest time between two post-receive events of one upload (default 2s; 0: no post-receive).", valueName: "DURATION"))
    var hookProgressInterval: DurationArgument?

    @Option(name: .customLong("cors-origin"), help: ArgumentHelp(
        "Let pages of this origin upload from a browser (repeatable; * for any page).", valueName: "ORIGIN"))
    var corsOrigins: [String] = []

    @Flag(name: .customLong("no-upload-page"), help: "Do not serve the upload page at / (browsers then upload only from pages of --cors-origin).")
    var noUploadPage = false

    @Option(name: .customLong("header-timeout"), help: ArgumentHelp(
        "Close a connection that has not sent a whole request head this long after it opened (default 30s).", valueName: "DURATION"))
    var headerTimeout: DurationArgument?

    @Option(name: .customLong("idle-timeout"), help: ArgumentHelp(
        "Close a connection with no request under way for this long, between requests (default 75s).", valueName: "DURATION"))
    var idleTimeout: DurationArgument?

    @Option(name: .customLong("body-timeout"), help: ArgumentHelp(
        "Close a connection whose request body sends no byte, or whose client reads no byte of an answer, for this long (default 60s); an upload keeps what a cut body keeps.",
        valueName: "DURATION"))
    var bodyTimeout: DurationArgument?

    @Option(name: .customLong("tls-handshake-timeout"), help: ArgumentHelp(
        "With --tls-cert: close a connection whose TLS handshake takes longer (default 10s).", valueName: "DURATION"))
    var tlsHandshakeTimeout: DurationArgument?

    @Option(name: .customLong("max-connections"), help: ArgumentHelp(
        "Connections held at once (default: half of what the descriptor limit leaves, at most 4096); at the limit the one idle the longest gives way.",
        valueName: "N"))
    var maxConnections: Int?

    // Faults, held answers and the like, for tests only (hidden; XFER_TEST_HOOKS=1).
    @OptionGroup var testing: ServeTestSwitches

    /// `30s`, `0.5s`: a duration as its flags are written.
    private static func text(_ duration: Duration) -> String {
        let (seconds, attoseconds) = duration.components
        return attoseconds == 0 ? "\(seconds)s" : "\(Double(seconds) + Double(attoseconds) / 1e18)s"
    }

    mutating func serve() async throws {
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
            // The receiver's own resolution: its STS and metadata requests go through
            // AsyncHTTPClient, as its store requests do, not through the engine's curl.
            let aws: AWSConfiguration
            do {
                aws = try ObjectStoreLocation.resolveConfiguration(profile: profile.profile)
            } catch {
                throw XferError.invalidInput(error.description)
            }
            var store = ObjectStoreLocation(
                bucket: location.bucket, prefix: location.prefix, configuration: aws,
                endpoint: try s3Server.endpoint(region: s3Server.region ?? aws.region), region: s3Server.region)
            if let claimLifetime = try testing.claimDuration() { store.claimLifetime = claimLifetime }
            configuration.objectStore = store
        case let text?:
            throw XferError.invalidInput("--storage must be disk or s3://BUCKET[/PREFIX], not '\(text.prefix(60))'")
        }
        if storage?.hasPrefix("s3://") != true, !s3Server.isEmpty || profile.profile != nil {
            throw XferError.invalidInput("--endpoint, --region, --addressing and --profile are for --storage s3://...")
        }
        configuration.expireAfter = expireAfter.duration > .zero ? expireAfter.duration : nil
        if let store = configuration.objectStore {
            do {
                try store.validate(expireAfter: configuration.expireAfter)
            } catch {
                let ratio = ObjectStoreLocation.expiryToClaimLifetimeRatio
                throw XferError.invalidInput(
                    "--expire-after must be at least \(ratio) times the \(Self.text(store.claimLifetime)) an append's claim holds (\(Self.text(store.claimLifetime * ratio))), so that no upload being written expires")
            }
        }
        guard maxUploadsInMemory >= 1 else { throw XferError.invalidInput("--max-uploads-in-memory must be at least 1") }
        configuration.limits.uploadsInMemory = maxUploadsInMemory
        configuration.host = host
        configuration.port = port
        if let publicURL {
            if let problem = ReceiverConfiguration.problem(ofPublicURL: publicURL) {
                throw XferError.invalidInput("--public-url \(problem), not '\(publicURL.prefix(80))'")
            }
            configuration.publicURL = publicURL
        } else if ["0.0.0.0", "::", "[::]"].contains(host) {
            Terminal.error("warning: bound to \(host) without --public-url: the links this receiver writes name \(host); set --public-url to what clients reach it by")
        }
        guard maxChunkSize.bytes >= 1 else { throw XferError.invalidInput("--max-chunk-size must be at least 1 byte") }
        guard maxUploadSize.bytes >= 0 else { throw XferError.invalidInput("--max-upload-size must not be negative") }
        configuration.maximumChunkSize = maxChunkSize.bytes
        configuration.maximumUploadSize = maxUploadSize.bytes
        // The test switches, XferReceiverTesting's: never part of a production configuration.
        let switches = try testing.switches()
        configuration.authToken = try resolvedAuthToken()
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
        configuration.hooks = try hookSettings()
        try applyConnectionLimits(to: &configuration)
        // GET /metrics in Prometheus's text format: the receiver's counters and Hummingbird's
        // request latencies, through the swift-metrics facade bootstrapped here, once.
        let registry = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
        configuration.metrics = MetricsExposition(contentType: "text/plain; version=0.0.4; charset=utf-8") { registry.emitToBuffer() }
        switch (tlsCertificate, tlsKey) {
        case (nil, nil):
            if tlsHandshakeTimeout != nil { throw XferError.invalidInput("--tls-handshake-timeout is for --tls-cert and --tls-key") }
        case (let certificate?, let key?):
            let files = TLSFiles(certificateChain: certificate, privateKey: key)
            // Read now: a bad file is bad input, said before anything listens.
            do { _ = try files.serverConfiguration() } catch { throw XferError.invalidInput(error.description) }
            configuration.tls = files
        default:
            throw XferError.invalidInput("--tls-cert and --tls-key go together")
        }
        var isDirectory = false
        if let root, FileManager.default.fileExists(atPath: root, isDirectory: &isDirectory), !isDirectory {
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

    /// The token every request must carry: `--auth-token-file`'s, `--auth-token`'s (which
    /// warns: any local user reads a command line in /proc/PID/cmdline), or
    /// `$XFER_AUTH_TOKEN`'s; nil when none is given.
    private func resolvedAuthToken() throws(XferError) -> String? {
        let found: (token: String, source: String)
        switch (authToken, authTokenFile) {
        case (_?, _?):
            throw .invalidInput("give the token with --auth-token-file or $XFER_AUTH_TOKEN, not with --auth-token too")
        case (let token?, nil):
            found = (token, "--auth-token")
        case (nil, let file?):
            found = (try TokenFile.firstLine(of: file, option: "--auth-token-file"), "--auth-token-file")
        case (nil, nil):
            guard let token = ProcessInfo.processInfo.environment["XFER_AUTH_TOKEN"] else { return nil }
            found = (token, "$XFER_AUTH_TOKEN")
        }
        guard !found.token.isEmpty, !found.token.unicodeScalars.contains(where: { $0.value < 0x21 || $0.value > 0x7E }) else {
            throw .invalidInput("\(found.source) must be non-empty printable ASCII without spaces")
        }
        if found.source == "--auth-token" {
            Terminal.error(
                "warning: --auth-token puts the token on the command line, where any local user can read it (ps, /proc/PID/cmdline); give it with --auth-token-file FILE or $XFER_AUTH_TOKEN")
        }
        return found.token
    }

    /// The hooks' settings from their flags; nil without `--hook-url`, `--hook-url-file` or `--hooks-dir`.
    private func hookSettings() throws(XferError) -> HookSettings? {
        var hookURL = hookURL
        if let hookURLFile {
            guard hookURL == nil else { throw .invalidInput("give the hook's URL with --hook-url or --hook-url-file, not both") }
            hookURL = try TokenFile.firstLine(of: hookURLFile, option: "--hook-url-file")
        }
        let destination: HookSettings.Destination?
        switch (hookURL, hooksDirectory) {
        case (nil, nil):
            destination = nil
        case (let hookURL?, nil):
            // The URL is not echoed: it may carry a credential.
            guard let url = URL(string: hookURL), ["http", "https"].contains(url.scheme ?? ""), url.host != nil else {
                throw .invalidInput("--hook-url must be an http(s) URL with a host (it is not repeated here: it may hold a credential)")
            }
            if hookURLFile == nil, url.user != nil || url.password != nil || url.query != nil {
                Terminal.error(
                    "warning: --hook-url has user info or a query, where credentials go, on the command line any local user can read; give it with --hook-url-file FILE")
            }
            destination = .url(hookURL)
        case (nil, let directory?):
            var isDirectory = false
            guard FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory), isDirectory else {
                throw .invalidInput("--hooks-dir must be a directory, not '\(directory.prefix(80))'")
            }
            // Absolute: the hooks are found by path whatever the receiver's working directory.
            destination = .executables(directory: URL(fileURLWithPath: directory).standardizedFileURL.path)
        case (_?, _?):
            throw .invalidInput("--hook-url and --hooks-dir are two ways to the same hooks: give one")
        }
        guard let destination else {
            for (flag, given) in [
                ("--hook-timeout", hookTimeout != nil), ("--hook-concurrency", hookConcurrency != nil),
                ("--hook-progress-interval", hookProgressInterval != nil),
            ] where given {
                throw .invalidInput("\(flag) is for --hook-url or --hooks-dir")
            }
            return nil
        }
        var hooks = HookSettings(destination)
        if let hookTimeout {
            guard hookTimeout.duration > .zero else { throw .invalidInput("--hook-timeout must be longer than 0") }
            hooks.timeout = hookTimeout.duration
        }
        if let hookConcurrency {
            guard (1...4096).contains(hookConcurrency) else { throw .invalidInput("--hook-concurrency must be between 1 and 4096") }
            hooks.concurrency = hookConcurrency
        }
        if let hookProgressInterval {
            hooks.progressInterval = hookProgressInterval.duration > .zero ? hookProgressInterval.duration : nil
        }
        return hooks
    }
}

extension ServeCommand {
    /// The timeouts and the connection limit, checked: each timeout longer than 0, the limit
    /// within what the descriptor limit allows.
    private func applyConnectionLimits(to configuration: inout ReceiverConfiguration) throws(XferError) {
        let timeouts: [(String, DurationArgument?, WritableKeyPath<ReceiverConfiguration, Duration>)] = [
            ("--header-timeout", headerTimeout, \.requestHeadTimeout), ("--idle-timeout", idleTimeout, \.idleTimeout),
            ("--body-timeout", bodyTimeout, \.bodyStallTimeout), ("--tls-handshake-timeout", tlsHandshakeTimeout, \.tlsHandshakeTimeout),
        ]
        for (flag, value, field) in timeouts {
            guard let value else { continue }
            guard value.duration > .zero else { throw XferError.invalidInput("\(flag) must be longer than 0") }
            configuration[keyPath: field] = value.duration
        }
        if let maxConnections {
            let largest = ReceiverConfiguration.largestMaximumConnections
            guard (1...largest).contains(maxConnections) else {
                throw XferError.invalidInput(
                    "--max-connections must be between 1 and \(largest) (the descriptor limit, less a reserve), not \(maxConnections)")
            }
            configuration.maximumConnections = maxConnections
        }
    }
}
