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
public struct PatchBackend: UploadBackend, FileOpening, FileReconciling, SHA256Reporting, UploadCancelling, FileUploadCancelling {
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

    public init() {}

    public func openFile(_ file: FileContext, in job: JobContext) -> Step<OpenedFile> {
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
        var request = HTTPRequest(
            method: .patch, url: try uploadURL(job, file) + "/chunks/\(chunk.number)", body: RequestBody(chunk: chunk))
        request.headers.set("Content-Type", "application/octet-stream")
        request.headers.set("Content-Range", ContentRange(offset: chunk.offset, count: Int64(chunk.count), size: file.size).header)
        let digest = file.handles[Self.digestAlgorithm].flatMap(ChunkDigest.init(rawValue:))
        var receipt: String?
        switch digest {
        case .crc32c?:
            let crc = chunk.crc32c
            request.headers.set("Content-Digest", ContentDigest.crc32c.header(for: chunk))
            // Kept with the chunk, so the completion's CRC-32C is checked
            // against the chunks' combined, without reading the file again.
            receipt = ChunkDigest.receipt(crc32c: crc, length: chunk.count)
        case .sha256?:
            request.headers.set("Content-Digest", ContentDigest.sha256.header(for: chunk))
        case nil:
            request.headers.set(ContentMD5.name, ContentMD5.header(chunk.md5))
        }
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

    /// The engine hashes a file for the server's SHA-256 only when no
    /// CRC-32C was agreed for it.
    public func reportsSHA256(of file: FileContext, in job: JobContext) -> Bool {
        file.handles[Self.digestAlgorithm] != ChunkDigest.crc32c.rawValue
    }

    public func finishFile(_ file: FileContext, in job: JobContext) throws(BackendError) -> Step<FileFinish> {
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
