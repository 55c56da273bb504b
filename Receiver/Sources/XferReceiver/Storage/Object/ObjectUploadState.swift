import FoundationEssentials
import XferPrimitives
import Synchronization
import XferS3Core

/// Where an object storage keeps what, below its prefix:
///
///     PREFIX/uploads/<id>.json         the upload's state (`ObjectUploadState`), replaced only by
///                                      compare-and-swap: the one truth about it, for every instance
///     PREFIX/files/<id>/<path>         the completed file, one object at a stable key; for an
///                                      upload stored whole by the request that created it
///                                      (`UploadID.isStoredWhole`), its state too, in the object's
///                                      metadata (`stateMetadataName`), and no state object
///     PREFIX/staging/<id>/<name>       pieces below the store's minimum part size, until completion
///                                      folds them into a part; a completed tus partial upload
///     PREFIX/received/<id>/<chunk>/…  a chunk of a chunked upload of several, received: an
///                                      empty object whose key is the record (`ObjectChunkRecord`),
///                                      written once its bytes are stored (chunks sent at once
///                                      never contend for one object)
///     PREFIX/sources/<sha256>.json     multipart's sources, created only if absent
///     PREFIX/pending/<id>              an empty marker: the upload may be unfinished. Written
///                                      before its state object is created unfinished, removed
///                                      when a change completes it or it is deleted; the expiry
///                                      sweep reads the states of these alone, not those of the
///                                      completed uploads the store keeps (`ObjectStorage.expire`)
struct ObjectLayout: Sendable {
    /// Empty, or ending in "/".
    let prefix: String

    init(prefix: String) {
        let trimmed = prefix.split(separator: "/").joined(separator: "/")
        self.prefix = trimmed.isEmpty ? "" : trimmed + "/"
    }

    func state(_ id: String) -> String { prefix + "uploads/" + id + ".json" }
    func file(_ id: String, path: RelativePath) -> String { prefix + "files/" + id + "/" + path.text }
    func filesPrefix(_ id: String) -> String { prefix + "files/" + id + "/" }
    /// The user metadata (`x-amz-meta-…`) holding the state of an upload stored whole at creation:
    /// the state's JSON, base64.
    static let stateMetadataName = "xfer-upload"
    /// The most state a file's metadata carries (AWS allows 2 KiB of user metadata in all).
    static let stateMetadataLimit = 1800
    func staged(_ id: String, _ name: String) -> String { prefix + "staging/" + id + "/" + name }
    func stagingPrefix(_ id: String) -> String { prefix + "staging/" + id + "/" }
    func receivedPrefix(_ id: String) -> String { prefix + "received/" + id + "/" }
    /// The staged name of a completed partial upload's object.
    static let completedPartial = "partial"
    func source(_ key: String) -> String { prefix + "sources/" + key + ".json" }
    var uploadsPrefix: String { prefix + "uploads/" }
    func pending(_ id: String) -> String { prefix + "pending/" + id }
    var pendingPrefix: String { prefix + "pending/" }
}

/// One upload's state in an object store: what it is, where its bytes are, what has been
/// acknowledged. Small, JSON, and replaced only by a conditional `PutObject` naming the version it
/// was read at (`S3WriteCondition.onlyIfCurrent`): of two instances changing it at once, the store
/// lets exactly one win, and the other reads it again and decides anew. No instance keeps anything
/// of an upload that another would need.
struct ObjectUploadState: Codable, Sendable {
    var meta: UploadMeta
    var created: Date
    /// The store's multipart upload receiving this upload's parts, once one was needed: recorded
    /// before the first part is sent to it, so that a crash never leaves parts nobody can find.
    var multipartUploadID: String?
    /// The part number the next part of an offset upload gets: its place among the parts, so one
    /// after the last recorded. A part whose sender died (or lost its claim) before recording it
    /// is sent again by the next claimant under the same number, over it: Ceph's gateway (16)
    /// refuses a completion that does not name every part the upload holds (`InvalidPart`,
    /// checked), so no part may be left that no record names. (`ObjectOffsetUpload.write` holds
    /// back a part's last byte unless its claim is sure to hold, so a sender that lost its claim
    /// never lands a part over the next claimant's.)
    var nextPartNumber: Int { (pieces.compactMap(\.part).max() ?? 0) + 1 }
    /// What holds the bytes, in byte order: a part or a staged object (offset uploads), or the
    /// single chunk of a chunked upload of one. (A chunked upload of several records its chunks
    /// apart, under `ObjectLayout.receivedPrefix`.)
    var pieces: [Piece] = []

