import Hummingbird
import Logging
import NIOCore

/// What every protocol's routes are built from, once per receiver: one storage and the capabilities
/// it declared (resolved once), one set of limits, one way to make the URLs handed out, one log. A
/// protocol's routes hold this and what is theirs alone (tus's and ietf's offset uploads,
/// sequence's tokens, multipart's sources), nothing twice.
struct RouteEnvironment: Sendable {
    /// The storage's core and capabilities: routes take what they need from here, never by
    /// asking the storage's type.
    let storage: StorageComposer
    let baseURL: BaseURL
    let configuration: ReceiverConfiguration
    let testHooks: ReceiverTestHooks
    let logger: Logger
    /// What upload URLs carry instead of the bare id (`UploadHandles`).
    let handles: UploadHandles
    /// The application's hook and the upload metrics: where routes report an upload's events.
    /// One per receiver: its calls share one cap and one line (`HookRuntime`).
    let hooks: UploadHooks

    init(
        storage: StorageComposer, baseURL: BaseURL, configuration: ReceiverConfiguration, testHooks: ReceiverTestHooks, logger: Logger,
        handles: UploadHandles
    ) {
        self.handles = handles
        self.storage = storage
        self.baseURL = baseURL
        self.configuration = configuration
        self.testHooks = testHooks
        self.logger = logger
        // Resolved once: whether the storage keeps files where the application could read them.
        var locate: (@Sendable (_ id: String) async -> String?)?
        if let locating = storage.core as? any PublishedFileLocating {
            locate = { id in await locating.publishedFilePath(id: id) }
        }
        hooks = UploadHooks(settings: configuration.hooks, logger: logger, locate: locate)
    }
}

/// One protocol's routes: built from the receiver's environment, registered on any router (the
/// receiver's own, or a group of someone else's application).
protocol ProtocolRoutes: Sendable {
    var environment: RouteEnvironment { get }
    /// Nil when the environment's storage did not declare a capability the protocol needs
    /// (`requiredCapabilities`): the protocol then has no routes.
    init?(_ environment: RouteEnvironment)
    /// What the protocol's routes need of the storage beyond its core.
    static var requiredCapabilities: Set<StorageComposer.Capability> { get }
    func register<Context: ReceiverRequestContext>(on router: some RouterMethods<Context>)
}

extension ProtocolRoutes {
    static var requiredCapabilities: Set<StorageComposer.Capability> { [] }
    var store: any UploadStorage { environment.storage.core }
    /// How long unfinished uploads last; nil when they do not expire.
    var expireAfter: Duration? { environment.storage.expiry?.after }
    var baseURL: BaseURL { environment.baseURL }
    var configuration: ReceiverConfiguration { environment.configuration }
    var testHooks: ReceiverTestHooks { environment.testHooks }
    var handles: UploadHandles { environment.handles }
    var logger: Logger { environment.logger }
    var hooks: UploadHooks { environment.hooks }
}

/// Routes over the storage's offset uploads (tus's, the IETF draft's): the same capability, each
/// protocol's uploads under its own name, resolved once.
protocol OffsetUploadRoutes: ProtocolRoutes {
    static var protocolName: String { get }
    init(environment: RouteEnvironment, uploads: any OffsetUploadStore)
    /// Publishes a complete upload and reports it (`pre-finish`, then `post-finish` and the
    /// metrics) if this call completed it.
    func finishUpload(_ upload: any OffsetUpload) async throws
}

extension OffsetUploadRoutes {
    /// Bytes below `offset` are acknowledged: `post-receive` (paced), unless there are none yet
    /// (a creation without a body) or the upload is complete (`post-finish` says so).
    func progressed(_ upload: any OffsetUpload, to offset: Int) {
        guard offset > 0, offset < upload.length else { return }
        hooks.received(Self.protocolName, id: upload.id, path: upload.path.text, size: upload.length) { offset }
    }

    /// The upload's offset as a client may be told it (nil once it is gone): an upload whose every
    /// byte is in but whose completion failed or was cut short by a crash is finished first, so
    /// that no answer says "complete" before the file exists (a completion that fails again is
    /// this request's error). `inTurn`: the caller holds the upload's turn already.
    func settledOffset(of upload: any OffsetUpload, inTurn: Bool = false) async throws -> Int? {
        guard let offset = await upload.currentOffset else { return nil }
        guard offset == upload.length else { return offset }
        if inTurn {
            try await finishUpload(upload)
        } else {
            try await upload.exclusively { try await finishUpload(upload) }
        }
        return offset
    }
}

extension OffsetUploadRoutes {
    static var requiredCapabilities: Set<StorageComposer.Capability> { [.offsetUploads] }

    init?(_ environment: RouteEnvironment) {
        guard let storage = environment.storage.offsetUploads else { return nil }
        self.init(environment: environment, uploads: storage.offsetUploads(protocolName: Self.protocolName))
    }
}

/// The wire protocols a receiver speaks, each a set of routes (Docs/protocols.md tells each
/// one's story). The one list of them: the receiver registers what is here, and a new protocol
/// is a case and its routes' type.
public enum UploadProtocol: String, Sendable, CaseIterable, Hashable {
    /// `POST /uploads`, `PATCH /uploads/{id}/chunks/{n}`, `GET`, `POST …/complete`, `DELETE`.
    case patch
    /// `POST /fileSection/preLoad.do`, `upload.do`, `isFinish.do`, `delete.do`.
    case multipart
    /// `POST /init`, `/block`, `/finish` (multipart forms with a token of their own).
    case sequence
    /// tus 1.0.0 under `/files/`: creation, creation-with-upload, checksum, termination, concatenation.
    case tus
    /// The IETF resumable uploads draft under `/resumable/` (interop versions 6 and 8).
    case ietf
    /// `PUT /raw/{name}`: one request per file, for baselines and simple scripts.
    case raw
    /// `GET /downloads/{id}/{path}` (with ranges): every protocol's completed files.
    case downloads
    /// `GET /stats`: bytes received, for measuring what clients send again.
    case statistics
    /// `GET /health`: whether the receiver can take uploads, for load balancers and probes.
    case health
    /// `GET /metrics`: counters and latencies, when the configuration says how to render them.
    case metrics
    /// `GET /`: a page uploading files from a browser over `ietf` or `tus` (and its script and style).
    case uploadPage

    var routes: any ProtocolRoutes.Type {
        switch self {
        case .patch: PatchRoutes.self
        case .multipart: MultipartRoutes.self
        case .sequence: SequenceRoutes.self
        case .tus: TusRoutes.self
        case .ietf: IETFRoutes.self
        case .raw: RawRoutes.self
        case .downloads: DownloadRoutes.self
        case .statistics: StatisticsRoutes.self
        case .health: HealthRoutes.self
        case .metrics: MetricsRoutes.self
        case .uploadPage: UploadPageRoutes.self
        }
    }
}

/// A request context the receiver's routes can run in: Hummingbird's, plus the request's channel
/// (the IETF draft's creation writes an informational `104` on it before its final answer, which a
/// route can only do there). An application mounting the routes gives its own context this.
public protocol ReceiverRequestContext: RequestContext {
    var channel: any Channel { get }
}
