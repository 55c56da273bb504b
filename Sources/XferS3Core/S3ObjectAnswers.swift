import FoundationEssentials
import XferWire
import XferPrimitives

// What `S3ObjectRequests`' operations answer with, and the reading of S3's
// answers that the `s3` backend shares with them (the UploadId of a new
// upload, a part's ETag, a completion, an abort).

/// An object's (or a part's) entity tag, as S3 names a version of its bytes.
///
/// Kept without quotes, because stores disagree on which form a condition
/// takes: S3 sends ETags quoted (`"9dd4…"`), Ceph's gateway (16) honours
/// `If-Match` on `PutObject` only unquoted, and accepts the quoted form on
/// `GetObject`. Each request picks the form that works (`quoted`, `unquoted`).
/// Two tags are the same whatever their quotes and letter case.
public struct S3ETag: Sendable, Hashable, CustomStringConvertible {
    /// The tag without quotes or surrounding spaces (`9dd4…`, `…-3` for a multipart object).
    public let unquoted: String

    /// A tag as S3 wrote it, quoted or not.
    public init(_ text: String) {
        unquoted = text.trimming { $0 == "\"" || $0 == " " }
    }

    /// The tag in quotes, as S3 sends it in `ETag` and as HTTP writes an entity tag.
    public var quoted: String { "\"\(unquoted)\"" }

    public var description: String { quoted }

    public static func == (a: S3ETag, b: S3ETag) -> Bool { a.unquoted.lowercased() == b.unquoted.lowercased() }

    public func hash(into hasher: inout Hasher) { hasher.combine(unquoted.lowercased()) }

    /// The `ETag` header's tag; nil when it is missing or empty.
    package init?(header response: AWSResponse) {
        guard let text = response.headers["ETag"] else { return nil }
        self.init(text)
        if unquoted.isEmpty { return nil }
    }
}

/// How a conditional `PutObject` may change the key: the store decides
/// atomically, which makes a small object a compare-and-swap cell with no
/// lock service.
public enum S3WriteCondition: Sendable, Hashable {
    /// Create only: `If-None-Match: *`, refused when the key exists.
    case onlyIfAbsent
    /// Replace only this version: `If-Match: ETAG` (sent unquoted, the one
    /// form both AWS and Ceph's gateway honour on PutObject), refused when
    /// the object changed or is gone.
    case onlyIfCurrent(S3ETag)
}

/// What a `PutObject` did.
public enum S3PutOutcome: Sendable, Hashable {
    /// The object holds the body now, under this ETag.
    case stored(S3ETag)
    /// The condition did not hold (HTTP 412): another writer got there first.
    case preconditionFailed
}

/// What S3 says about an object in the headers of a `GetObject` or
/// `HeadObject` answer.
public struct S3ObjectMetadata: Sendable, Hashable {
    /// The object's ETag; nil when the answer had none.
    public var etag: S3ETag?
    /// Bytes in this answer's body: the whole object, or the range's length.
    public var contentLength: Int64
    /// The object's whole size: `Content-Length` of a whole answer, the total
    /// in `Content-Range` of a partial one (nil when the store wrote `*`).
    public var size: Int64?
    /// Which bytes of the object a partial (206) answer holds.
    public var range: ClosedRange<Int64>?
    /// `Last-Modified`, to the second.
    public var lastModified: Date?
    /// `Content-Type`, as stored with the object.
    public var contentType: String?
    /// User metadata stored with the object: `x-amz-meta-NAME` headers, by NAME (lowercase).
    public var userMetadata: [String: String]
    /// The checksums S3 keeps of the object, when the request asked for
    /// them (`x-amz-checksum-mode: ENABLED`; `S3ObjectRequests.headObject(key:ifMatch:checksums:)`);
    /// `S3ObjectChecksum.checksums(in:)` says which kind each is.
    public var checksums: [S3ObjectChecksum] = []

    /// Where user metadata headers' names start.
    public static let userPrefix = "x-amz-meta-"

