import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

// What the `patch` protocol's requests carry and its answers say (see `PatchRoutes`).

/// `POST /uploads`'s body: `{"fileName","size","chunkSize"}`.
struct PatchCreateRequest: Decodable {
    var fileName: String
    var size: Int
    var chunkSize: Int

    /// The request's body, decoded; refused when it is not such an object.
    static func read(_ request: Request) async throws(Refusal) -> PatchCreateRequest {
        let body: ByteBuffer
        do {
            body = try await SmallBody.collect(request)
        } catch .tooLarge {
            throw .error(.contentTooLarge, "request body is larger than \(SmallBody.limit) bytes")
        } catch {
            throw .error(.badRequest, "request body could not be read")
        }
        guard let create = PatchCreateRequest(fast: body) ?? (try? JSONResponse.decode(PatchCreateRequest.self, from: body)) else {
            throw .error(.badRequest, "body must be JSON {\"fileName\": string, \"size\": integer, \"chunkSize\": integer}")
        }
        return create
    }

    /// Without `JSONDecoder`, for the plain bodies clients send; nil for anything else, which
    /// then goes through `JSONDecoder`.
    private init?(fast body: ByteBuffer) {
        guard let object = FlatJSONObject(body), let fileName = object.string("fileName"), let size = object.integer("size"),
            let chunkSize = object.integer("chunkSize")
        else { return nil }
        self.fileName = fileName
        self.size = size
        self.chunkSize = chunkSize
    }
}

/// The answers that carry something.
enum PatchAnswer {
    /// 201 `{"chunkSize","uploadId"}`, as `JSONResponse.make` would write it, without `JSONEncoder`.
    static func created(uploadId: String, chunkSize: Int, location: String) -> Response {
        var answer = JSONText()
        answer.raw("{\"chunkSize\":" + String(chunkSize) + ",\"uploadId\":")
        answer.string(uploadId)
        answer.raw("}")
        return answer.response(.created, headers: [.location: location, .wantContentDigest: ContentDigest.wanted])
    }

    /// `GET /uploads/{id}`. `receivedRanges` (`[[first, last], ...]`) lists every received
    /// chunk in runs: an answer that follows the gaps, not the chunks. `received` lists the
    /// first `listedChunks` chunk numbers one by one, for clients that predate the runs (they send
    /// the chunks past the list again). Both filled by `JSONResponse.make(_:_:filling:)`.
    static func status(_ meta: UploadMeta, handle: String, received: ChunkRanges, bytesReceived: Int) -> Response {
        struct Status: Encodable {
            var uploadId: String
            var fileName: String
            var size: Int
            var chunkSize: Int
            var received: [Int] = []
            var receivedRanges: [Int] = []
            var bytesReceived: Int
        }
        return JSONResponse.make(
            .ok,
            Status(uploadId: handle, fileName: meta.fileName, size: meta.size, chunkSize: meta.chunkSize, bytesReceived: bytesReceived),
            filling: [
                "received": JSONResponse.elements(received.numbers(limit: listedChunks)),
                "receivedRanges": JSONResponse.elements(received.runs),
            ])
    }

    /// The most chunk numbers an answer lists one by one.
    static let listedChunks = 65_536

    /// 409 `{"missing","missingCount","missingRanges"}`: the chunks to send before completing
    /// again. At most `missingRunsListed` runs and `missingNumbersListed` numbers (for clients
    /// that predate the runs), so the answer stays under 64 KiB whatever was declared (2^24
    /// chunks of which one was sent answered 140 MB when every number was listed); a client
    /// sends what is listed, completes again, and learns the rest. `missingCount` counts them all.
    static func missing(_ missing: ChunkRanges) -> Response {
        struct Missing: Encodable {
            var missing: [Int] = []
            var missingCount: Int
            var missingRanges: [Int] = []
        }
        return JSONResponse.make(
            .conflict, Missing(missingCount: missing.count),
            filling: [
                "missing": JSONResponse.elements(missing.numbers(limit: missingNumbersListed)),
                "missingRanges": JSONResponse.elements(missing.prefix(runs: missingRunsListed)),
            ])
    }

    static let missingNumbersListed = 1_000
    static let missingRunsListed = 2_000

