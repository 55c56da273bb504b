import FoundationEssentials
import Xfer
import XferS3Core
import XferPrimitives

/// Objects pulled from S3 and the S3-compatible stores (`xfer pull`), as
/// the `s3` backend pushes to them: the same locations, endpoints,
/// Signature V4 signing, credentials and reading of S3's answers.
///
/// `s3://BUCKET/KEY` names one object; `s3://BUCKET/PREFIX/` (with its
/// trailing slash) or `s3://BUCKET` names every object under the prefix,
/// listed with `ListObjectsV2`. An object is described by `HeadObject` and
/// fetched with ranged `GetObject`s, each conditional on the ETag the
/// description (or the listing) gave (`If-Match`: S3 answers `412` once
/// the object changed, so bytes of two versions are never mixed in one file).
///
/// An object's `RemoteObject.location` is its own location,
/// `s3://BUCKET/KEY` with the ` at ENDPOINT` of the location that named or
/// listed it: every request about it is built from that alone (a pull's
/// `JobContext.target` is its local destination), and `describeObject(at:)`
/// takes it back as it takes a named object's.
///
/// The digests checked at the end are the ones S3 can vouch for about the
/// whole object (see `digests(in:)`): its full-object CRC64NVME, CRC-32C,
/// CRC-32 or SHA-256, its ETag when that is the MD5 of its bytes, and a
/// composite checksum, checked through the parts `GetObjectAttributes`
/// lists (`listParts(of:after:in:)`).
///
/// Sans-IO like `S3Backend`: every method describes a request or reads an
/// answer; the engine sends, retries and signs (`sign(_:in:)`) after adding
/// the user's headers.
public struct S3DownloadSource: DownloadSource, ObjectListing, KeyRangeListing, DownloadRequestSigning, ObjectPartListing, ModificationTimeReading {
    public let name = "s3"

    public let traits = DownloadTraits(
        // As the s3 backend's parts: S3 serves each ranged GET from its own
        // connection, and 8 MiB ranges keep its per-request latency small
        // next to the transfer.
        defaultChunkSize: 8 << 20,
        defaultConcurrency: 16,
        // A tree of small objects is bound by each GET's latency, as a
        // push of small files is by each PUT's.
        smallRequestConcurrency: BackendTraits.wideSmallRequests,
        // Signature V4 carries them (`sign(_:in:)`).
        authentication: .byBackend)

    let configuration: AWSConfiguration
    private let endpoint: S3Endpoint?
    private let region: String?
    /// Keys per ListObjectsV2 page (S3's maximum is 1,000); smaller in tests.
    private let listPageSize: Int
    let now: @Sendable () -> Date

    /// A source reading from the store the `s3` backend would push to with the same settings.
    ///
    /// - Parameters:
    ///   - configuration: Credentials to sign with (asked for each request, so
    ///     temporary ones are fetched again before they expire) and a default region.
    ///   - endpoint: The server new jobs read from; nil for AWS in `region`.
    ///     A job keeps its endpoint in its location (`normalizedLocation(_:)`).
    ///   - region: The signing region; nil for the configuration's, else us-east-1.
    ///   - listPageSize: Keys asked for per ListObjectsV2 request (1–1,000).
    ///   - now: The clock requests are signed with.
    public init(
        configuration: AWSConfiguration, endpoint: S3Endpoint? = nil, region: String? = nil, listPageSize: Int = 1000,
        now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.configuration = configuration
        self.endpoint = endpoint
        self.region = region
        self.listPageSize = max(1, min(1000, listPageSize))
        self.now = now
    }

    // MARK: Locations

