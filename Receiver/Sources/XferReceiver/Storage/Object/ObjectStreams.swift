import AsyncHTTPClient
import Crypto
import FoundationEssentials
import Hummingbird
import Logging
import NIOCore
import Synchronization
import XferPrimitives
import XferS3Core
import NIOHTTP1

/// Staged objects read one after another, then (optionally) a body: the contents of a part made of
/// a staged tail and an append's own bytes.
struct ConcatenatedObjects: AsyncSequence, Sendable {
    typealias Element = ByteBuffer
    let client: ObjectStoreClient
    let keys: [String]

    struct AsyncIterator: AsyncIteratorProtocol {
        let client: ObjectStoreClient
        var keys: ArraySlice<String>
        var current: HTTPClientResponse.Body.AsyncIterator?

        mutating func next() async throws -> ByteBuffer? {
            while true {
                if var iterator = current {
                    let buffer = try await iterator.next()
                    current = iterator
                    if let buffer { return buffer }
                    current = nil
                }
                guard let key = keys.popFirst() else { return nil }
                let response = try await client.open(client.requests.getObject(key: key))
                guard response.status == .ok else { throw UploadError.corrupt("the store answered \(response.status.code) for \(key)") }
                current = response.body.makeAsyncIterator()
            }
        }
    }

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(client: client, keys: keys[...]) }
}

/// A body made of two: the first's bytes, then the second's.
struct Chained<First: AsyncSequence & Sendable, Second: AsyncSequence & Sendable>: AsyncSequence, Sendable
where First.Element == ByteBuffer, Second.Element == ByteBuffer {
    typealias Element = ByteBuffer
    let first: First
    let second: Second

    struct AsyncIterator: AsyncIteratorProtocol {
        var first: First.AsyncIterator?
        var second: Second.AsyncIterator

        mutating func next() async throws -> ByteBuffer? {
            if var iterator = first {
                let buffer = try await iterator.next()
                first = iterator
                if let buffer { return buffer }
                first = nil
            }
            return try await second.next()
        }
    }

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(first: first.makeAsyncIterator(), second: second.makeAsyncIterator()) }
}

/// What must follow a body's last byte (sequence's closing boundary), run by whoever reads the
/// body to its end: like the body, by one task at a time.
struct UncheckedSendableTrailer: @unchecked Sendable {
    let run: () async throws -> Void
}

/// A request body as the protocols hand it over: read by one task at a time, as the sender's
/// connection delivers it. Sending it to the store from that same task is what makes it safe.
struct UncheckedSendableBody<Base: AsyncSequence>: AsyncSequence, @unchecked Sendable where Base.Element == ByteBuffer {
    typealias Element = ByteBuffer
    let base: Base
    init(_ base: Base) { self.base = base }
    func makeAsyncIterator() -> Base.AsyncIterator { base.makeAsyncIterator() }
}
