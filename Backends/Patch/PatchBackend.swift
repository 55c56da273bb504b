import Xfer
import XferPrimitives
import XferWire

/// The `patch` protocol (from the JJUploadFile write-up): create an upload,
/// PATCH raw octet-stream chunks with `Content-Range` and a digest, ask which
/// chunks the server holds on resume, then complete and check the server's
/// digest of the assembled file. See Docs/protocols.md.
///
/// The digest is negotiated (RFC 9530): a server that answers the create
/// with `Want-Content-Digest` gets `Content-Digest` in the best algorithm
/// both sides have (CRC-32C first: hardware speed), and its completion's
/// CRC-32C is checked against one combined from the chunks' CRCs, with no
/// second pass over the file. A server that asks for nothing gets
/// `Content-MD5`, and its completion's SHA-256 is checked, as always.
///
/// A job with a file of one chunk (or none) first asks the server with
/// `OPTIONS /uploads` whether it takes a file whole with its creation
/// (`PatchWholeCreation`, as `xfer serve` does): then each such file is one
/// request, where create, chunk and complete are three. A server that does
/// not say so (no such answer, another `Accept-Post`) gets the three.
public struct PatchBackend: UploadBackend, JobStarting, FileOpening, FileReconciling, SHA256Reporting, UploadCancelling, FileUploadCancelling {
    public let name = "patch"

    public let traits = BackendTraits(
        defaultChunkSize: 1 << 20,
        defaultConcurrency: 5,
        authentication: .authorizationHeader,
        emptyFileHasOneChunk: false,
        // From 64 MiB: 8 MiB chunks, the size that took a GiB at curl's pace where 1 MiB ones
        // reached 0.71-0.89x (Docs/benchmarks.md, "Defaults"). The server may still choose.
        smallRequestConcurrency: BackendTraits.wideSmallRequests,
        largeFileChunkSize: 8 << 20)

    /// The id `POST /uploads` hands out, in every later URL.
    public static let uploadID = HandleKey("uploadId")
    /// The `Content-Digest` algorithm agreed for the file; absent: `Content-MD5`.
    public static let digestAlgorithm = HandleKey("digest")
    /// The job's: the largest file the server takes whole with its creation (its answer to
    /// `OPTIONS /uploads`); absent: it takes none, every file is created with JSON.
    static let wholeLimitKey = HandleKey("patch.whole")
    /// The job's: the `Content-Digest` algorithm the server wants (`Want-Content-Digest` of
    /// that answer), for the files sent whole (a file created with JSON agrees its own).
    static let jobDigestKey = HandleKey("patch.digest")
    /// A file created whole: the URL its creation answered (its upload is complete).
    static let completedURLKey = HandleKey("patch.url")

    public init() {}

    // MARK: Discovery

    /// `OPTIONS /uploads`, for a job with a file that could go whole (of one chunk or none):
    /// whether the server takes such a file with its creation, how large, and the digest it
    /// wants. A job of larger files only asks nothing.
    public func startJob(_ job: JobContext) -> Step<JobStart> {
        guard job.files.contains(where: { $0.chunkCount <= 1 }) else { return .skip }
        let request = HTTPRequest(method: .options, url: job.url("/uploads"))
        return .send(request) { response throws(BackendError) in
            let operation = "ask the server how it creates uploads"
            // Refused credentials or a failing server say nothing of the protocol: the job stops
            // or waits here. Any other answer from a server without discovery means JSON.
            if [401, 403].contains(response.status) || response.status >= 500 || response.isTransientStatus {
                throw response.unexpectedStatus(operation)
            }
            guard response.isSuccess, PatchWholeCreation.accepts(response.headers["Accept-Post"]) else { return JobStart() }
            let limits = IETFField.limits(response.headers[IETFField.uploadLimit])
            // The most one request may bring; a server that names none has promised nothing.
            guard let limit = limits["max-append-size"] else { return JobStart() }
            var handles: ServerHandles = [Self.wholeLimitKey: String(limit)]
            if let wanted = response.headers["Want-Content-Digest"],
                let algorithm = ContentDigest.preferred(in: wanted).flatMap({ ChunkDigest(rawValue: $0.rawValue) })
            {
                handles.set(Self.jobDigestKey, algorithm.rawValue)
            }
            return JobStart(handles: handles)
        }
    }

    /// Whether `file` goes whole with its creation: of one chunk or none, within the server's
    /// limit, and not already created with JSON by an earlier run.
    static func goesWhole(_ file: FileContext, in job: JobContext) -> Bool {
        guard file.chunkCount <= 1, file.handles[uploadID] == nil,
            let limit = job.handles[wholeLimitKey].flatMap({ Int64($0) })
        else { return false }
        return file.size <= limit
    }

