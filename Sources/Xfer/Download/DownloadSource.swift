import FoundationEssentials
import XferPrimitives

/// The other direction: a server objects are pulled from, described as an
/// upload backend is. A source never performs I/O: it says which request
/// describes an object, which request asks for a range of its bytes, and
/// (when it can list) which request lists a prefix; it reads the answers as
/// values. The engine sends the requests, writes the bodies straight to
/// their place in the destination's partial file, retries, schedules the
/// ranges as chunks, keeps their state and checks the result.
///
/// A minimal source is a name, traits, `describeObject` and
/// `rangeRequest`; listing (`ObjectListing`) and signing
/// (`DownloadRequestSigning`) are capabilities adopted by name and resolved
/// once per job.
///
/// What the engine does with a range's answer is HTTP's, not the source's:
/// `206` with the asked `Content-Range` is the range; `412` (a failed
/// `If-Match`) or a `200` carrying another validator is an object that
/// changed; a `200` with the same validator is a server that ignores ranges.
public protocol DownloadSource: Sendable {
    /// The source's name, as stored with a job (`http`, `s3`).
    var name: String { get }
    /// Defaults the engine uses when the user names none.
    var traits: DownloadTraits { get }

    /// The location as the job keeps it (the job's id is made from it): a
    /// location that is not one of this source's fails here, before anything
    /// is stored.
    func normalizedLocation(_ location: String) throws(BackendError) -> String

    /// Asks what `location` names now: its size, its validator, the digests
    /// the server offers, and whether it answers ranges. An object that is
    /// not there is a `.rejected` error.
    func describeObject(at location: String, in job: JobContext) throws(BackendError) -> Exchange<RemoteObject>

    /// The request for bytes `range` of `object`, conditional on its
    /// validator (`If-Match` where the server refuses a changed object with
    /// `412`, else `If-Range`), so bytes of two versions are never mixed.
    func rangeRequest(_ range: ClosedRange<Int64>, of object: RemoteObject, in job: JobContext) -> HTTPRequest

    /// The request for all of `object`, when it fits one chunk: one request
    /// instead of a description and a range, conditional as `rangeRequest`.
    /// Its answer's headers give the digests (`digests(in:)`).
    func wholeObjectRequest(_ object: RemoteObject, in job: JobContext) -> HTTPRequest

    /// The digests of the whole object that a response's headers carry
    /// (a `200` to a whole-object request, or a description's answer).
    func digests(in response: HTTPResponse) -> [ObjectDigest]

    /// The name the object at `location` (normalized) gets in a destination
    /// directory: by default the last segment of its path, percent-decoded.
    func fileName(of location: String) -> String

    /// The error an answer to a range means when HTTP's rules leave it to
    /// the server (a 403, a 503, a 400 with a body saying why): by default
    /// its status's usual meaning; a source that reads its server's error
    /// documents says more (S3's `SlowDown` is transient, `ExpiredToken`
    /// refreshes temporary credentials).
    func failure(_ response: HTTPResponse, of object: RemoteObject, in job: JobContext) -> BackendError
}

extension DownloadSource {
    public func normalizedLocation(_ location: String) throws(BackendError) -> String { location }

    public func wholeObjectRequest(_ object: RemoteObject, in job: JobContext) -> HTTPRequest {
        var request = rangeRequest(0...max(0, object.size - 1), of: object, in: job)
        request.headers.remove("Range")
        if request.headers.contains("If-Range") {
            // Without a range, If-Range means nothing; If-Match keeps the answer to this version.
            request.headers.remove("If-Range")
            if case .etag(let tag)? = object.validator { request.headers.set("If-Match", tag) }
        }
        return request
    }

    public func digests(in response: HTTPResponse) -> [ObjectDigest] { ObjectDigest.representationDigests(in: response.headers) }

    public func fileName(of location: String) -> String { TransferEngine.name(of: location) }

    public func failure(_ response: HTTPResponse, of object: RemoteObject, in job: JobContext) -> BackendError {
        response.unexpectedStatus("fetch \(DownloadWorker.shown(object.location))")
    }
}

/// A source that can list the objects under a prefix (`s3://BUCKET/PREFIX/`),
/// as `aws s3 cp --recursive` does.
public protocol ObjectListing: DownloadSource {
    /// Whether `location` (normalized) names the objects under a prefix
    /// rather than one object.
    func isPrefix(_ location: String) -> Bool

    /// One page of the objects under `location`, from after `cursor` (nil:
    /// from the start).
    func listObjects(under location: String, after cursor: String?, in job: JobContext) throws(BackendError) -> Exchange<ObjectListingPage>
}

/// A source whose objects keep their file's modification time in metadata
/// (S3: `x-amz-meta-mtime`, as rclone and `xfer sync` write it) that every
/// answer to a range carries: a sync into a directory gives each file that
/// time without asking for it first. Resolved once, when a pull starts.
public protocol ModificationTimeReading: DownloadSource {
    /// The modification time (nanoseconds since 1970) `response`, an answer
    /// to a range of an object, says the object keeps; nil when none.
    func keptModificationTime(in response: HTTPResponse) -> Int64?
}

