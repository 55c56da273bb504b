import HTTPTypes
import Hummingbird

/// Cross-origin uploads from browsers (`xfer serve --cors-origin ORIGIN`): a page on another
/// origin — tus-js-client, Uppy, a page speaking the IETF draft — may upload only when the
/// receiver's answers name its origin.
///
/// Outermost of the receiver's middleware, before authentication: a preflight (`OPTIONS` with
/// `Origin` and `Access-Control-Request-Method`) carries no credential by the browser's rules, and
/// an answer refusing a token (401) must still carry the CORS headers, or the page cannot read why.
/// No `Access-Control-Allow-Credentials`: every protocol here sends its credential in a header
/// the page sets (`Authorization`, or a form field), never in cookies, so `*` is safe.
struct CORSMiddleware<Context: RequestContext>: RouterMiddleware {
    /// Allowed origins as the browser sends them (`https://app.example.com`), or `*` for any.
    let origins: Set<String>

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let origin = request.headers[CORS.origin] else { return try await next(request, context) }
        let allowed = origins.contains("*") ? "*" : (origins.contains(origin) ? origin : nil)
        if request.method == .options, request.headers[CORS.requestMethod] != nil {
            // A preflight: answered here, never by a route (tus's OPTIONS is discovery, not this).
            var response = Response(status: .noContent)
            response.headers[CORS.vary] = "Origin"
            guard let allowed else { return response }
            response.headers[CORS.allowOrigin] = allowed
            response.headers[CORS.allowMethods] = CORS.methods
            response.headers[CORS.allowHeaders] = CORS.requestHeaders
            response.headers[CORS.maxAge] = "86400"
            return response
        }
        var response: Response
        do {
            response = try await next(request, context)
        } catch let error as any HTTPResponseError {
            response = try error.response(from: request, context: context)
        }
        response.headers[CORS.vary] = "Origin"
        if let allowed {
            response.headers[CORS.allowOrigin] = allowed
            response.headers[CORS.exposeHeaders] = CORS.exposedHeaders
        }
        return response
    }
}

/// What the CORS answers say, the same for every request.
enum CORS {
    /// Every method a protocol uses: patch PATCH and DELETE, tus PATCH/HEAD/DELETE, the IETF
    /// draft's POST/PATCH/HEAD/DELETE, raw PUT, downloads GET.
    static let methods = "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"
    /// The request headers the protocols read (tus's, the IETF draft's, digests, the token).
    static let requestHeaders = [
        "Authorization", "Content-Type", "Content-Disposition", "Content-Digest", "Repr-Digest", "Content-MD5",
        "Tus-Resumable", "Upload-Length", "Upload-Offset", "Upload-Metadata", "Upload-Defer-Length", "Upload-Concat",
        "Upload-Checksum", "Upload-Complete", "Upload-Draft-Interop-Version", "X-HTTP-Method-Override", "X-Requested-With",
    ].joined(separator: ", ")
    /// The answer headers a page must read to go on: where an upload lives, how far it got, what
    /// the server speaks, the digests it stored.
    static let exposedHeaders = [
        "Location", "Upload-Offset", "Upload-Length", "Upload-Metadata", "Upload-Expires", "Upload-Complete", "Upload-Limit",
        "Upload-Draft-Interop-Version", "Tus-Resumable", "Tus-Version", "Tus-Extension", "Tus-Max-Size",
        "Tus-Checksum-Algorithm", "Content-Digest", "Repr-Digest", "ETag", "Content-Range", "Retry-After", "WWW-Authenticate",
    ].joined(separator: ", ")

    static let allowOrigin = HTTPField.Name("Access-Control-Allow-Origin")!
    static let allowMethods = HTTPField.Name("Access-Control-Allow-Methods")!
    static let allowHeaders = HTTPField.Name("Access-Control-Allow-Headers")!
    static let exposeHeaders = HTTPField.Name("Access-Control-Expose-Headers")!
    static let maxAge = HTTPField.Name("Access-Control-Max-Age")!
    static let requestMethod = HTTPField.Name("Access-Control-Request-Method")!
    static let origin = HTTPField.Name("Origin")!
    static let vary = HTTPField.Name("Vary")!
}
