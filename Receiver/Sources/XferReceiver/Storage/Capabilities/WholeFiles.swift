import NIOCore

// Capability: a whole file in one request (`StorageComposer.wholeFiles`).

/// A whole file in one request, kept under a name of the client's (`PUT /raw/NAME`).
protocol WholeFileStoring: AnyObject, Sendable {
    /// Streams `body` (at most `limit` bytes: `BodyWriter.Failure.tooLarge` past it) durably under
    /// `name`, replacing what was there; returns the bytes stored. `declaredLength`: the request's
    /// `Content-Length`, which a storage may require (`WholeFileFailure.lengthRequired`).
    func storeWhole<Body: AsyncSequence>(_ body: Body, name: String, limit: Int, declaredLength: Int?) async throws -> Int
    where Body.Element == ByteBuffer
}

enum WholeFileFailure: Error {
    /// The storage sends a body to its store with its length, and the request named none.
    case lengthRequired
}
