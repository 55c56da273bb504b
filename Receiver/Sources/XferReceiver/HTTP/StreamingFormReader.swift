import FoundationEssentials
import NIOCore
import XferPrimitives

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Why a `multipart/form-data` body could not be read.
enum FormFailure: Error, Equatable, CustomStringConvertible {
    case malformed(String)
    case tooLarge(String)
    /// The body stopped mid-way (the client went away, a cut connection).
    case interrupted
    /// A part read as `content(length:)` does not end where its length says: the delimiter does
    /// not follow that many bytes, or the body ends before them.
    case partLength

    var description: String {
        switch self {
        case .malformed(let reason): "malformed multipart/form-data: \(reason)"
        case .tooLarge(let reason): reason
        case .interrupted: "the request body was cut off"
        case .partLength: "a part does not end where the length its fields give says"
        }
    }
}

/// Bounds that keep a hostile or broken client from making the reader buffer a body.
enum FormLimits {
    /// All header lines of one part together.
    static let headerBytes = 8 * 1024
    static let parts = 32
    /// RFC 2046 caps boundaries at 70 characters.
    static let boundaryLength = 70
}

/// One part's headers.
struct FormPart: Equatable {
    var name: String
    /// Present for file parts (possibly empty).
    var filename: String?
    var contentType: String?
}

/// Reads a `multipart/form-data` body part by part while it streams in.
///
/// Memory stays bounded whatever the body holds: at most one network read plus a delimiter's
/// length is buffered, text is collected only up to the caller's limit, and file content is
/// handed on as slices of what was read, piece by piece, never gathered.
///
/// Names are decoded the way browsers (and xfer's `MultipartForm`) encode them: a quoted value
/// ends at the next `"`, and `%22`, `%0D`, `%0A` stand for `"`, CR and LF.
final class StreamingFormReader<Body: AsyncSequence> where Body.Element == ByteBuffer {
    private enum State {
        case preamble
        /// Just after a delimiter: `--` closes the body, a line end opens a part.
        case boundaryLine
        case content
        case finished
    }

    private var iterator: Body.AsyncIterator
    private var buffer: ByteBuffer
    /// `CRLF--boundary`: what ends every part's content.
    private let delimiter: [UInt8]
    private var state = State.preamble
    private var partCount = 0

    init(body: Body, boundary: String) {
        iterator = body.makeAsyncIterator()
        delimiter = Array("\r\n--\(boundary)".utf8)
        // A body may open with the first boundary directly; a virtual line end lets the same
        // delimiter search find it.
        buffer = ByteBuffer(bytes: [13, 10])
    }

    /// The boundary of a `multipart/form-data` Content-Type, or nil when there is none usable.
    static func boundary(contentType: String?) -> String? {
        guard let contentType else { return nil }
        let parameters = contentType.split(separator: ";").map { $0.trimmingSpacesAndTabs() }
        guard parameters.first?.lowercased() == "multipart/form-data" else { return nil }
        for parameter in parameters.dropFirst() {
            guard let equals = parameter.firstIndex(of: "="),
                parameter[..<equals].trimmingSpacesAndTabs().lowercased() == "boundary"
            else { continue }
            var value = parameter[parameter.index(after: equals)...].trimmingSpacesAndTabs()
            if value.count >= 2, value.hasPrefix("\""), value.hasSuffix("\"") { value = String(value.dropFirst().dropLast()) }
            guard (1...FormLimits.boundaryLength).contains(value.utf8.count), value.utf8.allSatisfy({ (0x20...0x7e).contains($0) })
            else { return nil }
            return value
        }
        return nil
    }

    // MARK: Parts

