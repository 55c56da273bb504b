import Hummingbird

/// Requires `Authorization: Bearer TOKEN` on every request (downloads
/// included) when `xfer serve --auth-token` is set.
///
/// The token is compared in constant time so response timing does not leak
/// how much of a guess was right, and it never appears in an answer or a log.
struct AuthMiddleware<Context: RequestContext>: RouterMiddleware {
    private let expected: [UInt8]

    init(token: String) {
        expected = Array("Bearer \(token)".utf8)
    }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let presented = request.headers[.authorization], Self.equal(Array(presented.utf8), expected) else {
            var response = JSONResponse.error(.unauthorized, "a valid bearer token is required")
            response.headers[.wwwAuthenticate] = "Bearer"
            return response
        }
        return try await next(request, context)
    }

    private static func equal(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        var difference: UInt8 = 0
        for (x, y) in zip(a, b) { difference |= x ^ y }
        return difference == 0
    }
}
