import Foundation
import Hummingbird
import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle
import UnixSignals

public struct ReceiverConfiguration: Sendable {
    /// Loopback unless told otherwise: without `authToken` anyone who can connect may upload.
    public var host: String = "127.0.0.1"
    /// 0 picks a free port; the chosen one is reported through `onListening`.
    public var port: Int = 0
    /// Directory holding all receiver state and files; created if missing.
    public var root: String
    /// When set, POST /uploads answers this chunk size instead of the client's (lets tests exercise
    /// "server picks the chunk size").
    public var forcedPatchChunkSize: Int? = nil
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
    /// Test hook: `PATH` or `PATH@N` — the Nth request to PATH is processed,
    /// then its answer withheld until the client goes away. Invalid entries
    /// are refused by `run`.
    public var holds: [String] = []
    /// Test hook: `PATH` or `PATH@N` — the Nth request to PATH is withheld
    /// before it is processed (its body unread) until the client goes away.
    public var stalls: [String] = []
    /// Called when a held request is being withheld ("held POST /path #N", or
    /// "stalled POST /path #N" for a stall).
    public var onHold: (@Sendable (String) -> Void)? = nil

    /// Test hook for multipart: make `isFinish.do` report failed merges (see `MergeFailurePlan`).
    public var failMerge: MergeFailurePlan? = nil

    /// When set, every request must carry `Authorization: Bearer <authToken>` (401 otherwise).
    public var authToken: String? = nil

    /// Test hook: misbehave on a seeded share of state-changing requests (see `FaultPlan`).
    public var faults: FaultPlan? = nil

    public init(root: String) {
        self.root = root
    }
}

/// The reference receiver behind `xfer serve`.
public struct Receiver: Sendable {
    public let configuration: ReceiverConfiguration

    public init(configuration: ReceiverConfiguration) {
        self.configuration = configuration
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
        let store = try await UploadStore.open(root: configuration.root, io: BlockingIO(pool: threadPool), logger: logger)
        let baseURL = BaseURL(configuredHost: configuration.host)

        let router = Router(context: ReceiverContext.self)
        // Middleware first: Hummingbird wraps each route in the middleware present when it is added,
        // the first added outermost. tus's goes first so that every answer under /files, refusals
        // of the others included, carries Tus-Resumable.
        router.add(middleware: TusProtocolMiddleware())
        router.add(middleware: IETFVersionMiddleware())
        router.add(middleware: JSONNotFoundMiddleware())
        if let token = configuration.authToken {
            router.add(middleware: AuthMiddleware(
                token: token, checkedByRoute: SequenceRoutes.carriesItsOwnCredential,
                open: { TusRoutes.isDiscovery($0) || IETFRoutes.isDiscovery($0) }))
        }
        // Test hooks, all wired here: holds and stalls, injected HTTP faults, failed merges.
        if !configuration.holds.isEmpty || !configuration.stalls.isEmpty {
            let rules = try configuration.holds.map { text in
                guard let rule = HoldRule(text) else { throw ReceiverSetupError("--hold expects /PATH or /PATH@N, not '\(text)'") }
                return rule
            } + configuration.stalls.map { text in
                guard let rule = HoldRule(text, beforeProcessing: true) else {
                    throw ReceiverSetupError("--stall expects /PATH or /PATH@N, not '\(text)'")
                }
                return rule
            }
            router.add(middleware: HoldMiddleware(rules: rules, onHold: configuration.onHold ?? { _ in }))
        }
        if let faults = configuration.faults {
            router.add(middleware: FaultMiddleware(plan: faults))
        }
        let mergeFailures = configuration.failMerge.map { MergeFailures(plan: $0, store: store) }

        // Each protocol registers its own routes on the shared store, in a group that answers
        // what its handlers throw (`RefusalMiddleware`); downloads are common to all.
        PatchRoutes(store: store, baseURL: baseURL, configuration: configuration, logger: logger).register(on: router)
        MultipartRoutes(store: store, mergeFailures: mergeFailures, baseURL: baseURL, configuration: configuration, logger: logger)
            .register(on: router)
        SequenceRoutes(store: store, baseURL: baseURL, configuration: configuration, logger: logger).register(on: router)
        TusRoutes(store: store, threadPool: threadPool, baseURL: baseURL, configuration: configuration, logger: logger).register(on: router)
        IETFRoutes(store: store, threadPool: threadPool, baseURL: baseURL, configuration: configuration, logger: logger).register(on: router)
        DownloadRoutes(store: store, threadPool: threadPool).register(on: router)
        StatisticsRoutes(store: store).register(on: router)
        RawRoutes(store: store, configuration: configuration, logger: logger).register(on: router)

        let app = Application(
            router: router,
            server: .eventLoopBoundHTTP1(configuration: .init(additionalChannelHandlers: [ExpectContinueHandler()])),
            configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: nil),
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

struct ReceiverSetupError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
