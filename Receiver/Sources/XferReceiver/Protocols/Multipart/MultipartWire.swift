import XferWire
import FoundationEssentials
import HTTPTypes
import Hummingbird
import NIOCore
import XferPrimitives

// What the `multipart` protocol's requests carry and its answers say (see `MultipartRoutes`).
// Every answer is an `Envelope`: HTTP 200 with the outcome in `code`.

enum MultipartAnswer {
    static func ok(_ data: JSONValue = .object([:])) -> Response {
        Envelope(code: MultipartCode.success, msg: "ok", data: data).response()
    }
}

extension Refusal {
    static let unknownSource = Refusal.envelope(404, "unknown sourceId: call preLoad.do first")

    static func notInSource(_ fileId: String) -> Refusal {
        .envelope(400, "fileId \(fileId.prefix(64)) is not part of this source")
    }

    /// Worth retrying: HTTP 503 makes any client try again.
    static let fragmentDiscarded = Refusal.envelope(
        503, "the file was discarded while its fragment arrived; send it again", status: .serviceUnavailable)

    /// A fragment of `size` bytes (not 0) whose content is not what `file_block` says.
    static func fragment(_ failure: BodyWriter.Failure, size: Int) -> Refusal {
        switch failure {
        case .tooLarge: .envelope(400, "the fragment has more bytes than fragmentSize (\(size))")
        case .interrupted(FormFailure.partLength): .envelope(400, "the fragment does not have the \(size) bytes fragmentSize says")
        case .tooShort(let received, _): .envelope(400, "the fragment has \(received) bytes, fragmentSize says \(size)")
        case .digestMismatch: .envelope(400, "fragmentMd5 does not match the fragment's bytes")
        case .interrupted: .envelope(400, "the fragment's body was cut short or malformed")
        }
    }

    /// The one fragment of an empty file, whose content is not empty or not what `file_block` says.
    static func emptyFragment(_ failure: BodyWriter.Failure) -> Refusal {
        switch failure {
        // (Nothing is expected, so nothing can fall short.)
        case .tooLarge, .tooShort: .envelope(400, "the fragment holds bytes, fragmentSize says 0")
        case .digestMismatch: .envelope(400, "fragmentMd5 does not match the fragment's bytes")
        case .interrupted(let error): .envelope(400, "\(error)")
        }
    }
}

/// The form-urlencoded body of preLoad.do, isFinish.do and delete.do.
struct MultipartForm {
    static let maximumSourceIdLength = 256

    private var fields: [String: String] = [:]

    /// `+` is a space, `%XX` a UTF-8 byte; the first of repeated names wins.
    static func read(_ request: Request) async throws(Refusal) -> MultipartForm {
        let body: ByteBuffer
        do {
            body = try await SmallBody.collect(request)
        } catch .tooLarge {
            throw .envelope(400, "the form is larger than \(SmallBody.limit) bytes")
        } catch {
            throw .envelope(400, "the request body could not be read")
        }
        var form = MultipartForm()
        let text = String(decoding: body.readableBytesView, as: UTF8.self)
        for pair in text.split(separator: "&") {
            let halves = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard let name = decodeComponent(halves[0]), let value = decodeComponent(halves.count > 1 ? halves[1] : "") else {
                throw .envelope(400, "the body is not valid application/x-www-form-urlencoded")
            }
            if form.fields[name] == nil { form.fields[name] = value }
        }
        return form
    }

    private static func decodeComponent(_ text: Substring) -> String? {
        PercentEncoding.decodeForm(text)
    }

    /// The client's id: any string but an empty, long or control-character one.
    func sourceId() throws(Refusal) -> String {
        guard let id = fields[FileSectionForm.sourceId], !id.isEmpty, id.utf8.count <= Self.maximumSourceIdLength,
            !id.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7f })
        else { throw .envelope(400, "sourceId must be 1 to \(Self.maximumSourceIdLength) bytes without control characters") }
        return id
    }

    func fileCount(maximum: Int) throws(Refusal) -> Int {
        guard let count = fields[FileSectionForm.fileCount].flatMap({ Int($0) }), (1...maximum).contains(count) else {
            throw .envelope(400, "fileCount must be an integer between 1 and \(maximum)")
        }
        return count
    }

    /// `fileIds=a,b,c`, in order, each once.
    func fileIds() throws(Refusal) -> [String] {
        var seen = Set<String>()
        let ids = (fields[FileSectionForm.fileIds] ?? "").split(separator: ",").map { $0.trimmingSpacesAndTabs() }
            .filter { !$0.isEmpty && seen.insert($0).inserted }
        guard !ids.isEmpty else { throw .envelope(400, "fileIds must name the source's files, comma-separated") }
        return ids
    }
}

extension FileBlock {
    static let header = HTTPField.Name(FileBlock.headerName)!

    /// The request's `file_block`, read by the wire's `FileBlock`.
    init(headers: HTTPFields) throws(Refusal) {
        guard let header = headers[Self.header] else { throw .envelope(400, "the file_block header is missing") }
        do {
            try self.init(header: header)
        } catch {
            throw .envelope(400, error.description)
        }
    }

    /// The 16 bytes of `fragmentMd5`, written in hex (either case).
    func md5() throws(Refusal) -> [UInt8] {
        guard let digest = md5 else { throw .envelope(400, "fragmentMd5 must be 32 hex digits") }
        return digest
    }
}

/// How a file is cut, as one fragment's numbers imply it. Every fragment of a file must imply
/// the same: fragments may arrive in any order, so whichever comes first creates the file.
struct FileGeometry: Equatable {
    var size: Int
    /// The size of every fragment but the last; for a one-fragment file, its size (at least 1).
    var fragmentSize: Int

    init(implied block: FileBlock, maximumFragmentSize: Int, maximumFragmentCount: Int) throws(Refusal) {
        let count = block.totalFileFragment
        let index = block.fragmentIndex
        let size = block.totalFileSize
        guard size >= 0, block.fragmentOffset >= 0, block.fragmentSize >= 0, count >= 1, index >= 0, index < count else {
            throw .envelope(400, "fragment numbers out of range (sizes and offsets >= 0, 0 <= fragmentIndex < totalFileFragment)")
        }
        guard count <= maximumFragmentCount else {
            throw .envelope(400, "more than \(maximumFragmentCount) fragments: use larger fragments")
        }
        let fragmentSize: Int
        if count == 1 {
            fragmentSize = max(size, 1)
        } else if index < count - 1 {
            fragmentSize = block.fragmentSize
        } else {
            // The last fragment may be short; its offset still tells the others' size.
            guard block.fragmentOffset % index == 0 else { throw .envelope(400, "fragmentOffset is not a multiple of the fragment size") }
            fragmentSize = block.fragmentOffset / index
        }
        guard fragmentSize >= 1, fragmentSize <= maximumFragmentSize else {
            throw .envelope(400, "fragments must hold between 1 and \(maximumFragmentSize) bytes")
        }
        let expectedCount = size == 0 ? 1 : (size - 1) / fragmentSize + 1
        let offset = index * fragmentSize
        guard expectedCount == count, block.fragmentOffset == offset, block.fragmentSize == min(fragmentSize, size - offset) else {
            throw .envelope(
                400, "fragmentIndex, fragmentOffset, fragmentSize, totalFileFragment and totalFileSize do not describe one file cut in equal fragments")
        }
        self.size = size
        self.fragmentSize = fragmentSize
    }
}