    /// The next part's headers, skipping whatever is left of the current part; nil after the
    /// closing boundary.
    func nextPart() async throws(FormFailure) -> FormPart? {
        switch state {
        case .finished:
            return nil
        case .content:
            while try await nextContent() != nil {}
        case .preamble:
            try await skipPreamble()
        case .boundaryLine:
            break
        }
        try await fill(atLeast: 2)
        if buffer.readableBytesView.starts(with: [UInt8(ascii: "-"), UInt8(ascii: "-")]) {
            buffer.moveReaderIndex(forwardBy: 2)
            state = .finished
            return nil
        }
        // RFC 2046 allows spaces after a boundary ("transport padding"), nothing else.
        let padding = try await readLine(limit: 256, inside: "a boundary line", tooLong: "a boundary line is too long")
        guard padding.allSatisfy({ $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") }) else {
            throw .malformed("unexpected bytes after a boundary")
        }
        partCount += 1
        guard partCount <= FormLimits.parts else { throw .tooLarge("more than \(FormLimits.parts) parts") }
        let part = try await readHeaders()
        state = .content
        return part
    }

    /// Consumes the rest of the body and fails unless it is the closing boundary: called after
    /// the last part a request may have.
    func finish() async throws(FormFailure) {
        if let extra = try await nextPart() { throw .malformed("unexpected part '\(extra.name.prefix(40))' after the last one") }
    }

    // MARK: Content

    /// The next piece of the current part's content; nil at its end.
    func nextContent() async throws(FormFailure) -> ByteBuffer? {
        guard case .content = state else { return nil }
        while true {
            if let index = firstDelimiter() {
                if index > 0 { return buffer.readSlice(length: index) }
                buffer.moveReaderIndex(forwardBy: delimiter.count)
                state = .boundaryLine
                return nil
            }
            // Everything but a possible start of the delimiter is content. Only bytes that begin
            // it (a CR, then what follows it in the delimiter) are held back: usually none, so the
            // next read becomes the buffer as it is instead of being copied behind a held tail
            // (that copy was every byte of a file part once more).
            let safe = buffer.readableBytes - heldBack()
            if safe > 0 { return buffer.readSlice(length: safe) }
            guard try await readMore() else { throw .malformed("the body ended inside a part") }
        }
    }

    /// The next piece of a part whose length the caller knows, `remaining` bytes of it still to
    /// come: handed on as it arrives, not searched for the delimiter, which must follow the last
    /// of them. A protocol whose fields fix a part's length (a sequence block, a multipart
    /// fragment) so spares the search of every byte for a CR (`memchr`, 7 % of the thread that
    /// receives a sequence block). The part then ends at its length even where its bytes hold the
    /// delimiter (a boundary the client's content happens to contain), which the search would
    /// have taken for its end: those bytes are checked by the protocol's digest like any others.
    func nextContent(remaining: Int) async throws(FormFailure) -> ByteBuffer? {
        guard case .content = state else { return nil }
        if remaining > 0 {
            if buffer.readableBytes == 0 {
                guard try await readMore() else { throw .partLength }
            }
            return buffer.readSlice(length: min(remaining, buffer.readableBytes))
        }
        while buffer.readableBytes < delimiter.count {
            guard try await readMore() else { throw .partLength }
        }
        let delimited = buffer.withUnsafeReadableBytes { raw in
            delimiter.withUnsafeBytes { memcmp(raw.baseAddress!, $0.baseAddress!, $0.count) == 0 }
        }
        guard delimited else { throw .partLength }
        buffer.moveReaderIndex(forwardBy: delimiter.count)
        state = .boundaryLine
        return nil
    }

    /// The current part's whole content as UTF-8 text, refused beyond `limit` bytes.
    func readText(limit: Int) async throws(FormFailure) -> String {
        var bytes: [UInt8] = []
        while let piece = try await nextContent() {
            guard bytes.count + piece.readableBytes <= limit else { throw .tooLarge("a text field is longer than \(limit) bytes") }
            bytes.append(contentsOf: piece.readableBytesView)
        }
        guard let text = String(validating: bytes, as: UTF8.self) else { throw .malformed("a text field is not UTF-8") }
        return text
    }

    // MARK: Reading

    private func skipPreamble() async throws(FormFailure) {
        while true {
            if let index = firstDelimiter() {
                buffer.moveReaderIndex(forwardBy: index + delimiter.count)
                state = .boundaryLine
                return
            }
            let safe = buffer.readableBytes - (delimiter.count - 1)
            if safe > 0 { buffer.moveReaderIndex(forwardBy: safe) }
            guard try await readMore() else { throw .malformed("no boundary found") }
        }
    }

    private func readHeaders() async throws(FormFailure) -> FormPart {
        var remaining = FormLimits.headerBytes
        var disposition: String?
        var contentType: String?
        while true {
            let line = try await readLine(
                limit: remaining, inside: "part headers", tooLong: "a part's headers exceed \(FormLimits.headerBytes) bytes")
            remaining -= line.count + 2
            if line.isEmpty { break }
            guard let text = String(validating: line, as: UTF8.self), let colon = text.firstIndex(of: ":") else {
                throw .malformed("a part header is not 'Name: value' in UTF-8")
            }
            let name = text[..<colon].trimmingSpacesAndTabs().lowercased()
            let value = text[text.index(after: colon)...].trimmingSpacesAndTabs()
            switch name {
            case "content-disposition": disposition = value
            case "content-type": contentType = value
            default: break
            }
        }
        guard let disposition, var part = Self.parseDisposition(disposition) else {
            throw .malformed("a part lacks 'Content-Disposition: form-data; name=...'")
        }
        part.contentType = contentType
        return part
    }

    /// `form-data; name="..."[; filename="..."]`.
    static func parseDisposition(_ value: String) -> FormPart? {
        var rest = Substring(value)
        let type = rest.prefix { $0 != ";" }
        guard type.trimmingSpacesAndTabs().lowercased() == "form-data" else { return nil }
        rest = rest.dropFirst(type.count)
        var parameters: [String: String] = [:]
        while let semicolon = rest.first, semicolon == ";" {
            rest = rest.dropFirst().drop { $0 == " " || $0 == "\t" }
            let key = rest.prefix { $0 != "=" && $0 != ";" }
            rest = rest.dropFirst(key.count)
            guard rest.first == "=" else { continue }
            rest = rest.dropFirst()
            let parameterValue: Substring
            if rest.first == "\"" {
                rest = rest.dropFirst()
                parameterValue = rest.prefix { $0 != "\"" }
                rest = rest.dropFirst(parameterValue.count)
                guard rest.first == "\"" else { return nil }
                rest = rest.dropFirst().drop { $0 != ";" }
            } else {
                let token = rest.prefix { $0 != ";" }
                rest = rest.dropFirst(token.count)
                parameterValue = Substring(token.trimmingSpacesAndTabs())
            }
            let name = key.trimmingSpacesAndTabs().lowercased()
            if parameters[name] == nil { parameters[name] = unescape(String(parameterValue)) }
        }
        guard let name = parameters["name"] else { return nil }
        return FormPart(name: name, filename: parameters["filename"])
    }

    private static func unescape(_ text: String) -> String {
        text.replacing("%22", with: "\"")
            .replacing("%0D", with: "\r")
            .replacing("%0A", with: "\n")
    }

    /// One line without its CRLF; refused (with `tooLong`) when longer than `limit`.
    private func readLine(limit: Int, inside place: String, tooLong: String) async throws(FormFailure) -> [UInt8] {
        while true {
            if let end = firstLineEnd() {
                guard end <= limit else { throw .tooLarge(tooLong) }
                let line = buffer.readBytes(length: end) ?? []
                buffer.moveReaderIndex(forwardBy: 2)
                return line
            }
            guard buffer.readableBytes <= limit + 1 else { throw .tooLarge(tooLong) }
            guard try await readMore() else { throw .malformed("the body ended inside \(place)") }
        }
    }

    private func fill(atLeast count: Int) async throws(FormFailure) {
        while buffer.readableBytes < count {
            guard try await readMore() else { throw .malformed("the body ended without a closing boundary") }
        }
    }

    /// Appends the next network read; false at the end of the body.
    private func readMore() async throws(FormFailure) -> Bool {
        var incoming: ByteBuffer
        repeat {
            do {
                guard let next = try await iterator.next() else { return false }
                incoming = next
            } catch {
                throw .interrupted
            }
        } while incoming.readableBytes == 0
        if buffer.readableBytes == 0 {
            buffer = incoming
        } else {
            // Only a delimiter's length is ever left over, so this copy stays one read's size.
            var combined = ByteBufferAllocator().buffer(capacity: buffer.readableBytes + incoming.readableBytes)
            combined.writeImmutableBuffer(buffer)
            combined.writeImmutableBuffer(incoming)
            buffer = combined
        }
        return true
    }

    /// How many bytes at the end of the buffer could start a delimiter the next read completes:
    /// the longest end of it that is a proper prefix of the delimiter (none holds it whole).
    private func heldBack() -> Int {
        buffer.withUnsafeReadableBytes { raw -> Int in
            let count = raw.count
            for start in max(0, count - (delimiter.count - 1))..<count where raw[start] == delimiter[0] {
                let tail = count - start
                if delimiter.withUnsafeBytes({ memcmp(raw.baseAddress! + start, $0.baseAddress!, tail) == 0 }) { return tail }
            }
            return 0
        }
    }

    private func firstDelimiter() -> Int? {
        Self.firstIndex(of: delimiter, in: buffer)
    }

    private func firstLineEnd() -> Int? {
        Self.firstIndex(of: [13, 10], in: buffer)
    }

    /// Every needle here starts with CR, rare in most content, so `memchr` skips ahead fast. Its
    /// second byte (LF) is compared before the rest: in random bytes a CR comes every 256, and
    /// a `memcmp` for each was 2 % of a sequence block's receiving thread.
    private static func firstIndex(of needle: [UInt8], in buffer: ByteBuffer) -> Int? {
        buffer.withUnsafeReadableBytes { raw -> Int? in
            let count = raw.count
            let length = needle.count
            guard count >= length, let base = raw.baseAddress else { return nil }
            var start = 0
            while start <= count - length {
                guard let found = memchr(base + start, Int32(needle[0]), count - length + 1 - start) else { return nil }
                let index = base.distance(to: UnsafeRawPointer(found))
                if length > 1, raw[index + 1] != needle[1] {
                    start = index + 1
                    continue
                }
                let matches = needle.withUnsafeBytes { memcmp(base + index, $0.baseAddress!, length) == 0 }
                if matches { return index }
                start = index + 1
            }
            return nil
        }
    }
}

extension StreamingFormReader {
    /// The current part's content as the byte stream `BodyWriter` consumes; its errors are
    /// `FormFailure`s.
    var content: PartContent { PartContent(reader: self, length: nil) }

    /// The current part's content, `length` bytes that the delimiter must follow
    /// (`nextContent(remaining:)`).
    func content(length: Int) -> PartContent { PartContent(reader: self, length: length) }

    struct PartContent: AsyncSequence {
        typealias Element = ByteBuffer

        let reader: StreamingFormReader
        let length: Int?

        struct AsyncIterator: AsyncIteratorProtocol {
            let reader: StreamingFormReader
            var remaining: Int?

            mutating func next() async throws -> ByteBuffer? {
                guard let left = remaining else { return try await reader.nextContent() }
                let piece = try await reader.nextContent(remaining: left)
                remaining = left - (piece?.readableBytes ?? 0)
                return piece
            }
        }

        func makeAsyncIterator() -> AsyncIterator { AsyncIterator(reader: reader, remaining: length) }
    }
}
