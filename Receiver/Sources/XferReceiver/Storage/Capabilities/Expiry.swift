// Capability: unfinished uploads that expire (`StorageComposer.expiry`). Without it nothing
// expires and nothing says it does: no tus `expiration` extension, no `Upload-Expires`, no
// `expires` in the IETF draft's `Upload-Limit`.

protocol UploadExpiring: AnyObject, Sendable {
    /// One sweep: drops the unfinished uploads nobody touched for the storage's expiry
    /// (`StorageExpiry.after`), with everything they hold in the storage. Never one a request is
    /// sending to. The receiver's upkeep runs it every quarter of that (at most every minute, at
    /// least every second).
    func expire() async
    /// Where a sweep that completes an upload (its completion had failed, and every byte is in)
    /// reports it, as a request would have (`pre-finish`, `post-finish`). Set once, before the
    /// first sweep.
    func reportSweptCompletions(to report: @escaping @Sendable (FinishedUpload) async -> Void)
}

extension UploadExpiring {
    /// For storages whose sweeps only drop.
    func reportSweptCompletions(to report: @escaping @Sendable (FinishedUpload) async -> Void) {}
}

/// How a storage expires its uploads: after how long, and what sweeps.
struct StorageExpiry: Sendable {
    let after: Duration
    let sweeper: any UploadExpiring
}

/// An upload a sweep completed, as its report names it.
struct FinishedUpload: Sendable {
    var protocolName: String
    var id: String
    var path: String
    var size: Int
    var metadata: [String: String]?
}
