#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// An append-only file of short text records, each synced before `append` returns.
///
/// Each record is written as `\nrecord;`: the newline opens it and the `;` closes it. A write torn by a
/// crash or a full disk leaves a prefix of that, which has no `;` and so never counts, and the next
/// record's own newline cuts it off, so a torn `+1` (from `+12`) can never be read back as chunk 1,
/// and nothing appended after a tear is lost.
struct DurableLog: Sendable {
    let path: String
    let io: BlockingIO

    /// `record` must be non-empty and must not contain `;`, whitespace or control characters.
    func append(_ record: String) async throws {
        try await append([record])
    }

    /// Appends `records` in one write and one sync: a group of acknowledgements costs what one does.
    func append(_ records: [String]) async throws {
        guard !records.isEmpty else { return }
        precondition(records.allSatisfy(Self.isValidRecord), "invalid log record")
        let bytes = Array(records.map { "\n" + $0 + ";" }.joined().utf8)
        let path = self.path
        try await io.run {
            // O_APPEND keeps concurrent appends from different chunks from overwriting each other.
            let file = try POSIXFile.open(path, O_WRONLY | O_APPEND | O_CREAT)
            defer { file.close() }
            try bytes.withUnsafeBytes { try file.writeAll($0) }
            try file.syncData()
        }
    }

    /// Complete records in the order they were appended. Blocking: call from `BlockingIO` or at load time.
    static func readRecords(path: String) throws -> [Substring] {
        guard let bytes = try FileSystemOps.readAll(path) else { return [] }
        let text = String(decoding: bytes, as: UTF8.self)
        var records: [Substring] = []
        // Bytes, not Characters: records are ASCII, and walking grapheme clusters made loading a
        // million-record log take most of a second.
        let utf8 = text.utf8
        var start = utf8.startIndex
        var index = utf8.startIndex
        while index < utf8.endIndex {
            let byte = utf8[index]
            if byte == UInt8(ascii: ";") {
                if start < index { records.append(Substring(utf8[start..<index])) }
                start = utf8.index(after: index)
            } else if byte == UInt8(ascii: "\n") || byte == UInt8(ascii: "\r") || byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") {
                // A newline inside a token means the token before it was torn: drop it.
                start = utf8.index(after: index)
            }
            index = utf8.index(after: index)
        }
        return records
    }

    static func isValidRecord(_ record: String) -> Bool {
        !record.isEmpty && !record.contains(where: { $0 == ";" || $0.isWhitespace || $0.isNewline || $0.asciiValue.map { $0 < 0x20 } == true })
    }
}