    /// `s3://BUCKET/KEY`, or `s3://BUCKET/PREFIX/` for the objects under a
    /// prefix, followed by ` at ENDPOINT` unless the endpoint is AWS's, as
    /// `S3Backend.normalizedTarget(_:)` writes a push's target: the same
    /// pull from another S3 service is another job, and a resumed job reads
    /// from the store it started with. The trailing `/` is kept, since it is
    /// what says "the objects under" rather than "the object named".
    ///
    /// - Throws: `.rejected` for anything but `s3://BUCKET[/KEY]` with a valid bucket name.
    public func normalizedLocation(_ location: String) throws(BackendError) -> String {
        let (bare, storedEndpoint) = S3Backend.splitTarget(location)
        let (parsed, isPrefix) = try Self.parse(bare)
        let normalized = parsed.normalized + (isPrefix && !parsed.prefix.isEmpty ? "/" : "")
        if let storedEndpoint { return "\(normalized) at \(storedEndpoint)" }
        guard let endpoint else { return normalized }
        return "\(normalized) at \(endpoint.base)"
    }

    /// Whether `location` names the objects under a prefix: it ends in `/`,
    /// or names a bucket alone.
    public func isPrefix(_ location: String) -> Bool {
        (try? Self.parse(S3Backend.splitTarget(location).location))?.isPrefix ?? false
    }

    // MARK: Objects

    /// `HeadObject` of the object `location` names (a normalized location,
    /// or a listed object's `location`), asking for its checksums
    /// (`x-amz-checksum-mode: ENABLED`). The object's `location` is
    /// `location` itself; its validator the ETag, as S3 quoted it.
    ///
    /// - Throws: `.rejected` for a location that names a prefix, not one object.
    ///   The exchange's reading throws `.rejected("s3://BUCKET/KEY: no such object")`
    ///   on a 404, and S3's other failures as `S3Backend` words them.
    public func describeObject(at location: String, in job: JobContext) throws(BackendError) -> Exchange<RemoteObject> {
        let object = try ObjectAddress(location)
        let store = Store(self, job: job, endpoint: object.endpoint)
        var request = HTTPRequest(method: .head, url: store.endpoint.url(bucket: object.bucket, key: object.key))
        request.headers.set("x-amz-checksum-mode", "ENABLED")
        let operation = "look up \(object.shown)"
        return Exchange(request) { response throws(BackendError) in
            let outcome: S3HeadOutcome
            do throws(S3Failure) {
                outcome = try S3Answer.head(AWSResponse(response), operation: operation)
            } catch {
                throw store.failure(error, response: response, bucket: object.bucket)
            }
            switch outcome {
            case .found(let metadata):
                var described = RemoteObject(
                    location: object.location, size: metadata.contentLength, validator: metadata.etag.map { .etag($0.quoted) },
                    digests: Self.digests(in: response.headers), acceptsRanges: true)
                described.lastModifiedNanoseconds = metadata.lastModified.map(S3Backend.nanoseconds)
                described.modificationTimeNanoseconds =
                    metadata.userMetadata[S3Backend.modificationTimeMetadata].flatMap(ModificationTimeText.nanoseconds)
                return described
            case .notFound:
                throw .rejected("\(object.shown): no such object")
            case .preconditionFailed:
                // The request names no condition; a store that answers 412 anyway is broken for now.
                throw .transient("\(operation): HTTP 412 to a request without a condition")
            }
        }
    }

    /// `GetObject` of bytes `range` of `object`, only if it is still the
    /// version described (`If-Match` with its ETag; S3 answers `412`
    /// otherwise). Without a checksum mode: S3 gives no checksum of a range.
    public func rangeRequest(_ range: ClosedRange<Int64>, of object: RemoteObject, in job: JobContext) -> HTTPRequest {
        var request = getRequest(object, in: job)
        request.headers.set("Range", "bytes=\(range.lowerBound)-\(range.upperBound)")
        return request
    }

    /// `GetObject` of all of `object`, conditional as `rangeRequest`, asking
    /// for its checksums (`x-amz-checksum-mode: ENABLED`), which S3 gives
    /// only for a whole object: `digests(in:)` reads them from the answer.
    public func wholeObjectRequest(_ object: RemoteObject, in job: JobContext) -> HTTPRequest {
        var request = getRequest(object, in: job)
        request.headers.set("x-amz-checksum-mode", "ENABLED")
        return request
    }

