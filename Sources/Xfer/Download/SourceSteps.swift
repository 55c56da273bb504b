/// The capabilities a download source adopts, each resolved once when a
/// pull starts, as `BackendSteps` are for a backend: a pull's requests read
/// these fields, and nothing on the path of a range asks the source's type again.
struct SourceSteps: Sendable {
    let source: any DownloadSource
    /// Lists the objects under a prefix (`s3://bucket/prefix/`).
    let listing: (any ObjectListing)?
    /// Signs every request after the engine added the user's headers (S3's Signature V4).
    let requestSigning: (any DownloadRequestSigning)?
    /// Lists an object's parts, for a composite checksum (S3's GetObjectAttributes).
    let partListing: (any ObjectPartListing)?
    /// Reads the modification time an object keeps from an answer to a range (a sync into a directory).
    let modificationTimes: (any ModificationTimeReading)?

    init(_ source: any DownloadSource) {
        self.source = source
        listing = source as? any ObjectListing
        requestSigning = source as? any DownloadRequestSigning
        partListing = source as? any ObjectPartListing
        modificationTimes = source as? any ModificationTimeReading
    }

    /// The scheduler's view of a source: a download file has no empty chunk.
    var traits: BackendTraits {
        BackendTraits(
            defaultChunkSize: source.traits.defaultChunkSize, defaultConcurrency: source.traits.defaultConcurrency,
            authentication: source.traits.authentication)
    }

    /// `request` as a pull sends it: the user's credentials (when the engine
    /// places them) and extra headers, then the source's signature.
    func prepared(_ request: HTTPRequest, adding extraHeaders: HTTPHeaders, in job: JobContext) -> HTTPRequest {
        var request = request.prepared(adding: extraHeaders, authentication: source.traits.authentication, signing: nil, in: job)
        requestSigning?.sign(&request, in: job)
        return request
    }
}
