import XferWire
// A module that declares `headers: HTTPHeaders = [:]` must see the module the literal's
// initialiser is declared in: re-exported, so a backend written against `import Xfer` alone
// keeps compiling.
@_exported import struct XferWire.HTTPHeaders

/// The `Content-Digest` algorithms (RFC 9530) a backend can send with a chunk, and the reading
/// of a server's `Want-Content-Digest`: XferWire's, the receiver's own reading of them (one
/// definition for both sides), named here so backends written against `Xfer` alone keep it.
public typealias ContentDigest = XferWire.ContentDigest

/// An ordered list of header fields, names compared case-insensitively: XferWire's, the one header
/// type of the engine, S3's requests (XferS3Core) and the protocols' wire, named here so code
/// written against `Xfer` alone keeps it.
public typealias HTTPHeaders = XferWire.HTTPHeaders

/// A parsed JSON document, for protocols whose answers are loosely shaped: XferWire's, the one
/// JSON codec of the project, named here so backends written against `Xfer` alone keep it.
public typealias JSONValue = XferWire.JSONValue

extension ContentDigest {
    /// The `Content-Digest` value for `chunk`'s bytes, e.g. `crc32c=:AAAAAA==:`.
    public func header(for chunk: ChunkPayload) -> String {
        switch self {
        case .crc32c: ContentDigest.header(crc32c: chunk.crc32c)
        case .sha256: header(digest: chunk.sha256)
        }
    }
}