    /// Offset uploads (tus, ietf): what the client declared, the acknowledged offset, the CRC-32C
    /// of the bytes below it, and the append under way.
    var info: OffsetUploadInfo?
    var offset = 0
    var crc: UInt32? = 0
    var claim: Claim?

    /// sequence: its token's digest and suffix, and each accepted block's CRC-32, in order.
    var sequence: SequenceMeta?
    var blocks: [UInt32] = []

    var completion: CompletionRecord?

    /// How many writes made this version: every compare-and-swap writes one more than it read, so
    /// of two sights of one upload's state the higher is the newer (`StateVersion` keeps that
    /// one). Nil in a state no write has replaced since it was created: 0.
    var revision: Int?
    /// The nonce of the write that made this version. A write whose answer was lost, or was an
    /// error after the store applied it, is retried and refused (412: the version it named is
    /// gone — replaced by itself); reading the state again, the writer finds its own nonce and
    /// knows it won, instead of taking its own write for another's.
    var writer: String?
    /// When the upload's deletion began (a client's, or its expiry): from then on no write may
    /// change it, and whoever meets it finishes the deletion. A tombstone written by
    /// compare-and-swap on the version the deleter read, because the store this was built on
    /// cannot make a `DeleteObject` conditional (Ceph 16's gateway ignores `If-Match` there and
    /// deletes whatever the key holds): an append that claimed the upload since makes the
    /// tombstone's write fail, and the upload stays.
    var deletion: Date?
    /// A chunked upload's completion is recorded, and what it no longer needs (its staged chunks
    /// and chunk records, needed until then to finish it again) may still be in the store: the
    /// next request that meets the upload deletes them and clears this.
    var leftovers: Bool?

    /// An offset upload whose every byte is acknowledged but whose file is not made yet (its
    /// completion failed, or its instance died first): whoever meets it completes it — it never
    /// expires, and no answer reports it complete before the file exists.
    var isDueForCompletion: Bool {
        info != nil && completion == nil && deletion == nil && offset == meta.size
    }

    struct Piece: Codable, Sendable, Equatable {
        /// Chunked uploads: the chunk (1-based) this is.
        var chunk: Int? = nil
        /// The byte range it holds: `at..<at + length`.
        var at: Int
        var length: Int
        /// The multipart part holding it; nil when staged (or when a single chunk went straight to
        /// the file's own key).
        var part: Int? = nil
        /// The staged object holding it, by name (`ObjectLayout.staged`).
        var staged: String? = nil
        var etag: String
        /// The CRC-32C of its bytes, for the file's at completion.
        var crc: UInt32

        var end: Int { at + length }
    }

    /// An append of an offset upload under way on some instance: the offset it starts at, the part
    /// number it will send, and until when it holds the upload. A claim past its time belongs to a
    /// sender that died: another append may take the upload over.
    struct Claim: Codable, Sendable, Equatable {
        var at: Int
        var part: Int?
        var until: Date
        var by: String
    }


    /// Staged pieces after the last part: the tail an offset upload keeps below the minimum part size.
    var stagedTail: [Piece] {
        Array(pieces.reversed().prefix { $0.staged != nil }.reversed())
    }

    /// The most staged pieces an offset upload's tail holds: past it, an append is staged together
    /// with the tail's last pieces (`ObjectOffsetUpload.piecesToFold`), so the state — rewritten
    /// whole by every append — stays small however small the appends (beside the parts, which
    /// S3 caps at 10,000 and which are at least 5 MiB each).
    static let maximumStagedPieces = 32
}

/// How large a part must be, but for the last: S3's 5 MiB (Ceph's gateway enforces it at
/// `CompleteMultipartUpload` with `EntityTooSmall`).
let minimumPartSize = 5 << 20

extension ObjectUploadState.Piece {
    /// The CRC-32C of a file of `length` bytes from its pieces', when they cover it in order.
    static func combinedCRC(of pieces: [Self], length: Int) -> UInt32? {
        var crc: UInt32 = 0
        var at = 0
        for piece in pieces.sorted(by: { $0.at < $1.at }) {
            guard piece.at == at else { return nil }
            crc = CRC32C.combine(crc, piece.crc, lengthOfSecond: Int64(piece.length))
            at = piece.end
        }
        return at == length ? crc : nil
    }
}

