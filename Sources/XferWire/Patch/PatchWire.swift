import XferPrimitives

// The `patch` protocol's bodies and answers (Docs/protocols.md), written once: the client
// backend (Backends/Patch) writes the requests and reads the answers with these types, the
// receiver's routes (Receiver/.../Protocols/Patch) read the requests and write the answers.
// Headers: `Content-Range` (HTTP/ContentRange) and the digests (HTTP/ContentDigest).

/// Why a body is not the protocol's: a one-line reason, for a 400 or a backend's error.
public struct PatchWireError: Error, Sendable, Equatable, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}

/// `POST /uploads`'s body: `{"chunkSize","fileName","size"}`.
public struct PatchCreateRequest: Sendable, Equatable {
    public var fileName: String
    public var size: Int
    public var chunkSize: Int

    public init(fileName: String, size: Int, chunkSize: Int) {
        self.fileName = fileName
        self.size = size
        self.chunkSize = chunkSize
    }

    /// What the receiver says when the body is not such an object.
    public static let shape = "body must be JSON {\"fileName\": string, \"size\": integer, \"chunkSize\": integer}"

    /// The body, as the client sends it (plain ASCII: non-ASCII names escaped).
    public var json: JSONValue {
        ["fileName": .string(fileName), "size": .int(size), "chunkSize": .int(chunkSize)]
    }

    /// Reads a body; the members' types are part of the contract (a size written as a string
    /// is refused, not guessed at). Bounds (sizes, counts) are the receiver's to check.
    public init(parsing body: UnsafeRawBufferPointer) throws(PatchWireError) {
        guard let json = try? JSONValue.parse(body), let fileName = json["fileName"]?.strictString,
            let size = json["size"]?.strictInteger, let chunkSize = json["chunkSize"]?.strictInteger
        else { throw PatchWireError(Self.shape) }
        self.init(fileName: fileName, size: size, chunkSize: chunkSize)
    }
}

/// `POST /uploads`'s 201: `{"chunkSize","uploadId"}`, with `Want-Content-Digest`
/// (`ContentDigest.wanted`) and `Location`.
public struct PatchCreated: Sendable, Equatable {
    public var uploadId: String
    /// The chunk size the server chose; nil from a server that does not say.
    public var chunkSize: Int?

    public init(uploadId: String, chunkSize: Int?) {
        self.uploadId = uploadId
        self.chunkSize = chunkSize
    }

    /// The answer's body, written without building a value (every file goes through it).
    public var body: [UInt8] {
        var answer = JSONWriter()
        if let chunkSize {
            answer.raw("{\"chunkSize\":")
            answer.integer(chunkSize)
            answer.raw(",\"uploadId\":")
        } else {
            answer.raw("{\"uploadId\":")
        }
        answer.string(uploadId)
        answer.raw("}")
        return answer.bytes
    }

    /// Reads the answer (servers mix numbers and strings: read leniently).
    public init(parsing json: JSONValue) throws(PatchWireError) {
        guard let id = json["uploadId"]?.stringValue, !id.isEmpty else { throw PatchWireError("the answer has no uploadId") }
        self.init(uploadId: id, chunkSize: json["chunkSize"]?.intValue)
    }
}

/// `GET /uploads/{id}`'s answer: what the server holds of an upload.
///
/// `receivedRanges` (`[[first, last], ...]`, 1-based chunk numbers) lists every received chunk
/// in runs: an answer that follows the gaps, not the chunks. `received` lists the first
/// `listedChunks` chunk numbers one by one, for clients that predate the runs (they send the
/// chunks past the list again).
public enum PatchStatus {
    /// The most chunk numbers an answer lists one by one.
    public static let listedChunks = 65_536

