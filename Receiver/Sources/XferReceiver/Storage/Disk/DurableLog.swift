#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// An append-only file of short text records, each durable before `append` returns.
///
/// Each record is written as `\nrecord;`: the newline opens it and the `;` closes it. A write torn by a
/// crash or a full disk leaves a prefix of that, which has no `;` and so never counts, and the next
/// record's own newline cuts it off, so a torn `+1` (from `+12`) can never be read back as chunk 1,
/// and nothing appended after a tear is lost.
///
/// A log may start with a header line (an upload's `meta`, in `uploads/<id>.log`): `readRecords` is
/// given the bytes after it.
struct DurableLog: Sendable {
    let path: String
    let durability: Durability

    /// `record` must be non-empty and must not contain `;`, whitespace or control characters.
    func append(_ record: String) async throws {
        try await append([record])
    }

    /// Appends `records` in one write, then waits for the store's next sync round: a group of
    /// acknowledgements costs one write, and the flush is shared with every other request.
    func append(_ records: [String]) async throws {
        guard !records.isEmpty else { return }
        try appendUnsynced(records)
        try await durability.sync()
    }

    /// The write alone, into the page cache (durable at the next sync round). Blocking, but only
    /// for a small write: callers make it inline rather than pay a thread hop.
    ///
    /// `creating: false` for a log that must already exist (an upload's own log): after a delete
    /// moved it away, an append fails instead of leaving a stray file behind.
    func appendUnsynced(_ records: [String], creating: Bool = true) throws {
        try POSIXFile.appendRecords(records, to: path, creating: creating)
    }

    /// Complete records in the order they were appended. Blocking: call from `BlockingIO` or at load time.
    static func readRecords(path: String) throws -> [Substring] {
        guard let bytes = try FileSystemOps.readAll(path) else { return [] }
        return parseRecords(bytes[...])
    }

    /// The complete records in `bytes` (a log's content, or what follows its header line).
    static func parseRecords(_ bytes: ArraySlice<UInt8>) -> [Substring] {
        var records: [Substring] = []
        forEachRecord(in: bytes) { records.append(Substring(decoding: $0, as: UTF8.self)) }
        return records
    }

    /// Calls `body` with each complete record's bytes, in order, with no string made: an
    /// upload's log holds a record per chunk, and loading a million of them as Substrings
    /// (each retaining the log's text) was most of the receiver's answer to a resume.
    static func forEachRecord(in bytes: ArraySlice<UInt8>, _ body: (ArraySlice<UInt8>) throws -> Void) rethrows {
        var start = bytes.startIndex
        var index = bytes.startIndex
        while index < bytes.endIndex {
            switch bytes[index] {
            case UInt8(ascii: ";"):
                if start < index { try body(bytes[start..<index]) }
                start = index + 1
            case UInt8(ascii: "\n"), UInt8(ascii: "\r"), UInt8(ascii: " "), UInt8(ascii: "\t"):
                // A newline inside a token means the token before it was torn: drop it.
                start = index + 1
            default:
                break
            }
            index += 1
        }
    }

    /// Printable ASCII without `;` (bytes, not Characters: this runs on every append).
    static func isValidRecord(_ record: String) -> Bool {
        !record.isEmpty && record.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: ";") }
    }
}

extension POSIXFile {
    /// `records` in DurableLog's form (`\nrecord;` each), appended in one write, not synced.
    /// Blocking, but only for a small write into the page cache.
    static func appendRecords(_ records: [String], to path: String, creating: Bool = true) throws {
        precondition(records.allSatisfy(DurableLog.isValidRecord), "invalid log record")
        var bytes: [UInt8] = []
        for record in records {
            bytes.append(UInt8(ascii: "\n"))
            bytes.append(contentsOf: record.utf8)
            bytes.append(UInt8(ascii: ";"))
        }
        // O_APPEND keeps concurrent appends from different chunks from overwriting each other.
        let file = try POSIXFile.open(path, O_WRONLY | O_APPEND | (creating ? O_CREAT : 0))
        defer { file.close() }
        try bytes.withUnsafeBytes { try file.writeAll($0) }
    }
}
