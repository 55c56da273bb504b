import Foundation

/// What a job listing needs from a job's record, kept in a compact binary
/// form beside the JSON record (`summaries` database).
///
/// Decoding JSON records with `JSONDecoder` took most of the time of listing
/// 10,000 jobs (about 0.6 s of 1.1 s, release build); reading this form is a
/// few string copies.
///
/// `package`: a `JobStateStore` returns listings, and needs the id, phase,
/// time and file sizes to index and count what it stores.
package struct JobListing: Sendable, Hashable {
    package struct File: Sendable, Hashable {
        var path: String
        package internal(set) var size: Int64
        package internal(set) var chunkSize: Int
    }

    package internal(set) var id: JobID
    var backend: String
    var target: String
    package internal(set) var phase: JobPhase
    var createdAt: Date
    package internal(set) var updatedAt: Date
    var lastError: String?
    package internal(set) var files: [File]

    package init(_ record: JobRecord) {
        id = record.id
        backend = record.backend
        target = record.target
        phase = record.phase
        createdAt = record.createdAt
        updatedAt = record.updatedAt
        lastError = record.lastError
        files = record.files.map { File(path: $0.path, size: $0.size, chunkSize: $0.chunkSize) }
    }

    private static let version: UInt8 = 1
    private static let noString = UInt32.max

    /// Version, phase, times, strings with u32 lengths, then the files.
    package var encoded: [UInt8] {
        var out: [UInt8] = [Self.version, Self.code(of: phase)]
        Self.append(createdAt.timeIntervalSince1970.bitPattern, to: &out)
        Self.append(updatedAt.timeIntervalSince1970.bitPattern, to: &out)
        Self.append(backend, to: &out)
        Self.append(target, to: &out)
        if let lastError {
            Self.append(lastError, to: &out)
        } else {
            Self.append(UInt64(Self.noString), bytes: 4, to: &out)
        }
        Self.append(UInt64(files.count), bytes: 4, to: &out)
        for file in files {
            Self.append(UInt64(bitPattern: file.size), to: &out)
            Self.append(UInt64(max(0, file.chunkSize)), to: &out)
            Self.append(file.path, to: &out)
        }
        return out
    }

    /// Nil for bytes of another version or cut short: the caller then reads
    /// the JSON record instead.
    package init?(id: JobID, decoding bytes: [UInt8]) {
        var reader = Reader(bytes: bytes)
        guard reader.byte() == Self.version, let phaseCode = reader.byte(), let phase = Self.phase(code: phaseCode),
            let created = reader.integer(8), let updated = reader.integer(8),
            let backend = reader.string(), let target = reader.string(), let lastError = reader.optionalString(),
            let count = reader.integer(4), count <= UInt64(bytes.count)
        else { return nil }
        var files: [File] = []
        files.reserveCapacity(Int(count))
        for _ in 0..<count {
            guard let size = reader.integer(8), let chunkSize = reader.integer(8), let path = reader.string() else { return nil }
            files.append(File(path: path, size: Int64(bitPattern: size), chunkSize: Int(clamping: chunkSize)))
        }
        self.id = id
        self.phase = phase
        self.createdAt = Date(timeIntervalSince1970: Double(bitPattern: created))
        self.updatedAt = Date(timeIntervalSince1970: Double(bitPattern: updated))
        self.backend = backend
        self.target = target
        self.lastError = lastError
        self.files = files
    }

    private static func code(of phase: JobPhase) -> UInt8 {
        switch phase {
        case .unfinished: return 0
        case .completed: return 1
        case .failed: return 2
        }
    }

    private static func phase(code: UInt8) -> JobPhase? {
        switch code {
        case 0: return .unfinished
        case 1: return .completed
        case 2: return .failed
        default: return nil
        }
    }

    private static func append(_ value: UInt64, bytes: Int = 8, to out: inout [UInt8]) {
        for shift in 0..<bytes { out.append(UInt8(truncatingIfNeeded: value >> UInt64(8 * shift))) }
    }

    private static func append(_ text: String, to out: inout [UInt8]) {
        let utf8 = Array(text.utf8)
        append(UInt64(utf8.count), bytes: 4, to: &out)
        out.append(contentsOf: utf8)
    }

    private struct Reader {
        let bytes: [UInt8]
        var offset = 0

        mutating func byte() -> UInt8? {
            guard offset < bytes.count else { return nil }
            defer { offset += 1 }
            return bytes[offset]
        }

        /// A little-endian unsigned integer of `size` bytes.
        mutating func integer(_ size: Int) -> UInt64? {
            guard bytes.count - offset >= size else { return nil }
            var value: UInt64 = 0
            for index in 0..<size { value |= UInt64(bytes[offset + index]) << UInt64(8 * index) }
            offset += size
            return value
        }

        mutating func string() -> String? {
            guard let length = integer(4), length != UInt64(JobListing.noString), bytes.count - offset >= Int(length) else {
                return nil
            }
            defer { offset += Int(length) }
            return String(decoding: bytes[offset..<(offset + Int(length))], as: UTF8.self)
        }

        /// A string, or `.some(nil)` for the marker of none.
        mutating func optionalString() -> String?? {
            let start = offset
            guard let length = integer(4) else { return nil }
            if length == UInt64(JobListing.noString) { return .some(nil) }
            offset = start
            return string().map { .some($0) }
        }
    }
}