    /// The answer's body; `received` and `receivedRanges` come from the caller's chunk set
    /// (a million numbers written directly take milliseconds, through an encoder seconds).
    public static func body(
        uploadId: String, fileName: String, size: Int, chunkSize: Int, bytesReceived: Int,
        received: some Sequence<Int>, receivedRanges: some Sequence<ClosedRange<Int>>
    ) -> [UInt8] {
        var answer = JSONWriter(capacity: 256)
        answer.raw("{\"bytesReceived\":")
        answer.integer(bytesReceived)
        answer.raw(",\"chunkSize\":")
        answer.integer(chunkSize)
        answer.raw(",\"fileName\":")
        answer.string(fileName)
        answer.raw(",\"received\":")
        answer.array(of: received)
        answer.raw(",\"receivedRanges\":")
        answer.array(ofRuns: receivedRanges)
        answer.raw(",\"size\":")
        answer.integer(size)
        answer.raw(",\"uploadId\":")
        answer.string(uploadId)
        answer.raw("}")
        return answer.bytes
    }
}

/// `POST /uploads/{id}/complete`'s 409: the chunks to send before completing again.
///
/// At most `runsListed` runs and `numbersListed` numbers (for clients that predate the runs),
/// so the answer stays under 64 KiB whatever was declared (2^24 chunks of which one was sent
/// answered 140 MB when every number was listed); a client sends what is listed, completes
/// again, and learns the rest. `missingCount` counts them all.
public enum PatchMissing {
    public static let numbersListed = 1_000
    public static let runsListed = 2_000

    /// The answer's body: `missing` and `missingRanges` cut to their limits here.
    public static func body(count: Int, numbers: some Sequence<Int>, runs: some Sequence<ClosedRange<Int>>) -> [UInt8] {
        var answer = JSONWriter(capacity: 256)
        answer.raw("{\"missing\":")
        answer.array(of: numbers.prefix(numbersListed))
        answer.raw(",\"missingCount\":")
        answer.integer(count)
        answer.raw(",\"missingRanges\":")
        answer.array(ofRuns: runs.prefix(runsListed))
        answer.raw("}")
        return answer.bytes
    }
}

/// Reading the chunk lists of a status or 409 answer, on the client's side.
public enum PatchChunkList {
    /// The 0-based chunk indexes of the runs `name` (`[[first, last], ...]`, 1-based numbers)
    /// in `json`; nil when the answer has no such member. Runs reaching outside a file of
    /// `chunkCount` chunks are cut to it, so an answer cannot make the client hold more than
    /// its own file's chunks.
    public static func indexes(inRunsNamed name: String, of json: JSONValue, chunkCount: Int) throws(PatchWireError) -> [Int]? {
        guard let runs = json[name]?.arrayValue else { return nil }
        var indexes: [Int] = []
        for run in runs {
            guard let pair = run.arrayValue, pair.count == 2, let first = pair[0].intValue, let last = pair[1].intValue else {
                throw PatchWireError("\(name) must hold [first, last] pairs of chunk numbers")
            }
            let lower = max(first, 1)
            let upper = min(last, chunkCount)
            if lower <= upper { indexes.append(contentsOf: (lower - 1)...(upper - 1)) }
        }
        return indexes
    }
}

/// `POST /uploads/{id}/complete`'s 200: `{"crc32c","sha256","url"}`. `crc32c` when the
/// receiver has it (read back, or combined from every chunk's checked CRC-32C), `sha256` when
/// the file was read back (always, for a client that did not send CRC-32C digests).
public struct PatchCompleted: Sendable, Equatable {
    public var url: String
    /// 8 lowercase hex digits.
    public var crc32c: String?
    /// 64 lowercase hex digits.
    public var sha256: String?

    public init(url: String, crc32c: String?, sha256: String?) {
        self.url = url
        self.crc32c = crc32c
        self.sha256 = sha256
    }

    public var body: [UInt8] {
        var answer = JSONWriter()
        writeMembers(into: &answer, opening: "{")
        answer.raw("}")
        return answer.bytes
    }

