import FoundationEssentials
import Hummingbird
import HummingbirdCore
import HummingbirdTLS
import NIOSSL
import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle
import XferS3Core
import UnixSignals

/// What a receiver is told in production: where it listens, where it stores, what it accepts,
/// who may send. (What tests alone need, injected faults and withheld answers, is
/// XferReceiverTesting's, not this.)
public struct ReceiverConfiguration: Sendable {
    /// Loopback unless told otherwise: without `authToken` anyone who can connect may upload.
    public var host: String = "127.0.0.1"
    /// 0 picks a free port; the chosen one is reported through `onListening`.
    public var port: Int = 0
    /// Directory holding all receiver state and files; created if missing.
    public var root: String
    /// Larger chunks are refused at creation (400) and larger chunk bodies at upload (413). Bounds
    /// every request body that carries file bytes.
    public var maximumChunkSize: Int = 256 << 20
    /// Larger files are refused when their upload is created (patch 413, multipart 413 on the first
    /// fragment, sequence at the open), before any byte of them is stored.
    public var maximumUploadSize: Int = 1 << 40
    /// Warnings only by default: request headers and bodies carry tokens and are never logged at any level.
    public var logLevel: Logger.Level = .warning
    /// How long SIGINT/SIGTERM waits for requests in flight before cutting them off.
    public var shutdownGracePeriod: Duration = .seconds(10)
    /// How long a new connection may take to deliver its first request's head (after the TLS
    /// handshake): a client that sends nothing, or half a head, is closed after this. (nginx's
    /// `client_header_timeout` is 60 s; a head takes one packet.)
    public var requestHeadTimeout: Duration = .seconds(30)
    /// How long a connection may stay open with no request under way, after an answer, until the
    /// next request's head is complete. Longer than the idle timeouts of common load balancers (60
    /// s), so that they, not the receiver, close the connections they keep; nginx's
    /// `keepalive_timeout`.
    public var idleTimeout: Duration = .seconds(75)
    /// How long a request body may go without a byte while the receiver reads it: then the
    /// connection is closed and the request fails as a cut body (an upload keeps what a cut body
    /// keeps; a resuming client need not wait for this, see `OffsetUpload.takingOver`). Time the
    /// receiver itself spends not reading does not count. nginx's `client_body_timeout`; also
    /// `URLSession`'s default request timeout. The same bound holds for answers: a client that
    /// takes no byte of one (a download) this long is closed (nginx's `send_timeout`).
    public var bodyStallTimeout: Duration = .seconds(60)
    /// How long a TLS handshake may take from the connection (with `tls`).
    public var tlsHandshakeTimeout: Duration = .seconds(10)
    /// The most connections held at once; nil: half of what the process's descriptor limit
    /// leaves after a reserve, at most 4,096 (`ConnectionLimit.defaultMaximum`; each held
    /// connection costs ~22 KiB resident). At the maximum a new connection pushes out the one idle
    /// the longest (no request under way: half-open, or kept alive between requests); it is
    /// refused only when every other one is busy.
    public var maximumConnections: Int? = nil
    /// When set, every request must carry `Authorization: Bearer <authToken>` (401 otherwise).
    public var authToken: String? = nil
    /// When set, the receiver speaks HTTPS with this certificate (iOS apps reach only HTTPS by
    /// default) and answers `https://` URLs.
    public var tls: TLSFiles? = nil
    /// The application's hook (`pre-create`, `post-finish`, `post-terminate`); nil: none.
    public var hooks: HookSettings? = nil
    /// What `GET /metrics` answers (the program bootstraps a swift-metrics backend and renders
    /// it here, as `xfer serve` does with Prometheus); nil: no /metrics.
    public var metrics: MetricsExposition? = nil
    /// Origins whose pages may upload from a browser (`https://app.example.com`; `*` for any):
    /// their requests get CORS answers (preflights, allowed and exposed headers). Empty: none.
    public var corsOrigins: [String] = []
    /// Whether `GET /` serves the upload page (resumable uploads from a browser, IETF or tus).
    public var uploadPage: Bool = true
    /// When set, uploads live in this object store instead of under `root` (which is then unused):
    /// any number of receivers may share it, behind any load balancer.
    public var objectStore: ObjectStoreLocation? = nil
    /// Where clients reach the receiver (`https://uploads.example.com`, or with a path a proxy
    /// maps: `https://example.com/xfer`): every link the receiver writes (`Location`, download
    /// links, hooks' events) starts with it. Nil: the address it is bound to. Never the request's
    /// `Host`, which is the client's to write.
    public var publicURL: String? = nil
    /// What the receiver holds of clients' uploads in memory at most (503 with `Retry-After` past it).
    public var limits = ReceiverLimits()
    /// An unfinished upload nobody touched this long is dropped with everything it holds (on an
    /// object store, its multipart upload aborted too): by a sweep every quarter of it (at most
    /// every minute). Never one a request is sending to. A day by default; nil keeps unfinished
    /// uploads until a client deletes them. tus answers it as `Upload-Expires`, the IETF draft as
    /// `Upload-Limit: expires`.
    public var expireAfter: Duration? = .seconds(24 * 3600)

