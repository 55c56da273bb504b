import Hummingbird

// Capability: a published file read by byte range (`StorageComposer.rangeReads`). Without it
// downloads answer the whole file to a `Range` request (200, as RFC 9110 allows) and say no
// `Accept-Ranges`.

protocol PublishedRangeReading: AnyObject, Sendable {
    /// The bytes of `range` (inclusive offsets within the file, checked by the caller) of a
    /// completed upload's file, streamed. `upload` is one of this storage's.
    func publishedFile(of upload: any ChunkedUpload, range: ClosedRange<Int>, context: some RequestContext) async throws -> ResponseBody
}
