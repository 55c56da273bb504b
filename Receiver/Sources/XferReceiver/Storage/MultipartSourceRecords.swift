/// A multipart source: the ids handed out for its files, in the client's order. Written once, at
/// the first preLoad for the source, and answered again to every later one.
struct MultipartSourceRecord: Codable, Sendable, Equatable {
    static let currentFormatVersion = 1

    var formatVersion: Int
    /// The client's id, kept verbatim: the file name on disk is only its digest.
    var sourceId: String
    /// Each is also the `Upload` id of that file once its first fragment arrived.
    let fileIds: [String]
    /// `fileIds` as a set, built once per record: every fragment and every merge check asks
    /// whether an id is one of the source's, which a walk of up to 1,000 ids made O(files) a
    /// request. Not stored.
    private let members: Set<String>

    private enum CodingKeys: String, CodingKey {
        case formatVersion, sourceId, fileIds
    }

    init(formatVersion: Int, sourceId: String, fileIds: [String]) {
        self.formatVersion = formatVersion
        self.sourceId = sourceId
        self.fileIds = fileIds
        members = Set(fileIds)
    }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.init(
            formatVersion: try container.decode(Int.self, forKey: .formatVersion),
            sourceId: try container.decode(String.self, forKey: .sourceId),
            fileIds: try container.decode([String].self, forKey: .fileIds))
    }

    /// Whether `fileId` is one of the source's files.
    func contains(_ fileId: String) -> Bool { members.contains(fileId) }
}