    public init(root: String) {
        self.root = root
    }

    /// Nil when `text` can be `publicURL`; else why not, in a user's words.
    public static func problem(ofPublicURL text: String) -> String? {
        BaseURL.problem(ofPublicURL: text)
    }
}

extension ReceiverConfiguration {
    /// What a nil `maximumConnections` stands for in this process (its descriptor limit now).
    public static var defaultMaximumConnections: Int { ConnectionLimit.defaultMaximum() }
    /// The most `maximumConnections` may be in this process: one descriptor per connection,
    /// past a reserve for files, stores and hooks.
    public static var largestMaximumConnections: Int { ConnectionLimit.largestMaximum() }
}

/// The receiver's certificate and key, as PEM files (a chain: the server's certificate first).
public struct TLSFiles: Sendable, Hashable {
    public var certificateChain: String
    public var privateKey: String

    public init(certificateChain: String, privateKey: String) {
        self.certificateChain = certificateChain
        self.privateKey = privateKey
    }

    /// What a file of them lacks, in a user's words.
    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    /// The server's TLS configuration: HTTP/1.1 by ALPN only. HTTP/2 is not offered: through a
    /// TLS front it made large uploads 0.22x as fast as HTTP/1.1 (Docs/benchmarks.md, "Far from
    /// the server"), and libcurl 7.88 crashed once in 22 runs of it.
    public func serverConfiguration() throws(Failure) -> TLSConfiguration {
        let chain: [NIOSSLCertificate]
        do {
            chain = try NIOSSLCertificate.fromPEMFile(certificateChain)
        } catch {
            throw Failure(description: "cannot read the TLS certificate \(certificateChain): \(Receiver.reason(for: error))")
        }
        guard !chain.isEmpty else { throw Failure(description: "no PEM certificate in \(certificateChain)") }
        let key: NIOSSLPrivateKey
        do {
            key = try NIOSSLPrivateKey(file: privateKey, format: .pem)
        } catch {
            throw Failure(description: "cannot read the TLS private key \(privateKey): \(Receiver.reason(for: error))")
        }
        var configuration = TLSConfiguration.makeServerConfiguration(certificateChain: chain.map { .certificate($0) }, privateKey: .privateKey(key))
        configuration.applicationProtocols = ["http/1.1"]
        // TLS 1.0 and 1.1 are deprecated (RFC 8996); every client that speaks the upload
        // protocols speaks 1.2.
        configuration.minimumTLSVersion = .tlsv12
        return configuration
    }
}

