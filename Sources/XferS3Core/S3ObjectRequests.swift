import Crypto
import FoundationEssentials
import XferWire
import XferPrimitives

/// One S3 operation, sans-IO: the signed request to send, and the reading
/// of its answer into a typed outcome.
///
/// Signed when described, with the credentials current then: describe the
/// operation again for every attempt (a retry, a request that waited), so
/// each is signed at its own time and temporary credentials are fresh.
public struct S3Operation<Outcome: Sendable>: Sendable {
    /// The request, signed. A body the caller streams (`UploadPart`) is not
    /// in it: attach it to `request.body` (or send it another way) with
    /// exactly the `Content-Length` the request names.
    public var request: AWSRequest
    /// What the request does, for messages: `PutObject s3://bucket/key`.
    public let operation: String
    private let read: @Sendable (AWSResponse) throws(S3Failure) -> Outcome

    package init(_ request: AWSRequest, operation: String, read: @escaping @Sendable (AWSResponse) throws(S3Failure) -> Outcome) {
        self.request = request
        self.operation = operation
        self.read = read
    }

    /// Reads S3's answer: the outcome, or why it failed and whether to try again. (The engine's
    /// `exchange` of it is in XferS3, which knows the engine.)
    public func interpret(_ response: AWSResponse) throws(S3Failure) -> Outcome {
        try read(response)
    }
}

/// The S3 object operations of one bucket, described as signed requests
/// and read back from S3's answers, with no I/O of its own: the `s3`
/// backend's signing (Signature V4), credentials (the AWS chain, refreshed
/// before they expire), addressing, XML reading and error classification,
/// offered to any client of the store — the receiver's object storage first.
///
/// What it adds to plain object storage is what lets several processes
/// share a store without a lock service: conditional `PutObject`
/// (`S3WriteCondition`) as a compare-and-swap, and `UploadPart` signed
/// without its body, so a body can stream from a client straight to the
/// store with no local spool.
///
/// Keys are sent as given (no prefix is added): the caller owns the layout.
public struct S3ObjectRequests: Sendable {
    public let bucket: String
    /// The store; path-style unless virtual-hosted addressing is asked for
    /// (and the bucket's name allows it).
    public let endpoint: S3Endpoint
    /// The region requests are signed for.
    public let region: String
    /// Asked at every request, so temporary credentials are fetched again before they expire.
    public let credentials: AWSCredentialProvider
    private let now: @Sendable () -> Date

    /// - Parameters:
    ///   - now: The clock requests are signed with.
    public init(
        bucket: String, endpoint: S3Endpoint, region: String, credentials: AWSCredentialProvider,
        now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.bucket = bucket
        self.endpoint = endpoint
        self.region = region
        self.credentials = credentials
        self.now = now
    }

    /// The store the `s3` backend would send to with the same settings:
    /// `endpoint` nil for AWS in the region; `region` nil for the
    /// configuration's, else us-east-1.
    public init(
        bucket: String, configuration: AWSConfiguration, endpoint: S3Endpoint? = nil, region: String? = nil,
        now: @escaping @Sendable () -> Date = { Date() }
    ) {
        let resolved = S3Endpoint.resolved(endpoint, region: region, configuration: configuration)
        self.init(bucket: bucket, endpoint: resolved.endpoint, region: resolved.region, credentials: configuration.credentialProvider, now: now)
    }

    /// `s3://BUCKET/KEY`, for messages.
    public func s3URL(ofKey key: String) -> String { "s3://\(bucket)/\(key)" }

    // MARK: Objects

    /// `PutObject` of a small body held in memory (a state record, say).
    ///
    /// With a condition it is a compare-and-swap: `.stored` with the new
    /// ETag when the condition held, `.preconditionFailed` when another
    /// writer changed the key first. The body is checked by the store: over
    /// http its SHA-256 is signed, over https `Content-MD5` carries its MD5.
    public func putObject(
        key: String, bytes: [UInt8], condition: S3WriteCondition? = nil, contentType: String = "application/octet-stream"
    ) -> S3Operation<S3PutOutcome> {
        var request = AWSRequest(method: "PUT", url: endpoint.url(bucket: bucket, key: key), body: bytes)
        request.headers.set("Content-Type", contentType)
        switch condition {
        case nil: break
        case .onlyIfAbsent: request.headers.set("If-None-Match", "*")
        // Unquoted: Ceph's gateway (16) refuses the quoted form with 412 even
        // when it names the current version; AWS takes either.
        case .onlyIfCurrent(let etag): request.headers.set("If-Match", etag.unquoted)
        }
        return describe("PutObject", key: key, request, checksum: .md5UnlessSigned(bytes)) { response, operation throws(S3Failure) in
            if response.status == 412 { return .preconditionFailed }
            return .stored(try S3Answer.storedETag(response, operation: operation))
        }
    }

