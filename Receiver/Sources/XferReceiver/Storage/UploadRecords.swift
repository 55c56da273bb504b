import XferWire
import FoundationEssentials
import XferPrimitives

/// What an upload is, fixed at creation and stored as `meta.json`.
struct UploadMeta: Codable, Sendable {
    static let currentFormatVersion = 1

    var formatVersion: Int
    /// The wire protocol that created the upload ("patch", later "multipart", "sequence"...), so routes
    /// of one protocol can refuse ids of another if their rules differ.
    var protocolName: String
    var uploadId: String
    /// The file's path relative to `downloads/<id>/` (`RelativePath.text`: '/'-separated, checked;
    /// a plain name for clients that send no directories). Named `fileName` since format 1. With
    /// `Publication.file` the file is `downloads/<id>.<its last component>`.
    var fileName: String
    var size: Int
    var chunkSize: Int
    /// How the completed file is published on disk; nil (metas before it, and every other
    /// storage) is `.directory`.
    var publication: Publication?

    var chunkCount: Int { size == 0 ? 0 : (size - 1) / chunkSize + 1 }

    /// Where the file is published: `fileName`, checked by `RelativePath.parse` when the upload
    /// was created, read back as it was written.
    var path: RelativePath { RelativePath(stored: fileName) }

    /// The meta as the upload log's first line: the JSON `JSONEncoder` with sorted keys would write
    /// (and `JSONDecoder` reads back), built directly since it is written for every upload.
    func jsonLine() -> [UInt8] {
        var out = JSONWriter()
        out.raw("{\"chunkSize\":"); out.raw(String(chunkSize))
        out.raw(",\"fileName\":"); out.string(fileName)
        out.raw(",\"formatVersion\":"); out.raw(String(formatVersion))
        out.raw(",\"protocolName\":"); out.string(protocolName)
        if let publication { out.raw(",\"publication\":"); out.string(publication.rawValue) }
        out.raw(",\"size\":"); out.raw(String(size))
        out.raw(",\"uploadId\":"); out.string(uploadId)
        out.raw("}")
        return out.bytes
    }

    /// Byte range of 1-based chunk `chunk`; the caller has checked `1...chunkCount`.
    func byteRange(ofChunk chunk: Int) -> Range<Int> {
        let start = (chunk - 1) * chunkSize
        return start..<min(start + chunkSize, size)
    }
}

/// Where a disk store puts an upload's file once it is complete, below `downloads/`.
enum Publication: String, Codable, Sendable {
    /// `downloads/<id>/<path>`: a directory of the upload's own, the path's directories below it.
    case directory
    /// `downloads/<id>.<name>`, `name` the path's last component: a file of its own, for a file
    /// created whole by one request. Publishing it is one rename, where a directory of its own
    /// (and the path's below it) cost two `mkdir`s more a file: a quarter of the receiver's CPU
    /// per small file (Docs/benchmarks.md). The whole path stays in the upload's log, and in its
    /// URL.
    case file

    /// A file of its own when `<id>.<name>` fits a file name (NAME_MAX, 255 bytes): a name
    /// longer than 222 bytes keeps the directory.
    static func forFileCreatedWhole(name: String) -> Publication {
        UploadID.length + 1 + name.utf8.count <= RelativePath.maximumComponentLength ? .file : .directory
    }
}

/// Written (atomically) once the file is assembled, before it is published; its presence is what
/// makes completion idempotent across restarts.
struct CompletionRecord: Codable, Sendable, Equatable {
    /// The file's SHA-256 (64 lowercase hex digits); nil when its chunks' CRC-32Cs stood for
    /// reading it back (`ChunkCRCs`).
    var sha256: String?
    var size: Int
    /// The file's CRC-32C (8 lowercase hex digits), for a client that combines its chunks'
    /// CRCs instead of hashing the file again; nil where the file was not read back (a single
    /// small chunk's SHA-256 stands for it) and in records written before it existed.
    var crc32c: String?

    init(sha256: String?, size: Int, crc32c: String? = nil) {
        self.sha256 = sha256
        self.size = size
        self.crc32c = crc32c
    }

    /// As a record of the upload's log: `=<sha256 hex>.<size>[.<crc32c hex>]` (the SHA-256
    /// empty when there is none).
    var logRecord: String { "=" + (sha256 ?? "") + "." + String(size) + (crc32c.map { "." + $0 } ?? "") }

    init?(logRecord record: Substring) {
        guard record.first == "=" else { return nil }
        let parts = record.dropFirst().split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 2 || parts.count == 3, parts[0].isEmpty || parts[0].utf8.count == 64,
            parts[0].utf8.allSatisfy(Hex.isLowercaseDigit),
            let size = Int(parts[1]), size >= 0
        else { return nil }
        var crc32c: String?
        if parts.count == 3 {
            guard parts[2].utf8.count == 8, parts[2].utf8.allSatisfy(Hex.isLowercaseDigit) else { return nil }
            crc32c = String(parts[2])
        }
        // A record must say something of the file's bytes.
        guard !parts[0].isEmpty || crc32c != nil else { return nil }
        self.init(sha256: parts[0].isEmpty ? nil : String(parts[0]), size: size, crc32c: crc32c)
    }
}

enum UploadError: Error, CustomStringConvertible {
    /// The upload was deleted while the request was in flight.
    case deleted
    /// The upload is completed (or completing): its data file is no longer writable.
    case completed
    /// On-disk state contradicts itself; never expected outside of tampering or disk corruption.
    case corrupt(String)

    var description: String {
        switch self {
        case .deleted: "upload was deleted"
        case .completed: "upload is already completed"
        case .corrupt(let reason): "upload state is corrupt: \(reason)"
        }
    }
}

enum CompletionOutcome: Sendable {
    case completed(CompletionRecord)
    /// The chunks not received yet (runs: an answer's size follows the gaps, not the chunks).
    case missing(ChunkRanges)
}
