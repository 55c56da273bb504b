import XferPrimitives
import Foundation
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
/// resumed upload exact.
struct SequenceRoutes: Sendable {
    /// Bounds the per-upload CRC list (4 bytes a block) and the log replayed at load.
    static let maximumBlockCount = 1 << 24
    /// Text fields are short (the longest is a credential); a larger one is refused, not buffered.
    static let fieldLimit = 4096

    let uploads: SequenceUploads
    let baseURL: BaseURL
    let configuration: ReceiverConfiguration
    let logger: Logger

    init(store: UploadStore, baseURL: BaseURL, configuration: ReceiverConfiguration, logger: Logger) {
        uploads = SequenceUploads(store: store, logger: logger)
        self.baseURL = baseURL
        self.configuration = configuration
        self.logger = logger
    }

    func register(on router: Router<BasicRequestContext>) {
        router.post("upload") { request, _ in await self.receive(request) }
    }

    /// The protocol sends the user's credential as its `token` field, so with `--auth-token` that
    /// field is what `receive` checks, not an Authorization header.
    static let carriesItsOwnCredential: @Sendable (Request) -> Bool = { request in
        request.method == .post && request.uri.path == "/upload"
    }

    // MARK: Handling a request

    private func receive(_ request: Request) async -> Response {
        guard let boundary = StreamingFormReader<RequestBody>.boundary(contentType: request.headers[.contentType]) else {
            return SequenceReply.refusal(.badRequest, "the body must be multipart/form-data with a boundary").response
        }
        let form = StreamingFormReader(body: request.body, boundary: boundary)
        do {
            let (fields, block) = try await readFields(form)
            if let expected = configuration.authToken,
                !AuthMiddleware<BasicRequestContext>.equal(Array((fields["token"] ?? "").utf8), Array(expected.utf8))
            {
                // HTTP 401, not the protocol's code 401 (which means an unknown upToken and makes clients start over).
                return JSONResponse.error(.unauthorized, "a valid token is required")
            }
            let sent = try SequenceRequest(fields: fields)
            let reply =
                sent.sequenceNo == 0
                ? try await open(sent, block: block, form: form)
                : try await accept(sent, form: form, request: request)
            return reply.response
        } catch let refusal as SequenceRefusal {
            return SequenceReply.refusal(.badRequest, refusal.message).response
        } catch let failure as FormFailure {
            return SequenceReply.refusal(.badRequest, failure.description).response
        } catch {
            return storageFailure(error, logger: logger, answer: SequenceReply.refusal(.storageFailure, "storage error").response)
        }
    }

    /// The text fields, up to the `block` part (whose content is left unread).
    private func readFields(_ form: StreamingFormReader<RequestBody>) async throws -> ([String: String], FormPart) {
        var fields: [String: String] = [:]
        while let part = try await form.nextPart() {
            if part.name == "block" { return (fields, part) }
            guard part.filename == nil else { throw SequenceRefusal("unexpected file part '\(part.name.prefix(40))'; only 'block' is a file") }
            guard fields[part.name] == nil else { throw SequenceRefusal("field '\(part.name.prefix(40))' appears twice") }
            fields[part.name] = try await form.readText(limit: Self.fieldLimit)
        }
        throw SequenceRefusal("the body has no 'block' part (the text fields come first, then the block)")
    }

    /// sequenceNo 0: creates the upload and hands out its upToken.
    private func open(_ sent: SequenceRequest, block: FormPart, form: StreamingFormReader<RequestBody>) async throws -> SequenceReply {
        let path: RelativePath
        switch RelativePath.parse(block.filename ?? "") {
        case .success(let parsed): path = parsed
        case .failure(let problem): throw SequenceRefusal(problem.message("the block part's filename"))
        }
        guard (1...configuration.maximumChunkSize).contains(sent.blockSize) else {
            throw SequenceRefusal("blockSize must be between 1 and \(configuration.maximumChunkSize)")
        }
        guard sent.totFileSize <= configuration.maximumUploadSize else {
            throw SequenceRefusal("totFileSize \(sent.totFileSize) is larger than this receiver accepts (\(configuration.maximumUploadSize) bytes)")
        }
        let blockCount = sent.totFileSize == 0 ? 1 : (sent.totFileSize - 1) / sent.blockSize + 1
        guard blockCount <= Self.maximumBlockCount else {
            throw SequenceRefusal("more than \(Self.maximumBlockCount) blocks: use a larger blockSize")
        }
        let empty = VerifiedBlock(form: form, expectedLength: 0, expectedCRC: 0)
        if let refusal = try await drain(empty, sequenceNo: 0) { return refusal }

        let (_, upToken) = try await uploads.create(
            path: path, size: sent.totFileSize, blockSize: sent.blockSize, suffix: sent.suffix)
        return .accepted(SequenceReply.Payload(upToken: upToken))
    }