    public init(
        etag: S3ETag?, contentLength: Int64, size: Int64?, range: ClosedRange<Int64>? = nil, lastModified: Date? = nil,
        contentType: String? = nil, userMetadata: [String: String] = [:]
    ) {
        self.etag = etag
        self.contentLength = contentLength
        self.size = size
        self.range = range
        self.lastModified = lastModified
        self.contentType = contentType
        self.userMetadata = userMetadata
    }

    /// The metadata of a 200 or 206 answer's headers; nil without a
    /// readable `Content-Length` (or, for a 206, `Content-Range`).
    ///
    /// Public for a caller that streams a `GetObject`'s body elsewhere and
    /// has only the headers to read.
    public init?(_ response: AWSResponse) {
        guard let length = response.headers["Content-Length"].flatMap({ Int64($0.trimmingSpacesAndTabs()) }),
            length >= 0
        else { return nil }
        var size: Int64? = length
        var range: ClosedRange<Int64>?
        if response.status == 206 {
            // HTTP's one reading of the header, the engine's and the receiver's (XferWire).
            guard let contentRange = response.headers["Content-Range"].flatMap({ ContentRange($0) }) else { return nil }
            range = contentRange.first...contentRange.last
            size = contentRange.size
        }
        self.init(
            etag: S3ETag(header: response), contentLength: length, size: size, range: range,
            lastModified: response.headers["Last-Modified"].flatMap(HTTPAnswerRules.date),
            contentType: response.headers["Content-Type"],
            userMetadata: Dictionary(
                response.headers.compactMap { field in
                    let name = field.name.lowercased()
                    return name.hasPrefix(Self.userPrefix) ? (String(name.dropFirst(Self.userPrefix.count)), field.value) : nil
                }, uniquingKeysWith: { first, _ in first }))
        // A ranged answer's checksum headers, if a store sent any, are not the object's.
        if response.status == 200 { checksums = S3ObjectChecksum.checksums(in: response) }
    }
}

/// An object's bytes as a `GetObject` answered them.
public struct S3ObjectContent: Sendable, Hashable {
    /// The answer's headers, read.
    public var metadata: S3ObjectMetadata
    /// The bytes: the whole object, or the range asked for.
    public var body: [UInt8]

    public init(metadata: S3ObjectMetadata, body: [UInt8]) {
        self.metadata = metadata
        self.body = body
    }
}

/// What a `GetObject` found.
public enum S3GetOutcome: Sendable, Hashable {
    /// The object's bytes (those of the range, when one was asked for).
    case found(S3ObjectContent)
    /// No object has this key (`NoSuchKey`).
    case notFound
    /// The object is not the version `If-Match` named (HTTP 412).
    case preconditionFailed
    /// The range starts past the object's end (HTTP 416); the object's size
    /// when the store said (AWS does in `Content-Range`, Ceph 16 does not).
    case rangeNotSatisfiable(objectSize: Int64?)
}

/// What a `HeadObject` found.
public enum S3HeadOutcome: Sendable, Hashable {
    case found(S3ObjectMetadata)
    /// No object has this key. (A HEAD answer has no body, so a missing
    /// bucket looks the same.)
    case notFound
    /// The object is not the version `If-Match` named (HTTP 412).
    case preconditionFailed
}

/// One part of a multipart upload as `CompleteMultipartUpload` names it.
public struct S3CompletedPart: Sendable, Hashable {
    /// 1 to 10,000.
    public var number: Int
    /// The ETag `UploadPart` or `UploadPartCopy` answered with.
    public var etag: S3ETag
    /// The part's CRC-32C, for an upload created with `partsCarryCRC32C`
    /// (S3 then wants each part's checksum repeated here).
    public var crc32c: UInt32?

    public init(number: Int, etag: S3ETag, crc32c: UInt32? = nil) {
        self.number = number
        self.etag = etag
        self.crc32c = crc32c
    }
}