    /// `"crc32c":…,"sha256":…,"url":…`, after `opening` (what comes before the first).
    func writeMembers(into answer: inout JSONWriter, opening: String) {
        var separator = opening
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
    }

    public init(parsing json: JSONValue) throws(PatchWireError) {
        guard let url = json["url"]?.stringValue, !url.isEmpty else { throw PatchWireError("the answer has no url") }
        self.init(url: url, crc32c: json["crc32c"]?.stringValue, sha256: json["sha256"]?.stringValue)
    }

    /// `crc32c` as a number, when it is 8 hex digits.
    public var crc32cValue: UInt32? {
        crc32c.flatMap { $0.utf8.count == 8 ? UInt32($0, radix: 16) : nil }
    }
}

/// A small file in one request: `POST /uploads?fileName=PATH` whose body is the whole file
/// (`Content-Type: application/octet-stream`, its `Content-Length` the file's size, a digest as a
/// chunk's), answered `201` with what a creation and a completion answer together
/// (`PatchCreatedWhole`). A server says it takes them in its answer to `OPTIONS /uploads`
/// (`Accept-Post` naming `application/octet-stream`; `Upload-Limit`'s `max-append-size`, the
/// most bytes such a body may hold); a client that was not told so creates with JSON.
public enum PatchWholeCreation {
    /// The body's media type, and what `Accept-Post` names for it.
    public static let mediaType = "application/octet-stream"
    /// `Accept-Post` of a server that takes both forms of creation.
    public static let acceptPost = "application/json, application/octet-stream"
    /// The query parameter naming the file (percent-encoded, as `PercentEncoding.encode`).
    public static let fileNameParameter = "fileName"

    /// `/uploads?fileName=…` for `fileName`.
    public static func path(fileName: String) -> String {
        "/uploads?" + fileNameParameter + "=" + PercentEncoding.encode(fileName)
    }

    /// The file's name in a request's query (`a=b&fileName=…`), decoded; nil when it names none
    /// or its escapes are malformed.
    public static func fileName(inQuery query: some StringProtocol) -> String? {
        for member in query.split(separator: "&") {
            let parts = member.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard parts.count == 2, parts[0] == fileNameParameter else { continue }
            return PercentEncoding.decode(parts[1])
        }
        return nil
    }

    /// Whether an `Accept-Post` header names `application/octet-stream` (parameters and case aside).
    public static func accepts(_ acceptPost: String?) -> Bool {
        guard let acceptPost else { return false }
        return acceptPost.split(separator: ",").contains { member in
            HTTPNumber.trimmed(member.split(separator: ";").first ?? "").lowercased() == mediaType
        }
    }

    /// `Upload-Limit` of such a server: `max-size` (the largest upload) and `max-append-size`
    /// (the largest body of one request, so the largest file it takes in one).
    public static func limit(maximumSize: Int, maximumBody: Int) -> String {
        "max-size=\(maximumSize), max-append-size=\(maximumBody)"
    }
}

/// The 201 of a creation that brought the whole file: `{"uploadId","crc32c","sha256","url"}`
/// (`crc32c` and `sha256` when the receiver has them), with `Location`: the upload is complete.
public struct PatchCreatedWhole: Sendable, Equatable {
    public var uploadId: String
    public var completed: PatchCompleted

    public init(uploadId: String, completed: PatchCompleted) {
        self.uploadId = uploadId
        self.completed = completed
    }

    public var body: [UInt8] {
        var answer = JSONWriter()
        answer.raw("{\"uploadId\":")
        answer.string(uploadId)
        completed.writeMembers(into: &answer, opening: ",")
        answer.raw("}")
        return answer.bytes
    }

    public init(parsing json: JSONValue) throws(PatchWireError) {
        guard let id = json["uploadId"]?.stringValue, !id.isEmpty else { throw PatchWireError("the answer has no uploadId") }
        self.init(uploadId: id, completed: try PatchCompleted(parsing: json))
    }
}