    /// sequenceNo k ≥ 1: appends the next block, replays the answer to the latest one, or says
    /// which block the server expects.
    private func accept(_ sent: SequenceRequest, form: StreamingFormReader<RequestBody>, request: Request) async throws -> SequenceReply {
        guard let upload = try await uploads.upload(forToken: sent.upToken) else {
            return .refusal(.unknownUpToken, "unknown upToken (never issued, or expired)")
        }
        let meta = upload.upload.meta
        guard sent.blockSize == meta.chunkSize, sent.totFileSize == meta.size, sent.suffix == upload.meta.suffix else {
            throw SequenceRefusal("blockSize, totFileSize and suffix must stay those of sequenceNo 0 (\(meta.chunkSize), \(meta.size), '\(upload.meta.suffix)')")
        }
        let sequenceNo = sent.sequenceNo
        let blockCount = upload.blockCount
        guard sequenceNo <= blockCount else { throw SequenceRefusal("sequenceNo \(sequenceNo) is beyond the file's \(blockCount) blocks") }
        guard let crc = sent.crc else { throw SequenceRefusal("crc must be 8 lowercase hex digits") }
        let base = baseURL.resolve(for: request)

        return try await upload.exclusively {
            let accepted = await upload.acceptedCount
            if sequenceNo == accepted + 1 {
                if let refusal = try await write(sequenceNo, crc: crc, of: upload, form: form) { return refusal }
                try await upload.recordAccepted(sequenceNo, crc: crc)
                return try await answer(sequenceNo, of: upload, base: base)
            }
            if sequenceNo > accepted + 1 { return .outOfOrder(expected: accepted + 1) }
            // The server holds block k already; with the same crc it is the client's copy of it.
            guard let held = await upload.acceptedCRC(of: sequenceNo), held == crc else {
                return .refusal(.conflict, "block \(sequenceNo) was accepted with another crc; this upload holds other bytes")
            }
            // Only the latest block's answer can have been lost by a client sending one block at a
            // time, so only it is replayed; an older one means the client is behind: move it on.
            if sequenceNo == accepted { return try await answer(sequenceNo, of: upload, base: base) }
            return .outOfOrder(expected: accepted + 1)
        }
    }

    /// The answer an accepted block gets, the first time and on every replay.
    private func answer(_ sequenceNo: Int, of upload: SequenceUpload, base: String) async throws -> SequenceReply {
        guard sequenceNo == upload.blockCount else { return .accepted(SequenceReply.Payload(nextSequenceNo: sequenceNo + 1)) }
        // Idempotent: assembles on the first call (or after a crash cut it short), then answers
        // the same record forever.
        guard case .completed = try await upload.upload.complete() else {
            throw UploadError.corrupt("every block is recorded but the upload lacks chunks")
        }
        let url = DownloadRoutes.url(base: base, upload: upload.upload)
        return .accepted(SequenceReply.Payload(nextSequenceNo: sequenceNo + 1, fileUrl: url))
    }

    /// Streams block `sequenceNo` to its place in the data file and syncs it. A refusal when the
    /// block is not what its fields say; nothing is recorded then.
    private func write(
        _ sequenceNo: Int, crc: UInt32, of upload: SequenceUpload, form: StreamingFormReader<RequestBody>
    ) async throws -> SequenceReply? {
        let meta = upload.upload.meta
        // A zero-byte file is one empty block: there is nothing to write, only to check.
        guard meta.size > 0 else {
            return try await drain(VerifiedBlock(form: form, expectedLength: 0, expectedCRC: crc), sequenceNo: sequenceNo)
        }
        let block = VerifiedBlock(form: form, expectedLength: meta.byteRange(ofChunk: sequenceNo).count, expectedCRC: crc)
        do {
            try await upload.upload.writeChunk(sequenceNo, body: block, expectedMD5: nil)
            return nil
        } catch {
            if let failure = block.failure { return failure.reply(sequenceNo: sequenceNo, expectedLength: block.expectedLength) }
            switch error as? UploadError {
            case .bodyTooLarge?, .bodyTooShort?:
                return .refusal(.badRequest, "block \(sequenceNo) must have \(block.expectedLength) bytes")
            case .bodyInterrupted?:
                return .refusal(.badRequest, FormFailure.interrupted.description)
            default:
                throw error
            }
        }
    }

    /// Reads a block that must be empty (there is nothing to store).
    private func drain(_ block: VerifiedBlock<RequestBody>, sequenceNo: Int) async throws -> SequenceReply? {
        do {
            while try await block.next() != nil {}
            return nil
        } catch {
            guard let failure = block.failure else { throw error }
            return failure.reply(sequenceNo: sequenceNo, expectedLength: block.expectedLength)
        }
    }
}

// MARK: - Requests and answers

/// A request the protocol cannot act on (answered with code 400).
struct SequenceRefusal: Error {
    let message: String
    init(_ message: String) { self.message = message }
}

/// The text fields of one request, checked for shape (not yet against the upload).
struct SequenceRequest: Equatable {
    var sequenceNo: Int
    var blockSize: Int
    var totFileSize: Int
    var suffix: String
    var upToken: String
    /// Nil only for sequenceNo 0, where the field is empty.
    var crc: UInt32?