/// What a `CompleteMultipartUpload` did.
public enum S3CompleteOutcome: Sendable, Hashable {
    /// The object exists now. Its ETag when the answer named one: Ceph's
    /// gateway (16) answers `<ETag></ETag>`, empty (a HEAD has it).
    case completed(etag: S3ETag?)
    /// S3 no longer knows the upload (`NoSuchUpload`): aborted, expired, or
    /// completed by an earlier attempt whose answer was lost — a HEAD of the
    /// key tells which.
    case uploadUnknown
}

/// One object of a `ListObjectsV2` page.
public struct S3ObjectSummary: Sendable, Hashable {
    public var key: String
    public var size: Int64
    public var etag: S3ETag?
    public var lastModified: Date?

    public init(key: String, size: Int64, etag: S3ETag?, lastModified: Date?) {
        self.key = key
        self.size = size
        self.etag = etag
        self.lastModified = lastModified
    }
}

/// One page of a `ListObjectsV2` listing.
public struct S3ObjectPage: Sendable, Hashable {
    /// The page's objects, in key order.
    public var objects: [S3ObjectSummary]
    /// With a delimiter: the prefixes that group keys below this level
    /// (`dir/` for `dir/a` and `dir/b`), each listed once.
    public var commonPrefixes: [String]
    /// Where the next page starts (`continuation-token`); nil after the last page.
    public var nextContinuationToken: String?

    public init(objects: [S3ObjectSummary], commonPrefixes: [String] = [], nextContinuationToken: String?) {
        self.objects = objects
        self.commonPrefixes = commonPrefixes
        self.nextContinuationToken = nextContinuationToken
    }
}