/// An S3-compatible store holding a receiver's uploads: `s3://BUCKET/PREFIX` and how to reach it,
/// with the credentials the `s3` backend would use.
public struct ObjectStoreLocation: Sendable {
    public var bucket: String
    /// Every key the receiver writes starts with it (and a "/"); empty for the bucket's root.
    public var prefix: String
    public var configuration: AWSConfiguration
    /// Nil for AWS in the region.
    public var endpoint: S3Endpoint?
    public var region: String?
    /// How long an append's claim on an upload holds without renewal: how long an upload whose
    /// receiver died mid-append waits before another may take it over.
    public var claimLifetime: Duration = .seconds(30)
    /// An unfinished upload untouched this long is dropped (its multipart upload aborted, its
    /// staged pieces deleted): by whichever receiver meets it first, or by a sweep each receiver
    /// runs now and then (never a scan at startup). Nil: `ReceiverConfiguration.expireAfter`.
    @available(*, deprecated, message: "set ReceiverConfiguration.expireAfter, which both storages follow")
    public var expireAfter: Duration? {
        get { expiry }
        set { expiry = newValue }
    }
    var expiry: Duration? = nil

    public init(bucket: String, prefix: String, configuration: AWSConfiguration, endpoint: S3Endpoint? = nil, region: String? = nil) {
        self.bucket = bucket
        self.prefix = prefix
        self.configuration = configuration
        self.endpoint = endpoint
        self.region = region
    }
}

/// What a test build of the receiver may add (XferReceiverTesting sets these; nothing else should):
/// middleware in front of every route (faults, held and stalled requests), the chunk size `patch`
/// answers, and merges of `multipart` that fail on purpose.
@_spi(Testing) public struct ReceiverTestHooks: Sendable {
    /// Outermost first, after the protocols' own and the authentication.
    public var middleware: [any MiddlewareProtocol<Request, Response, ReceiverContext>] = []
    /// When set, `POST /uploads` answers this chunk size instead of the client's (lets tests
    /// exercise "the server picks the chunk size").
    public var patchChunkSize: Int? = nil
    /// When set, `patch` creates uploads from JSON only, as receivers before whole creations did
    /// (its discovery says so), so tests drive the three requests a small file costs there.
    public var patchJSONOnly = false
    /// Asked before a complete multipart file (its upload id, its index in its source) is merged:
    /// true fails the merge and discards the file's fragments, as a real failed merge leaves them.
    public var failsMerge: (@Sendable (_ uploadID: String, _ fileIndex: Int) async -> Bool)? = nil

    public init() {}
}

/// Every protocol's routes over one storage, for mounting in a Hummingbird application: the
/// application's own middleware (its authentication, say) wraps them as it wraps its other routes.
///
///     let receiver = try await ReceiverRoutes.open(ReceiverConfiguration(root: "/srv/uploads"), logger: logger)
///     let uploads = router.group().add(middleware: MyAuthMiddleware())
///     receiver.register([.tus, .ietf], on: uploads)
///
/// Paths are the protocols' own (`/files/`, `/resumable/`, ...), as Docs/protocols.md lists them.
/// `authToken` is not checked here: mounted routes are behind the application's middleware.
public struct ReceiverRoutes: Sendable {
    let environment: RouteEnvironment

    /// Opens (or creates) the storage under `configuration.root`, recovering what a crash left.
    /// `threadPool` runs the blocking file work (writes, syncs, reads of downloads); it must be
    /// running for as long as the routes serve.
    public static func open(
        _ configuration: ReceiverConfiguration, threadPool: NIOThreadPool = .singleton, logger: Logger
    ) async throws -> ReceiverRoutes {
        try await open(configuration, testHooks: ReceiverTestHooks(), threadPool: threadPool, logger: logger)
    }

