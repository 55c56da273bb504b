import AsyncHTTPClient
import Crypto
import FoundationEssentials
import Hummingbird
import Logging
import NIOCore
import Synchronization
import XferPrimitives
import XferS3Core

/// multipart's sources as small objects, created only if absent: two instances preloading one
/// source at once agree on the ids the store kept.
struct ObjectMultipartSources: MultipartSourceStore {
    let client: ObjectStoreClient
    let layout: ObjectLayout

    private func key(_ sourceId: String) -> String {
        layout.source(Hex.lowercase(SHA256.hash(data: Array(sourceId.utf8))))
    }

    func preload(sourceId: String, fileCount: Int) async throws -> MultipartSourceRecord {
        if let existing = try await source(id: sourceId) { return existing }
        let record = MultipartSourceRecord(
            formatVersion: MultipartSourceRecord.currentFormatVersion, sourceId: sourceId,
            fileIds: (0..<fileCount).map { _ in UploadID.generate() })
        let bytes = Array(try JSONEncoder.objectState.encode(record))
        let key = key(sourceId)
        switch try await client.perform({ client.requests.putObject(key: key, bytes: bytes, condition: .onlyIfAbsent) }) {
        case .stored: return record
        case .preconditionFailed:
            guard let kept = try await source(id: sourceId) else { throw UploadError.corrupt("source \(sourceId.prefix(64)) vanished") }
            return kept
        }
    }

    func source(id sourceId: String) async throws -> MultipartSourceRecord? {
        let key = key(sourceId)
        switch try await client.perform({ client.requests.getObject(key: key) }) {
        case .found(let content):
            return try JSONDecoder.objectState.decode(MultipartSourceRecord.self, from: Data(content.body))
        case .notFound:
            return nil
        case .preconditionFailed, .rangeNotSatisfiable:
            throw UploadError.corrupt("the store answered a plain read of \(key) with a condition")
        }
    }

    func remove(id sourceId: String) async throws -> Bool {
        guard try await source(id: sourceId) != nil else { return false }
        let key = key(sourceId)
        try await client.perform({ client.requests.deleteObject(key: key) })
        return true
    }
}
