import FoundationEssentials
import HTTPTypes
import Hummingbird
import NIOCore
import XferWire

// What the `patch` protocol's requests carry and its answers say (see `PatchRoutes`).

extension PatchCreateRequest {
    /// The request's body, read by the wire's `PatchCreateRequest`; refused when it is not
    /// such an object.
    static func read(_ request: Request) async throws(Refusal) -> PatchCreateRequest {
        let body: ByteBuffer
        do {
            body = try await SmallBody.collect(request)
        } catch .tooLarge {
            throw .error(.contentTooLarge, "request body is larger than \(SmallBody.limit) bytes")
        } catch {
            throw .error(.badRequest, "request body could not be read")
        }
        guard let create = body.withUnsafeReadableBytes({ try? PatchCreateRequest(parsing: $0) }) else {
            throw .error(.badRequest, PatchCreateRequest.shape)
        }
        return create
    }
}

/// The answers that carry something: the wire's bodies, as responses.
enum PatchAnswer {
    /// Whether a `POST /uploads` brings the file itself (`PatchWholeCreation`) rather than JSON.
    static func bringsTheFile(_ request: Request) -> Bool {
        guard let type = request.headers[.contentType]?.split(separator: ";").first else { return false }
        return type.trimmingSpacesAndTabs().lowercased() == PatchWholeCreation.mediaType
    }

    /// 201 `{"crc32c","sha256","uploadId","url"}` (see `PatchCreatedWhole`).
    static func createdWhole(uploadId: String, completed: PatchCompleted, location: String) -> Response {
        JSONResponse.make(.created, body: PatchCreatedWhole(uploadId: uploadId, completed: completed).body, headers: [.location: location])
    }

    /// 201 `{"chunkSize","uploadId"}`.
    static func created(uploadId: String, chunkSize: Int, location: String) -> Response {
        JSONResponse.make(
            .created, body: PatchCreated(uploadId: uploadId, chunkSize: chunkSize).body,
            headers: [.location: location, .wantContentDigest: ContentDigest.wanted])
    }

    /// `GET /uploads/{id}` (see `PatchStatus`).
    static func status(_ meta: UploadMeta, handle: String, received: ChunkRanges, bytesReceived: Int) -> Response {
        JSONResponse.make(
            .ok,
            body: PatchStatus.body(
                uploadId: handle, fileName: meta.fileName, size: meta.size, chunkSize: meta.chunkSize, bytesReceived: bytesReceived,
                received: received.numbers(limit: PatchStatus.listedChunks), receivedRanges: received.runs))
    }

    /// 409 (see `PatchMissing`).
    static func missing(_ missing: ChunkRanges) -> Response {
        JSONResponse.make(
            .conflict,
            body: PatchMissing.body(
                count: missing.count, numbers: missing.numbers(limit: PatchMissing.numbersListed),
                runs: missing.prefix(runs: PatchMissing.runsListed)))
    }

    /// 200 `{"crc32c","sha256","url"}` (see `PatchCompleted`).
    static func completed(sha256: String?, crc32c: String?, url: String) -> Response {
        JSONResponse.make(.ok, body: PatchCompleted(url: url, crc32c: crc32c, sha256: sha256).body)
    }
}

extension Refusal {
    /// A chunk body that is not the chunk.
    static func patchChunk(_ failure: BodyWriter.Failure) -> Refusal {
        switch failure {
        case .tooLarge(let limit): .error(.contentTooLarge, "body is larger than the chunk (\(limit) bytes)")
        case .tooShort(let received, let expected): .error(.badRequest, "body has \(received) bytes, the chunk has \(expected)")
        // 422, not 400: the request was right and its bytes were damaged on the way, so the
        // client sends them again.
        case .digestMismatch: .error(.unprocessableContent, "the body does not match its digest")
        case .interrupted(let error): .error(.badRequest, "request body was cut: \(error)")
        }
    }
}

extension Refusal {
    /// A file brought with its creation that was not stored: nothing of it is kept.
    static func patchWhole(_ failure: OffsetWriteFailure, size: Int) -> Refusal {
        switch failure {
        case .interrupted: .error(.badRequest, "request body was cut; nothing of it was kept")
        // 422, as a chunk's: its bytes were damaged on the way, and the client sends them again.
        case .checksumMismatch: .error(.unprocessableContent, "the body does not match its digest")
        case .tooLarge: .error(.contentTooLarge, "body is larger than the file's \(size) bytes")
        case .offsetMoved: .error(.conflict, "the upload was written by another request")
        case .lengthRequired: .error(.lengthRequired, "this receiver needs the body's Content-Length")
        }
    }
}

extension HTTPField.Name {
    static let acceptPost = HTTPField.Name("Accept-Post")!
    static let contentMD5 = HTTPField.Name(ContentMD5.name)!
    static let contentDigest = HTTPField.Name("Content-Digest")!
    static let wantContentDigest = HTTPField.Name("Want-Content-Digest")!
}

extension ContentDigest {
    /// The check of the first member of `header` in an algorithm this receiver verifies; nil
    /// when it names none (a recipient may ignore digests it does not know). Refused when a
    /// member it verifies is malformed.
    static func check(_ header: String) throws(Refusal) -> BodyWriter.Check? {
        do {
            guard let (algorithm, digest) = try ContentDigest.parse(header) else { return nil }
            switch algorithm {
            case .crc32c: return BodyWriter.Check(algorithm: .crc32c, expected: digest)
            case .sha256: return BodyWriter.Check(algorithm: .sha256, expected: digest)
            }
        } catch {
            throw Refusal.error(.badRequest, error.description)
        }
    }
}
