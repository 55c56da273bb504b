import Hummingbird
import Synchronization

/// A test hook: the Nth request to a path is processed as usual, then its
/// answer is withheld until the client goes away.
///
/// That is exactly the moment a crash is hardest for a client: the server
/// acted on the request, the client cannot know. Tests kill the client
/// while it waits, and `onHold` tells them (through `xfer serve`'s stdout)
/// when that moment has come, so no test needs to guess with a sleep.
/// A stall (`beforeProcessing`) withholds the request unread instead: the
/// client is just as blind, but the server never acted on it.
struct HoldRule: Sendable, Hashable {
    /// The request path, e.g. `/fileSection/isFinish.do`; ending in `*`,
    /// every path it begins (`/files/*`: tus uploads, whose ids are not
    /// known in advance), counted together. A `*` elsewhere (one at most)
    /// stands for any characters within one segment: `/uploads/ID*/chunks/3`,
    /// whatever the signature the upload's handle carries after its id.
    var path: String
    /// Which request to that path to hold, 1-based.
    var occurrence: Int
    /// Withhold the request before processing it (a "stall"): the server never
    /// acted on it, the other moment a client cannot tell apart.
    var beforeProcessing = false

    /// Parses `PATH` or `PATH@N`.
    init?(_ text: String, beforeProcessing: Bool = false) {
        self.beforeProcessing = beforeProcessing
        let parts = text.split(separator: "@", maxSplits: 1).map(String.init)
        guard let path = parts.first, path.hasPrefix("/") else { return nil }
        self.path = path
        if path.filter({ $0 == "*" }).count > 1 { return nil }
        if parts.count == 2 {
            guard let n = Int(parts[1]), n >= 1 else { return nil }
            occurrence = n
        } else {
            occurrence = 1
        }
    }

    func matches(_ requestPath: String) -> Bool {
        if path.hasSuffix("*") { return requestPath.hasPrefix(path.dropLast()) }
        guard let star = path.firstIndex(of: "*") else { return requestPath == path }
        let head = path[..<star], tail = path[path.index(after: star)...]
        guard requestPath.count >= head.count + tail.count, requestPath.hasPrefix(head), requestPath.hasSuffix(tail) else { return false }
        return !requestPath.dropFirst(head.count).dropLast(tail.count).contains("/")
    }
}

struct HoldMiddleware<Context: RequestContext>: RouterMiddleware {
    let rules: [HoldRule]
    let onHold: @Sendable (String) -> Void
    private let counts = RequestCounts()

    init(rules: [HoldRule], onHold: @escaping @Sendable (String) -> Void) {
        self.rules = rules
        self.onHold = onHold
    }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let path = request.uri.path
        // Each pattern counts the requests it matches.
        let patterns = Set(rules.filter { $0.matches(path) }.map(\.path))
        guard !patterns.isEmpty else { return try await next(request, context) }
        let due = patterns.map { pattern in (pattern, counts.next(pattern)) }
        func chosen(beforeProcessing: Bool) -> Int? {
            due.first { pattern, count in
                rules.contains { $0.path == pattern && $0.occurrence == count && $0.beforeProcessing == beforeProcessing }
            }?.1
        }
        if let count = chosen(beforeProcessing: true) {
            onHold("stalled \(request.method) \(path) #\(count)")
            try? await Task.sleep(for: .seconds(3600))
            return Response(status: .serviceUnavailable)
        }
        let response = try await next(request, context)
        if let count = chosen(beforeProcessing: false) {
            onHold("held \(request.method) \(path) #\(count)")
            // Until the client disconnects or the server stops.
            try? await Task.sleep(for: .seconds(3600))
        }
        return response
    }
}

private final class RequestCounts: Sendable {
    private let counts = Mutex<[String: Int]>([:])

    func next(_ path: String) -> Int {
        counts.withLock { counts in
            counts[path, default: 0] += 1
            return counts[path]!
        }
    }
}