/// A listing that can also start after a key, not only go on from a page's
/// continuation token (S3's `start-after`): what lets a sync from this
/// source list its prefix as key ranges at once. Optional: a source without
/// it is listed a page after the other.
public protocol KeyRangeListing: ObjectListing {
    /// One page of the objects under `location` whose path below it sorts
    /// after `relativePath` (in the listing's order), whether or not an
    /// object is there; its `next` goes on with `listObjects(under:after:in:)`.
    func listObjects(under location: String, startingAfter relativePath: String, in job: JobContext) throws(BackendError)
        -> Exchange<ObjectListingPage>
}

/// A source that can list the parts an object was uploaded in, with each
/// part's checksum (S3's `GetObjectAttributes`): what a composite checksum
/// (`ObjectDigest.composite`) is checked through, a part at a time, when the
/// file is complete.
public protocol ObjectPartListing: DownloadSource {
    /// One page of `object`'s parts, from after part `marker` (0: from the first).
    func listParts(of object: RemoteObject, after marker: Int, in job: JobContext) throws(BackendError) -> Exchange<ObjectPartsPage>
}

/// A source whose requests are signed (S3's Signature V4), after the
/// engine added the user's extra headers.
public protocol DownloadRequestSigning: DownloadSource {
    /// Signs `request` in place.
    func sign(_ request: inout HTTPRequest, in job: JobContext)
}

/// What a source's defaults are.
public struct DownloadTraits: Sendable, Hashable {
    /// Bytes per ranged request.
    public var defaultChunkSize: Int
    /// Ranged requests in flight.
    public var defaultConcurrency: Int
    /// Requests in flight when they are small (whole small objects of a prefix).
    public var smallRequestConcurrency: Int?
    /// How the user's credentials reach the server.
    public var authentication: BackendTraits.Authentication

    /// Traits with these values.
    public init(
        defaultChunkSize: Int = 8 << 20, defaultConcurrency: Int = 8, smallRequestConcurrency: Int? = BackendTraits.wideSmallRequests,
        authentication: BackendTraits.Authentication = .authorizationHeader
    ) {
        self.defaultChunkSize = defaultChunkSize
        self.defaultConcurrency = defaultConcurrency
        self.smallRequestConcurrency = smallRequestConcurrency
        self.authentication = authentication
    }
}

/// An object as its server describes it.
public struct RemoteObject: Sendable, Hashable {
    /// What the source's requests address (a URL, a key).
    public var location: String
    /// Its size in bytes.
    public var size: Int64
    /// What identifies this version of it; nil when the server gives none
    /// (the pull then cannot tell a changed object and says so once).
    public var validator: Validator?
    /// Digests of the whole object the server offers, checked at the end.
    public var digests: [ObjectDigest]
    /// Whether the server answers ranges (`Accept-Ranges: bytes`); false
    /// makes the object one stream, resumable only from its start.
    public var acceptsRanges: Bool
    /// When the server last wrote it, in nanoseconds since 1970, when it says
    /// (S3: a listing's `LastModified`, a description's `Last-Modified`):
    /// what a sync compares with a local file's time when nothing else is kept.
    public var lastModifiedNanoseconds: Int64?
    /// The modification time of the file it was made from, as kept with it
    /// (S3: `x-amz-meta-mtime`), in nanoseconds since 1970: only a
    /// description says.
    public var modificationTimeNanoseconds: Int64?

    /// An object with these values.
    public init(location: String, size: Int64, validator: Validator?, digests: [ObjectDigest] = [], acceptsRanges: Bool = true) {
        self.location = location
        self.size = size
        self.validator = validator
        self.digests = digests
        self.acceptsRanges = acceptsRanges
    }

    /// What identifies a version of an object.
    public enum Validator: Sendable, Hashable {
        /// A strong entity tag, quoted as the server sent it.
        case etag(String)
        /// A `Last-Modified` date, as the server sent it (`If-Range` only).
        case lastModified(String)

        /// The value as sent in `If-Match`/`If-Range`.
        public var headerValue: String {
            switch self {
            case .etag(let tag): return tag
            case .lastModified(let date): return date
            }
        }
    }
}

/// A digest of a whole object that a server offers.
public enum ObjectDigest: Sendable, Hashable {
    /// CRC-32C of the whole object (S3's full-object checksum, `Repr-Digest: crc32c`).
    case crc32c(UInt32)
    /// CRC-32 (IEEE) of the whole object (S3's full-object CRC32).
    case crc32(UInt32)
    /// MD5 (an S3 ETag of an object stored in one part).
    case md5([UInt8])
    /// SHA-256 (`Repr-Digest: sha-256`, S3's full-object SHA256).
    case sha256([UInt8])
    /// CRC-64/NVME of the whole object (S3's `x-amz-checksum-crc64nvme`,
    /// which it keeps of every new object since 2025).
    case crc64nvme(UInt64)
    /// A checksum of the object's parts' checksums (S3's composite
    /// checksums of multipart objects, `BASE64-N`), checked part by part
    /// through a source's `ObjectPartListing`.
    case composite(CompositeChecksum)

