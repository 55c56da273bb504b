import FoundationEssentials
import XferPrimitives
import Xfer
import XferS3Core

// `S3MultipartUpload`, `S3UploadPage` and `S3AbortOutcome` are XferS3Core's (the receiver
// lists and aborts uploads too); `isOpened(byFileWith:)` is in S3CoreBridges.swift.

/// The multipart uploads in progress in one bucket under one key prefix:
/// the requests that list them a page at a time and abort them, and the
/// reading of S3's answers. Sans-IO like the backend: it describes and
/// signs; `TransferEngine.send(_:retry:onRetry:_:)` sends (build the
/// exchange inside its closure, so every attempt is signed afresh).
///
/// Pages are read one at a time and kept by nobody here: a listing of a
/// bucket with 100,000 uploads costs one page of memory.
public struct S3UploadListing: Sendable {
    public let bucket: String
    /// The key prefix, as S3 matches it: character by character, so `in`
    /// covers `in/a.bin` and `inbox/b.bin`, `in/` only the first.
    public let prefix: String
    /// The server the requests go to.
    public let endpoint: S3Endpoint
    /// Uploads asked for per page (S3 gives at most 1,000).
    public let pageSize: Int
    private let signer: S3RequestSigner

    init(bucket: String, prefix: String, endpoint: S3Endpoint, pageSize: Int, signer: S3RequestSigner) {
        self.bucket = bucket
        self.prefix = prefix
        self.endpoint = endpoint
        self.pageSize = max(1, min(1000, pageSize))
        self.signer = signer
    }

    /// `s3://BUCKET[/PREFIX]`, for messages.
    public var target: String { prefix.isEmpty ? "s3://\(bucket)" : "s3://\(bucket)/\(prefix)" }

    /// `s3://BUCKET/KEY`, for messages.
    public func url(ofKey key: String) -> String { "s3://\(bucket)/\(key)" }

    /// Whether a job with this target and job-level handles sent to this
    /// bucket at this endpoint: only its uploads can be among the listed
    /// ones (the same bucket name at another S3 service is another bucket).
    public func sharesBucket(withJobTarget target: String, handles: ServerHandles) -> Bool {
        let (location, storedEndpoint) = S3Backend.splitTarget(target)
        guard let jobBucket = try? S3Location(parsing: location).bucket, jobBucket == bucket else { return false }
        let base =
            handles[S3Backend.endpointKey] ?? storedEndpoint
            ?? S3Endpoint.aws(region: handles[S3Backend.regionKey] ?? "us-east-1").base
        return base.lowercased() == endpoint.base.lowercased()
    }

    /// `ListMultipartUploads`: the page after `marker` (nil: the first).
    public func listPage(after marker: S3UploadPage.Marker?) -> Exchange<S3UploadPage> {
        let query = S3Answer.uploadListQuery(prefix: prefix, after: marker, maxUploads: pageSize)
        var request = HTTPRequest(method: .get, url: endpoint.url(bucket: bucket, key: "", query: query))
        signer.sign(&request)
        let operation = "list the multipart uploads in \(target)"
        return Exchange(request) { [self] response throws(BackendError) in
            do throws(S3Failure) {
                return try S3Answer.uploadPage(AWSResponse(response), operation: operation, after: marker)
            } catch {
                // A page that cannot be read is worth another try; S3's refusals are named as the
                // backend names them (the bucket, the credentials).
                if error.code == nil, error.isRetryable { throw .transient(error.description) }
                if error.code == nil { throw .rejected(error.description) }
                throw failure(response, operation)
            }
        }
    }

    /// `AbortMultipartUpload` of upload `uploadID` of `key`: S3 drops it and
    /// its parts. An upload S3 no longer knows counts as gone already.
    public func abort(key: String, uploadID: String) -> Exchange<S3AbortOutcome> {
        var request = HTTPRequest(
            method: .delete, url: endpoint.url(bucket: bucket, key: key, query: "uploadId=\(Self.encoded(uploadID))"))
        signer.sign(&request)
        let operation = "abort upload \(uploadID) of \(url(ofKey: key))"
        return Exchange(request) { [self] response throws(BackendError) in
            do throws(S3Failure) {
                return try S3Answer.abort(AWSResponse(response), operation: operation)
            } catch {
                throw S3Backend.failure(signer.reviewed(error), bucket: bucket, endpoint: endpoint, signer: signer)
            }
        }
    }

    private func failure(_ response: HTTPResponse, _ operation: String, _ known: (code: String, message: String)? = nil) -> BackendError {
        S3Backend.failure(response, operation, bucket: bucket, endpoint: endpoint, signer: signer, known: known)
    }

    private static func encoded(_ value: String) -> String { SignatureV4.uriEncode(value, keepSlash: false) }
    static func date(_ text: String) -> Date? { S3Answer.date(text) }
}

extension S3Backend {
    /// The multipart uploads in progress under `target`, `s3://BUCKET[/PREFIX]`
    /// with PREFIX as written (leading slashes dropped), at this backend's
    /// endpoint and signed for its region, as a new job's requests would be.
    ///
    /// - Parameter pageSize: Uploads asked for per page (at most 1,000).
    /// - Throws: `.rejected` for a target that is not `s3://BUCKET[/PREFIX]`.
    public func uploads(under target: String, pageSize: Int = 1000) throws(BackendError) -> S3UploadListing {
        let bucket = try S3Location(parsing: target).bucket
        // The prefix as written, a trailing slash included: S3 matches it
        // character by character, and `in/` should not cover `inbox`.
        let trimmed = target.trimmingSpacesAndTabs()
        let prefix = trimmed.dropFirst("s3://".count + bucket.count).drop { $0 == "/" }
        let (endpoint, region) = resolvedEndpoint
        return S3UploadListing(
            bucket: bucket, prefix: String(prefix), endpoint: endpoint, pageSize: pageSize,
            signer: S3RequestSigner(configuration.credentialProvider, region: region, endpoint: endpoint, now: now))
    }
}
