import Hummingbird
import NIOCore

/// Hummingbird's basic request context plus the request's channel: the IETF resumable uploads
/// answer a creation with an informational `104` before the final response, which a route can
/// only write on the channel (a route returns one final `Response`).
struct ReceiverContext: RequestContext {
    var coreContext: CoreRequestContextStorage
    let channel: any Channel

    init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        channel = source.channel
    }
}
