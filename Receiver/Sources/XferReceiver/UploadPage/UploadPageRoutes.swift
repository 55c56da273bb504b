import HTTPTypes
import Hummingbird
import NIOCore

/// `GET /`: a page from which a person uploads files from a browser, resumably, over the IETF
/// draft or tus (the page's script speaks them to this receiver's own routes; same origin, so no
/// CORS is needed). Its three files are compiled into the binary (`embedInCode`): an installed
/// `xfer` is one file, with nothing to find at run time. Docs/cli.md, "The upload page".
///
/// The page and its script are open even with `--auth-token`: they hold nothing but code, and the
/// page asks for the token to send with its uploads. `ReceiverConfiguration.uploadPage` false
/// (`xfer serve --no-upload-page`) leaves `/` unanswered (404).
struct UploadPageRoutes: ProtocolRoutes {
    let environment: RouteEnvironment

    /// The page uploads over the IETF draft or tus: offset uploads.
    static var requiredCapabilities: Set<StorageComposer.Capability> { [.offsetUploads] }

    init?(_ environment: RouteEnvironment) {
        guard environment.configuration.uploadPage, environment.storage.offsetUploads != nil else { return nil }
        self.environment = environment
    }

    /// Paths of the page's files: `/` and what it loads.
    static let assetPrefix = "/upload-page/"

    private struct Asset: Sendable {
        let bytes: [UInt8]
        let contentType: String
    }

    private static let assets: [String: Asset] = [
        "/": Asset(bytes: PackageResources.index_html, contentType: "text/html; charset=utf-8"),
        assetPrefix + "upload.js": Asset(bytes: PackageResources.upload_js, contentType: "text/javascript; charset=utf-8"),
        assetPrefix + "upload.css": Asset(bytes: PackageResources.upload_css, contentType: "text/css; charset=utf-8"),
    ]

    /// Whether `request` asks for a file of the page, which needs no credential.
    static func isPage(_ request: Request) -> Bool {
        (request.method == .get || request.method == .head) && assets[request.uri.path] != nil
    }

    func register<Context: ReceiverRequestContext>(on router: some RouterMethods<Context>) {
        for (path, asset) in Self.assets {
            let routerPath = RouterPath(path == "/" ? "/" : String(path.dropFirst()))
            router.get(routerPath) { _, _ in Self.response(asset, body: true) }
            router.head(routerPath) { _, _ in Self.response(asset, body: false) }
        }
    }

    private static func response(_ asset: Asset, body: Bool) -> Response {
        Response(
            status: .ok,
            headers: [
                .contentType: asset.contentType,
                .contentLength: String(asset.bytes.count),
                // A new `xfer` brings a new page: revalidated each time, never stale.
                .cacheControl: "no-cache",
                // Only this receiver's own script, style and requests; nothing inline, nothing
                // fetched elsewhere, not framed by other sites.
                .contentSecurityPolicy:
                    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
                .xContentTypeOptions: "nosniff",
                HTTPField.Name("Referrer-Policy")!: "no-referrer",
            ],
            body: body ? ResponseBody(byteBuffer: ByteBuffer(bytes: asset.bytes)) : ResponseBody())
    }
}