    /// `PutObject` of a body of `length` bytes that the caller sends itself, as `uploadPart`'s:
    /// signed with `UNSIGNED-PAYLOAD` and the length, so the body can stream from elsewhere (a
    /// client's request) without being held or hashed first. No condition: the key is the
    /// caller's alone. Returns the object's ETag.
    ///
    /// `metadata`: user metadata stored with the object (`x-amz-meta-NAME`; names lowercase,
    /// values printable ASCII, at most 2 KiB in all on AWS), read back by `headObject`.
    public func putObjectStreamed(
        key: String, length: Int64, contentType: String = "application/octet-stream", metadata: [String: String] = [:]
    ) -> S3Operation<S3ETag> {
        var request = AWSRequest(method: "PUT", url: endpoint.url(bucket: bucket, key: key))
        request.headers.set("Content-Type", contentType)
        request.headers.set("Content-Length", String(length))
        for (name, value) in metadata.sorted(by: { $0.key < $1.key }) { request.headers.set(S3ObjectMetadata.userPrefix + name, value) }
        return describe("PutObject", key: key, request, checksum: .unsignedPayload) { response, operation throws(S3Failure) in
            try S3Answer.storedETag(response, operation: operation)
        }
    }

    /// `GetObject` of the whole object or of `range` (inclusive byte
    /// offsets), only if it is still version `ifMatch` when one is named
    /// (sent quoted, which Ceph's gateway and AWS honour on GET).
    ///
    /// The body comes back in the answer, so this suits what a client holds
    /// in memory (the engine's `TransportOptions.maximumResponseBodySize`, the
    /// receiver's `ObjectStoreClient.maximumAnswerSize`; a download streams
    /// the body instead); a body
    /// shorter than its `Content-Length` is a retryable failure, never bytes.
    public func getObject(key: String, range: ClosedRange<Int64>? = nil, ifMatch: S3ETag? = nil) -> S3Operation<S3GetOutcome> {
        var request = AWSRequest(method: "GET", url: endpoint.url(bucket: bucket, key: key))
        if let range { request.headers.set("Range", "bytes=\(range.lowerBound)-\(range.upperBound)") }
        if let ifMatch { request.headers.set("If-Match", ifMatch.quoted) }
        return describe("GetObject", key: key, request) { response, operation throws(S3Failure) in
            switch response.status {
            case 200, 206:
                guard let metadata = S3ObjectMetadata(response) else {
                    throw S3Failure.unreadable(response, operation: operation, "the answer has no readable Content-Length or Content-Range")
                }
                guard Int64(response.body.count) == metadata.contentLength else {
                    throw S3Failure.unreadable(
                        response, operation: operation,
                        "the answer holds \(response.body.count) of its \(metadata.contentLength) bytes")
                }
                return .found(S3ObjectContent(metadata: metadata, body: response.body))
            case 412:
                return .preconditionFailed
            case 416:
                return .rangeNotSatisfiable(objectSize: response.headers["Content-Range"].flatMap { ContentRange.unsatisfiedSize($0) ?? ContentRange($0)?.size })
            case 404 where Self.isMissingKey(response):
                return .notFound
            default:
                throw S3Failure(response, operation: operation)
            }
        }
    }

    /// `HeadObject`: the object's size, ETag, date and user metadata, without its bytes.
    public func headObject(key: String, ifMatch: S3ETag? = nil) -> S3Operation<S3HeadOutcome> {
        headObject(key: key, ifMatch: ifMatch, checksums: false)
    }

    /// `HeadObject`, asking S3 for the checksums it keeps of the object when
    /// `checksums` (`x-amz-checksum-mode: ENABLED`): the found metadata's
    /// `checksums`, and `S3ObjectChecksum.fullObject(in:)` the one a local
    /// file can be compared with.
    public func headObject(key: String, ifMatch: S3ETag? = nil, checksums: Bool) -> S3Operation<S3HeadOutcome> {
        var request = AWSRequest(method: "HEAD", url: endpoint.url(bucket: bucket, key: key))
        if let ifMatch { request.headers.set("If-Match", ifMatch.quoted) }
        if checksums { request.headers.set("x-amz-checksum-mode", "ENABLED") }
        return describe("HeadObject", key: key, request) { response, operation throws(S3Failure) in
            try S3Answer.head(response, operation: operation)
        }
    }