    @_spi(Testing) public static func open(
        _ configuration: ReceiverConfiguration, testHooks: ReceiverTestHooks, threadPool: NIOThreadPool, logger: Logger
    ) async throws -> ReceiverRoutes {
        let memory = UploadsInMemory(limits: configuration.limits)
        let storage: StorageComposer
        if let location = configuration.objectStore {
            try location.validate(expireAfter: configuration.expireAfter)
            let requests = S3ObjectRequests(
                bucket: location.bucket, configuration: location.configuration, endpoint: location.endpoint, region: location.region)
            storage = StorageComposer(composing: ObjectStorage(
                client: ObjectStoreClient(requests: requests, logger: logger), prefix: location.prefix, claimLifetime: location.claimLifetime,
                expireAfter: location.expiry ?? configuration.expireAfter, memory: memory, logger: logger))
        } else {
            storage = StorageComposer(composing: try await DiskStorage.open(
                root: configuration.root, threadPool: threadPool, memory: memory, expireAfter: configuration.expireAfter, logger: logger))
        }
        return try await open(storage, configuration: configuration, testHooks: testHooks, logger: logger)
    }

    /// The routes over `storage`, whose capabilities are resolved here, once: the routes of a
    /// protocol whose capability it lacks are not registered, and nothing advertises it.
    static func open(
        _ storage: StorageComposer, configuration: ReceiverConfiguration, testHooks: ReceiverTestHooks = ReceiverTestHooks(), logger: Logger
    ) async throws -> ReceiverRoutes {
        let handles = UploadHandles(key: try await storage.handleKeys?.handleKey() ?? UploadHandles.processKey())
        let environment = RouteEnvironment(
            storage: storage,
            baseURL: BaseURL(
                publicURL: configuration.publicURL, configuredHost: configuration.host, configuredPort: configuration.port,
                scheme: configuration.tls == nil ? "http" : "https"),
            configuration: configuration, testHooks: testHooks, logger: logger, handles: handles)
        // A sweep that completes an upload (its completion had failed) reports it as a request
        // would: pre-finish (a refusal discards it; nobody is there to be answered), post-finish.
        if let expiry = storage.expiry {
            let hooks = environment.hooks
            expiry.sweeper.reportSweptCompletions { [weak core = storage.core] upload in
                try? await hooks.finish(
                    upload.protocolName, id: upload.id, path: upload.path, size: upload.size, metadata: upload.metadata, form: .error
                ) { try await core?.delete(id: upload.id) ?? false }
            }
        }
        let missing = UploadProtocol.allCases.filter { !$0.routes.requiredCapabilities.isSubset(of: storage.capabilities) }
        if !missing.isEmpty {
            logger.info("The storage serves no \(missing.map(\.rawValue).joined(separator: ", ")): it lacks their capabilities")
        }
        startUpkeep(of: storage, limits: configuration.limits)
        return ReceiverRoutes(environment: environment)
    }

    /// The storage's upkeep for as long as it serves: idle uploads leave memory every half of
    /// the idle lifetime (at least every 30 s, at most every second), expired ones go every
    /// quarter of `expireAfter` (at least every minute, at most every second). It holds the
    /// storage weakly, so routes an application lets go take their upkeep with them; nothing is
    /// scanned at startup. A storage without the capabilities has no upkeep.
    private static func startUpkeep(of storage: StorageComposer, limits: ReceiverLimits) {
        let idlePeriod = min(max(limits.idleUploadLifetime / 2, .seconds(1)), .seconds(30))
        if let upkeep = storage.upkeep {
            Task.detached { [weak upkeep] in
                while true {
                    do { try await Task.sleep(for: idlePeriod) } catch { return }
                    guard let upkeep else { return }
                    await upkeep.dropIdle()
                }
            }
        }
        guard let expiry = storage.expiry else { return }
        let expiryPeriod = min(max(expiry.after / 4, .seconds(1)), .seconds(60))
        Task.detached { [weak sweeper = expiry.sweeper] in
            while true {
                do { try await Task.sleep(for: expiryPeriod) } catch { return }
                guard let sweeper else { return }
                await sweeper.expire()
            }
        }
    }

