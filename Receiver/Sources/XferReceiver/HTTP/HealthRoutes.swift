import FoundationEssentials
import Hummingbird

#if canImport(Glibc)
    import Glibc
#endif

/// `GET /health` (and `HEAD`): whether this receiver can take uploads, for load balancers
/// (haproxy's `option httpchk`) and Kubernetes probes. Open even when `--auth-token` is
/// set: a probe carries no credential, and the answer tells nothing about any upload.
///
/// 200 `{"status":"ok","storage":"disk"|"objectStore"}`; on disk, 503 with a reason when
/// the root can no longer be written (removed, read-only, unmounted), so a balancer stops
/// sending uploads that would fail. An object store is not asked at every probe (a request to
/// the store per probe per instance): its failures reach clients as 503s of the uploads.
struct HealthRoutes: ProtocolRoutes {
    let environment: RouteEnvironment

    init(_ environment: RouteEnvironment) {
        self.environment = environment
    }

    /// Whether `request` is a probe, which needs no credential.
    static func isProbe(_ request: Request) -> Bool {
        (request.method == .get || request.method == .head) && request.uri.path == "/health"
    }

    private struct Answer: Encodable {
        var status: String
        var storage: String
        var reason: String?
    }

    func register<Context: ReceiverRequestContext>(on router: some RouterMethods<Context>) {
        let onObjectStore = environment.configuration.objectStore != nil
        let root = environment.configuration.root
        router.on("health", method: .get) { _, _ in Self.answer(objectStore: onObjectStore, root: root) }
        router.on("health", method: .head) { _, _ in Self.answer(objectStore: onObjectStore, root: root) }
    }

    private static func answer(objectStore: Bool, root: String) -> Response {
        if objectStore { return JSONResponse.make(.ok, Answer(status: "ok", storage: "objectStore")) }
        var isDirectory = false
        guard FileManager.default.fileExists(atPath: root, isDirectory: &isDirectory), isDirectory else {
            return JSONResponse.make(.serviceUnavailable, Answer(status: "unavailable", storage: "disk", reason: "the root directory is gone"))
        }
        guard access(root, W_OK) == 0 else {
            return JSONResponse.make(.serviceUnavailable, Answer(status: "unavailable", storage: "disk", reason: "the root directory is not writable"))
        }
        return JSONResponse.make(.ok, Answer(status: "ok", storage: "disk"))
    }
}
