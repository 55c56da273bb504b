import AsyncHTTPClient
import Crypto
import FoundationEssentials
import Hummingbird
import Logging
import NIOCore
import Synchronization
import XferPrimitives
import XferS3Core

extension ObjectStorage: WholeFileStoring {
    /// One `PutObject` streamed through at `PREFIX/raw/NAME` (so at most the store's 5 GiB).
    func storeWhole<Body: AsyncSequence>(_ body: Body, name: String, limit: Int, declaredLength: Int?) async throws -> Int
    where Body.Element == ByteBuffer {
        // The routes checked it; checked again where it becomes a key, whoever calls.
        guard RelativePath.isValidComponent(name) else { throw UploadError.corrupt("an unsafe name reached the storage") }
        guard let length = declaredLength else { throw WholeFileFailure.lengthRequired }
        let limit = min(limit, 5 << 30)
        guard length <= limit else { throw BodyWriter.Failure.tooLarge(limit: limit) }
        let statistics = self.statistics
        let checked = CheckedBody(
            UncheckedSendableBody(body), limit: length, exactLength: true, check: nil,
            counted: { statistics.received($0) })
        do {
            _ = try await client.perform(
                client.requests.putObjectStreamed(key: layout.prefix + "raw/" + name, length: Int64(length)), streaming: checked, length: length)
        } catch {
            if let failure = checked.outcome.failure { throw failure }
            throw error
        }
        return length
    }
}