    /// The digest of `file`'s chunks: the one its creation agreed, or for a file sent whole the job's.
    static func digest(of file: FileContext, in job: JobContext) -> ChunkDigest? {
        let agreed = file.handles[uploadID] == nil ? job.handles[jobDigestKey] : file.handles[digestAlgorithm]
        return agreed.flatMap(ChunkDigest.init(rawValue:))
    }

    // MARK: Files

    /// A file that goes whole is created by its one chunk (`uploadChunk`), or, empty, here: one
    /// request either way. Any other is created with JSON, its chunks sent after.
    public func openFile(_ file: FileContext, in job: JobContext) -> Step<OpenedFile> {
        if Self.goesWhole(file, in: job) {
            guard file.chunkCount == 0 else { return .skip }
            return .send(Self.wholeCreation(of: file, body: .empty, digest: nil, in: job)) { response throws(BackendError) in
                let created = try Self.createdWhole(response, file, crc32c: nil, for: "create the upload of \(file.name)")
                return OpenedFile(handles: [Self.completedURLKey: created.completed.url])
            }
        }
        let create = PatchCreateRequest(fileName: file.relativePath, size: Int(file.size), chunkSize: file.chunkSize)
        var request = HTTPRequest(method: .post, url: job.url("/uploads"), body: .json(create.json))
        request.headers.set("Content-Type", "application/json")
        return .send(request) { response throws(BackendError) in
            let operation = "create the upload of \(file.name)"
            try response.require(201, 200, for: operation)
            let json = try response.json(for: operation)
            let created: PatchCreated
            do {
                created = try PatchCreated(parsing: json)
            } catch {
                throw .transient("\(operation): \(error)")
            }
            let id = created.uploadId
            var handles: ServerHandles = [Self.uploadID: id]
            if let wanted = response.headers["Want-Content-Digest"],
                let algorithm = ContentDigest.preferred(in: wanted).flatMap({ ChunkDigest(rawValue: $0.rawValue) })
            {
                handles.set(Self.digestAlgorithm, algorithm.rawValue)
            }
            return OpenedFile(handles: handles, chunkSize: created.chunkSize)
        }
    }

    /// The chunk indexes of the runs `name` (`[[first, last], ...]`, 1-based chunk numbers) in a
    /// JSON answer; nil when the answer has no such member. Runs reaching outside the file are
    /// cut to it, so an answer cannot make the client hold more than its own file's chunks.
    static func chunkIndexes(
        inRunsNamed name: String, of file: FileContext, in response: HTTPResponse, for operation: String
    ) throws(BackendError) -> [Int]? {
        let json = try response.json(for: operation)
        do {
            return try PatchChunkList.indexes(inRunsNamed: name, of: json, chunkCount: file.chunkCount)
        } catch {
            throw .transient("\(operation): \(error)")
        }
    }

    public func reconcileFile(_ file: FileContext, in job: JobContext) throws(BackendError) -> Step<Reconciliation<Never>> {
        // A file sent whole has no upload until its one request is answered: it is sent again.
        if Self.goesWhole(file, in: job) { return .skip }
        let request = HTTPRequest(method: .get, url: try uploadURL(job, file))
        let operation = "ask what the server holds of \(file.name)"
        return .send(request) { response throws(BackendError) in
            if response.status == 404 { throw .uploadUnknown("\(operation): the server no longer knows the upload") }
            try response.require(200, for: operation)
            // One reading of the answer (XferWire's JSON) for the chunk size and the runs.
            let json = try response.json(for: operation)
            if let size = json["chunkSize"]?.intValue, size != file.chunkSize {
                throw .rejected("the server's chunk size for \(file.name) is \(size), the job's is \(file.chunkSize)", remedy: .startOver)
            }
            // Runs first (`receivedRanges`, what servers send since the list was bounded: its
            // `received` may stop short), the plain list from servers that predate them.
            let runs: [Int]?
            do {
                runs = try PatchChunkList.indexes(inRunsNamed: "receivedRanges", of: json, chunkCount: file.chunkCount)
            } catch {
                throw .transient("\(operation): \(error)")
            }
            if let runs { return .serverHas(chunks: Set(runs)) }
            guard let listed = json["received"]?.arrayValue else {
                throw .transient("\(operation): the answer lists neither receivedRanges nor received")
            }
            var received: [Int] = []
            received.reserveCapacity(listed.count)
            for number in listed {
                guard let number = number.intValue else { throw .transient("\(operation): received must hold chunk numbers") }
                received.append(number)
            }
            return .serverHas(chunks: Set(file.chunkIndexes(fromNumbers: received)))
        }
    }