extension JSONEncoder {
    /// Sorted keys: the same state always makes the same bytes.
    static let objectState: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        encoder.dateEncodingStrategy = .secondsSince1970
        return encoder
    }()
}

extension JSONDecoder {
    static let objectState: JSONDecoder = {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .secondsSince1970
        return decoder
    }()
}

/// The record of a received chunk of a chunked upload of several, all in its key so that one
/// listing answers a completion: `<chunk>/<where>.<etag>.<crc>` below `ObjectLayout.receivedPrefix`,
/// where `<where>` is `p` (part `<chunk>`) or `s<nonce>` (the staged object `chunk-<chunk>-<nonce>`),
/// the ETag as the store gave it (or `x` and its bytes in hex, should it hold other characters than
/// letters, digits and `-`, or start with `x`), the CRC-32C in hex. The byte range follows from the chunk's number.
struct ObjectChunkRecord: Sendable {
    let chunk: Int
    let piece: ObjectUploadState.Piece

    /// The record's name below the upload's prefix.
    static func name(of piece: ObjectUploadState.Piece, chunk: Int) -> String {
        let place: String
        if piece.part != nil {
            place = "p"
        } else {
            place = "s" + (piece.staged ?? "").dropFirst(stagedPrefix(chunk).count)
        }
        let etag = piece.etag.allSatisfy(isPlain) && !piece.etag.hasPrefix("x") ? piece.etag : "x" + Hex.lowercase(Array(piece.etag.utf8))
        return "\(chunk)/\(place).\(etag).\(String(piece.crc, radix: 16))"
    }

    /// The staged object of chunk `chunk` is `chunk-<chunk>-<nonce>`.
    static func stagedPrefix(_ chunk: Int) -> String { "chunk-\(chunk)-" }

    private static func isPlain(_ character: Character) -> Bool {
        character.isASCII && (character.isLetter || character.isNumber || character == "-")
    }

    static func chunk(ofKey key: String, under prefix: String) -> Int? {
        guard key.hasPrefix(prefix) else { return nil }
        return key.dropFirst(prefix.count).split(separator: "/").first.flatMap { Int($0) }
    }

    init?(key: String, under prefix: String, meta: UploadMeta) {
        guard key.hasPrefix(prefix) else { return nil }
        let parts = key.dropFirst(prefix.count).split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2, let chunk = Int(parts[0]), chunk >= 1, chunk <= meta.chunkCount else { return nil }
        let fields = parts[1].split(separator: ".", omittingEmptySubsequences: false)
        guard fields.count == 3, let place = fields[0].first, let crc = UInt32(fields[2], radix: 16) else { return nil }
        var etag = String(fields[1])
        if etag.hasPrefix("x") {
            guard let bytes = Hex.bytes(String(etag.dropFirst())), let text = String(bytes: bytes, encoding: .utf8) else { return nil }
            etag = text
        }
        let range = meta.byteRange(ofChunk: chunk)
        switch place {
        case "p":
            piece = .init(chunk: chunk, at: range.lowerBound, length: range.count, part: chunk, staged: nil, etag: etag, crc: crc)
        case "s":
            piece = .init(
                chunk: chunk, at: range.lowerBound, length: range.count, part: nil,
                staged: Self.stagedPrefix(chunk) + fields[0].dropFirst(), etag: etag, crc: crc)
        default:
            return nil
        }
        self.chunk = chunk
    }
}

/// A handle's last sight of an upload's state and the version the store gave it: where a
/// compare-and-swap starts, so that a request that just read or wrote the state does not read it
/// again. A stale sight costs one refused write (412) and a read, never a wrong one.
///
/// It only moves forward (by `ObjectUploadState.revision`): requests of one instance read and
/// write one upload's state at once (a `HEAD` while an append records), and a sight read before a
/// write but arriving after it must not replace the newer one.
final class StateVersion: Sendable {
    private let seen = Mutex<(ObjectUploadState, S3ETag)?>(nil)

    init(_ sight: (ObjectUploadState, S3ETag)? = nil) {
        if let sight { advance(to: sight) }
    }

    var latest: (ObjectUploadState, S3ETag)? { seen.withLock { $0 } }

    /// Keeps `sight` unless the sight kept is newer.
    func advance(to sight: (ObjectUploadState, S3ETag)) {
        seen.withLock { kept in
            if let old = kept, old.0.created == sight.0.created, (old.0.revision ?? 0) > (sight.0.revision ?? 0) { return }
            kept = sight
        }
    }
}
