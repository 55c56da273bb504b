import FoundationEssentials
import Xfer
import XferPrimitives
import XferS3Core

/// `xfer sync s3://A/P s3://B/Q`: objects copied inside the store
/// (`ObjectCopying`). Up to `singleCopyLimit` (5 GiB, S3's limit for one
/// `CopyObject`) one request keeps the source's metadata (`x-amz-metadata-
/// directive: COPY`, its `mtime` included); above it, `CreateMultipartUpload`
/// (with the source's time as `mtime`), `UploadPartCopy` of each range and
/// `CompleteMultipartUpload`. Each is conditional on the source version
/// listed (`x-amz-copy-source-if-match`: AWS honours it, Ceph 16 ignores it)
/// and on the destination as listed (`If-None-Match`/`If-Match`, where the
/// store honours them).
extension S3Backend: ObjectCopying {
    public var singleCopyLimit: Int64 { copyLimit }

    public func canCopy(from location: String, in job: JobContext) -> Bool {
        let session = Session(self, job)
        let named = S3Backend.splitTarget(location).endpoint ?? resolvedEndpoint.endpoint.base
        return named.lowercased() == session.endpoint.base.lowercased()
    }

    public func copyObject(
        from location: String, version: String?, to relativePath: String, condition: WriteCondition?, in job: JobContext
    ) throws(BackendError) -> Exchange<String?> {
        let session = Session(self, job)
        let key = session.location.key(forFileNamed: relativePath)
        var request = HTTPRequest(method: .put, url: session.endpoint.url(bucket: session.location.bucket, key: key))
        try Self.setCopySource(location, version: version, on: &request)
        request.headers.set("x-amz-metadata-directive", "COPY")
        Self.setCondition(condition, on: &request)
        let operation = "copy \(location) to s3://\(session.location.bucket)/\(key)"
        return Exchange(request) { response throws(BackendError) in
            if response.status == 412 { throw Self.copyPrecondition(response, operation) }
            guard response.status == 200 else { throw session.failure(response, operation) }
            // As CompleteMultipartUpload, a copy may answer 200 and report its failure in the body.
            guard let document = S3XML(response.body), document.root == "CopyObjectResult" else {
                throw session.failure(response, operation)
            }
            return document.fields["ETag"].map { S3ETag($0).unquoted }.flatMap { $0.isEmpty ? nil : $0 }
        }
    }

    public func startCopy(to relativePath: String, modificationTimeNanoseconds: Int64?, in job: JobContext) throws(BackendError)
        -> Exchange<ServerHandles>
    {
        let session = Session(self, job)
        let key = session.location.key(forFileNamed: relativePath)
        var request = HTTPRequest(method: .post, url: session.endpoint.url(bucket: session.location.bucket, key: key, query: "uploads"))
        if let time = modificationTimeNanoseconds {
            request.headers.set(S3ObjectMetadata.userPrefix + Self.modificationTimeMetadata, ModificationTimeText.text(nanoseconds: time))
        }
        let operation = "start copying to s3://\(session.location.bucket)/\(key)"
        return Exchange(request) { response throws(BackendError) in
            do throws(S3Failure) {
                return [Self.uploadID: try S3Answer.uploadID(AWSResponse(response), operation: operation), Self.objectKey: key]
            } catch {
                throw session.failure(error)
            }
        }
    }

    public func copyPart(
        _ number: Int, range: ClosedRange<Int64>, from location: String, version: String?, handles: ServerHandles,
        to relativePath: String, in job: JobContext
    ) throws(BackendError) -> Exchange<String> {
        let session = Session(self, job)
        let key = handles[Self.objectKey] ?? session.location.key(forFileNamed: relativePath)
        let upload = try handles.require(Self.uploadID)
        let query = "partNumber=\(number)&uploadId=\(SignatureV4.uriEncode(upload, keepSlash: false))"
        var request = HTTPRequest(method: .put, url: session.endpoint.url(bucket: session.location.bucket, key: key, query: query))
        try Self.setCopySource(location, version: version, on: &request)
        request.headers.set("x-amz-copy-source-range", "bytes=\(range.lowerBound)-\(range.upperBound)")
        let operation = "copy part \(number) of \(location)"
        return Exchange(request) { response throws(BackendError) in
            if response.status == 412 { throw Self.copyPrecondition(response, operation) }
            if AWSResponse(response).s3Error?.code == "NoSuchUpload" { throw .uploadUnknown("\(operation): S3 no longer knows the upload") }
            guard response.status == 200, let document = S3XML(response.body), document.root == "CopyPartResult",
                let etag = document.fields["ETag"].map(S3ETag.init), !etag.unquoted.isEmpty
            else { throw session.failure(response, operation) }
            return etag.quoted
        }
    }

    public func finishCopy(
        handles: ServerHandles, receipts: [String], to relativePath: String, condition: WriteCondition?, in job: JobContext
    ) throws(BackendError) -> Exchange<String?> {
        let session = Session(self, job)
        let key = handles[Self.objectKey] ?? session.location.key(forFileNamed: relativePath)
        let upload = try handles.require(Self.uploadID)
        let body = S3Answer.completionBody(receipts.enumerated().map { ($0.offset + 1, $0.element, nil) })
        let query = "uploadId=\(SignatureV4.uriEncode(upload, keepSlash: false))"
        var request = HTTPRequest(
            method: .post, url: session.endpoint.url(bucket: session.location.bucket, key: key, query: query), body: RequestBody(body))
        request.headers.set("Content-Type", "application/xml")
        Self.setCondition(condition, on: &request)
        let operation = "complete the copy to s3://\(session.location.bucket)/\(key)"
        return Exchange(request) { response throws(BackendError) in
            if response.status == 412 { throw Self.conflict(operation) }
            let outcome: S3CompleteOutcome
            do throws(S3Failure) {
                outcome = try S3Answer.completion(AWSResponse(response), operation: operation)
            } catch {
                throw session.failure(error)
            }
            switch outcome {
            case .completed(let etag):
                // Ceph's gateway (16) answers an empty ETag: S3's own rule from the parts stands in.
                return etag?.unquoted ?? Self.multipartETag(ofParts: receipts)
            case .uploadUnknown: throw .uploadUnknown("\(operation): S3 no longer knows the upload")
            }
        }
    }

    /// `x-amz-copy-source` (and `-if-match`) of a listed object's location.
    static func setCopySource(_ location: String, version: String?, on request: inout HTTPRequest) throws(BackendError) {
        let address = try S3DownloadSource.ObjectAddress(location)
        request.headers.set("x-amz-copy-source", "/\(address.bucket)/\(SignatureV4.uriEncode(address.key, keepSlash: true))")
        if let version { request.headers.set("x-amz-copy-source-if-match", "\"\(version)\"") }
    }

    /// A 412 to a copy: the source changed since it was listed, or the
    /// destination did (a conflict either way: that file fails).
    static func copyPrecondition(_ response: HTTPResponse, _ operation: String) -> BackendError {
        .conflict(
            "\(operation): the source or the destination changed since the sync listed them (HTTP 412); nothing was overwritten "
                + "(run the sync again with --restart to decide it anew)")
    }
}