    /// 200 `{"crc32c","sha256","url"}`, without `JSONEncoder`: `crc32c` when the receiver has
    /// it (read back, or combined from every chunk's checked CRC-32C), `sha256` when the file
    /// was read back (always, for a client that did not send CRC-32C digests).
    static func completed(sha256: String?, crc32c: String?, url: String) -> Response {
        var answer = JSONText()
        var separator = "{"
        if let crc32c {
            answer.raw(separator + "\"crc32c\":")
            answer.string(crc32c)
            separator = ","
        }
        if let sha256 {
            answer.raw(separator + "\"sha256\":")
            answer.string(sha256)
            separator = ","
        }
        answer.raw(separator + "\"url\":")
        answer.string(url)
        answer.raw("}")
        return answer.response(.ok)
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

/// `Content-Range: bytes first-last/total`, as sent with a chunk.
struct ContentRange: Equatable {
    var first: Int
    var last: Int
    var total: Int

    init(first: Int, last: Int, total: Int) {
        self.first = first
        self.last = last
        self.total = total
    }

    /// Nil for anything but the complete form: unknown totals (`*`) and unsatisfied ranges have no
    /// meaning for a chunk.
    init?(header: String) {
        if let parsed = Self.parseASCII(header) {
            self = parsed
            return
        }
        // Anything but plain ASCII digits and spaces: Foundation's trimming and lowercasing.
        let trimmed = header.trimmingCharacters(in: .whitespaces)
        guard trimmed.lowercased().hasPrefix("bytes ") else { return nil }
        let spec = trimmed.dropFirst("bytes ".count).trimmingCharacters(in: .whitespaces)
        let parts = spec.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2 else { return nil }
        let bounds = parts[0].split(separator: "-", omittingEmptySubsequences: false)
        guard bounds.count == 2,
            let first = Self.number(bounds[0]), let last = Self.number(bounds[1]), let total = Self.number(parts[1]),
            first <= last, last < total
        else { return nil }
        self.init(first: first, last: last, total: total)
    }

    /// `bytes a-b/total` with ASCII spaces or tabs around, read byte by byte (this header comes
    /// with every chunk); nil for anything else, which the general parser then reads.
    private static func parseASCII(_ header: String) -> ContentRange? {
        var utf8 = Substring(header).utf8[...]
        func isSpace(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x09 }
        while let first = utf8.first, isSpace(first) { utf8 = utf8.dropFirst() }
        while let last = utf8.last, isSpace(last) { utf8 = utf8.dropLast() }
        let unit = Array("bytes".utf8)
        guard utf8.count > unit.count, zip(utf8.prefix(unit.count), unit).allSatisfy({ $0 | 0x20 == $1 }),
            utf8[utf8.index(utf8.startIndex, offsetBy: unit.count)] == 0x20
        else { return nil }
        utf8 = utf8.dropFirst(unit.count)
        while let first = utf8.first, isSpace(first) { utf8 = utf8.dropFirst() }
        var numbers: [Int] = []
        var current: Int?
        var separators: [UInt8] = []
        for byte in utf8 {
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"):
                let (times, overflow1) = (current ?? 0).multipliedReportingOverflow(by: 10)
                let (sum, overflow2) = times.addingReportingOverflow(Int(byte - UInt8(ascii: "0")))
                guard !overflow1, !overflow2 else { return nil }
                current = sum
            case UInt8(ascii: "-"), UInt8(ascii: "/"):
                guard let value = current else { return nil }
                numbers.append(value)
                separators.append(byte)
                current = nil
            default:
                return nil
            }
        }
        guard let total = current, separators == [UInt8(ascii: "-"), UInt8(ascii: "/")] else { return nil }
        let (first, last) = (numbers[0], numbers[1])
        guard first <= last, last < total else { return nil }
        return ContentRange(first: first, last: last, total: total)
    }

    private static func number(_ text: Substring) -> Int? {
        guard !text.isEmpty, text.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else { return nil }
        return Int(text)
    }
}

extension HTTPField.Name {
    static let contentMD5 = HTTPField.Name("Content-MD5")!
    static let contentDigest = HTTPField.Name("Content-Digest")!
    static let wantContentDigest = HTTPField.Name("Want-Content-Digest")!
}

/// RFC 9530's `Content-Digest` of a chunk, in the algorithms this receiver verifies.
enum ContentDigest {
    /// What the create answer asks for (`Want-Content-Digest`): CRC-32C first, at hardware
    /// speed on both ends; SHA-256 for a client without it. A client that knows neither header
    /// sends `Content-MD5`, which is still checked.
    static let wanted = "crc32c=10, sha-256=5"

    /// The check of the first member of `header` in an algorithm this receiver verifies; nil
    /// when it names none (a recipient may ignore digests it does not know). Throws when a
    /// member it verifies is malformed.
    static func check(_ header: String) throws(Refusal) -> BodyWriter.Check? {
        for member in header.split(separator: ",") {
            guard let equals = member.firstIndex(of: "=") else { continue }
            let name = member[..<equals].trimmingCharacters(in: .whitespaces).lowercased()
            let value = member[member.index(after: equals)...].trimmingCharacters(in: .whitespaces)
            let algorithm: StreamingDigest.Algorithm
            let length: Int
            switch name {
            case "crc32c": (algorithm, length) = (.crc32c, 4)
            case "sha-256": (algorithm, length) = (.sha256, 32)
            default: continue
            }
            // A byte sequence: the base64 between colons.
            guard value.count >= 2, value.hasPrefix(":"), value.hasSuffix(":"),
                let bytes = Data(base64Encoded: String(value.dropFirst().dropLast())), bytes.count == length
            else {
                throw Refusal.error(.badRequest, "Content-Digest \(name) must be :BASE64: of a \(length)-byte digest")
            }
            return BodyWriter.Check(algorithm: algorithm, expected: Array(bytes))
        }
        return nil
    }
}

/// Decodes `Content-MD5` (base64 of the 16-byte digest); nil when malformed.
func decodeContentMD5(_ header: String) -> [UInt8]? {
    // ASCII spaces trimmed without Foundation's general trimming (this runs for every chunk).
    var utf8 = Substring(header).utf8[...]
    while let first = utf8.first, first == 0x20 || first == 0x09 { utf8 = utf8.dropFirst() }
    while let last = utf8.last, last == 0x20 || last == 0x09 { utf8 = utf8.dropLast() }
    let trimmed = utf8.allSatisfy({ $0 < 0x80 }) ? String(Substring(utf8)) : header.trimmingCharacters(in: .whitespaces)
    guard let data = Data(base64Encoded: trimmed), data.count == 16 else { return nil }
    return Array(data)
}
