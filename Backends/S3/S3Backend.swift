import Crypto
import FoundationEssentials
import Xfer
import XferS3Core
import XferPrimitives

/// S3's multipart upload, as AWS S3 and the S3-compatible stores speak it.
///
/// A file larger than one part is `CreateMultipartUpload` (the UploadId is
/// committed before any part), `UploadPart` for each part with one check
/// the server verifies (`Content-MD5`, or over plain http the signed SHA-256:
/// `S3PartChecksum.auto`; or, when asked, `x-amz-checksum-crc32[c]`), then
/// `CompleteMultipartUpload` listing every part's ETag (and CRC-32). A file of one
/// part or less is one `PutObject`. On resume `ListParts` says which parts S3
/// holds; those of the expected size whose ETag matches what this job
/// recorded (or that this job never heard back about) are not sent again.
/// `xfer cancel` sends `AbortMultipartUpload`. Outside any job,
/// `uploads(under:)` lists the multipart uploads a bucket holds and aborts
/// them (`xfer uploads`). See Docs/protocols.md.
public struct S3Backend: UploadBackend, TargetNormalizing, JobHandleInventing, ChunkSizing, FileOpening, FileReconciling,
    FileFinishing, UploadCancelling, FileUploadCancelling, RequestSigning, StreamUploading
{
    public let name = "s3"

    /// S3 refuses parts below 5 MiB, except the last.
    public static let minimumPartSize = 5 << 20
    /// S3 refuses part numbers above 10,000.
    public static let maximumPartCount = 10_000

    public let traits = BackendTraits(
        defaultChunkSize: 8 << 20,
        // Bodies stream from the file, so memory does not grow with this;
        // a kill sends again at most this many parts.
        defaultConcurrency: 16,
        // Signature V4 carries them (`sign(_:in:)`).
        authentication: .byBackend,
        // An empty file is one empty PutObject.
        emptyFileHasOneChunk: true,
        // A PUT's latency, not the link, bounds a tree of small files: s5cmd
        // keeps 256 going. 64 is the most a job may keep in flight.
        smallRequestConcurrency: BackendTraits.wideSmallRequests)

    let configuration: AWSConfiguration
    private let endpoint: S3Endpoint?
    private let region: String?
    private let partChecksum: S3PartChecksum
    private let objectOptions: S3ObjectOptions
    let now: @Sendable () -> Date
    /// Parts per ListParts page (S3's maximum is 1,000); smaller in tests.
    private let listPageSize: Int
    /// The largest object a sync copies in one request (`ObjectCopying`).
    let copyLimit: Int64
    /// S3's limit for one `CopyObject`.
    public static let maximumSingleCopy: Int64 = 5 << 30

    // Handles: where a job sends (kept, so a resumed job talks to the
    // endpoint and region it started with), and each file's upload.
    static let endpointKey = HandleKey("endpoint")
    static let addressingKey = HandleKey("addressing")
    static let regionKey = HandleKey("region")
    /// The multipart upload's id.
    public static let uploadID = HandleKey("uploadId")
    /// The object's key, fixed when the upload is created.
    public static let objectKey = HandleKey("key")
    /// Job: the name of the one file whose object is the target's key itself
    /// (`xfer push FILE --to s3://B/KEY`); absent, every file is `PREFIX/NAME`.
    static let namedObjectKey = HandleKey("namedObject")
    /// File: the full-object checksum (its algorithm) that the store did not
    /// say it keeps when the upload was created; the file's parts refuse to go.
    static let checksumNotKeptKey = HandleKey("checksumNotKept")

    /// The next question when reconciling a multipart upload: ListParts
    /// from after this part number (0: from the start).
    public struct PartMarker: Sendable, Hashable {
        /// The last part number the previous page held.
        public var after: Int

        /// ListParts from after part `after`.
        public init(after: Int) { self.after = after }
    }

    /// - Parameters:
    ///   - configuration: Credentials to sign with (asked for each request, so
    ///     temporary ones are fetched again before they expire) and a default region.
    ///   - endpoint: Where new jobs send to; nil for AWS in `region`. A job
    ///     keeps the endpoint and region it was created with.
    ///   - region: The signing region for new jobs; nil for the
    ///     configuration's, else us-east-1.
    ///   - partChecksum: The checksum each part of a new job carries. A job
    ///     keeps the one it was created with.
    ///   - listPageSize: Parts asked for per ListParts request.
    ///   - objectOptions: What S3 keeps with each object of a new job
    ///     (Content-Type — by default each file's by its extension, from the
    ///     system's `/etc/mime.types`, else `application/octet-stream` —
    ///     metadata, storage class, ACL, tags, encryption…). A job keeps the
    ///     options it was created with.
    ///   - now: The clock requests are signed with.
    public init(
        configuration: AWSConfiguration, endpoint: S3Endpoint? = nil, region: String? = nil,
        partChecksum: S3PartChecksum = .auto, listPageSize: Int = 1000, objectOptions: S3ObjectOptions = S3ObjectOptions(),
        now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.init(
            configuration: configuration, endpoint: endpoint, region: region, partChecksum: partChecksum, listPageSize: listPageSize,
            objectOptions: objectOptions, singleCopyLimit: Self.maximumSingleCopy, now: now)
    }

    /// The same, with objects above `singleCopyLimit` bytes copied part by
    /// part by a sync (a store with a lower limit; tests).
    public init(
        configuration: AWSConfiguration, endpoint: S3Endpoint? = nil, region: String? = nil,
        partChecksum: S3PartChecksum = .auto, listPageSize: Int = 1000, objectOptions: S3ObjectOptions = S3ObjectOptions(),
        singleCopyLimit: Int64, now: @escaping @Sendable () -> Date = { Date() }
    ) {
        copyLimit = max(1, min(singleCopyLimit, Self.maximumSingleCopy))
        self.configuration = configuration
        self.endpoint = endpoint
        self.region = region
        self.partChecksum = partChecksum
        self.objectOptions = objectOptions
        self.listPageSize = max(1, min(1000, listPageSize))
        self.now = now
    }

    // MARK: Job setup

    /// `s3://BUCKET/PREFIX`, followed by ` at ENDPOINT` unless the endpoint
    /// is AWS's: the same push to another S3 service is another job.
    /// A trailing `/` after a prefix is kept: it says the prefix is a folder
    /// even for one file (see `namedObjectKey`), so `s3://B/K` and `s3://B/K/`
    /// are different pushes.
    public func normalizedTarget(_ target: String) throws(BackendError) -> String {
        let (location, storedEndpoint) = Self.splitTarget(target)
        let parsed = try S3Location(parsing: location)
        let normalized = parsed.normalized + (!parsed.prefix.isEmpty && Self.endsWithSlash(location) ? "/" : "")
        if let storedEndpoint { return "\(normalized) at \(storedEndpoint)" }
        guard let endpoint else { return normalized }
        return "\(normalized) at \(endpoint.base)"
    }

    /// A stored target's location and endpoint (see `normalizedTarget`).
    /// Read for every request: the endpoint was checked when the job was
    /// made, so here " at " only has to be followed by an http(s) URL.
    static func splitTarget(_ target: String) -> (location: String, endpoint: String?) {
        guard let separator = target.lastRange(of: " at ") else { return (target, nil) }
        let endpoint = target[separator.upperBound...]
        guard endpoint.hasPrefix("http://") || endpoint.hasPrefix("https://"), !endpoint.contains(" ") else {
            return (target, nil)
        }
        return (String(target[..<separator.lowerBound]), String(endpoint))
    }

    public func makeJobHandles(for job: JobContext) -> ServerHandles {
        let (endpoint, region) = resolvedEndpoint
        var handles: ServerHandles = [
            Self.endpointKey: endpoint.base, Self.addressingKey: endpoint.addressing.rawValue, Self.regionKey: region,
        ]
        // Absent means auto. Jobs created before the choice existed sent MD5
        // and may go on with auto: parts differ only in the check they carry.
        if partChecksum != .auto { handles.set(S3PartChecksum.handleKey, partChecksum.rawValue) }
        handles.merge(objectOptions.handles)
        // As `aws s3 cp FILE s3://B/KEY`: one file named, and a target whose
        // key does not end in "/", names the object. Kept with the job, so its
        // later runs name it the same; jobs made before this rule lack the
        // handle and keep the prefix naming they were created with.
        let location = Self.splitTarget(job.target).location
        if let name = job.namedFile, !Self.endsWithSlash(location),
            let parsed = try? S3Location(parsing: location), !parsed.prefix.isEmpty
        {
            handles.set(Self.namedObjectKey, name)
        }
        return handles
    }

    static func endsWithSlash(_ location: String) -> Bool {
        location.trimmingSpacesAndTabs().hasSuffix("/")
    }

    /// Where new jobs send to and the region they sign for: as given, else
    /// the configuration's region (else us-east-1) and AWS's endpoint in it.
    var resolvedEndpoint: (endpoint: S3Endpoint, region: String) {
        S3Endpoint.resolved(endpoint, region: region, configuration: configuration)
    }

    /// The part size asked for, raised to S3's 5 MiB minimum, and to whole
    /// MiB above size / 10,000 so no file needs more than 10,000 parts.
    public func chunkSize(forFileOfSize size: Int64, requested: Int) -> Int {
        var part = max(requested, Self.minimumPartSize)
        let needed = (size + Int64(Self.maximumPartCount) - 1) / Int64(Self.maximumPartCount)
        if Int64(part) < needed {
            let mebibyte: Int64 = 1 << 20
            part = Int((needed + mebibyte - 1) / mebibyte * mebibyte)
        }
        return part
    }

    // MARK: Steps

    public func openFile(_ file: FileContext, in job: JobContext) -> Step<OpenedFile> {
        guard isMultipart(file) else { return .skip }  // one PutObject
        return createMultipartUpload(file, in: job)
    }

    /// `CreateMultipartUpload`: the UploadId and the key it is for.
    private func createMultipartUpload(_ file: FileContext, in job: JobContext) -> Step<OpenedFile> {
        let session = Session(self, job)
        let key = session.key(file)
        var request = HTTPRequest(method: .post, url: session.endpoint.url(bucket: session.location.bucket, key: key, query: "uploads"))
        session.describeObject(file, in: &request)
        for header in session.partChecksum.creationHeaders { request.headers.set(header.name, header.value) }
        let operation = "start the multipart upload of \(file.name)"
        let fullObject = session.partChecksum.fullObject
        return .send(request) { response throws(BackendError) in
            do throws(S3Failure) {
                let id = try S3Answer.uploadID(AWSResponse(response), operation: operation)
                var handles: ServerHandles = [Self.uploadID: id, Self.objectKey: key]
                // A store that keeps full-object checksums says so (AWS, moto); one that ignores
                // the headers (Ceph 16) does not: the upload is kept, so `xfer cancel` drops it,
                // and its parts refuse to go (`uploadPart`).
                if let fullObject, response.headers["x-amz-checksum-type"]?.trimmingSpacesAndTabs().uppercased() != "FULL_OBJECT" {
                    handles.set(Self.checksumNotKeptKey, fullObject.algorithm.rawValue)
                }
                return OpenedFile(handles: handles)
            } catch {
                throw session.failure(error)
            }
        }
    }

    public func uploadChunk(_ chunk: ChunkPayload, of file: FileContext, in job: JobContext) throws(BackendError) -> Exchange<ChunkOutcome> {
        let session = Session(self, job)
        if isMultipart(file) {
            return try uploadPart(chunk, of: file, session: session, operation: "send part \(chunk.number)/\(file.chunkCount) of \(file.name)")
        }
        var request = HTTPRequest(method: .put, url: session.objectURL(file), body: RequestBody(chunk: chunk))
        session.describeObject(file, in: &request)
        Self.setCondition(file.writeCondition, on: &request)
        return exchange(request, chunk, session: session, operation: "send \(file.name)", objectURL: session.s3URL(file))
    }

    /// `UploadPart` of `chunk` into the file's multipart upload.
    private func uploadPart(
        _ chunk: ChunkPayload, of file: FileContext, session: Session, operation: String
    ) throws(BackendError) -> Exchange<ChunkOutcome> {
        let id = try file.handles.require(Self.uploadID)
        if let algorithm = file.handles[Self.checksumNotKeptKey] {
            throw .rejected(
                "\(session.s3URL(file)): the store did not say it keeps a full-object \(algorithm) checksum (its answer to CreateMultipartUpload has no x-amz-checksum-type: FULL_OBJECT; Ceph 16's gateway ignores it), so no part was sent; push to it without --checksum-algorithm (xfer cancel drops the upload started)"
            )
        }
        let query = "partNumber=\(chunk.number)&uploadId=\(SignatureV4.uriEncode(id, keepSlash: false))"
        let request = HTTPRequest(method: .put, url: session.objectURL(file, query: query), body: RequestBody(chunk: chunk))
        return exchange(request, chunk, session: session, operation: operation, objectURL: nil)
    }

    /// A part's or an object's PUT with its checksum, and the reading of its answer.
    private func exchange(
        _ request: HTTPRequest, _ chunk: ChunkPayload, session: Session, operation: String, objectURL: String?
    ) -> Exchange<ChunkOutcome> {
        var request = request
        for header in session.partChecksum.headers(for: chunk, payloadSigned: session.signer.signsPayload) {
            request.headers.set(header.name, header.value)
        }
        let crcHeader = session.partChecksum.crcHeader
        let crc = crcHeader.flatMap { request.headers[$0] }
        // A PutObject's answer repeats a checksum the store keeps; without it the object has none.
        let mustEcho = objectURL != nil && session.partChecksum.fullObject != nil
        return Exchange(request) { response throws(BackendError) in
            if objectURL != nil, response.status == 412 { throw Self.conflict(operation) }
            let etag: S3ETag
            do throws(S3Failure) {
                etag = try S3Answer.storedETag(AWSResponse(response), operation: operation, crcHeader: crcHeader, sentCRC: crc)
            } catch {
                throw session.failure(error)
            }
            if mustEcho, let crcHeader, response.headers[crcHeader] == nil {
                throw .rejected(
                    "\(objectURL ?? operation): the store wrote the object but did not say it keeps its full-object checksum (its answer has no \(crcHeader); Ceph 16's gateway ignores it); push to it without --checksum-algorithm"
                )
            }
            var stored = ChunkOutcome.Stored(receipt: S3PartReceipt(etag: etag.quoted, crc: crc).stored, fileURL: objectURL)
            if objectURL != nil { stored.version = etag.unquoted }
            return .stored(stored)
        }
    }

    /// Asks first whether the object is already whole when every part was
    /// acknowledged (the previous run may have died after completing it),
    /// then lists the parts, a page at a time.
    /// (A file of one part has no upload to ask about: a resume sends its
    /// PutObject again, which was in flight.)
    public func reconcileFile(_ file: FileContext, in job: JobContext) throws(BackendError) -> Step<Reconciliation<PartMarker>> {
        guard isMultipart(file) else { return .skip }
        let session = Session(self, job)
        guard let expected = Self.multipartETag(file) else { return try listParts(file, session, after: 0) }
        let request = HTTPRequest(method: .head, url: session.objectURL(file))
        let url = session.s3URL(file)
        return .send(request) { response throws(BackendError) in
            if response.status == 200, let etag = response.headers["ETag"], Self.sameETag(etag, expected) {
                return .complete(url: url)
            }
            if response.status >= 500 || response.status == 429 { throw session.failure(response, "ask whether \(file.name) is complete") }
            // Missing (404, or 403 without ListBucket) or another object: ask for the parts.
            return .serverHasMore(chunks: [], next: PartMarker(after: 0))
        }
    }

    public func continueReconciling(
        _ file: FileContext, in job: JobContext, from marker: PartMarker
    ) throws(BackendError) -> Step<Reconciliation<PartMarker>> {
        try listParts(file, Session(self, job), after: marker.after)
    }

    public func finishFile(_ file: FileContext, in job: JobContext) throws(BackendError) -> Step<FileFinish> {
        guard isMultipart(file) else { return .skip }  // the PutObject's answer completed it
        let session = Session(self, job)
        let operation = "complete the upload of \(file.name)"
        let receipts = (0..<file.chunkCount).map { file.receipts[$0].map(S3PartReceipt.init(stored:)) }
        let unreceipted = (0..<file.chunkCount).filter {
            guard let receipt = receipts[$0] else { return true }
            return session.partChecksum.sendsCRC && receipt.crc == nil
        }
        // A part acknowledged without its ETag (or CRC-32) cannot be listed
        // in the completion: send those again (their answers carry it).
        guard unreceipted.isEmpty else { return .answer(.missing(unreceipted)) }
        return try complete(
            file, parts: receipts.compactMap { $0 }, lengths: (0..<file.chunkCount).map { Int64(file.plan.length(of: $0)) }, session: session,
            operation: operation)
    }

    /// `CompleteMultipartUpload` of `parts` (part 1 first) of these `lengths`.
    /// Under a full-object checksum it carries the whole object's CRC,
    /// combined from the parts' (`x-amz-checksum-*` with
    /// `x-amz-checksum-type: FULL_OBJECT`), which S3 checks against what it
    /// assembled; an answer naming another is refused here too.
    private func complete(
        _ file: FileContext, parts: [S3PartReceipt], lengths: [Int64], session: Session, operation: String
    ) throws(BackendError) -> Step<FileFinish> {
        let id = try file.handles.require(Self.uploadID)
        let query = "uploadId=\(SignatureV4.uriEncode(id, keepSlash: false))"
        let element = session.partChecksum.crcElement
        let body = S3Answer.completionBody(
            parts.enumerated().map { chunk, receipt in
                (chunk + 1, receipt.etag, receipt.crc.flatMap { crc in element.map { ($0, crc) } })
            })
        var request = HTTPRequest(method: .post, url: session.objectURL(file, query: query), body: RequestBody(body))
        request.headers.set("Content-Type", "application/xml")
        // AWS honours a sync's condition here (Ceph 16's gateway ignores it).
        Self.setCondition(file.writeCondition, on: &request)
        let whole: String?
        if let fullObject = session.partChecksum.fullObject {
            guard parts.count == lengths.count, let combined = fullObject.combined(zip(parts, lengths).map { ($0.crc ?? "", $1) }) else {
                throw .rejected("\(operation): a part's \(fullObject.algorithm.rawValue) is missing or unreadable")
            }
            whole = combined
            request.headers.set(fullObject.algorithm.header, combined)
            request.headers.set("x-amz-checksum-type", "FULL_OBJECT")
        } else {
            whole = nil
        }
        let url = session.s3URL(file)
        let expectedETag = Self.multipartETag(file)
        return .send(request) { response throws(BackendError) in
            if response.status == 412 { throw Self.conflict(operation) }
            // AWS repeats the object's checksum in its answer: another than ours is another object.
            if let whole, let element, response.status == 200, let kept = S3XML(response.body)?.fields[element], !kept.isEmpty, kept != whole {
                throw .rejected("\(operation): S3 reports the object's \(element) as \(kept.prefix(24)), not the \(whole) of the parts sent")
            }
            let outcome: S3CompleteOutcome
            do throws(S3Failure) {
                outcome = try S3Answer.completion(AWSResponse(response), operation: operation)
            } catch {
                // S3 lacks a part this job recorded (or holds another one): send them all again.
                if error.code == "InvalidPart", !error.isErrorInSuccess { return .missing(Array(0..<parts.count)) }
                throw session.failure(error)
            }
            switch outcome {
            case .completed(let etag):
                // Ceph's gateway (16) answers an empty ETag: the one S3 computes from
                // the parts' MD5s stands in (a later sync that finds another one asks).
                var completion = FileFinish.Completion(url: url)
                completion.version = etag?.unquoted ?? expectedETag
                return .completed(completion)
            case .uploadUnknown:
                // An earlier attempt may have completed it and lost its answer: let
                // reconcileFile's HEAD look for the object before anything is sent again.
                throw .outOfSync("\(operation): S3 no longer knows the upload; asking whether the object is already whole")
            }
        }
    }

    // MARK: Streams

    /// Parts of a stream double in size every 1,000 parts from the chunk
    /// size (at least 6 MiB): 10,000 parts then hold at least 5.8 TiB (S3's
    /// largest object is 5 TiB), and no part passes S3's 5 GiB. The engine
    /// holds two parts in memory: 2 × 8 MiB for the first 7.8 GiB of a
    /// stream at the default size, 2 × 4 GiB at its longest.
    public func streamPartSize(ofPart number: Int, requested: Int) -> Int {
        let base = max(requested, Self.minimumStreamPartSize)
        let doublings = min(max(0, number - 1) / Self.partsPerStreamTier, 9)
        return min(base << doublings, Self.maximumPartSize)
    }

    /// The smallest first part of a stream: below it, 10,000 growing parts
    /// would not reach 5 TiB.
    public static let minimumStreamPartSize = 6 << 20
    /// Parts of one size before a stream's parts double.
    public static let partsPerStreamTier = 1000
    /// S3 refuses parts above 5 GiB.
    public static let maximumPartSize = 5 << 30

    public func openStream(_ file: FileContext, in job: JobContext) -> Step<OpenedFile> {
        createMultipartUpload(file, in: job)
    }

    public func uploadStreamPart(_ part: ChunkPayload, of file: FileContext, in job: JobContext) throws(BackendError)
        -> Exchange<ChunkOutcome>
    {
        guard part.number <= Self.maximumPartCount else {
            throw .rejected("the stream is longer than S3 takes in \(Self.maximumPartCount) parts (\(file.size) bytes read so far)")
        }
        return try uploadPart(part, of: file, session: Session(self, job), operation: "send part \(part.number) of \(file.name)")
    }

    public func finishStream(_ file: FileContext, receipts: [String?], in job: JobContext) throws(BackendError) -> Step<FileFinish> {
        let session = Session(self, job)
        let operation = "complete the upload of \(file.name)"
        var parts: [S3PartReceipt] = []
        for (index, receipt) in receipts.enumerated() {
            guard let receipt = receipt.map(S3PartReceipt.init(stored:)) else {
                throw .rejected("\(operation): part \(index + 1) was acknowledged without its ETag")
            }
            parts.append(receipt)
        }
        return try complete(file, parts: parts, lengths: streamPartLengths(file, parts: parts.count), session: session, operation: operation)
    }

    /// The lengths of a stream's `parts` parts: each its planned size but
    /// the last, which holds the rest (`streamPartSize(ofPart:requested:)`).
    private func streamPartLengths(_ file: FileContext, parts: Int) -> [Int64] {
        var lengths: [Int64] = []
        var left = file.size
        for number in 1...max(1, parts) {
            // As the engine cuts them (`StreamRunner`).
            let planned = Int64(min(TransferOptions.maximumChunkSize, streamPartSize(ofPart: number, requested: file.chunkSize)))
            let length = number == parts ? left : min(planned, left)
            lengths.append(length)
            left -= length
        }
        return lengths
    }

    public func cancelRequests(for job: JobContext) -> [HTTPRequest] {
        job.files.flatMap { cancelRequests(forFile: $0, in: job) }
    }

    /// `AbortMultipartUpload` of the file's upload.
    public func cancelRequests(forFile file: FileContext, in job: JobContext) -> [HTTPRequest] {
        guard let id = file.handles[Self.uploadID] else { return [] }
        return [
            HTTPRequest(
                method: .delete, url: Session(self, job).objectURL(file, query: "uploadId=\(SignatureV4.uriEncode(id, keepSlash: false))"))
        ]
    }

    // MARK: Signing

    /// Signature V4 over every header, the engine's extra ones included
    /// (S3 refuses unsigned `x-amz-*` headers).
    public func sign(_ request: inout HTTPRequest, in job: JobContext) {
        Session(self, job).sign(&request)
    }

    // MARK: Helpers

    private func isMultipart(_ file: FileContext) -> Bool { file.chunkCount > 1 }

    private func listParts(
        _ file: FileContext, _ session: Session, after marker: Int
    ) throws(BackendError) -> Step<Reconciliation<PartMarker>> {
        let id = try file.handles.require(Self.uploadID)
        var query = "max-parts=\(listPageSize)&uploadId=\(SignatureV4.uriEncode(id, keepSlash: false))"
        if marker > 0 { query += "&part-number-marker=\(marker)" }
        let request = HTTPRequest(method: .get, url: session.objectURL(file, query: query))
        let operation = "list the parts S3 holds of \(file.name)"
        return .send(request) { response throws(BackendError) in
            // Ceph's gateway (16) answers NoSuchKey, not NoSuchUpload, to ListParts of an
            // upload it no longer knows (aborted, expired or completed). ListParts reads
            // no object, so either code means the upload is gone.
            if let code = AWSResponse(response).s3Error?.code, code == "NoSuchUpload" || code == "NoSuchKey" {
                throw .uploadUnknown("\(operation): S3 no longer knows the upload")
            }
            guard response.status == 200 else { throw session.failure(response, operation) }
            // AWS names the root ListPartsResult; moto ListPartsResponse.
            guard let document = S3XML(response.body, recordNames: ["Part"]), document.root.hasPrefix("ListParts") else {
                throw .transient("\(operation): the answer is not a ListPartsResult")
            }
            var chunks = Set<Int>()
            var receipts: [Int: String] = [:]
            for part in document.records {
                guard let number = part["PartNumber"].flatMap(Int.init), (1...file.chunkCount).contains(number),
                    let etag = part["ETag"], let size = part["Size"].flatMap(Int.init)
                else { continue }
                let chunk = number - 1
                // Another size means another cut of the file; another ETag
                // (or CRC-32) than recorded, other bytes. Either way: send it again.
                guard size == file.plan.length(of: chunk) else { continue }
                let recorded = file.receipts[chunk].map(S3PartReceipt.init(stored:))
                let listedCRC = session.partChecksum.crcElement.flatMap { part[$0] }.flatMap { $0.isEmpty ? nil : $0 }
                if let recorded, !Self.sameETag(recorded.etag, etag) { continue }
                if let listedCRC, let recordedCRC = recorded?.crc, listedCRC != recordedCRC { continue }
                let receipt = S3PartReceipt(etag: etag, crc: listedCRC ?? recorded?.crc)
                // The completion must name each part's CRC-32; a part whose
                // CRC-32 neither S3 nor this job knows is sent again.
                if session.partChecksum.sendsCRC, receipt.crc == nil { continue }
                chunks.insert(chunk)
                receipts[chunk] = receipt.stored
            }
            if document.fields["IsTruncated"] == "true", let next = document.fields["NextPartNumberMarker"].flatMap(Int.init),
                next > marker
            {
                return .serverHasMore(chunks: chunks, receipts: receipts, next: PartMarker(after: next))
            }
            return .serverHas(chunks: chunks, receipts: receipts)
        }
    }

    static func sameETag(_ a: String, _ b: String) -> Bool {
        func bare(_ text: String) -> String {
            text.trimming { $0 == "\"" || $0 == " " }.lowercased()
        }
        return bare(a) == bare(b)
    }

    /// The ETag S3 gives an object completed from these parts: the MD5 of
    /// the parts' MD5s, "-", the part count. Nil unless every part's receipt
    /// is a plain MD5 (not so with SSE-KMS, for one).
    static func multipartETag(ofParts etags: [String]) -> String? {
        var digests: [UInt8] = []
        for etag in etags {
            guard let bytes = Hex.bytes(etag.trimming { $0 == "\"" }), bytes.count == 16 else { return nil }
            digests += bytes
        }
        return etags.isEmpty ? nil : Checksums.hex(Array(Insecure.MD5.hash(data: digests))) + "-\(etags.count)"
    }

    static func multipartETag(_ file: FileContext) -> String? {
        guard file.chunkCount > 1, file.receipts.count == file.chunkCount else { return nil }
        var etags: [String] = []
        etags.reserveCapacity(file.chunkCount)
        for chunk in 0..<file.chunkCount {
            guard let receipt = file.receipts[chunk] else { return nil }
            etags.append(S3PartReceipt(stored: receipt).etag)
        }
        return multipartETag(ofParts: etags)
    }

    /// What every request of a job needs: where to send, how to sign, which
    /// bucket and prefix. Built from the job's stored handles, so a resumed
    /// job talks to the endpoint and region it started with.
    struct Session: Sendable {
        let location: S3Location
        let endpoint: S3Endpoint
        /// Signs with the credentials current at each request: temporary
        /// ones are fetched again before they expire.
        let signer: S3RequestSigner
        let partChecksum: S3PartCheck
        /// The job's handles, read for an object's headers only when an object is created.
        let jobHandles: ServerHandles
        let fileCount: Int

        /// Made for every request (a step holds no state between them), so it
        /// only reads: the job's handles, and the defaults when a view has none.
        init(_ backend: S3Backend, _ job: JobContext) {
            let handles = job.handles
            var base = handles[S3Backend.endpointKey]
            var region = handles[S3Backend.regionKey]
            if base == nil || region == nil {
                let defaults = backend.resolvedEndpoint
                base = base ?? defaults.endpoint.base
                region = region ?? defaults.region
            }
            let addressing = handles[S3Backend.addressingKey].flatMap(S3Endpoint.Addressing.init(rawValue:)) ?? .path
            location =
                (try? S3Location(parsing: S3Backend.splitTarget(job.target).location)) ?? S3Location(bucket: "invalid-target", prefix: "")
            endpoint = S3Endpoint(base: base!, addressing: addressing)
            signer = S3RequestSigner(backend.configuration.credentialProvider, region: region!, endpoint: endpoint, now: backend.now)
            partChecksum = S3PartCheck(handles: handles)
            jobHandles = handles
            fileCount = job.files.count
            keepsModificationTimes = job.keepsModificationTimes
        }

        func objectURL(_ file: FileContext, query: String = "") -> String {
            endpoint.url(bucket: location.bucket, key: key(file), query: query)
        }

        /// The headers that make an object what the job's options say: its
        /// Content-Type (chosen, else the file's by its extension), metadata,
        /// storage class, ACL, tags, encryption.
        func describeObject(_ file: FileContext, in request: inout HTTPRequest) {
            // Built here, not with the session: a session is made for every part's request too.
            request.headers.set("Content-Type", S3ObjectOptions.contentType(from: jobHandles) ?? MediaTypes.type(forFileNamed: file.name))
            for header in S3ObjectOptions.headers(from: jobHandles) { request.headers.set(header.name, header.value) }
            if keepsModificationTimes { S3Backend.describeSyncedObject(file, in: &request) }
        }

        /// A sync's job: objects keep their files' times (see `S3Sync.swift`).
        var keepsModificationTimes: Bool

        func s3URL(_ file: FileContext) -> String {
            "s3://\(location.bucket)/\(key(file))"
        }

        /// The key the upload was created for, or the file's: the target's key
        /// itself for the one file a push named (see `namedObjectKey`), else
        /// `PREFIX/RELATIVE PATH`.
        func key(_ file: FileContext) -> String {
            if let key = file.handles[S3Backend.objectKey] { return key }
            // The name alone is not enough: a re-run may find a directory at
            // the path, holding a file of that name (then it is a prefix again).
            if jobHandles[S3Backend.namedObjectKey] == file.relativePath, fileCount <= 1 { return location.prefix }
            return location.key(forFileNamed: file.relativePath)
        }

        func sign(_ request: inout HTTPRequest) { signer.sign(&request) }

        func failure(_ response: HTTPResponse, _ operation: String) -> BackendError {
            S3Backend.failure(response, operation, bucket: location.bucket, endpoint: endpoint, signer: signer)
        }

        /// A failure the shared reading of an answer (`S3Answer`) classified.
        func failure(_ failure: S3Failure) -> BackendError {
            S3Backend.failure(signer.reviewed(failure), bucket: location.bucket, endpoint: endpoint, signer: signer)
        }
    }

    /// The error an unwanted answer means: S3's classification
    /// (`S3Failure`, shared with `S3ObjectRequests`), reviewed against the
    /// credentials that signed, then worded for a job: the engine acts on
    /// `uploadUnknown`, and a user on a message naming the bucket or the
    /// credentials' source. `signer`: whose credentials signed the request
    /// (fetched again when S3 says temporary ones expired).
    static func failure(
        _ response: HTTPResponse, _ operation: String, bucket: String, endpoint: S3Endpoint, signer: S3RequestSigner,
        known: (code: String, message: String)? = nil, okStatus: Bool = false
    ) -> BackendError {
        failure(
            signer.reviewed(S3Failure(AWSResponse(response), operation: operation, known: known, isErrorInSuccess: okStatus)), bucket: bucket,
            endpoint: endpoint, signer: signer)
    }

    /// The job's wording of a classified failure (see above).
    static func failure(_ failure: S3Failure, bucket: String, endpoint: S3Endpoint, signer: S3RequestSigner) -> BackendError {
        let operation = failure.operation
        let credentials = signer.credentials
        switch failure.code {
        case "NoSuchUpload":
            return .uploadUnknown("\(operation): S3 no longer knows the upload")
        case "ExpiredToken" where failure.isRetryable, "TokenRefreshRequired" where failure.isRetryable:
            // The next attempt waits for new ones (`S3RequestSigner.reviewed`).
            let failed = credentials.refreshFailure.map { "; the last attempt to fetch new ones failed: \($0)" } ?? ""
            return .transient("\(operation): S3 says the credentials from \(credentials.source) expired; fetching new ones\(failed)")
        case "RequestTimeTooSkewed":
            return .rejected("\(operation): this machine's clock is more than 15 minutes off S3's; set the clock right and resume")
        case "NoSuchBucket":
            return .rejected("\(operation): bucket '\(bucket)' does not exist at \(endpoint.base)")
        case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken", "TokenRefreshRequired":
            return .rejected("\(operation): S3 refused the credentials from \(credentials.source)\(failure.detail)")
        default:
            return failure.backendError
        }
    }
}
