import NIOCore
import Synchronization

/// A request body an upload's turn is waiting on, and the way to stop waiting: closing the
/// connection it arrives on.
///
/// A client whose connection died mid-body (a phone that changed networks, say) often leaves the
/// receiver a connection that says nothing: the body neither goes on nor ends. The request holding
/// the upload's turn would hold it until the body-stall timeout, and the client's resumption (the
/// IETF draft's offset retrieval, or its next append) would wait behind it. A request that takes
/// over the turn (`TakesTurns.takingOver`) cuts such a body instead, as tusd releases an upload's
/// lock for a new request and as the draft lets a server end a transfer the client has given up
/// on: the connection is closed, so the body fails as if the client had gone (`BodyWriter` sees it
/// cut), and the storage settles what arrived as for any cut body (on disk, without a checksum,
/// it is kept, durably, before the turn ends; an object store keeps nothing of it).
///
/// Only the body's own wait is cut short. Once the body has ended, the request is settling —
/// syncing, recording — and is left to finish: that wait is the storage's, bounded, and cutting it
/// would only lose an answer its client may still read.
final class BodyInFlight: Sendable {
    private let ended = Atomic<Bool>(false)
    private let channel: any Channel

    /// A body arriving on `channel`.
    init(arrivingOn channel: any Channel) {
        self.channel = channel
    }

    /// `body`, telling this when it ends or fails: pass that to the storage instead of `body`.
    func watching<Base: AsyncSequence>(_ body: Base) -> Watched<Base> where Base.Element == ByteBuffer {
        Watched(base: body, owner: self)
    }

    /// Closes the connection the body arrives on, unless the body has ended.
    func cut() {
        guard !ended.load(ordering: .acquiring) else { return }
        channel.close(promise: nil)
    }

    fileprivate func markEnded() {
        ended.store(true, ordering: .releasing)
    }

    /// A body that tells its `BodyInFlight` when it ends (its last buffer read, or its failure).
    struct Watched<Base: AsyncSequence>: AsyncSequence where Base.Element == ByteBuffer {
        typealias Element = ByteBuffer
        let base: Base
        let owner: BodyInFlight

        func makeAsyncIterator() -> Iterator {
            Iterator(base: base.makeAsyncIterator(), owner: owner)
        }

        struct Iterator: AsyncIteratorProtocol {
            var base: Base.AsyncIterator
            let owner: BodyInFlight

            mutating func next() async throws -> ByteBuffer? {
                do {
                    guard let buffer = try await base.next() else {
                        owner.markEnded()
                        return nil
                    }
                    return buffer
                } catch {
                    owner.markEnded()
                    throw error
                }
            }
        }
    }
}

extension BodyInFlight.Watched: Sendable where Base: Sendable {}