    init(fields: [String: String]) throws(SequenceRefusal) {
        sequenceNo = try Self.number("sequenceNo", in: fields)
        blockSize = try Self.number("blockSize", in: fields)
        totFileSize = try Self.number("totFileSize", in: fields)
        suffix = fields["suffix"] ?? ""
        upToken = fields["upToken"] ?? ""
        if sequenceNo == 0 {
            crc = nil
        } else {
            guard let text = fields["crc"], let parsed = SequenceCRC.parse(text) else {
                throw SequenceRefusal("crc must be the block's CRC-32 as 8 lowercase hex digits")
            }
            crc = parsed
        }
    }

    private static func number(_ name: String, in fields: [String: String]) throws(SequenceRefusal) -> Int {
        guard let text = fields[name] else { throw SequenceRefusal("field '\(name)' is missing (the text fields come before the block)") }
        guard !text.isEmpty, text.utf8.count <= 18, text.utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }),
            let value = Int(text)
        else { throw SequenceRefusal("field '\(name)' must be a non-negative integer") }
        return value
    }
}

/// The protocol's envelope `{"code","msg","data"}`.
struct SequenceReply: Encodable {
    enum Code: Int {
        case ok = 0
        case badRequest = 400
        case unknownUpToken = 401
        case outOfOrder = 409
        /// Another crc for a sequenceNo the upload already holds.
        case conflict = 412
        /// The block's bytes do not match its crc (damaged on the way; worth sending again).
        case damaged = 422
        case storageFailure = 500
    }

    struct Payload: Encodable {
        var upToken: String?
        var nextSequenceNo: Int?
        var fileUrl: String?
        var expectedSequenceNo: Int?
    }

    var code: Int
    var msg: String
    var data: Payload

    static func accepted(_ data: Payload) -> SequenceReply {
        SequenceReply(code: Code.ok.rawValue, msg: "ok", data: data)
    }

    static func outOfOrder(expected: Int) -> SequenceReply {
        SequenceReply(
            code: Code.outOfOrder.rawValue, msg: "out of order: the server expects block \(expected)",
            data: Payload(expectedSequenceNo: expected))
    }

    static func refusal(_ code: Code, _ message: String) -> SequenceReply {
        SequenceReply(code: code.rawValue, msg: message, data: Payload())
    }

    /// HTTP 200 for every answer of the protocol; a storage failure is HTTP 500 so that any
    /// client retries it.
    var response: Response {
        JSONResponse.make(code == Code.storageFailure.rawValue ? .internalServerError : .ok, self)
    }
}

// MARK: - Checking a block on its way to disk

/// The `block` part's content, checked as it passes: its length, its CRC-32 and a well-formed end
/// of the body. A failed check throws from `next()` before the end is reported, so `Upload`
/// never syncs or records such a block; `failure` tells the route why.
final class VerifiedBlock<Body: AsyncSequence>: AsyncSequence, AsyncIteratorProtocol where Body.Element == ByteBuffer {
    typealias Element = ByteBuffer

    enum Failure: Error {
        case wrongLength
        case damaged(actual: UInt32)
        case form(FormFailure)

        func reply(sequenceNo: Int, expectedLength: Int) -> SequenceReply {
            switch self {
            case .wrongLength where sequenceNo == 0:
                return .refusal(.badRequest, "the block of sequenceNo 0 must be empty")
            case .wrongLength:
                return .refusal(.badRequest, "block \(sequenceNo) must have \(expectedLength) bytes")
            case .damaged(let actual):
                return .refusal(.damaged, "block \(sequenceNo) has crc \(SequenceCRC.hex(actual)), not the one its crc field names")
            case .form(let failure):
                return .refusal(.badRequest, failure.description)
            }
        }
    }

    let expectedLength: Int
    private let form: StreamingFormReader<Body>
    private let expectedCRC: UInt32
    private var crc = CRC32()
    private var length = 0
    private(set) var failure: Failure?

    init(form: StreamingFormReader<Body>, expectedLength: Int, expectedCRC: UInt32) {
        self.form = form
        self.expectedLength = expectedLength
        self.expectedCRC = expectedCRC
    }

    func makeAsyncIterator() -> VerifiedBlock { self }

    func next() async throws -> ByteBuffer? {
        let piece: ByteBuffer?
        do {
            piece = try await form.nextContent()
        } catch {
            throw fail(.form(error))
        }
        if let piece {
            length += piece.readableBytes
            guard length <= expectedLength else { throw fail(.wrongLength) }
            piece.withUnsafeReadableBytes { crc.update($0) }
            return piece
        }
        guard length == expectedLength else { throw fail(.wrongLength) }
        let actual = crc.value
        guard actual == expectedCRC else { throw fail(.damaged(actual: actual)) }
        do {
            try await form.finish()
        } catch {
            throw fail(.form(error))
        }
        return nil
    }

    private func fail(_ failure: Failure) -> Failure {
        self.failure = failure
        return failure
    }
}
