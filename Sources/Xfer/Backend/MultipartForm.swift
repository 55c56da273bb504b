/// A `multipart/form-data` body built around a chunk without copying it:
/// text fields and part headers become framing before and after the chunk,
/// which the body only names (see `RequestBody`).
///
/// Field names and file names are written the way browsers write them
/// (the WHATWG HTML form encoding): UTF-8, with `"` as `%22`, CR as `%0D` and
/// LF as `%0A`, so no name can end the header line or inject another header.
/// A server that reverses those three escapes gets the original name back.
public struct MultipartForm: Sendable {
    /// The boundary between parts; never occurs in a chunk by chance (24 random characters).
    public let boundary: String
    /// Everything before the chunk's bytes (all of the form while it has no chunk).
    private var before: [UInt8] = []
    /// Everything after them.
    private var after: [UInt8] = []
    private var chunk: ChunkPayload?

    /// `boundary` defaults to a random one; pass a fixed one in tests.
    public init(boundary: String? = nil) {
        self.boundary = boundary ?? "xfer-" + (0..<24).map { _ in
            String("0123456789abcdefghijklmnopqrstuvwxyz".randomElement()!)
        }.joined()
    }

    /// The `Content-Type` header value for this body.
    public var contentType: String { "multipart/form-data; boundary=\(boundary)" }

    /// Adds a text field.
    public mutating func addField(_ name: String, _ value: String) {
        var header = "--\(boundary)\r\n"
        header += "Content-Disposition: form-data; name=\"\(Self.escape(name))\"\r\n\r\n"
        append(Array(header.utf8) + Array(value.utf8) + Array("\r\n".utf8))
    }

    /// Adds a file part holding `chunk`'s bytes. A form carries at most one chunk.
    public mutating func addFile(
        _ name: String, filename: String, contentType: String = "application/octet-stream", chunk: ChunkPayload
    ) {
        precondition(self.chunk == nil, "a multipart form carries at most one chunk")
        append(partHeader(name, filename: filename, contentType: contentType))
        self.chunk = chunk
        after = Array("\r\n".utf8)
    }

    /// Adds a file part holding `bytes` (copied into the form: for small
    /// documents, not for a chunk).
    public mutating func addFile(
        _ name: String, filename: String, contentType: String = "application/octet-stream", bytes: [UInt8]
    ) {
        append(partHeader(name, filename: filename, contentType: contentType) + bytes + Array("\r\n".utf8))
    }

    /// The finished body (adds the closing boundary).
    public var body: RequestBody {
        let closing = Array("--\(boundary)--\r\n".utf8)
        guard let chunk else { return RequestBody(before + closing) }
        return RequestBody(chunk: chunk, before: before, after: after + closing)
    }

    private mutating func append(_ bytes: [UInt8]) {
        if chunk == nil { before += bytes } else { after += bytes }
    }

    private func partHeader(_ name: String, filename: String, contentType: String) -> [UInt8] {
        var header = "--\(boundary)\r\n"
        header += "Content-Disposition: form-data; name=\"\(Self.escape(name))\"; filename=\"\(Self.escape(filename))\"\r\n"
        header += "Content-Type: \(Self.headerSafe(contentType))\r\n\r\n"
        return Array(header.utf8)
    }

    /// Escapes a name for a quoted `Content-Disposition` parameter.
    public static func escape(_ name: String) -> String {
        var out = ""
        for scalar in name.unicodeScalars {
            switch scalar {
            case "\"": out += "%22"
            case "\r": out += "%0D"
            case "\n": out += "%0A"
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out
    }

    /// Reverses `escape`.
    public static func unescape(_ name: String) -> String {
        name.replacing("%22", with: "\"")
            .replacing("%0D", with: "\r")
            .replacing("%0A", with: "\n")
    }

    private static func headerSafe(_ value: String) -> String {
        String(value.unicodeScalars.filter { $0 != "\r" && $0 != "\n" })
    }
}

/// MIME types for the file extensions people upload most; everything else
/// is `application/octet-stream`.
public enum MIMEType {
    /// The MIME type for a file extension (without the dot, any case).
    public static func forFileExtension(_ ext: String) -> String {
        table[ext.lowercased()] ?? "application/octet-stream"
    }

    private static let table: [String: String] = [
        "mp4": "video/mp4", "m4v": "video/mp4", "mov": "video/quicktime", "webm": "video/webm",
        "mkv": "video/x-matroska", "avi": "video/x-msvideo",
        "jpg": "image/jpeg", "jpeg": "image/jpeg", "png": "image/png", "gif": "image/gif",
        "webp": "image/webp", "heic": "image/heic", "svg": "image/svg+xml",
        "mp3": "audio/mpeg", "m4a": "audio/mp4", "wav": "audio/wav", "ogg": "audio/ogg", "flac": "audio/flac",
        "pdf": "application/pdf", "zip": "application/zip", "gz": "application/gzip", "tar": "application/x-tar",
        "json": "application/json", "txt": "text/plain", "csv": "text/csv", "html": "text/html",
        "xml": "application/xml",
    ]
}
