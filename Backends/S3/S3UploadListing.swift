import Foundation
import Xfer

/// A multipart upload S3 holds unfinished: one `Upload` of a
/// ListMultipartUploads answer.
public struct S3MultipartUpload: Sendable, Hashable {
    /// The key of the object it would become.
    public var key: String
    /// Its UploadId.
    public var uploadID: String
    /// When it was created; nil when S3's answer held no date xfer can read.
    public var initiated: Date?
    /// The storage class its object would have (`STANDARD`, …), when S3 says.
    public var storageClass: String?

    public init(key: String, uploadID: String, initiated: Date?, storageClass: String? = nil) {
        self.key = key
        self.uploadID = uploadID
        self.initiated = initiated
        self.storageClass = storageClass
    }

    /// Whether a local file with these handles opened this upload: its
    /// upload id, and its key where the file keeps one.
    public func isOpened(byFileWith handles: ServerHandles) -> Bool {
        guard handles[S3Backend.uploadID] == uploadID else { return false }
        return handles[S3Backend.objectKey].map { $0 == key } ?? true
    }
}

/// One page of a listing of multipart uploads.
public struct S3UploadPage: Sendable, Hashable {
    /// Where a page starts: after this upload (ListMultipartUploads'
    /// `key-marker` and `upload-id-marker`).
    public struct Marker: Sendable, Hashable {
        public var key: String
        public var uploadID: String

        public init(key: String, uploadID: String) {
            self.key = key
            self.uploadID = uploadID
        }
    }

    /// The uploads of this page, in S3's order (by key).
    public var uploads: [S3MultipartUpload]
    /// Where the next page starts; nil after the last page.
    public var next: Marker?

    public init(uploads: [S3MultipartUpload], next: Marker?) {
        self.uploads = uploads
        self.next = next
    }
}

/// What an `AbortMultipartUpload` did.
public enum S3AbortOutcome: Sendable, Hashable {
    /// S3 dropped the upload and its parts.
    case aborted
    /// S3 no longer knew the upload (`NoSuchUpload`): aborted, completed or
    /// expired before.
    case alreadyGone
}

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
        var query = "uploads&max-uploads=\(pageSize)"
        if !prefix.isEmpty { query += "&prefix=\(Self.encoded(prefix))" }
        if let marker {
            query += "&key-marker=\(Self.encoded(marker.key))"
            if !marker.uploadID.isEmpty { query += "&upload-id-marker=\(Self.encoded(marker.uploadID))" }
        }
        var request = HTTPRequest(method: .get, url: endpoint.url(bucket: bucket, key: "", query: query))
        signer.sign(&request)
        let operation = "list the multipart uploads in \(target)"
        return Exchange(request) { [self] response throws(BackendError) in
            guard response.status == 200 else { throw failure(response, operation) }
            // AWS names the root ListMultipartUploadsResult; moto too.
            guard let document = S3XML(response.body, recordNames: ["Upload"]), document.root.hasPrefix("ListMultipartUploads") else {
                if let error = response.s3Error { throw failure(response, operation, error) }
                throw .transient("\(operation): the answer is not a ListMultipartUploadsResult")
            }
            let uploads = document.records.compactMap { record -> S3MultipartUpload? in
                guard let key = record["Key"], let id = record["UploadId"], !id.isEmpty else { return nil }
                let storageClass = record["StorageClass"].flatMap { $0.isEmpty ? nil : $0 }
                return S3MultipartUpload(key: key, uploadID: id, initiated: record["Initiated"].flatMap(Self.date), storageClass: storageClass)
            }
            guard document.fields["IsTruncated"] == "true" else { return S3UploadPage(uploads: uploads, next: nil) }
            // S3 names where to go on; else the page's last upload is the place.
            let next: S3UploadPage.Marker? =
                if let key = document.fields["NextKeyMarker"], !key.isEmpty {
                    S3UploadPage.Marker(key: key, uploadID: document.fields["NextUploadIdMarker"] ?? "")
                } else {
                    uploads.last.map { S3UploadPage.Marker(key: $0.key, uploadID: $0.uploadID) }
                }
            guard let next, next != marker else {
                throw .rejected("\(operation): S3 says more uploads follow, but not where they start")
            }
            return S3UploadPage(uploads: uploads, next: next)
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
                return try S3Answer.abort(response, operation: operation)
            } catch {
                throw S3Backend.failure(signer.reviewed(error), bucket: bucket, endpoint: endpoint, signer: signer)
            }
        }
    }

    private func failure(_ response: HTTPResponse, _ operation: String, _ known: (code: String, message: String)? = nil) -> BackendError {
        S3Backend.failure(response, operation, bucket: bucket, endpoint: endpoint, signer: signer, known: known)
    }

    private static func encoded(_ value: String) -> String { SignatureV4.uriEncode(value, keepSlash: false) }

    /// S3's timestamps: ISO 8601 in UTC, with milliseconds (AWS) or without.
    static func date(_ text: String) -> Date? {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        return (try? Date(trimmed, strategy: Date.ISO8601FormatStyle(includingFractionalSeconds: true)))
            ?? (try? Date(trimmed, strategy: Date.ISO8601FormatStyle()))
    }
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
        let trimmed = target.trimmingCharacters(in: .whitespaces)
        let prefix = trimmed.dropFirst("s3://".count + bucket.count).drop { $0 == "/" }
        let (endpoint, region) = resolvedEndpoint
        return S3UploadListing(
            bucket: bucket, prefix: String(prefix), endpoint: endpoint, pageSize: pageSize,
            signer: S3RequestSigner(configuration.credentialProvider, region: region, endpoint: endpoint, now: now))
    }
}