    /// The digests of the whole object that an answer's headers carry (a
    /// `HeadObject`'s, or a whole `GetObject`'s; a ranged answer has no
    /// checksums, only the ETag):
    ///
    /// - `x-amz-checksum-crc64nvme`, `-crc32c`, `-crc32`, `-sha256` (base64)
    ///   of the whole object (`S3ObjectChecksum.checksums(in:)` says which
    ///   kind each is: `x-amz-checksum-type`, else the `-N` suffix, else the
    ///   ETag).
    /// - A composite checksum (`COMPOSITE`, `…-3`: the checksum of the parts'
    ///   checksums) as `.composite`, which the engine checks part by part
    ///   through `listParts(of:after:in:)` once the file is complete.
    /// - `.md5` from an ETag of 32 hexadecimal digits (one part) unless the
    ///   object is encrypted with SSE-KMS, DSSE-KMS or a customer's key
    ///   (`x-amz-server-side-encryption: aws:kms…`,
    ///   `x-amz-server-side-encryption-customer-algorithm`): S3 documents
    ///   those ETags as not being the MD5 of the object's bytes.
    public func digests(in response: HTTPResponse) -> [ObjectDigest] {
        Self.digests(in: response.headers)
    }

    /// `x-amz-meta-mtime` (rclone's form, `xfer sync`'s), which S3 answers with every range.
    public func keptModificationTime(in response: HTTPResponse) -> Int64? {
        response.headers[S3ObjectMetadata.userPrefix + S3Backend.modificationTimeMetadata].flatMap(ModificationTimeText.nanoseconds)
    }

    /// The last segment of the key `location` names, as it is: S3 keys are
    /// not percent-encoded, so `a%20b` is the object's name, not `a b`.
    /// Empty for a location that names no key (the engine then picks one).
    public func fileName(of location: String) -> String {
        guard let object = try? ObjectAddress(location) else { return "" }
        return object.key.split(separator: "/").last.map(String.init) ?? ""
    }

    // MARK: Listing

    /// `ListObjectsV2` of the keys under `location`'s prefix (with its
    /// trailing `/`), a page at a time, from after `cursor` (S3's
    /// continuation token). Each object lands at its key less the prefix.
    ///
    /// What is left out, or refused:
    /// - A key ending in `/` with size 0 is a folder's marker (the console's
    ///   "Create folder"), not a file: left out.
    /// - A key whose path below the destination would be empty or hold an
    ///   empty, `.` or `..` component (`dir/../x`, `dir//x`, `dir/a/` of
    ///   size 5) fails the listing with a `.rejected` naming it: such a key
    ///   cannot be a file below the destination, and leaving it out quietly
    ///   would report a partial copy as a whole one. It can still be pulled
    ///   alone, by its own location, to a file the user names.
    /// - Listed objects carry no MD5 digest, even with a plain ETag: a
    ///   listing does not say whether the object is encrypted with SSE-KMS
    ///   or a customer's key, whose ETags are not MD5s, and a wrong digest
    ///   would fail a correct download. The whole-object `GetObject` (or a
    ///   `HeadObject`) answer, which says, gives it (`digests(in:)`).
    public func listObjects(
        under location: String, after cursor: String?, in job: JobContext
    ) throws(BackendError) -> Exchange<ObjectListingPage> {
        try listObjects(under: location, after: cursor, startingAfter: nil, in: job)
    }

    /// S3's `start-after` (`KeyRangeListing`): a sync from this prefix lists it as key ranges at once.
    public func listObjects(
        under location: String, startingAfter relativePath: String, in job: JobContext
    ) throws(BackendError) -> Exchange<ObjectListingPage> {
        try listObjects(under: location, after: nil, startingAfter: relativePath, in: job)
    }

