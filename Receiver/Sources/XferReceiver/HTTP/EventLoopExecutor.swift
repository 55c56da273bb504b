import Hummingbird
import HummingbirdCore
import Logging
import NIOCore

/// Runs jobs on one NIO event loop's thread.
///
/// Hummingbird handles each connection in a task on Swift's global executor, so every request
/// crossed threads twice without it: the event loop read the bytes and woke a cooperative thread
/// for the handler, which handed the answer back to the event loop to write. Measured on a small
/// patch upload (three requests), those wake-ups and their context switches were the receiver's
/// largest cost after the disk.
@available(macOS 15, *)
final class EventLoopTaskExecutor: TaskExecutor {
    /// The executor of the connection the current request came on, for unstructured tasks that
    /// should stay on its thread (they do not inherit a task executor preference).
    @TaskLocal static var current: EventLoopTaskExecutor?

    let eventLoop: any EventLoop

    init(_ eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        eventLoop.execute { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}

/// HTTP/1 connections whose handling (the request's handler, the actors it calls and the writes
/// of its answer) runs on the connection's own event loop: a request costs no thread switch
/// unless it waits for something (a sync round, the blocking pool).
///
/// Handlers that block the thread long (hashing a large file, fsync) already hop to the receiver's
/// blocking pool, so they hold up an event loop no longer than they held a cooperative thread.
struct EventLoopBoundHTTP1Channel: ServerChildChannel {
    typealias Value = HTTP1Channel.Value

    let inner: HTTP1Channel

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        // NIO's default first read is 2 KiB and adapts per connection, so a request carrying a
        // small chunk (headers and 4 KiB) took two reads, and the body arrived in two parts.
        _ = try? channel.syncOptions?.setOption(
            ChannelOptions.recvAllocator, value: AdaptiveRecvByteBufferAllocator(minimum: 8192, initial: 8192, maximum: 65536))
        return inner.setup(channel: channel, logger: logger)
    }

    func handle(value: Value, logger: Logger) async {
        if #available(macOS 15, *) {
            let executor = EventLoopTaskExecutor(value.channel.eventLoop)
            await EventLoopTaskExecutor.$current.withValue(executor) {
                await withTaskExecutorPreference(executor) {
                    await inner.handle(value: value, logger: logger)
                }
            }
        } else {
            await inner.handle(value: value, logger: logger)
        }
    }
}

/// `Task { ... }` on the current connection's event loop when there is one (see
/// `EventLoopTaskExecutor.current`), else on the global executor.
func unstructuredTask<Success: Sendable>(
    _ operation: sending @escaping @isolated(any) () async throws -> Success
) -> Task<Success, any Error> {
    if #available(macOS 15, *), let executor = EventLoopTaskExecutor.current {
        return Task(executorPreference: executor, operation: operation)
    }
    return Task(operation: operation)
}

extension HTTPServerBuilder {
    /// `.http1(configuration:)`, each connection handled on its event loop.
    static func eventLoopBoundHTTP1(configuration: HTTP1Channel.Configuration) -> HTTPServerBuilder {
        .init { responder in
            EventLoopBoundHTTP1Channel(inner: HTTP1Channel(responder: responder, configuration: configuration))
        }
    }
}
