import XferWire

/// What an offset upload (tus's, the IETF draft's) declared at its creation, kept by every
/// storage with the upload before its URL is handed out.
struct OffsetUploadInfo: Codable, Sendable, Equatable {
    enum Role: String, Codable, Sendable {
        /// An ordinary upload.
        case single
        /// `Upload-Concat: partial`: a piece of a later final upload.
        case partial
        /// `Upload-Concat: final;...`: made from complete partial uploads at its creation; no PATCH.
        case final
    }

    var role: Role
    /// tus's `Upload-Metadata` exactly as received (validated), or as the application's
    /// `pre-create` hook replaced it (tus and ietf); nil when absent or empty.
    var metadata: String?
    /// `Upload-Concat` exactly as received; nil for a single upload.
    var concat: String?
    /// A final upload's partial uploads, in order.
    var partials: [String]

    /// An ordinary upload with no metadata: the IETF draft's, unless a hook gives it some.
    static let defaultSingle = OffsetUploadInfo(role: .single, metadata: nil, concat: nil, partials: [])
}

/// What became of one request body (a PATCH, or the data of a creation-with-upload POST).
enum OffsetWriteResult: Sendable, Equatable {
    /// The whole body is durable and the upload's offset is now this.
    case stored(offset: Int)
    case failed(OffsetWriteFailure)
}

/// Why a request body was not stored whole.
enum OffsetWriteFailure: Sendable, Equatable {
    /// The body was cut (the client went away mid-body). Without a checksum what arrived is kept,
    /// durably, and the offset is now this; with one nothing is kept and it is unchanged.
    case interrupted(offset: Int)
    /// The body does not match its checksum or digest: nothing kept, offset unchanged.
    case checksumMismatch
    /// The body goes past what this request may carry (the rest of Upload-Length, at most
    /// `--max-chunk-size`): nothing kept, offset unchanged.
    case tooLarge(limit: Int)
    /// Another request (through another receiver sharing the storage) appended at this offset
    /// first: nothing kept, and the upload's offset is now this.
    case offsetMoved(offset: Int)
    /// The storage needs to know a body's length before its first byte (an object store sends
    /// each append to the store with its length) and the request named none.
    case lengthRequired
}

extension OffsetUploadInfo {
    /// The metadata's pairs as text, for the application's hooks; nil when there is none.
    var metadataText: [String: String]? {
        metadata.flatMap(TusMetadata.parse).map(TusMetadata.text)
    }
}