    /// A page from after a continuation token (`cursor`) or after a path below the prefix (`relativePath`).
    private func listObjects(
        under location: String, after cursor: String?, startingAfter relativePath: String?, in job: JobContext
    ) throws(BackendError) -> Exchange<ObjectListingPage> {
        let (bare, named) = S3Backend.splitTarget(location)
        let (parsed, _) = try Self.parse(bare)
        let store = Store(self, job: job, endpoint: named)
        // S3 matches the prefix character by character: with its slash, `dir/`
        // does not cover `dir2/`.
        let prefix = parsed.prefix.isEmpty ? "" : parsed.prefix + "/"
        let query = S3ObjectRequests.listQuery(
            prefix: prefix, delimiter: nil, continuationToken: cursor, maxKeys: listPageSize, urlEncodedKeys: true,
            startAfter: relativePath.map { prefix + $0 })
        let request = HTTPRequest(method: .get, url: store.endpoint.url(bucket: parsed.bucket, key: "", query: query))
        let listed = "s3://\(parsed.bucket)/\(prefix)"
        let operation = "list \(listed)"
        return Exchange(request) { response throws(BackendError) in
            let page: S3ObjectPage
            do throws(S3Failure) {
                page = try S3Answer.objectPage(AWSResponse(response), operation: operation, continuationToken: cursor)
            } catch {
                throw store.failure(error, response: response, bucket: parsed.bucket)
            }
            var objects: [ListedObject] = []
            objects.reserveCapacity(page.objects.count)
            for summary in page.objects {
                if summary.key.hasSuffix("/"), summary.size == 0 { continue }
                let path = try Self.relativePath(ofKey: summary.key, under: prefix, listing: operation)
                let address = ObjectAddress(bucket: parsed.bucket, key: summary.key, endpoint: named, defaultEndpoint: store.endpoint.base)
                var object = RemoteObject(
                    location: address.location, size: summary.size, validator: summary.etag.map { .etag($0.quoted) }, digests: [],
                    acceptsRanges: true)
                object.lastModifiedNanoseconds = summary.lastModified.map(S3Backend.nanoseconds)
                objects.append(ListedObject(relativePath: path, object: object))
            }
            return ObjectListingPage(objects: objects, next: page.nextContinuationToken)
        }
    }

    // MARK: Parts

    /// `GetObjectAttributes` (`?attributes`, `x-amz-object-attributes:
    /// ETag,Checksum,ObjectParts`) of `object`, a page of at most 1,000 parts
    /// from after part `marker`: each part's number, size and checksum by
    /// the object's composite algorithm, and the object's ETag (another than
    /// the one fetched is an object that changed). A store that answers
    /// without `ObjectParts` (moto 5.2) gives an empty page: nothing to
    /// check against. Ceph 16's gateway answers 500 (it keeps no checksums
    /// either, so a pull from it never asks).
    public func listParts(of object: RemoteObject, after marker: Int, in job: JobContext) throws(BackendError) -> Exchange<ObjectPartsPage> {
        let address = try ObjectAddress(object.location)
        let store = Store(self, job: job, endpoint: address.endpoint)
        var request = HTTPRequest(method: .get, url: store.endpoint.url(bucket: address.bucket, key: address.key, query: "attributes"))
        for header in S3Answer.partAttributeHeaders(after: marker, maxParts: listPageSize) { request.headers.set(header.name, header.value) }
        var algorithm = S3ChecksumAlgorithm.crc32c
        for digest in object.digests {
            guard case .composite(let composite) = digest else { continue }
            algorithm = Self.compositeAlgorithms.first { $0.value == composite.algorithm }?.key ?? .crc32c
        }
        let operation = "list the parts of \(address.shown)"
        return Exchange(request) { [algorithm] response throws(BackendError) in
            let page: S3ObjectPartsPage
            do throws(S3Failure) {
                page = try S3Answer.objectParts(AWSResponse(response), algorithm: algorithm, after: marker, operation: operation)
            } catch {
                throw store.failure(error, response: response, bucket: address.bucket)
            }
            return ObjectPartsPage(
                parts: page.parts.map { ObjectPartsPage.Part(number: $0.number, size: $0.size, checksum: $0.checksum) },
                next: page.nextMarker, validator: page.etag.map { .etag($0.quoted) })
        }
    }

