import HTTPTypes
import Hummingbird

/// Adds `Tus-Resumable` to every answer under `/files` (refusals of other middleware included)
/// and refuses requests of another protocol version before anything processes them.
///
/// The version check: OPTIONS is exempt (the spec has the server ignore the header there); GET
/// and HEAD without the header pass (browsers, curl); any other request must carry exactly
/// `Tus-Resumable: 1.0.0`, else 412 with `Tus-Version`.
struct TusProtocolMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard TusRoutes.isTusPath(request.uri.path) else { return try await next(request, context) }
        let version = TusHeaders.version
        if request.method != .options, request.headers[.tusResumable] != version {
            let tolerated = request.headers[.tusResumable] == nil && (request.method == .get || request.method == .head)
            if !tolerated {
                let headers: HTTPFields = [.tusResumable: version, .tusVersion: version]
                if request.method == .head { return Response(status: .preconditionFailed, headers: headers) }
                return Refusal.error(.preconditionFailed, "this server speaks tus \(version): send Tus-Resumable: \(version)", headers: headers).response
            }
        }
        var response = try await next(request, context)
        response.headers[.tusResumable] = version
        return response
    }
}
