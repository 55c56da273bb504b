// Capability: multipart's sources (`StorageComposer.multipartSources`).

/// multipart's sources: a client-chosen id naming the file ids handed out for it.
protocol MultipartSourceStoring: AnyObject, Sendable {
    var multipartSources: any MultipartSourceStore { get }
}

protocol MultipartSourceStore: Sendable {
    /// The source's record, created with `fileCount` fresh ids if it does not exist (durably,
    /// before any caller is answered; concurrent callers agree on one).
    func preload(sourceId: String, fileCount: Int) async throws -> MultipartSourceRecord
    func source(id sourceId: String) async throws -> MultipartSourceRecord?
    func remove(id sourceId: String) async throws -> Bool
}