    // MARK: Signing

    /// Signature V4 over every header, the engine's extra ones included (S3
    /// refuses unsigned `x-amz-*` headers), with the credentials current now.
    public func sign(_ request: inout HTTPRequest, in job: JobContext) {
        Store(self, job: job, endpoint: nil).signer.sign(&request)
    }

    // MARK: Failures

    /// What an answer to a `rangeRequest` or `wholeObjectRequest` of
    /// `object` that the engine does not read itself (not a `206`, a `200`
    /// or a `412`) means, in S3's words: its error code read from the body
    /// (`SlowDown` and `InternalError` retryable; `AccessDenied`,
    /// `InvalidObjectState`, `RequestTimeTooSkewed` not), temporary
    /// credentials S3 calls expired fetched again and the request made
    /// retryable, a bucket in another region named.
    ///
    /// Not yet called by the engine: `DownloadSource` has no hook for it
    /// (the engine reads a range's answer by HTTP status alone).
    public func failure(_ response: HTTPResponse, of object: RemoteObject, in job: JobContext) -> BackendError {
        let address = ObjectAddress(stored: object.location)
        let store = Store(self, job: job, endpoint: address?.endpoint)
        let operation = "fetch \(address?.shown ?? object.location)"
        return store.failure(S3Failure(response, operation: operation), response: response, bucket: address?.bucket ?? "")
    }

    // MARK: Helpers

    /// Where new jobs read from and the region they sign for: as given, else
    /// the configuration's region (else us-east-1) and AWS's endpoint in it.
    var resolvedEndpoint: (endpoint: S3Endpoint, region: String) {
        S3Endpoint.resolved(endpoint, region: region, configuration: configuration)
    }

    /// `GetObject` of `object`, conditional on its validator.
    private func getRequest(_ object: RemoteObject, in job: JobContext) -> HTTPRequest {
        guard let address = ObjectAddress(stored: object.location) else {
            // Not a location this source wrote (a record edited by hand): a host
            // that never resolves (RFC 2606) fails the request on this machine,
            // rather than sending it to whatever bucket a guess would name.
            return HTTPRequest(method: .get, url: "https://unreadable-s3-location.invalid/")
        }
        let store = Store(self, job: job, endpoint: address.endpoint)
        var request = HTTPRequest(method: .get, url: store.endpoint.url(bucket: address.bucket, key: address.key))
        switch object.validator {
        case .etag(let tag)?: request.headers.set("If-Match", tag)
        // S3 answers 412 to this too when the object changed since.
        case .lastModified(let date)?: request.headers.set("If-Unmodified-Since", date)
        case nil: break
        }
        return request
    }

    /// `s3://BUCKET[/KEY]` (without ` at ENDPOINT`), and whether it names a
    /// prefix: a bucket alone, or a trailing `/`.
    static func parse(_ location: String) throws(BackendError) -> (location: S3Location, isPrefix: Bool) {
        let trimmed = location.trimmingSpacesAndTabs()
        guard trimmed.prefix(5).lowercased() == "s3://" else {
            throw .rejected("the s3 source pulls from s3://BUCKET/KEY or s3://BUCKET/PREFIX/, not '\(trimmed.prefix(200))'")
        }
        let parsed = try S3Location(parsing: trimmed)
        return (parsed, parsed.prefix.isEmpty || trimmed.hasSuffix("/"))
    }