    /// The algorithm's name, for messages.
    public var algorithm: String {
        switch self {
        case .crc32c: return "CRC-32C"
        case .crc32: return "CRC-32"
        case .md5: return "MD5"
        case .sha256: return "SHA-256"
        case .crc64nvme: return "CRC64NVME"
        case .composite(let composite): return "composite \(composite.algorithm.name)"
        }
    }
}

/// A checksum of a multipart object's parts' checksums: the algorithm's
/// digest of the parts' digests (each big-endian), concatenated in part
/// order, as S3 keeps of an object uploaded in parts with a checksum that is
/// not full-object. A file's bytes are checked against it only through the
/// parts' sizes, which the server lists (`ObjectPartListing`).
public struct CompositeChecksum: Sendable, Hashable {
    /// The algorithm of the parts' checksums and of the checksum of them.
    public struct Algorithm: Sendable, Hashable {
        /// Its name in messages (`CRC-32C`).
        public let name: String
        /// The digest's length in bytes.
        public let digestLength: Int

        /// CRC-32 (IEEE).
        public static let crc32 = Algorithm(name: "CRC-32", digestLength: 4)
        /// CRC-32C (Castagnoli).
        public static let crc32c = Algorithm(name: "CRC-32C", digestLength: 4)
        /// SHA-1.
        public static let sha1 = Algorithm(name: "SHA-1", digestLength: 20)
        /// SHA-256.
        public static let sha256 = Algorithm(name: "SHA-256", digestLength: 32)
    }

    public var algorithm: Algorithm
    /// The checksum of the parts' checksums.
    public var digest: [UInt8]
    /// How many parts it covers (the `N` of `BASE64-N`).
    public var partCount: Int

    public init(algorithm: Algorithm, digest: [UInt8], partCount: Int) {
        self.algorithm = algorithm
        self.digest = digest
        self.partCount = partCount
    }
}

/// A page of an object's parts, in order (`ObjectPartListing`).
public struct ObjectPartsPage: Sendable, Hashable {
    /// One part of the object.
    public struct Part: Sendable, Hashable {
        /// 1-based.
        public var number: Int
        /// Its length in bytes.
        public var size: Int64
        /// Its checksum by the composite checksum's algorithm, when listed.
        public var checksum: [UInt8]?

        public init(number: Int, size: Int64, checksum: [UInt8]?) {
            self.number = number
            self.size = size
            self.checksum = checksum
        }
    }

    /// This page's parts; empty when the server does not list parts (the
    /// composite checksum then cannot be checked, and is not).
    public var parts: [Part]
    /// The part number the next page starts after; nil after the last page.
    public var next: Int?
    /// The version of the object the page describes (its ETag), when the
    /// answer says: another than the one fetched is an object that changed.
    public var validator: RemoteObject.Validator?

    public init(parts: [Part], next: Int?, validator: RemoteObject.Validator? = nil) {
        self.parts = parts
        self.next = next
        self.validator = validator
    }
}

/// One page of a listing.
public struct ObjectListingPage: Sendable, Hashable {
    /// The page's objects.
    public var objects: [ListedObject]
    /// Where the next page starts; nil after the last.
    public var next: String?

    /// A page.
    public init(objects: [ListedObject], next: String?) {
        self.objects = objects
        self.next = next
    }
}

/// An object a listing named: where it lands below the destination, and
/// what the listing said of it (enough to fetch a small one in one request).
public struct ListedObject: Sendable, Hashable {
    /// '/'-separated path below the destination directory.
    public var relativePath: String
    /// The object as listed.
    public var object: RemoteObject

    /// A listed object.
    public init(relativePath: String, object: RemoteObject) {
        self.relativePath = relativePath
        self.object = object
    }
}

extension ObjectDigest {
    /// The digests of an RFC 9530 `Repr-Digest` field (`sha-256=:…:, crc32c=:…:`):
    /// the algorithms this engine checks, others ignored; a malformed member is skipped.
    public static func representationDigests(in headers: HTTPHeaders) -> [ObjectDigest] {
        var found: [ObjectDigest] = []
        for value in headers.values(for: "Repr-Digest") {
            for member in value.split(separator: ",") {
                let parts = member.split(separator: "=", maxSplits: 1).map { $0.trimmingSpacesAndTabs() }
                guard parts.count == 2, parts[1].count >= 2, parts[1].hasPrefix(":"), parts[1].hasSuffix(":"),
                    let bytes = Data(base64Encoded: String(parts[1].dropFirst().dropLast())).map(Array.init)
                else { continue }
                switch parts[0].lowercased() {
                case "sha-256" where bytes.count == 32: found.append(.sha256(bytes))
                case "crc32c" where bytes.count == 4: found.append(.crc32c(bigEndian(bytes)))
                case "md5" where bytes.count == 16: found.append(.md5(bytes))
                default: continue
                }
            }
        }
        return found
    }

    static func bigEndian(_ bytes: [UInt8]) -> UInt32 {
        bytes.reduce(0) { $0 << 8 | UInt32($1) }
    }
}
