import Hummingbird
import NIOCore

/// The context `xfer serve` runs its routes in: Hummingbird's basic request context plus the
/// request's channel (`ReceiverRequestContext`). An application that mounts the routes in its own
/// router uses its own context instead.
public struct ReceiverContext: ReceiverRequestContext {
    public var coreContext: CoreRequestContextStorage
    public let channel: any Channel

    public init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        channel = source.channel
    }
}
