/// A multipart source: the ids handed out for its files, in the client's order. Written once, at
/// the first preLoad for the source, and answered again to every later one.
struct MultipartSourceRecord: Codable, Sendable, Equatable {
    static let currentFormatVersion = 1

    var formatVersion: Int
    /// The client's id, kept verbatim: the file name on disk is only its digest.
    var sourceId: String
    /// Each is also the `Upload` id of that file once its first fragment arrived.
    var fileIds: [String]
}