    public func uploadChunk(_ chunk: ChunkPayload, of file: FileContext, in job: JobContext) throws(BackendError) -> Exchange<ChunkOutcome> {
        if Self.goesWhole(file, in: job) { return createWhole(chunk, of: file, in: job) }
        var request = HTTPRequest(
            method: .patch, url: try uploadURL(job, file) + "/chunks/\(chunk.number)", body: RequestBody(chunk: chunk))
        request.headers.set("Content-Type", "application/octet-stream")
        request.headers.set("Content-Range", ContentRange(offset: chunk.offset, count: Int64(chunk.count), size: file.size).header)
        let digest = file.handles[Self.digestAlgorithm].flatMap(ChunkDigest.init(rawValue:))
        Self.setDigest(&request, digest, chunk)
        // Kept with the chunk, so the completion's CRC-32C is checked
        // against the chunks' combined, without reading the file again.
        let receipt = digest == .crc32c ? ChunkDigest.receipt(crc32c: chunk.crc32c, length: chunk.count) : nil
        let operation = "send chunk \(chunk.number) of \(file.name)"
        let stored = ChunkOutcome.stored(receipt: receipt)
        return Exchange(request) { response throws(BackendError) in
            if response.status == 404 { throw .uploadUnknown("\(operation): the server no longer knows the upload") }
            // The bytes arrived other than they left: send them again.
            if response.status == 422 { throw .transient("\(operation): the server received other bytes than were sent (422)") }
            try response.require(204, 200, for: operation)
            return stored
        }
    }

    /// The file's one request: `POST /uploads?fileName=…` with all its bytes and their digest.
    /// Its answer completes the file, checked against the chunk's CRC-32C when the server
    /// reports one. Sent again after a kill (it created nothing the client knows of).
    private func createWhole(_ chunk: ChunkPayload, of file: FileContext, in job: JobContext) -> Exchange<ChunkOutcome> {
        let digest = Self.digest(of: file, in: job)
        let request = Self.wholeCreation(of: file, body: RequestBody(chunk: chunk), digest: (digest, chunk), in: job)
        let operation = "send \(file.name)"
        let crc = digest == .crc32c ? chunk.crc32c : nil
        return Exchange(request) { response throws(BackendError) in
            let created = try Self.createdWhole(response, file, crc32c: crc, for: operation)
            return .stored(fileURL: created.completed.url)
        }
    }

    private static func wholeCreation(
        of file: FileContext, body: RequestBody, digest: (ChunkDigest?, ChunkPayload)?, in job: JobContext
    ) -> HTTPRequest {
        var request = HTTPRequest(method: .post, url: job.url(PatchWholeCreation.path(fileName: file.relativePath)), body: body)
        request.headers.set("Content-Type", PatchWholeCreation.mediaType)
        if let (algorithm, chunk) = digest { setDigest(&request, algorithm, chunk) }
        return request
    }

    /// A chunk's digest header: `Content-Digest` in the algorithm agreed, else `Content-MD5`.
    private static func setDigest(_ request: inout HTTPRequest, _ digest: ChunkDigest?, _ chunk: ChunkPayload) {
        switch digest {
        case .crc32c?: request.headers.set("Content-Digest", ContentDigest.crc32c.header(for: chunk))
        case .sha256?: request.headers.set("Content-Digest", ContentDigest.sha256.header(for: chunk))
        case nil: request.headers.set(ContentMD5.name, ContentMD5.header(chunk.md5))
        }
    }

    /// The answer to a creation that brought the file: 201 and where it is, its CRC-32C (when
    /// reported) the one `crc32c` the bytes sent make.
    private static func createdWhole(
        _ response: HTTPResponse, _ file: FileContext, crc32c: UInt32?, for operation: String
    ) throws(BackendError) -> PatchCreatedWhole {
        // The bytes arrived other than they left: send them again.
        if response.status == 422 { throw .transient("\(operation): the server received other bytes than were sent (422)") }
        try response.require(201, 200, for: operation)
        let created: PatchCreatedWhole
        do {
            created = try PatchCreatedWhole(parsing: try response.json(for: operation))
        } catch {
            throw .transient("\(operation): \(error)")
        }
        if let crc32c, let reported = created.completed.crc32cValue, reported != crc32c {
            throw .mismatch(
                "the server's CRC-32C of \(file.name) is \(CRC32.hex(reported)), the bytes sent make \(CRC32.hex(crc32c)); the server holds different bytes",
                remedy: .startOver)
        }
        return created
    }