    /// `DeleteObject`. Deleting a key that holds nothing succeeds, as S3
    /// itself answers it: the caller wanted it gone, and it is.
    public func deleteObject(key: String) -> S3Operation<Void> {
        let request = AWSRequest(method: "DELETE", url: endpoint.url(bucket: bucket, key: key))
        return describe("DeleteObject", key: key, request) { response, operation throws(S3Failure) in
            if response.isSuccess || (response.status == 404 && Self.isMissingKey(response)) { return }
            throw S3Failure(response, operation: operation)
        }
    }

    /// `DeleteObjects` of up to 1,000 `keys` in one request (quiet: S3 answers only failures).
    /// Keys that hold nothing count as deleted, as with `deleteObject`. S3 wants the body's MD5
    /// on this request whatever else signs it.
    public func deleteObjects(keys: [String]) -> S3Operation<Void> {
        precondition(keys.count <= 1000, "S3 deletes at most 1,000 keys a request")
        var xml = "<Delete xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Quiet>true</Quiet>"
        for key in keys { xml += "<Object><Key>\(S3XML.escaped(key))</Key></Object>" }
        xml += "</Delete>"
        let body = Array(xml.utf8)
        var request = AWSRequest(method: "POST", url: endpoint.url(bucket: bucket, key: "", query: "delete"), body: body)
        request.headers.set("Content-Type", "application/xml")
        request.headers.set("Content-MD5", Data(Insecure.MD5.hash(data: body)).base64EncodedString())
        return describe("DeleteObjects (\(keys.count) keys)", request) { response, operation throws(S3Failure) in
            guard response.status == 200 else { throw S3Failure(response, operation: operation) }
            guard let document = S3XML(response.body, recordNames: ["Error"]), document.root == "DeleteResult" else {
                if let error = response.s3Error { throw S3Failure(response, operation: operation, known: error, isErrorInSuccess: true) }
                throw S3Failure.unreadable(response, operation: operation, "the answer is not a DeleteResult")
            }
            if let failed = document.records.first(where: { $0["Code"] != "NoSuchKey" }) {
                throw S3Failure(
                    operation: operation, status: response.status, code: failed["Code"],
                    message: "\(failed["Key"] ?? "a key"): \(failed["Message"] ?? "not deleted")", isRetryable: failed["Code"] == "InternalError")
            }
        }
    }

    /// `ListObjectsV2`: a page of the keys under `prefix` (as S3 matches it,
    /// character by character), after `continuationToken` (nil: the first
    /// page), at most `maxKeys` (1–1,000). With a `delimiter`, keys below
    /// the next one are grouped into `commonPrefixes`.
    public func listObjects(
        prefix: String = "", delimiter: String? = nil, continuationToken: String? = nil, maxKeys: Int = 1000
    ) -> S3Operation<S3ObjectPage> {
        let query = Self.listQuery(prefix: prefix, delimiter: delimiter, continuationToken: continuationToken, maxKeys: maxKeys)
        let request = AWSRequest(method: "GET", url: endpoint.url(bucket: bucket, key: "", query: query))
        let name = "ListObjectsV2 \(s3URL(ofKey: prefix))"
        return describe(name, request) { response, operation throws(S3Failure) in
            try S3Answer.objectPage(response, operation: operation, continuationToken: continuationToken)
        }
    }

    /// `ListObjectsV2`'s query (`list-type=2&max-keys=…`), encoded: shared
    /// with the `s3` download source, which signs its requests later.
    /// `urlEncodedKeys`: ask S3 to URL-encode the keys of its answer
    /// (`encoding-type=url`; `S3Answer.objectPage` decodes them).
    /// `startAfter`: list the keys after this one (`start-after`, which S3
    /// ignores beside a continuation token), whether or not it is a key.
    package static func listQuery(
        prefix: String, delimiter: String?, continuationToken: String?, maxKeys: Int, urlEncodedKeys: Bool = false,
        startAfter: String? = nil
    ) -> String {
        var query = "list-type=2&max-keys=\(max(1, min(1000, maxKeys)))"
        if urlEncodedKeys { query += "&encoding-type=url" }
        if !prefix.isEmpty { query += "&prefix=\(encoded(prefix))" }
        if let delimiter { query += "&delimiter=\(encoded(delimiter))" }
        if let continuationToken { query += "&continuation-token=\(encoded(continuationToken))" }
        if let startAfter { query += "&start-after=\(encoded(startAfter))" }
        return query
    }

    // MARK: Multipart uploads