    /// `key` less the listing's `prefix`, as a '/'-separated path below the
    /// destination; `.rejected` when it cannot be one (see `listObjects`).
    static func relativePath(ofKey key: String, under prefix: String, listing operation: String) throws(BackendError) -> String {
        func refuse(_ why: String) -> BackendError {
            // Quoted and escaped: a key may hold newlines, and a message is one line.
            let shown = String(reflecting: String(key.prefix(300)))
            return .rejected(
                "\(operation): the key \(shown) \(why), so it cannot be a file below the destination; pull it alone by its own location")
        }
        guard key.hasPrefix(prefix) else { throw refuse("is not under the prefix listed") }
        let path = key.dropFirst(prefix.count)
        if path.isEmpty { throw refuse("is the prefix itself") }
        for component in path.split(separator: "/", omittingEmptySubsequences: false) {
            switch component {
            case "": throw refuse("has an empty path component ('//', or a '/' at an end)")
            case ".", "..": throw refuse("has a '\(component)' path component")
            default: if component.utf8.contains(0) { throw refuse("holds a NUL character") }
            }
        }
        return String(path)
    }

    /// The digests S3 vouches for about the whole object in `headers` (see `digests(in:)`).
    static func digests(in headers: HTTPHeaders) -> [ObjectDigest] {
        var found: [ObjectDigest] = []
        for checksum in S3ObjectChecksum.checksums(in: headers) {
            switch (checksum.kind, checksum.algorithm) {
            case (.fullObject, .crc32c): found.append(.crc32c(UInt32(truncatingIfNeeded: checksum.crc ?? 0)))
            case (.fullObject, .crc32): found.append(.crc32(UInt32(truncatingIfNeeded: checksum.crc ?? 0)))
            case (.fullObject, .crc64nvme): found.append(.crc64nvme(checksum.crc ?? 0))
            case (.fullObject, .sha256): found.append(.sha256(checksum.digest))
            case (.fullObject, .sha1): continue  // a whole file's SHA-1 is not worth a read of it
            case (.composite(let parts), let algorithm):
                guard let kind = Self.compositeAlgorithms[algorithm] else { continue }
                found.append(.composite(CompositeChecksum(algorithm: kind, digest: checksum.digest, partCount: parts)))
            }
        }
        if let md5 = etagMD5(in: headers) { found.append(.md5(md5)) }
        return found
    }

    private static let compositeAlgorithms: [S3ChecksumAlgorithm: CompositeChecksum.Algorithm] = [
        .crc32: .crc32, .crc32c: .crc32c, .sha1: .sha1, .sha256: .sha256,
    ]

    /// The MD5 an ETag is, when S3 says it is one: 32 hexadecimal digits (an
    /// object stored in one part; a multipart one's ends in `-N`) and no
    /// encryption whose ETags are something else (SSE-KMS, DSSE-KMS, SSE-C).
    static func etagMD5(in headers: HTTPHeaders) -> [UInt8]? {
        guard let etag = headers["ETag"].map(S3ETag.init), etag.unquoted.utf8.count == 32, let bytes = Hex.bytes(etag.unquoted) else {
            return nil
        }
        let encryption = headers["x-amz-server-side-encryption"]?.trimmingSpacesAndTabs().lowercased() ?? ""
        if encryption.hasPrefix("aws:kms") || headers.contains("x-amz-server-side-encryption-customer-algorithm") { return nil }
        return bytes
    }

    /// What every request of a job needs: where to send and how to sign.
    /// Made for every request (a source keeps no state between them), so it
    /// only reads.
    private struct Store: Sendable {
        let endpoint: S3Endpoint
        let region: String
        /// Signs with the credentials current at each request.
        let signer: S3RequestSigner

        /// The endpoint a job keeps: its handles' (none unless the engine
        /// stores the `s3` backend's), else the one a location names
        /// (` at ENDPOINT`), else this source's. An endpoint named in a
        /// location is read with this source's addressing when it is this
        /// source's, else path-style, which every S3 store takes.
        init(_ source: S3DownloadSource, job: JobContext, endpoint named: String?) {
            let handles = job.handles
            let defaults = source.resolvedEndpoint
            let base = handles[S3Backend.endpointKey] ?? named ?? defaults.endpoint.base
            let addressing =
                handles[S3Backend.addressingKey].flatMap(S3Endpoint.Addressing.init(rawValue:))
                ?? (base.lowercased() == defaults.endpoint.base.lowercased() ? defaults.endpoint.addressing : .path)
            endpoint = S3Endpoint(base: base, addressing: addressing)
            region = handles[S3Backend.regionKey] ?? defaults.region
            signer = S3RequestSigner(source.configuration.credentialProvider, region: region, endpoint: endpoint, now: source.now)
        }