    /// The engine hashes a file for the server's SHA-256 only when no
    /// CRC-32C was agreed for it.
    public func reportsSHA256(of file: FileContext, in job: JobContext) -> Bool {
        Self.digest(of: file, in: job) != .crc32c
    }

    public func finishFile(_ file: FileContext, in job: JobContext) throws(BackendError) -> Step<FileFinish> {
        // An empty file created whole: its creation completed it.
        if let url = file.handles[Self.completedURLKey] { return .answer(.completed(url: url)) }
        let request = HTTPRequest(method: .post, url: try uploadURL(job, file) + "/complete")
        let operation = "complete the upload of \(file.name)"
        let combined = file.handles[Self.digestAlgorithm] == ChunkDigest.crc32c.rawValue ? ChunkDigest.combinedCRC32C(file) : nil
        return .send(request) { response throws(BackendError) in
            switch response.status {
            case 404:
                throw .uploadUnknown("\(operation): the server no longer knows the upload")
            case 409:
                // The runs when the server sends them (the list, and the runs too, may name only
                // the first missing chunks: completing again after sending them learns the rest).
                if let runs = try Self.chunkIndexes(inRunsNamed: "missingRanges", of: file, in: response, for: operation) {
                    return .missing(runs)
                }
                let json = try response.json(for: operation)
                let numbers = json["missing"]?.arrayValue?.compactMap(\.intValue) ?? []
                return .missing(file.chunkIndexes(fromNumbers: numbers))
            default:
                try response.require(200, for: operation)
                let json = try response.json(for: operation)
                let completed: PatchCompleted
                do {
                    completed = try PatchCompleted(parsing: json)
                } catch {
                    throw .transient("\(operation): \(error)")
                }
                let url = completed.url
                if let combined, let reported = completed.crc32c {
                    guard reported.lowercased() == CRC32.hex(combined) else {
                        throw .mismatch(
                            "the server's CRC-32C of \(file.name) is \(reported.prefix(8)), the chunks sent make \(CRC32.hex(combined)); the server holds different bytes",
                            remedy: .startOver)
                    }
                    return .completed(url: url)
                }
                // No CRC to combine (chunks a resume found on the server carry
                // none): the engine checks what the server reports by reading the
                // file (the CRC-32C at ISA-L's speed when there is one).
                let reportedCRC = completed.crc32cValue
                if let reportedCRC, combined == nil, file.handles[Self.digestAlgorithm] == ChunkDigest.crc32c.rawValue {
                    return .completed(url: url, crc32c: reportedCRC)
                }
                return .completed(url: url, sha256: completed.sha256)
            }
        }
    }

    public func cancelRequests(for job: JobContext) -> [HTTPRequest] {
        job.files.flatMap { cancelRequests(forFile: $0, in: job) }
    }

    /// `DELETE` of the file's upload.
    public func cancelRequests(forFile file: FileContext, in job: JobContext) -> [HTTPRequest] {
        (try? uploadURL(job, file)).map { [HTTPRequest(method: .delete, url: $0)] } ?? []
    }

    private func uploadURL(_ job: JobContext, _ file: FileContext) throws(BackendError) -> String {
        job.url("/uploads/\(try file.handles.require(Self.uploadID).percentEncodedPathSegment)")
    }
}

/// The `Content-Digest` algorithm agreed for a file (`ContentDigest`'s
/// names), and what a chunk's receipt keeps of its CRC-32C.
enum ChunkDigest: String, CaseIterable {
    case crc32c = "crc32c"
    case sha256 = "sha-256"

    /// `crc32c=HEX8:LENGTH`.
    static func receipt(crc32c: UInt32, length: Int) -> String {
        "crc32c=\(CRC32.hex(crc32c)):\(length)"
    }

    /// The file's CRC-32C combined from its chunks' receipts, or nil when a
    /// chunk has none (e.g. the server reported holding it on resume).
    static func combinedCRC32C(_ file: FileContext) -> UInt32? {
        var combined: UInt32 = 0
        for chunk in 0..<file.chunkCount {
            guard let receipt = file.receipts[chunk], receipt.hasPrefix("crc32c=") else { return nil }
            let fields = receipt.dropFirst("crc32c=".count).split(separator: ":")
            guard fields.count == 2, let crc = UInt32(fields[0], radix: 16), let length = Int64(fields[1]),
                length == Int64(file.plan.length(of: chunk))
            else { return nil }
            combined = CRC32C.combine(combined, crc, lengthOfSecond: length)
        }
        return combined
    }
}