    /// `CreateMultipartUpload`: the UploadId every part and the completion name.
    ///
    /// - Parameter partsCarryCRC32C: Every part will carry its CRC-32C
    ///   (`uploadPart(…crc32c:)`); S3 wants that declared here, and each
    ///   part's CRC repeated in the completion.
    public func createMultipartUpload(
        key: String, contentType: String = "application/octet-stream", partsCarryCRC32C: Bool = false
    ) -> S3Operation<String> {
        var request = AWSRequest(method: "POST", url: endpoint.url(bucket: bucket, key: key, query: "uploads"))
        request.headers.set("Content-Type", contentType)
        if partsCarryCRC32C { request.headers.set("x-amz-checksum-algorithm", "CRC32C") }
        return describe("CreateMultipartUpload", key: key, request) { response, operation throws(S3Failure) in
            try S3Answer.uploadID(response, operation: operation)
        }
    }

    /// `UploadPart` of a body of `length` bytes that the caller sends
    /// itself: the request carries the URL and headers only, signed with
    /// `UNSIGNED-PAYLOAD` and the length, so the body can stream from
    /// elsewhere (a client's request) without being held or hashed first.
    /// Attach it to `request.body`, or send it by other means, with exactly
    /// `length` bytes (`Content-Length` is signed).
    ///
    /// - Parameter crc32c: The body's CRC-32C, when the caller knows it
    ///   before sending: the store refuses a body that does not match. (S3
    ///   wants the upload created with `partsCarryCRC32C` then.)
    /// - Returns: The part's ETag, for `completeMultipartUpload`.
    public func uploadPart(key: String, uploadID: String, partNumber: Int, length: Int64, crc32c: UInt32? = nil) -> S3Operation<S3ETag> {
        var request = AWSRequest(method: "PUT", url: partURL(key: key, uploadID: uploadID, partNumber: partNumber))
        request.headers.set("Content-Length", String(length))
        let crc = crc32c.map(S3Answer.crcText)
        if let crc {
            request.headers.set("x-amz-checksum-crc32c", crc)
            request.headers.set("x-amz-sdk-checksum-algorithm", "CRC32C")
        }
        return describe("UploadPart \(partNumber)", key: key, request, checksum: .unsignedPayload) { response, operation throws(S3Failure) in
            try S3Answer.storedETag(response, operation: operation, crcHeader: "x-amz-checksum-crc32c", sentCRC: crc)
        }
    }

    /// `UploadPartCopy`: part `partNumber` is made of bytes the store already
    /// holds — `range` (inclusive offsets; nil for all) of `sourceKey` in
    /// `sourceBucket` (nil: this bucket) — without them passing through the
    /// caller. With `sourceETag`, only if the source is still that version
    /// (`x-amz-copy-source-if-match`; AWS honours it, Ceph 16's gateway
    /// ignores it and copies whatever the source holds).
    public func uploadPartCopy(
        key: String, uploadID: String, partNumber: Int, sourceKey: String, sourceBucket: String? = nil,
        range: ClosedRange<Int64>? = nil, sourceETag: S3ETag? = nil
    ) -> S3Operation<S3ETag> {
        var request = AWSRequest(method: "PUT", url: partURL(key: key, uploadID: uploadID, partNumber: partNumber))
        request.headers.set("x-amz-copy-source", "/\(sourceBucket ?? bucket)/\(SignatureV4.uriEncode(sourceKey, keepSlash: true))")
        if let range { request.headers.set("x-amz-copy-source-range", "bytes=\(range.lowerBound)-\(range.upperBound)") }
        if let sourceETag { request.headers.set("x-amz-copy-source-if-match", sourceETag.quoted) }
        return describe("UploadPartCopy \(partNumber)", key: key, request) { response, operation throws(S3Failure) in
            guard response.status == 200 else { throw S3Failure(response, operation: operation) }
            // As CompleteMultipartUpload, a copy may answer 200 before the
            // work is done and report its failure in the body.
            guard let document = S3XML(response.body) else {
                throw S3Failure.unreadable(response, operation: operation, "the answer was cut short")
            }
            if document.root == "CopyPartResult", let etag = document.fields["ETag"].map(S3ETag.init), !etag.unquoted.isEmpty {
                return etag
            }
            if let error = response.s3Error { throw S3Failure(response, operation: operation, known: error, isErrorInSuccess: true) }
            throw S3Failure.unreadable(response, operation: operation, "the answer has no CopyPartResult ETag")
        }
    }

