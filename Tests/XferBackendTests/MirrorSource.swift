import Xfer

/// The download source of Docs/backend-guide.md, section 8, word for word (DownloadGuideTests).
struct MirrorSource: DownloadSource {
    let name = "mirror"
    let traits = DownloadTraits(defaultChunkSize: 4 << 20, defaultConcurrency: 8)

    // What the object is now: size, validator, digests, whether ranges work.
    func describeObject(at location: String, in job: JobContext) throws(BackendError) -> Exchange<RemoteObject> {
        Exchange(HTTPRequest(method: .head, url: location)) { response throws(BackendError) in
            guard response.status == 200, let size = response.headers["Content-Length"].flatMap({ Int64($0) }) else {
                throw response.unexpectedStatus("ask \(location) what it holds")
            }
            return RemoteObject(
                location: location, size: size, validator: response.headers["ETag"].map { .etag($0) },
                digests: ObjectDigest.representationDigests(in: response.headers))
        }
    }

    // Bytes `range` of that version only: a changed object answers 412, never other bytes.
    func rangeRequest(_ range: ClosedRange<Int64>, of object: RemoteObject, in job: JobContext) -> HTTPRequest {
        var request = HTTPRequest(method: .get, url: object.location)
        request.headers.set("Range", "bytes=\(range.lowerBound)-\(range.upperBound)")
        if let validator = object.validator { request.headers.set("If-Match", validator.headerValue) }
        return request
    }
}