    /// Registers the routes of `protocols` on `router` (a router or a group of one). The
    /// protocols' own middleware (tus's `Tus-Resumable`, the IETF draft's version echo) comes
    /// with them.
    public func register<Context: ReceiverRequestContext>(
        _ protocols: Set<UploadProtocol> = Set(UploadProtocol.allCases), on router: some RouterMethods<Context>
    ) {
        let group = router.group()
        if protocols.contains(.tus) { group.add(middleware: TusProtocolMiddleware()) }
        if protocols.contains(.ietf) { group.add(middleware: IETFVersionMiddleware()) }
        registerRoutes(protocols, on: group)
    }

    /// The routes alone: `Receiver` puts the protocols' middleware outermost on its whole router
    /// instead, so that its own refusals (a 401, a 404 for no route) carry their headers too.
    func registerRoutes<Context: ReceiverRequestContext>(_ protocols: Set<UploadProtocol>, on router: some RouterMethods<Context>) {
        // In the list's order, so that the registration (and so the routing) never depends on a set's.
        for kind in UploadProtocol.allCases where protocols.contains(kind) {
            kind.routes.init(environment)?.register(on: router)
        }
    }
}

/// The reference receiver behind `xfer serve`: every protocol's routes on disk storage, served
/// by a Hummingbird application of its own.
public struct Receiver: Sendable {
    public let configuration: ReceiverConfiguration
    let testHooks: ReceiverTestHooks

    public init(configuration: ReceiverConfiguration) {
        self.configuration = configuration
        self.testHooks = ReceiverTestHooks()
    }

    @_spi(Testing) public init(configuration: ReceiverConfiguration, testHooks: ReceiverTestHooks) {
        self.configuration = configuration
        self.testHooks = testHooks
    }

    /// Runs until the task is cancelled or the process receives SIGINT/SIGTERM (graceful shutdown),
    /// then returns normally. Throws if the root can't be prepared or the address can't be bound.
    ///
    /// Calls `onListening` exactly once with the base URL, e.g. "http://127.0.0.1:43817", once the
    /// socket is bound and accepting.
    public func run(onListening: @escaping @Sendable (String) -> Void) async throws {
        var base = Logger(label: "xfer.receiver")
        base.logLevel = configuration.logLevel
        // Hummingbird gives every request a logger with its own metadata (a request id); the
        // default handler formats all metadata each time it is set, for logs that are never
        // written at this level. This one keeps metadata as given until something is logged.
        let logger = Logger(label: "xfer.receiver") { _ in DeferredMetadataLogHandler(base: base.handler) }

        // fsyncs wait on the disk, not the CPU, so a few more threads than cores keeps concurrent
        // chunks from queueing behind each other's syncs.
        let threadPool = NIOThreadPool(numberOfThreads: max(4, System.coreCount))
        threadPool.start()
        do {
            try await serve(threadPool: threadPool, logger: logger, onListening: onListening)
        } catch {
            try? await threadPool.shutdownGracefully()
            throw error
        }
        try await threadPool.shutdownGracefully()
    }

