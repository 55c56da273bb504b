import Xfer
import XferWire

/// The `sequence` protocol (from the YJT write-up): `sequenceNo` 0 obtains
/// an `upToken`, then blocks go one at a time with increasing `sequenceNo`,
/// and the last block's answer carries the file's URL. See Docs/protocols.md.
///
/// Mapping onto the engine: `openFile` is sequenceNo 0, chunk index i is
/// block i + 1, and the protocol has no finish call: the answer that
/// completes the file hands its URL to the engine with the last
/// acknowledgement, so both are committed together. After a crash the
/// client simply sends its first unacknowledged block; the server either
/// replays its answer (the block was accepted) or names the block it wants
/// with a 409, which becomes `.resync`.
public struct SequenceBackend: UploadBackend, FileOpening, ChunkOrdering {
    public let name = "sequence"

    public let traits = BackendTraits(
        defaultChunkSize: 1 << 20,
        defaultConcurrency: 4,
        // The protocol's `token` form field carries it.
        authentication: .byBackend,
        emptyFileHasOneChunk: true,
        smallRequestConcurrency: BackendTraits.wideSmallRequests,
        // Blocks go strictly one after another within a file, each waiting a round trip (and
        // the server's sync) for its answer: a large file's blocks must be long enough to keep
        // the link busy through it. At 50 ms and 200 Mbit/s, 1 MiB blocks reached under half
        // the link and 32 MiB ones 0.88 (Docs/benchmarks.md, "Far from the server"). A kill
        // sends again at most the block in flight.
        largeFileChunkSize: 64 << 20)

    /// The handle the server's sequenceNo-0 answer provides. Secret: it is
    /// what lets anyone write into the upload.
    public static let upToken = HandleKey("upToken", secret: true)

    public init() {}

    /// Blocks go one after another: the server accepts only the next sequenceNo.
    public func chunkOrder(for job: JobContext) -> ChunkOrder { .sequentialWithinFile }

    public func openFile(_ file: FileContext, in job: JobContext) -> Step<OpenedFile> {
        let request = makeRequest(job, file, fields: SequenceFields(sequenceNo: 0, upToken: "", crc: ""), block: nil)
        let operation = "open the upload of \(file.name)"
        return .send(request) { response throws(BackendError) in
            let answer = try SequenceAnswer(response, for: operation)
            guard answer.code == SequenceCode.ok.rawValue else { throw answer.refusal(operation) }
            guard let token = answer.payload.upToken else {
                throw .transient("\(operation): the answer has no upToken")
            }
            return OpenedFile(handles: [Self.upToken: token])
        }
    }

    public func uploadChunk(_ chunk: ChunkPayload, of file: FileContext, in job: JobContext) throws(BackendError) -> Exchange<ChunkOutcome> {
        let sequenceNo = chunk.number
        let blockCount = file.chunkCount
        let fields = SequenceFields(
            sequenceNo: sequenceNo, upToken: try file.handles.require(Self.upToken), crc: Self.crcField(chunk.crc32))
        let request = makeRequest(job, file, fields: fields, block: chunk)
        let operation = "send block \(sequenceNo)/\(blockCount) of \(file.name)"
        return Exchange(request) { response throws(BackendError) in
            let answer = try SequenceAnswer(response, for: operation)
            switch answer.code {
            case SequenceCode.ok.rawValue:
                return try Self.stored(answer, sequenceNo: sequenceNo, blockCount: blockCount, operation: operation)
            case SequenceCode.outOfOrder.rawValue:
                return try Self.resync(answer, sequenceNo: sequenceNo, blockCount: blockCount, operation: operation)
            default:
                throw answer.refusal(operation)
            }
        }
    }

    /// `crc` as the protocol writes it: zlib's CRC-32 as 8 lowercase hex digits.
    public static func crcField(_ crc: UInt32) -> String {
        SequenceCRC.hex(crc)
    }

    // MARK: Reading block answers

    private static func stored(
        _ answer: SequenceAnswer, sequenceNo: Int, blockCount: Int, operation: String
    ) throws(BackendError) -> ChunkOutcome {
        let isLast = sequenceNo == blockCount
        if let url = answer.payload.fileUrl {
            guard isLast else {
                throw .mismatch("\(operation): the server sent the file's URL before its last block (\(blockCount))")
            }
            return .stored(fileURL: url)
        }
        // Without the URL the file could never complete: refuse rather than
        // mark the last block done, so a re-run replays it and asks again.
        guard !isLast else { throw .rejected("\(operation): the server accepted the last block but sent no fileUrl") }
        guard let next = answer.payload.nextSequenceNo else {
            throw .transient("\(operation): the answer has no nextSequenceNo")
        }
        guard next == sequenceNo + 1 else {
            throw .mismatch("\(operation): the server accepted it but asks for block \(next) next, not \(sequenceNo + 1)")
        }
        return .stored()
    }