        /// A classified failure, reviewed against the credentials that
        /// signed (expired temporary ones are fetched again), worded as the
        /// `s3` backend words it; and what S3 says only in headers: the
        /// region a bucket is in, and a refusal that a HEAD answer has no
        /// body to explain.
        func failure(_ failure: S3Failure, response: HTTPResponse, bucket: String) -> BackendError {
            let failure = signer.reviewed(failure)
            if !failure.isRetryable, let other = response.headers["x-amz-bucket-region"]?.trimmingSpacesAndTabs(),
                !other.isEmpty, other != region
            {
                return .rejected("\(failure.operation): bucket '\(bucket)' is in region \(other), not \(region); pull with --region \(other)")
            }
            if failure.status == 403, failure.code == nil {
                return .rejected(
                    "\(failure.operation): S3 refused the credentials from \(signer.credentials.source) (HTTP 403; without s3:ListBucket on the bucket, S3 answers so for a missing object too)"
                )
            }
            return S3Backend.failure(failure, bucket: bucket, endpoint: endpoint, signer: signer)
        }
    }

    /// One object's location, `s3://BUCKET/KEY[ at ENDPOINT]`, read
    /// verbatim: the key is everything after the bucket's slash, so a listed
    /// key that `S3Location` would trim or refuse (a leading or doubled
    /// `/`, spaces at an end, `?`, `#`) names the same object when it comes back.
    struct ObjectAddress: Hashable {
        var bucket: String
        var key: String
        /// The endpoint the location names; nil for this source's.
        var endpoint: String?

        /// An object's location, as `describeObject(at:)` takes it.
        ///
        /// - Throws: `.rejected` for a location that is not `s3://BUCKET/KEY`,
        ///   or that names the objects under a prefix.
        init(_ location: String) throws(BackendError) {
            let (bare, endpoint) = S3Backend.splitTarget(location)
            guard bare.prefix(5).lowercased() == "s3://" else {
                throw .rejected("the s3 source pulls from s3://BUCKET/KEY or s3://BUCKET/PREFIX/, not '\(bare.prefix(200))'")
            }
            let rest = bare.dropFirst(5)
            let slash = rest.firstIndex(of: "/") ?? rest.endIndex
            bucket = String(rest[..<slash])
            try S3Location.check(bucket: bucket)
            key = slash == rest.endIndex ? "" : String(rest[rest.index(after: slash)...])
            self.endpoint = endpoint
            if key.isEmpty || key.hasSuffix("/") {
                throw .rejected("\(bare.prefix(300)) names the objects under a prefix, not one object")
            }
        }

        /// A location this source wrote (`RemoteObject.location`), read as
        /// `init(_:)` reads it; nil for one it did not write.
        init?(stored location: String) {
            guard let address = try? ObjectAddress(location) else { return nil }
            self = address
        }

        /// The object `key` of `bucket` at `endpoint` (nil: this source's).
        /// A key that would read as ending in ` at http…` names
        /// `defaultEndpoint` explicitly, so the location reads back whole.
        init(bucket: String, key: String, endpoint: String?, defaultEndpoint: String? = nil) {
            self.bucket = bucket
            self.key = key
            self.endpoint = endpoint
            if endpoint == nil, let defaultEndpoint, S3Backend.splitTarget(shown).endpoint != nil { self.endpoint = defaultEndpoint }
        }

        /// `s3://BUCKET/KEY`, for messages.
        var shown: String { "s3://\(bucket)/\(key)" }

        /// `s3://BUCKET/KEY[ at ENDPOINT]`, as `RemoteObject.location` keeps it.
        var location: String { endpoint.map { "\(shown) at \($0)" } ?? shown }
    }
}