/// The readings of S3's answers that the `s3` backend and
/// `S3ObjectRequests` both make: written once, so a quirk of a store learnt
/// by one (Ceph's empty ETag, an `<Error>` inside a 200) is known to both.
/// Each throws the unclassified-by-credentials `S3Failure`; callers review
/// it with their signer.
package enum S3Answer {
    /// `CreateMultipartUpload`'s UploadId.
    package static func uploadID(_ response: AWSResponse, operation: String) throws(S3Failure) -> String {
        guard response.status == 200 else { throw S3Failure(response, operation: operation) }
        guard let document = S3XML(response.body), document.root.hasPrefix("InitiateMultipartUpload"),
            let id = document.fields["UploadId"], !id.isEmpty
        else {
            if let error = response.s3Error { throw S3Failure(response, operation: operation, known: error, isErrorInSuccess: true) }
            throw S3Failure.unreadable(response, operation: operation, "the answer has no UploadId")
        }
        return id
    }

    /// A stored part's (or a `PutObject`'s) ETag. `crcHeader`, `sentCRC`:
    /// the checksum header the request carried, which S3 echoes; an echo of
    /// another value means the store computed something else than was sent.
    package static func storedETag(
        _ response: AWSResponse, operation: String, crcHeader: String? = nil, sentCRC: String? = nil
    ) throws(S3Failure) -> S3ETag {
        guard response.status == 200 else { throw S3Failure(response, operation: operation) }
        guard let etag = S3ETag(header: response) else {
            throw S3Failure.unreadable(response, operation: operation, "the answer has no ETag")
        }
        if let sentCRC, let crcHeader, let echoed = response.headers[crcHeader], echoed != sentCRC {
            throw S3Failure.unreadable(response, operation: operation, "S3 reports \(crcHeader) \(echoed.prefix(16)), not the \(sentCRC) sent")
        }
        return etag
    }

    /// `CompleteMultipartUpload`'s answer. S3 may answer 200 and report an
    /// error in the body, even after sending whitespace for minutes: only a
    /// `CompleteMultipartUpload…` root means done (AWS names it …Result, moto
    /// …Response). `InvalidPart` and the like are thrown with their code.
    package static func completion(_ response: AWSResponse, operation: String) throws(S3Failure) -> S3CompleteOutcome {
        guard response.status == 200 else {
            if response.s3Error?.code == "NoSuchUpload" { return .uploadUnknown }
            throw S3Failure(response, operation: operation)
        }
        guard let document = S3XML(response.body) else {
            throw S3Failure.unreadable(response, operation: operation, "the answer was cut short")
        }
        if document.root.hasPrefix("CompleteMultipartUpload") {
            // Ceph's gateway (16) answers an empty ETag.
            let etag = document.fields["ETag"].map(S3ETag.init).flatMap { $0.unquoted.isEmpty ? nil : $0 }
            return .completed(etag: etag)
        }
        if let error = response.s3Error {
            if error.code == "NoSuchUpload" { return .uploadUnknown }
            throw S3Failure(response, operation: operation, known: error, isErrorInSuccess: true)
        }
        throw S3Failure.unreadable(response, operation: operation, "unexpected answer <\(document.root)>")
    }

    /// `HeadObject`'s answer: the object's metadata, or that it is missing
    /// or another version than `If-Match` named.
    package static func head(_ response: AWSResponse, operation: String) throws(S3Failure) -> S3HeadOutcome {
        switch response.status {
        case 200:
            guard let metadata = S3ObjectMetadata(response) else {
                throw S3Failure.unreadable(response, operation: operation, "the answer has no readable Content-Length")
            }
            return .found(metadata)
        case 412: return .preconditionFailed
        // A HEAD answer has no body to name NoSuchKey or NoSuchBucket.
        case 404: return .notFound
        default: throw S3Failure(response, operation: operation)
        }
    }

    /// A `ListObjectsV2` page. Its keys and common prefixes are
    /// decoded when the answer says it encoded them (`<EncodingType>url`,
    /// asked for with `encoding-type=url`: S3 cannot put a key holding a
    /// character XML 1.0 forbids into its answer otherwise); a store that
    /// ignored the request sent them as they are, and they are read so.
    /// `continuationToken`: the token the page was asked with, so a store
    /// that names it again as the next one is an error, not a loop.
    package static func objectPage(_ response: AWSResponse, operation: String, continuationToken: String?) throws(S3Failure) -> S3ObjectPage {
        guard response.status == 200 else { throw S3Failure(response, operation: operation) }
        guard let document = S3XML(response.body, recordNames: ["Contents", "CommonPrefixes"]), document.root == "ListBucketResult"
        else {
            if let error = response.s3Error { throw S3Failure(response, operation: operation, known: error, isErrorInSuccess: true) }
            throw S3Failure.unreadable(response, operation: operation, "the answer is not a ListBucketResult")
        }
        let encoded = document.fields["EncodingType"]?.lowercased() == "url"
        func name(_ text: String) throws(S3Failure) -> String {
            guard encoded else { return text }
            // As botocore reads them: '+' is a space, then percent-decoding.
            guard let decoded = PercentEncoding.decodeForm(text) else {
                throw S3Failure.unreadable(response, operation: operation, "the answer holds a key that is not URL-encoded")
            }
            return decoded
        }
        var objects: [S3ObjectSummary] = []
        var prefixes: [String] = []
        for record in document.records {
            if let key = record["Key"] {
                objects.append(
                    S3ObjectSummary(
                        key: try name(key), size: record["Size"].flatMap { Int64($0) } ?? 0,
                        etag: record["ETag"].map(S3ETag.init).flatMap { $0.unquoted.isEmpty ? nil : $0 },
                        lastModified: record["LastModified"].flatMap(S3Answer.date)))
            } else if let prefix = record["Prefix"] {
                prefixes.append(try name(prefix))
            }
        }
        guard document.fields["IsTruncated"] == "true" else {
            return S3ObjectPage(objects: objects, commonPrefixes: prefixes, nextContinuationToken: nil)
        }
        // Without a token, the next page cannot be asked for: a caller
        // would list this page again forever.
        guard let next = document.fields["NextContinuationToken"], !next.isEmpty, next != continuationToken else {
            throw S3Failure(
                operation: operation, status: response.status, code: nil,
                message: "S3 says more keys follow, but not where they start", isRetryable: false)
        }
        return S3ObjectPage(objects: objects, commonPrefixes: prefixes, nextContinuationToken: next)
    }

    /// `AbortMultipartUpload`'s answer: an upload S3 no longer knows is gone already.
    package static func abort(_ response: AWSResponse, operation: String) throws(S3Failure) -> S3AbortOutcome {
        if (200..<300).contains(response.status) { return .aborted }
        if response.s3Error?.code == "NoSuchUpload" { return .alreadyGone }
        throw S3Failure(response, operation: operation)
    }

    /// The body of `CompleteMultipartUpload`: each part's number, ETag (as
    /// S3 gave it, quotes and all) and, for an upload whose parts carry a
    /// CRC, that CRC in its element (`ChecksumCRC32C`, ...).
    package static func completionBody(_ parts: [(number: Int, etag: String, checksum: (element: String, value: String)?)]) -> [UInt8] {
        var xml = "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
        for part in parts {
            xml += "<Part><PartNumber>\(part.number)</PartNumber><ETag>\(S3XML.escaped(part.etag))</ETag>"
            if let checksum = part.checksum {
                xml += "<\(checksum.element)>\(S3XML.escaped(checksum.value))</\(checksum.element)>"
            }
            xml += "</Part>"
        }
        xml += "</CompleteMultipartUpload>"
        return Array(xml.utf8)
    }

    /// S3's spelling of a CRC: its four bytes, big-endian, in base64.
    package static func crcText(_ crc: UInt32) -> String {
        Data(CRC32.bigEndianBytes(crc)).base64EncodedString()
    }

    /// S3's timestamps: ISO 8601 in UTC, with milliseconds (AWS) or without.
    package static func date(_ text: String) -> Date? {
        let trimmed = text.trimmingSpacesAndTabs()
        return (try? Date(trimmed, strategy: Date.ISO8601FormatStyle(includingFractionalSeconds: true)))
            ?? (try? Date(trimmed, strategy: Date.ISO8601FormatStyle()))
    }

    /// `ListMultipartUploads`' query: the page of at most `maxUploads` (1–1,000) under `prefix`
    /// after `marker`.
    package static func uploadListQuery(prefix: String, after marker: S3UploadPage.Marker?, maxUploads: Int) -> String {
        func encoded(_ value: String) -> String { SignatureV4.uriEncode(value, keepSlash: false) }
        var query = "uploads&max-uploads=\(max(1, min(1000, maxUploads)))"
        if !prefix.isEmpty { query += "&prefix=\(encoded(prefix))" }
        if let marker {
            query += "&key-marker=\(encoded(marker.key))"
            if !marker.uploadID.isEmpty { query += "&upload-id-marker=\(encoded(marker.uploadID))" }
        }
        return query
    }

    /// A `ListMultipartUploads` page: the uploads, and where the next page starts. A page that
    /// says more follow without saying where (or names where it started) is a final failure: asked
    /// again, it would answer the same.
    package static func uploadPage(_ response: AWSResponse, operation: String, after marker: S3UploadPage.Marker?) throws(S3Failure) -> S3UploadPage {
        guard response.status == 200 else { throw S3Failure(response, operation: operation) }
        // AWS names the root ListMultipartUploadsResult; moto too.
        guard let document = S3XML(response.body, recordNames: ["Upload"]), document.root.hasPrefix("ListMultipartUploads") else {
            if let error = response.s3Error { throw S3Failure(response, operation: operation, known: error, isErrorInSuccess: true) }
            throw S3Failure.unreadable(response, operation: operation, "the answer is not a ListMultipartUploadsResult")
        }
        let uploads = document.records.compactMap { record -> S3MultipartUpload? in
            guard let key = record["Key"], let id = record["UploadId"], !id.isEmpty else { return nil }
            let storageClass = record["StorageClass"].flatMap { $0.isEmpty ? nil : $0 }
            return S3MultipartUpload(key: key, uploadID: id, initiated: record["Initiated"].flatMap(date), storageClass: storageClass)
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
            throw S3Failure(
                operation: operation, status: response.status, code: nil, message: "S3 says more uploads follow, but not where they start",
                isRetryable: false)
        }
        return S3UploadPage(uploads: uploads, next: next)
    }
}

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