    /// `CompleteMultipartUpload` of `parts` (sent in part-number order, which
    /// S3 requires). S3 refuses parts below 5 MiB other than the last
    /// (`EntityTooSmall`) and unknown ones (`InvalidPart`): thrown, with the code.
    public func completeMultipartUpload(key: String, uploadID: String, parts: [S3CompletedPart]) -> S3Operation<S3CompleteOutcome> {
        let body = S3Answer.completionBody(
            parts.sorted { $0.number < $1.number }.map { part in
                (part.number, part.etag.quoted, part.crc32c.map { ("ChecksumCRC32C", S3Answer.crcText($0)) })
            })
        var request = AWSRequest(
            method: "POST", url: endpoint.url(bucket: bucket, key: key, query: "uploadId=\(Self.encoded(uploadID))"), body: body)
        request.headers.set("Content-Type", "application/xml")
        return describe("CompleteMultipartUpload", key: key, request) { response, operation throws(S3Failure) in
            try S3Answer.completion(response, operation: operation)
        }
    }

    /// `AbortMultipartUpload`: S3 drops the upload and its parts. An upload
    /// it no longer knows is `.alreadyGone`, not a failure: aborting is how
    /// a caller makes sure it is gone.
    public func abortMultipartUpload(key: String, uploadID: String) -> S3Operation<S3AbortOutcome> {
        let request = AWSRequest(method: "DELETE", url: endpoint.url(bucket: bucket, key: key, query: "uploadId=\(Self.encoded(uploadID))"))
        return describe("AbortMultipartUpload", key: key, request) { response, operation throws(S3Failure) in
            try S3Answer.abort(response, operation: operation)
        }
    }

    /// `ListMultipartUploads` of the keys under `prefix`: the page after `marker` (nil: the
    /// first), read as `S3UploadListing` (`xfer uploads`) reads it. What finds a multipart upload
    /// whose creator died before recording it (the receiver's object storage aborts those of a key
    /// it completes).
    public func listMultipartUploads(prefix: String, after marker: S3UploadPage.Marker? = nil, maxUploads: Int = 1000) -> S3Operation<S3UploadPage> {
        let query = S3Answer.uploadListQuery(prefix: prefix, after: marker, maxUploads: maxUploads)
        let request = AWSRequest(method: "GET", url: endpoint.url(bucket: bucket, key: "", query: query))
        return describe("ListMultipartUploads \(s3URL(ofKey: prefix))", request) { response, operation throws(S3Failure) in
            try S3Answer.uploadPage(response, operation: operation, after: marker)
        }
    }

    // MARK: Helpers

    /// How a request's body is checked by the store.
    private enum BodyCheck {
        /// As the backend's parts: the signed SHA-256 over http; over https,
        /// where the payload is not signed, `Content-MD5`.
        case md5UnlessSigned([UInt8])
        /// Whatever the signer does (small XML bodies, empty ones).
        case signer
        /// `UNSIGNED-PAYLOAD`: the body is not in the request.
        case unsignedPayload
    }

    /// Signs `request` now and pairs it with `read`, whose failures are
    /// reviewed against the credentials that signed (expired temporary
    /// ones are fetched again and the failure made retryable).
    private func describe<Outcome: Sendable>(
        _ name: String, key: String? = nil, _ request: AWSRequest, checksum: BodyCheck = .signer,
        read: @escaping @Sendable (AWSResponse, String) throws(S3Failure) -> Outcome
    ) -> S3Operation<Outcome> {
        let signer = S3RequestSigner(credentials, region: region, endpoint: endpoint, now: now)
        var request = request
        switch checksum {
        case .unsignedPayload:
            signer.sign(&request, payloadHash: SignatureV4.unsignedPayload)
        case .md5UnlessSigned(let body) where !signer.signsPayload:
            request.headers.set("Content-MD5", Data(Insecure.MD5.hash(data: body)).base64EncodedString())
            signer.sign(&request)
        case .md5UnlessSigned, .signer:
            signer.sign(&request)
        }
        let operation = key.map { "\(name) \(s3URL(ofKey: $0))" } ?? name
        return S3Operation(request, operation: operation) { response throws(S3Failure) in
            do throws(S3Failure) {
                return try read(response, operation)
            } catch {
                throw signer.reviewed(error)
            }
        }
    }

    private func partURL(key: String, uploadID: String, partNumber: Int) -> String {
        endpoint.url(bucket: bucket, key: key, query: "partNumber=\(partNumber)&uploadId=\(Self.encoded(uploadID))")
    }

    /// A 404 about the key (`NoSuchKey`, or no body to say), not about the
    /// bucket: a missing bucket is a failure, not an absent object.
    private static func isMissingKey(_ response: AWSResponse) -> Bool {
        guard let code = response.s3Error?.code else { return true }
        return code == "NoSuchKey"
    }

    private static func encoded(_ value: String) -> String { SignatureV4.uriEncode(value, keepSlash: false) }
}
