import XferWire
import FoundationEssentials
import Hummingbird
import Logging
import NIOCore

/// The `sequence` protocol (the YJT write-up): one endpoint, blocks strictly in order.
///
///     POST /upload   multipart/form-data: sequenceNo, blockSize, totFileSize, suffix, token,
///                    upToken, crc (text, in that order or any), then the file part `block`
///       sequenceNo 0, empty block          -> {"code":0,"msg":"ok","data":{"upToken"}}
///       sequenceNo k = next block          -> {"code":0,...,"data":{"nextSequenceNo":k+1}}
///                                             (+ "fileUrl" after the last block)
///       the latest accepted block again    -> the same answer; nothing is written
///       any other sequenceNo               -> {"code":409,...,"data":{"expectedSequenceNo"}}
///       unknown upToken                    -> {"code":401,...}
///
/// Every answer is HTTP 200 except storage failures (HTTP 500, which clients retry). The block
/// part must come last: it is streamed to disk as it arrives, checked against `crc` on the way,
/// and synced before the answer. See Docs/protocols.md for why the replay and 409 rules make a
/// resumed upload exact, and SequenceWire.swift for the wire's shapes.
struct SequenceRoutes: ProtocolRoutes {
    /// Bounds the per-upload CRC list (4 bytes a block) and the log replayed at load.
    static let maximumBlockCount = 1 << 24
    /// Text fields are short (the longest is a credential); a larger one is refused, not buffered.
    static let fieldLimit = 4096

    let environment: RouteEnvironment
    let uploads: any SequenceUploadStore

    static var requiredCapabilities: Set<StorageComposer.Capability> { [.sequences] }

    init?(_ environment: RouteEnvironment) {
        guard let storage = environment.storage.sequences else { return nil }
        self.environment = environment
        uploads = storage.sequenceUploads
    }

    func register<Context: ReceiverRequestContext>(on router: some RouterMethods<Context>) {
        let routes = router.group().add(
            middleware: RefusalMiddleware(form: .envelope, logger: logger) { error in
                // An upload discarded under a request (its completion refused by the application):
                // what a client hears of an upToken that leads nowhere, so that it starts over.
                if case UploadError.deleted? = error as? UploadError { return .sequence(.unknownUpToken, "the upload is gone") }
                return Refusal.unreadableForm(error)
            })
        routes.post("upload") { request, _ in try await self.receive(request) }
    }

    /// The protocol sends the user's credential as its `token` field, so with `--auth-token` that
    /// field is what `receive` checks, not an Authorization header.
    static let carriesItsOwnCredential: @Sendable (Request) -> Bool = { request in
        request.method == .post && request.uri.path == SequenceForm.path
    }

    // MARK: Handling a request

    private func receive(_ request: Request) async throws -> Response {
        guard let boundary = StreamingFormReader<RequestBody>.boundary(contentType: request.headers[.contentType]) else {
            throw Refusal.sequence(.badRequest, "the body must be multipart/form-data with a boundary")
        }
        let form = StreamingFormReader(body: request.body, boundary: boundary)
        let (fields, block) = try await readFields(form)
        if let expected = configuration.authToken,
            !ConstantTime.equal(Array((fields[SequenceForm.token] ?? "").utf8), Array(expected.utf8))
        {
            // HTTP 401, not the protocol's code 401 (which means an unknown upToken and makes clients start over).
            throw Refusal.error(.unauthorized, "a valid token is required")
        }
        let sent = try SequenceRequest(fields: fields)
        let reply =
            sent.sequenceNo == 0
            ? try await open(sent, block: block, form: form)
            : try await accept(sent, form: form, request: request)
        return reply.response()
    }

    /// The text fields, up to the `block` part (whose content is left unread).
    private func readFields(_ form: StreamingFormReader<RequestBody>) async throws -> ([String: String], FormPart) {
        var fields: [String: String] = [:]
        while let part = try await form.nextPart() {
            if part.name == SequenceForm.block { return (fields, part) }
            guard part.filename == nil else {
                throw Refusal.sequence(.badRequest, "unexpected file part '\(part.name.prefix(40))'; only 'block' is a file")
            }
            guard fields[part.name] == nil else { throw Refusal.sequence(.badRequest, "field '\(part.name.prefix(40))' appears twice") }
            fields[part.name] = try await form.readText(limit: Self.fieldLimit)
        }
        throw Refusal.sequence(.badRequest, "the body has no 'block' part (the text fields come first, then the block)")
    }

    /// sequenceNo 0: creates the upload and hands out its upToken.
    private func open(
        _ sent: SequenceRequest, block: FormPart, form: StreamingFormReader<RequestBody>
    ) async throws -> Envelope {
        let path = try RelativePath.parse(block.filename ?? "", field: "the block part's filename") { .sequence(.badRequest, $0) }
        guard (1...configuration.maximumChunkSize).contains(sent.blockSize) else {
            throw Refusal.sequence(.badRequest, "blockSize must be between 1 and \(configuration.maximumChunkSize)")
        }
        guard sent.totFileSize <= configuration.maximumUploadSize else {
            throw Refusal.sequence(
                .badRequest, "totFileSize \(sent.totFileSize) is larger than this receiver accepts (\(configuration.maximumUploadSize) bytes)")
        }
        let blockCount = sent.totFileSize == 0 ? 1 : (sent.totFileSize - 1) / sent.blockSize + 1
        guard blockCount <= Self.maximumBlockCount else {
            throw Refusal.sequence(.badRequest, "more than \(Self.maximumBlockCount) blocks: use a larger blockSize")
        }
        try await checkEmptyBlock(form, sequenceNo: 0, crc: 0)

        try await hooks.preCreate("sequence", path: path.text, size: sent.totFileSize, form: .envelope)
        let (_, upToken) = try await uploads.create(
            path: path, size: sent.totFileSize, blockSize: sent.blockSize, suffix: sent.suffix)
        hooks.created("sequence")
        return Envelope.sequenceAccepted(SequencePayload(upToken: upToken))
    }