    private static func resync(
        _ answer: SequenceAnswer, sequenceNo: Int, blockCount: Int, operation: String
    ) throws(BackendError) -> ChunkOutcome {
        guard let expected = answer.payload.expectedSequenceNo else {
            throw .transient("\(operation): the server refused the block as out of order but sent no expectedSequenceNo")
        }
        guard (1...blockCount + 1).contains(expected) else {
            throw .mismatch("\(operation): the server expects block \(expected), but the file has \(blockCount)")
        }
        // "Expecting" the block after the last means the server holds the
        // whole file; its URL is the last block's answer, so replay that block.
        let next = min(expected, blockCount)
        // Resending the very block the server just refused would loop forever.
        guard next != sequenceNo else {
            throw .mismatch("\(operation): the server refused block \(sequenceNo) as out of order yet expects that very block")
        }
        return .resync(next: next - 1)
    }

    // MARK: Building requests

    /// The protocol's form; sequenceNo 0 carries an empty block.
    private func makeRequest(_ job: JobContext, _ file: FileContext, fields: SequenceFields, block: ChunkPayload?) -> HTTPRequest {
        var form = MultipartForm()
        form.addField(SequenceForm.sequenceNo, String(fields.sequenceNo))
        form.addField(SequenceForm.blockSize, String(file.chunkSize))
        form.addField(SequenceForm.totFileSize, String(file.size))
        form.addField(SequenceForm.suffix, file.fileExtension)
        form.addField(SequenceForm.token, job.credentials.token ?? "")
        form.addField(SequenceForm.upToken, fields.upToken)
        form.addField(SequenceForm.crc, fields.crc)
        if let block {
            form.addFile(SequenceForm.block, filename: file.relativePath, contentType: "application/octet-stream", chunk: block)
        } else {
            form.addFile(SequenceForm.block, filename: file.relativePath, contentType: "application/octet-stream", bytes: [])
        }
        var request = HTTPRequest(method: .post, url: job.url(SequenceForm.path), body: form.body)
        request.headers.set("Content-Type", form.contentType)
        return request
    }
}

/// The per-request text fields that are not properties of the file.
private struct SequenceFields {
    var sequenceNo: Int
    var upToken: String
    var crc: String
}

/// A block's answer, read by the wire's `Envelope` (HTTP 200 with `{"code","msg","data"}`).
struct SequenceAnswer {
    let code: Int
    let message: String
    let payload: SequencePayload

    init(_ response: HTTPResponse, for operation: String) throws(BackendError) {
        try response.require(200, for: operation)
        let json = try response.json(for: operation)
        let envelope: Envelope
        do {
            envelope = try Envelope(parsing: json)
        } catch {
            throw .transient("\(operation): \(error)")
        }
        code = envelope.code
        message = envelope.msg
        payload = SequencePayload(data: envelope.data)
    }

    /// The error for any code the step does not accept.
    func refusal(_ operation: String) -> BackendError {
        let detail = message.isEmpty ? "" : " (\(Self.oneLine(message)))"
        switch code {
        case SequenceCode.unknownUpToken.rawValue:
            return .rejected("\(operation): the server does not know this upload's upToken (expired?)", remedy: .startOver)
        case SequenceCode.conflict.rawValue:
            return .mismatch("\(operation): the server holds different bytes for this block\(detail)", remedy: .startOver)
        case SequenceCode.damaged.rawValue:
            return .transient("\(operation): the block arrived damaged\(detail)")
        case 500...:
            return .transient("\(operation): server error \(code)\(detail)")
        default:
            return .rejected("\(operation): the server refused it with code \(code)\(detail)")
        }
    }

    /// Server messages end up in a one-line error: keep them short and flat.
    private static func oneLine(_ text: String) -> String {
        let flat = String(text.unicodeScalars.map { $0.value < 0x20 || $0.value == 0x7f ? " " : Character($0) })
        return flat.count > 200 ? String(flat.prefix(200)) + "…" : flat
    }
}
