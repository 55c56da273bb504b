import XferPrimitives

// The `multipart` protocol's header and answers (Docs/protocols.md), written once: the client
// backend (Backends/Multipart) and the receiver's routes (Receiver/.../Protocols/Multipart)
// both speak them through these types. Every answer is an `Envelope`.

/// The requests: four paths; `preLoad.do`, `isFinish.do` and `delete.do` take a form-urlencoded
/// body, `upload.do` a `multipart/form-data` one holding the fragment with `file_block`.
public enum FileSectionForm {
    public static let preloadPath = "/fileSection/preLoad.do"
    public static let uploadPath = "/fileSection/upload.do"
    public static let isFinishPath = "/fileSection/isFinish.do"
    public static let deletePath = "/fileSection/delete.do"
    public static let sourceId = "sourceId"
    public static let fileCount = "fileCount"
    /// The source's file ids, comma-separated.
    public static let fileIds = "fileIds"
    /// The file part holding the fragment.
    public static let sectionFile = "sectionFile"
}

/// The envelope codes of `multipart`: 200 is success, anything else the server's refusal.
public enum MultipartCode {
    public static let success = 200
}

/// Why a `file_block` header is not the protocol's.
public struct FileBlockMalformed: Error, Sendable, Equatable, CustomStringConvertible {
    public var description: String { "file_block must be a JSON array holding one object with \(FileBlock.fieldList)" }
}

/// The `file_block` header of a fragment: a JSON array holding one object that says where the
/// fragment belongs. Its members' types are part of the contract: a number written as a string
/// is refused, not guessed at.
public struct FileBlock: Sendable, Equatable {
    /// The header's name.
    public static let headerName = "file_block"
    public static let fieldList =
        "sourceId, fileId, fragmentIndex, fragmentOffset, fragmentSize, totalFileFragment, totalFileSize, fileName, fragmentMd5"

    public var sourceId: String
    public var fileId: String
    public var fragmentIndex: Int
    public var fragmentOffset: Int
    public var fragmentSize: Int
    public var totalFileFragment: Int
    public var totalFileSize: Int
    public var fileName: String
    /// The fragment's MD5, 32 hex digits.
    public var fragmentMd5: String

    public init(
        sourceId: String, fileId: String, fragmentIndex: Int, fragmentOffset: Int, fragmentSize: Int, totalFileFragment: Int,
        totalFileSize: Int, fileName: String, fragmentMd5: String
    ) {
        self.sourceId = sourceId
        self.fileId = fileId
        self.fragmentIndex = fragmentIndex
        self.fragmentOffset = fragmentOffset
        self.fragmentSize = fragmentSize
        self.totalFileFragment = totalFileFragment
        self.totalFileSize = totalFileSize
        self.fileName = fileName
        self.fragmentMd5 = fragmentMd5
    }

    /// The header's value. Plain ASCII: every non-ASCII (and control) character of a name is
    /// escaped, so the header survives any HTTP stack.
    public var headerValue: String {
        JSONValue.array([
            [
                "sourceId": .string(sourceId), "fileId": .string(fileId), "fragmentIndex": .int(fragmentIndex),
                "fragmentOffset": .int(fragmentOffset), "fragmentSize": .int(fragmentSize),
                "totalFileFragment": .int(totalFileFragment), "totalFileSize": .int(totalFileSize),
                "fileName": .string(fileName), "fragmentMd5": .string(fragmentMd5),
            ]
        ]).text(.ascii)
    }

    /// Reads the header's value (the numbers' ranges are the receiver's to check).
    public init(header: String) throws(FileBlockMalformed) {
        guard let blocks = (try? JSONValue.parse(header))?.arrayValue, blocks.count == 1, let block = blocks[0].objectValue,
            let sourceId = block["sourceId"]?.strictString, let fileId = block["fileId"]?.strictString,
            let fragmentIndex = block["fragmentIndex"]?.strictInteger, let fragmentOffset = block["fragmentOffset"]?.strictInteger,
            let fragmentSize = block["fragmentSize"]?.strictInteger, let totalFileFragment = block["totalFileFragment"]?.strictInteger,
            let totalFileSize = block["totalFileSize"]?.strictInteger, let fileName = block["fileName"]?.strictString,
            let fragmentMd5 = block["fragmentMd5"]?.strictString
        else { throw FileBlockMalformed() }
        self.init(
            sourceId: sourceId, fileId: fileId, fragmentIndex: fragmentIndex, fragmentOffset: fragmentOffset,
            fragmentSize: fragmentSize, totalFileFragment: totalFileFragment, totalFileSize: totalFileSize, fileName: fileName,
            fragmentMd5: fragmentMd5)
    }

    /// The 16 bytes of `fragmentMd5` (hex, either case); nil when it is not 32 hex digits.
    public var md5: [UInt8]? {
        fragmentMd5.utf8.count == 32 ? Hex.bytes(fragmentMd5) : nil
    }
}

/// preLoad.do's data: the ids the server gave the source's files, in order.
public struct MultipartPreload: Sendable, Equatable {
    public var fileIds: [String]

    public init(fileIds: [String]) { self.fileIds = fileIds }

    public var data: JSONValue { ["fileIds": .array(fileIds.map(JSONValue.string))] }

    /// Nil when `data` has no list of string ids.
    public init?(data: JSONValue) {
        guard let values = data["fileIds"]?.arrayValue else { return nil }
        var ids: [String] = []
        for value in values {
            guard let id = value.stringValue, !id.isEmpty else { return nil }
            ids.append(id)
        }
        fileIds = ids
    }
}

/// isFinish.do's data: every file merged (`finishStatus` 1, with their URLs by file id), or
/// some not (0, naming them comma-separated in `failFileIds`).
public struct MultipartFinish: Sendable, Equatable {
    public var finishStatus: Int
    public var fileUrls: [String: String]?
    public var failFileIds: String?

    public init(finishStatus: Int, fileUrls: [String: String]? = nil, failFileIds: String? = nil) {
        self.finishStatus = finishStatus
        self.fileUrls = fileUrls
        self.failFileIds = failFileIds
    }

    /// The data, without the members that are nil.
    public var data: JSONValue {
        var members: [String: JSONValue] = ["finishStatus": .int(finishStatus)]
        if let fileUrls { members["fileUrls"] = .object(fileUrls.mapValues(JSONValue.string)) }
        if let failFileIds { members["failFileIds"] = .string(failFileIds) }
        return .object(members)
    }
}
