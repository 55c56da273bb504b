import NIOCore
import Synchronization
import XferPrimitives

/// A client's request body on its way to the store, checked as it passes: at most `limit` bytes
/// (exactly `limit` with `exactLength`), the digest of `check`, and a CRC-32C kept of every byte.
///
/// The last buffer is held back until the body has ended and passed every check: only then does
/// the store receive its final byte. A body that fails (too long, too short, the wrong digest, cut
/// by the client) makes this sequence throw before that, so the store's request ends short of its
/// `Content-Length` and the store keeps nothing of it — "nothing of a refused body is committed"
/// with no local spool and one buffer of memory.
struct CheckedBody<Base: AsyncSequence & Sendable>: AsyncSequence, Sendable where Base.Element == ByteBuffer {
    typealias Element = ByteBuffer

    let base: Base
    let limit: Int
    let exactLength: Bool
    let check: BodyWriter.Check?
    /// What went through, read once the sequence has ended.
    let outcome: Outcome
    let trailer: (@Sendable () async throws -> Void)?
    let counted: @Sendable (Int) -> Void

    final class Outcome: Sendable {
        private let state = Mutex<(count: Int, crc32c: UInt32, failure: BodyWriter.Failure?)>((0, 0, nil))
        var count: Int { state.withLock { $0.count } }
        var crc32c: UInt32 { state.withLock { $0.crc32c } }
        /// Why the body was refused, when it was: the reason the store's request failed.
        var failure: BodyWriter.Failure? { state.withLock { $0.failure } }
        fileprivate func set(count: Int, crc32c: UInt32) { state.withLock { $0.count = count; $0.crc32c = crc32c } }
        fileprivate func fail(_ failure: BodyWriter.Failure) -> BodyWriter.Failure {
            state.withLock { $0.failure = failure }
            return failure
        }
    }

    init(
        _ base: Base, limit: Int, exactLength: Bool, check: BodyWriter.Check?, trailer: (@Sendable () async throws -> Void)? = nil,
        counted: @escaping @Sendable (Int) -> Void
    ) {
        self.base = base
        self.limit = limit
        self.exactLength = exactLength
        self.check = check
        self.trailer = trailer
        self.counted = counted
        outcome = Outcome()
    }

    struct AsyncIterator: AsyncIteratorProtocol {
        var base: Base.AsyncIterator
        let body: CheckedBody
        var held: ByteBuffer?
        var digest: StreamingDigest?
        var crc = CRC32C()
        var count = 0
        var ended = false

        mutating func next() async throws -> ByteBuffer? {
            while !ended {
                let next: ByteBuffer?
                do {
                    next = try await base.next()
                } catch {
                    throw body.outcome.fail(.interrupted(error))
                }
                guard let buffer = next else {
                    ended = true
                    try await finish()
                    break
                }
                body.counted(buffer.readableBytes)
                guard buffer.readableBytes <= body.limit - count else { throw body.outcome.fail(.tooLarge(limit: body.limit)) }
                guard buffer.readableBytes > 0 else { continue }
                buffer.withUnsafeReadableBytes { bytes in
                    digest?.update(bytes)
                    crc.update(bytes)
                }
                count += buffer.readableBytes
                let previous = held
                held = buffer
                if let previous { return previous }
            }
            defer { held = nil }
            return held
        }

        private mutating func finish() async throws {
            if body.exactLength, count != body.limit { throw body.outcome.fail(.tooShort(received: count, expected: body.limit)) }
            if let check = body.check, let actual = digest?.finalize(), actual != check.expected {
                throw body.outcome.fail(.digestMismatch(actual: actual))
            }
            if let trailer = body.trailer {
                do {
                    try await trailer()
                } catch {
                    throw body.outcome.fail(.interrupted(error))
                }
            }
            body.outcome.set(count: count, crc32c: crc.value)
        }
    }

    func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(base: base.makeAsyncIterator(), body: self, digest: check.map { StreamingDigest($0.algorithm) })
    }
}