    /// sequenceNo k ≥ 1: appends the next block, replays the answer to the latest one, or says
    /// which block the server expects.
    private func accept(
        _ sent: SequenceRequest, form: StreamingFormReader<RequestBody>, request: Request
    ) async throws -> Envelope {
        guard let upload = try await uploads.upload(forToken: sent.upToken) else {
            throw Refusal.sequence(.unknownUpToken, "unknown upToken (never issued, or expired)")
        }
        let meta = upload.upload.meta
        guard sent.blockSize == meta.chunkSize, sent.totFileSize == meta.size, sent.suffix == upload.meta.suffix else {
            throw Refusal.sequence(
                .badRequest,
                "blockSize, totFileSize and suffix must stay those of sequenceNo 0 (\(meta.chunkSize), \(meta.size), '\(upload.meta.suffix)')")
        }
        let sequenceNo = sent.sequenceNo
        let blockCount = upload.blockCount
        guard sequenceNo <= blockCount else {
            throw Refusal.sequence(.badRequest, "sequenceNo \(sequenceNo) is beyond the file's \(blockCount) blocks")
        }
        guard let crc = sent.crc else { throw Refusal.sequence(.badRequest, "crc must be 8 lowercase hex digits") }
        let base = baseURL.links

        return try await upload.exclusively {
            let accepted = await upload.acceptedCount
            if sequenceNo == accepted + 1 {
                try await writeAccepted(sequenceNo, crc: crc, of: upload, form: form)
                let reply = try await answer(sequenceNo, of: upload, base: base)
                // Counted here, not in a replayed answer: the last block accepted once completes it.
                let meta = upload.upload.meta
                if sequenceNo == blockCount {
                    // The application may refuse the file now: then it is gone, and the client told why.
                    try await hooks.finish("sequence", id: meta.uploadId, path: meta.fileName, size: meta.size, form: .envelope) {
                        try await store.delete(id: meta.uploadId)
                    }
                } else {
                    let received = min(sequenceNo * meta.chunkSize, meta.size)
                    hooks.received("sequence", id: meta.uploadId, path: meta.fileName, size: meta.size) { received }
                }
                return reply
            }
            if sequenceNo > accepted + 1 { return Envelope.sequenceOutOfOrder(expected: accepted + 1) }
            // The server holds block k already; with the same crc it is the client's copy of it.
            guard let held = await upload.acceptedCRC(of: sequenceNo), held == crc else {
                throw Refusal.sequence(.conflict, "block \(sequenceNo) was accepted with another crc; this upload holds other bytes")
            }
            // Only the latest block's answer can have been lost by a client sending one block at a
            // time, so only it is replayed; an older one means the client is behind: move it on.
            if sequenceNo == accepted { return try await answer(sequenceNo, of: upload, base: base) }
            return Envelope.sequenceOutOfOrder(expected: accepted + 1)
        }
    }

    /// The answer an accepted block gets, the first time and on every replay.
    private func answer(_ sequenceNo: Int, of upload: any SequenceUpload, base: String) async throws -> Envelope {
        guard sequenceNo == upload.blockCount else { return Envelope.sequenceAccepted(SequencePayload(nextSequenceNo: sequenceNo + 1)) }
        // Idempotent: assembles on the first call (or after a crash cut it short), then answers
        // the same record forever.
        guard case .completed = try await upload.upload.complete() else {
            throw UploadError.corrupt("every block is recorded but the upload lacks chunks")
        }
        let url = DownloadRoutes.url(base: base, upload: upload.upload)
        return Envelope.sequenceAccepted(SequencePayload(nextSequenceNo: sequenceNo + 1, fileUrl: url))
    }

    /// Streams block `sequenceNo` to its place in the data file and records it accepted, both
    /// durable. Refused when the block is not what its fields say, or not the body's last part;
    /// nothing is recorded then.
    private func writeAccepted(
        _ sequenceNo: Int, crc: UInt32, of upload: any SequenceUpload, form: StreamingFormReader<RequestBody>
    ) async throws {
        let meta = upload.upload.meta
        // A zero-byte file is one empty block: there is nothing to write, only to check.
        guard meta.size > 0 else {
            try await checkEmptyBlock(form, sequenceNo: sequenceNo, crc: crc)
            return try await upload.recordAccepted(sequenceNo, crc: crc)
        }
        let length = meta.byteRange(ofChunk: sequenceNo).count
        do {
            try await upload.writeAccepted(sequenceNo, crc: crc, body: form.content(length: length), trailer: { try await form.finish() })
        } catch let failure as BodyWriter.Failure {
            throw Refusal.block(failure, sequenceNo: sequenceNo, expectedLength: length)
        }
    }

    /// Reads a block that must be empty (there is nothing to store), and the end of the body.
    private func checkEmptyBlock(_ form: StreamingFormReader<RequestBody>, sequenceNo: Int, crc: UInt32) async throws {
        let writer = BodyWriter(limit: 0, exactLength: true, check: .crc32(crc), sync: .byCaller, counted: { _ in })
        do {
            _ = try await writer.write(form.content, to: nil, at: 0, trailer: { try await form.finish() })
        } catch let failure as BodyWriter.Failure {
            throw Refusal.block(failure, sequenceNo: sequenceNo, expectedLength: 0)
        }
    }
}