    private func serve(threadPool: NIOThreadPool, logger: Logger, onListening: @escaping @Sendable (String) -> Void) async throws {
        let routes = try await ReceiverRoutes.open(configuration, testHooks: testHooks, threadPool: threadPool, logger: logger)
        let router = Router(context: ReceiverContext.self)
        // Middleware first: Hummingbird wraps each route in the middleware present when it is added,
        // the first added outermost. tus's goes first so that every answer under /files, refusals
        // of the others included, carries Tus-Resumable.
        // CORS outermost: a preflight carries no token, and refusals must carry CORS headers too.
        if !configuration.corsOrigins.isEmpty {
            router.add(middleware: CORSMiddleware(origins: Set(configuration.corsOrigins)))
        }
        // Request latency and counts by route (Hummingbird's, recorded so that a small answer
        // keeps its one write: RequestMetricsMiddleware), when someone reads them.
        if configuration.metrics != nil { router.add(middleware: RequestMetricsMiddleware()) }
        router.add(middleware: TusProtocolMiddleware())
        router.add(middleware: IETFVersionMiddleware())
        router.add(middleware: JSONNotFoundMiddleware())
        if let token = configuration.authToken {
            router.add(middleware: AuthMiddleware(
                token: token, checkedByRoute: SequenceRoutes.carriesItsOwnCredential,
                open: { PatchRoutes.isDiscovery($0) || TusRoutes.isDiscovery($0) || IETFRoutes.isDiscovery($0) || HealthRoutes.isProbe($0) || UploadPageRoutes.isPage($0) }))
        }
        for middleware in testHooks.middleware {
            router.add(middleware: middleware)
        }
        routes.registerRoutes(Set(UploadProtocol.allCases), on: router)

        let baseURL = routes.environment.baseURL
        // What a slow or silent client may hold, in time and in connections (ConnectionGuard.swift).
        let rules = ConnectionRules(
            requestHeadTimeout: configuration.requestHeadTimeout, idleTimeout: configuration.idleTimeout,
            bodyStallTimeout: configuration.bodyStallTimeout, tlsHandshakeTimeout: configuration.tls == nil ? nil : configuration.tlsHandshakeTimeout)
        let connections = ConnectionLimit(maximum: configuration.maximumConnections ?? ConnectionLimit.defaultMaximum())
        var server = HTTPServerBuilder.eventLoopBoundHTTP1(
            configuration: .init(additionalChannelHandlers: [
                ExpectContinueHandler(), ConnectionDeadlines(rules: rules, limit: connections, logger: logger),
            ]))
        if let tls = configuration.tls { server = try .tls(server, tlsConfiguration: try tls.serverConfiguration()) }
        let app = Application(
            router: router,
            server: server,
            // A deep accept queue (the kernel caps it at net.core.somaxconn): in a burst of new
            // connections the receiver accepts a little behind, and each SYN dropped from a full
            // queue costs its client a second's retransmission — a /health probe among them
            // included. Accepted connections are then counted and bounded (ConnectionLimit).
            configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: nil, backlog: 4096),
            onServerRunning: { channel in
                onListening(baseURL.setBoundPort(channel.localAddress?.port ?? 0))
            },
            logger: logger
        )

        var groupConfiguration = ServiceGroupConfiguration(
            services: [app],
            gracefulShutdownSignals: [.sigterm, .sigint],
            logger: logger
        )
        groupConfiguration.maximumGracefulShutdownDuration = configuration.shutdownGracePeriod
        let group = ServiceGroup(configuration: groupConfiguration)
        // Cancelling the caller's task is the in-process way to stop. Cancelling the group directly
        // would make Hummingbird cut connections mid-response and log errors, so the group runs in
        // its own task and cancellation asks it for the same graceful shutdown a signal would.
        let running = Task { try await group.run() }
        try await withTaskCancellationHandler {
            try await running.value
        } onCancel: {
            Task { await group.triggerGracefulShutdown() }
        }
    }
}

extension Receiver {
    /// What went wrong in `run`, in a user's words: NIO's and Foundation's
    /// errors name the syscall and repeat errno, where a user needs the reason.
    public static func reason(for error: any Error) -> String {
        if let error = error as? NIOCore.IOError { return String(cString: strerror(error.errnoCode)).lowercased() }
        if let error = error as? CocoaError, let underlying = error.underlying as? POSIXError {
            return String(cString: strerror(underlying.code.rawValue)).lowercased()
        }
        return String(describing: error)
    }
}

/// A log handler that stores metadata and hands it to `base` only with a message that is logged.
struct DeferredMetadataLogHandler: LogHandler {
    var base: any LogHandler
    var metadata: Logger.Metadata = [:]

    var logLevel: Logger.Level {
        get { base.logLevel }
        set { base.logLevel = newValue }
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var event = event
        var merged = metadata
        if let given = event.metadata { merged.merge(given) { $1 } }
        event.metadata = merged
        base.log(event: event)
    }
}
