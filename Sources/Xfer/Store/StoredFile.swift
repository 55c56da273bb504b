import FoundationEssentials

/// How the state store keeps a `FileRecord`: three values under the file's
/// key in three databases, each written once in the usual life of a file.
///
/// - body (`files`): what the walk found (paths, identity, chunk size) and
///   the last run's failure; written when the file joins the job.
/// - server (`handles`): the open mark and the server's handles; written
///   when the file is opened.
/// - url (`urls`): written when the file completes.
///
/// One record holding all three grew twice per file after it had been
/// packed into its page, and LMDB splits a full page in half to grow a
/// value in it: the `files` pages of a finished tree were about half empty
/// (12 records per 4 KiB page). Written as inserts, in about the order of
/// the keys, they pack (LMDB splits a page at its end for an insert there).
package enum StoredFile {
    private static let bodyVersion: UInt8 = 2

    // MARK: Body

    /// How the absolute path is kept: written only when it does not follow
    /// from the root it was found under (in a tree it always does, and it
    /// was a quarter of a record).
    private enum PathForm: UInt8 {
        case whole = 0
        case underRoot = 1
        case root = 2
    }

    static func body(of record: FileRecord, rootPath: String?) -> [UInt8] {
        var writer = RecordWriter(capacity: 48 + record.relativePath.utf8.count)
        writer.byte(bodyVersion)
        if let rootPath, record.path == rootPath {
            writer.byte(PathForm.root.rawValue)
        } else if let rootPath, FileRecord.path(record.path, isJoinOf: rootPath, record.relativePath) {
            writer.byte(PathForm.underRoot.rawValue)
        } else {
            writer.byte(PathForm.whole.rawValue)
            writer.string(record.path)
        }
        writer.string(record.relativePath)
        writer.int(record.root)
        record.identity.write(to: &writer)
        writer.int(record.chunkSize)
        writer.optionalString(record.failure)
        return writer.bytes
    }

    // MARK: Server

    /// Nil when there is nothing to keep (not opened, no handles).
    static func server(of record: FileRecord) -> [UInt8]? {
        guard record.isOpen || !record.handles.isEmpty else { return nil }
        var writer = RecordWriter(capacity: 48)
        writer.bool(record.isOpen)
        record.handles.write(to: &writer)
        return writer.bytes
    }

    // MARK: URL

    private struct URLForm: OptionSet {
        let rawValue: UInt8
        /// Begins with the job's target.
        static let target = URLForm(rawValue: 1)
        /// Ends with the file's relative path.
        static let relativePath = URLForm(rawValue: 2)
        /// Holds a handle's value (a handle name, the text before it and after it follow).
        static let handle = URLForm(rawValue: 4)
    }

    /// A URL mostly repeats what the record holds already: the job's target,
    /// an upload id or URL among the handles, the relative path. Those parts
    /// are named rather than written (about 40 of a URL's 80 bytes).
    static func url(_ url: String, of record: FileRecord, target: String) -> [UInt8] {
        // Compared as bytes: String comparison would take a composed "é" for a
        // decomposed one, and the URL rebuilt would not be the one received.
        var form: URLForm = []
        var middle = Array(url.utf8)[...]
        let targetBytes = Array(target.utf8)
        if !targetBytes.isEmpty, middle.starts(with: targetBytes) {
            form.insert(.target)
            middle = middle.dropFirst(targetBytes.count)
        }
        let pathBytes = Array(record.relativePath.utf8)
        if !pathBytes.isEmpty, middle.count >= pathBytes.count, middle.suffix(pathBytes.count).elementsEqual(pathBytes) {
            form.insert(.relativePath)
            middle = middle.dropLast(pathBytes.count)
        }
        var writer = RecordWriter(capacity: 16 + middle.count)
        // The longest non-secret handle found in the middle (an upload URL beats an id in it).
        var best: (name: String, range: Range<Int>)?
        for (name, value) in record.handles.values.sorted(by: { $0.key < $1.key })
        where !record.handles.secretKeys.contains(name) && value.utf8.count > (best?.range.count ?? 0) {
            if let range = firstRange(of: Array(value.utf8), in: middle) { best = (name, range) }
        }
        if let best {
            form.insert(.handle)
            writer.byte(form.rawValue)
            writer.string(best.name)
            writer.string(String(decoding: middle[..<best.range.lowerBound], as: UTF8.self))
            writer.string(String(decoding: middle[best.range.upperBound...], as: UTF8.self))
        } else {
            writer.byte(form.rawValue)
            writer.string(String(decoding: middle, as: UTF8.self))
        }
        return writer.bytes
    }

    /// Where `needle` first occurs in `haystack` (indices of `haystack`).
    private static func firstRange(of needle: [UInt8], in haystack: ArraySlice<UInt8>) -> Range<Int>? {
        guard !needle.isEmpty, needle.count <= haystack.count else { return nil }
        var start = haystack.startIndex
        while start + needle.count <= haystack.endIndex {
            if haystack[start] == needle[0], haystack[start..<(start + needle.count)].elementsEqual(needle) {
                return start..<(start + needle.count)
            }
            start += 1
        }
        return nil
    }

    // MARK: Decoding

    /// The record from its parts; nil when one does not decode.
    static func decode(body: [UInt8], server: [UInt8]?, url: [UInt8]?, roots: [String], target: String) -> FileRecord? {
        var reader = RecordReader(body)
        guard reader.byte() == bodyVersion, let form = reader.byte().flatMap(PathForm.init(rawValue:)) else { return nil }
        var path = ""
        if form == .whole {
            guard let whole = reader.string() else { return nil }
            path = whole
        }
        guard let relativePath = reader.string(), let root = reader.int(), let identity = FileIdentity(from: &reader),
            let chunkSize = reader.int(), let failure = reader.optionalString(), reader.isAtEnd
        else { return nil }
        if form != .whole {
            guard roots.indices.contains(root) else { return nil }
            path = form == .root ? roots[root] : FileRecord.join(roots[root], relativePath)
        }
        var record = FileRecord(
            path: path, relativePath: relativePath, root: root, identity: identity, chunkSize: chunkSize, failure: failure)
        if let server {
            var reader = RecordReader(server)
            guard let isOpen = reader.bool(), let handles = ServerHandles(from: &reader), reader.isAtEnd else { return nil }
            record.isOpen = isOpen
            record.handles = handles
        }
        if let url {
            guard let decoded = decodeURL(url, record: record, target: target) else { return nil }
            record.url = decoded
        }
        return record
    }

    private static func decodeURL(_ bytes: [UInt8], record: FileRecord, target: String) -> String? {
        var reader = RecordReader(bytes)
        guard let raw = reader.byte() else { return nil }
        let form = URLForm(rawValue: raw)
        var middle: String
        if form.contains(.handle) {
            guard let name = reader.string(), let before = reader.string(), let after = reader.string(),
                let value = record.handles[name]
            else { return nil }
            middle = before + value + after
        } else {
            guard let literal = reader.string() else { return nil }
            middle = literal
        }
        guard reader.isAtEnd else { return nil }
        if form.contains(.target) { middle = target + middle }
        if form.contains(.relativePath) { middle += record.relativePath }
        return middle
    }

    // MARK: In one value

    /// The three parts in one value (each length-prefixed; the path whole,
    /// the URL relative to no target), for a store that keeps a file in one
    /// row (the SQLite store the benchmarks compare with).
    package static func whole(_ record: FileRecord) -> [UInt8] {
        var writer = RecordWriter(capacity: 128)
        for part in [body(of: record, rootPath: nil), server(of: record), record.url.map { url($0, of: record, target: "") }] {
            if let part {
                writer.bool(true)
                writer.varint(UInt64(part.count))
                writer.bytes(part)
            } else {
                writer.bool(false)
            }
        }
        return writer.bytes
    }

    package static func decode(whole bytes: [UInt8]) -> FileRecord? {
        var reader = RecordReader(bytes)
        var parts: [[UInt8]?] = []
        for _ in 0..<3 {
            guard let present = reader.bool() else { return nil }
            if present {
                guard let count = reader.varint(), let part = reader.bytes(Int(clamping: count)) else { return nil }
                parts.append(part)
            } else {
                parts.append(nil)
            }
        }
        guard reader.isAtEnd, let body = parts[0] else { return nil }
        return decode(body: body, server: parts[1], url: parts[2], roots: [], target: "")
    }
}
