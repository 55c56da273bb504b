import Hummingbird

/// Requires `Authorization: Bearer TOKEN` on every request (downloads
/// included) when `xfer serve --auth-token` is set, except where a protocol
/// carries the credential itself (sequence's `token` field), which its route checks,
/// and requests that are `open` (tus's OPTIONS discovery, which reveals only what
/// the receiver supports; `GET /health`, for probes that carry no credential).
///
/// The token is compared in constant time so response timing does not leak
/// how much of a guess was right, and it never appears in an answer or a log.
struct AuthMiddleware<Context: RequestContext>: RouterMiddleware {
    private let expected: [UInt8]
    private let checkedByRoute: @Sendable (Request) -> Bool
    private let open: @Sendable (Request) -> Bool

    init(token: String, checkedByRoute: @escaping @Sendable (Request) -> Bool, open: @escaping @Sendable (Request) -> Bool = { _ in false }) {
        expected = Array("Bearer \(token)".utf8)
        self.checkedByRoute = checkedByRoute
        self.open = open
    }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        if checkedByRoute(request) || open(request) { return try await next(request, context) }
        guard let presented = request.headers[.authorization], ConstantTime.equal(Array(presented.utf8), expected) else {
            var response = JSONResponse.error(.unauthorized, "a valid bearer token is required")
            response.headers[.wwwAuthenticate] = "Bearer"
            return response
        }
        return try await next(request, context)
    }

}

enum ConstantTime {
    /// Constant-time: response timing must not tell how much of a guess was right.
    static func equal(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        var difference: UInt8 = 0
        for (x, y) in zip(a, b) { difference |= x ^ y }
        return difference == 0
    }
}
