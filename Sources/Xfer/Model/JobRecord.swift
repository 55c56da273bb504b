import Foundation

/// A job's identity: derived from what the user asked for (backend, target
/// and files), so re-running the same push finds the same job.
public struct JobID: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible, Comparable {
    /// 16 lowercase hex digits.
    public let rawValue: String
    /// Wraps an id as stored (see `isWellFormed`).
    public init(rawValue: String) { self.rawValue = rawValue }
    /// The id as shown.
    public var description: String { rawValue }
    /// Ids order as their text does.
    public static func < (a: JobID, b: JobID) -> Bool { a.rawValue < b.rawValue }

    /// A job id is 16 lowercase hex digits; anything else is not one of ours.
    public var isWellFormed: Bool {
        rawValue.utf8.count == 16 && rawValue.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
    }
}

/// Where a job stands.
public enum JobPhase: String, Sendable, Codable, Hashable {
    /// Created or interrupted; a re-run resumes it.
    case unfinished
    /// Every file is on the server.
    case completed
    /// Stopped on an error that retrying did not fix; a re-run resumes it.
    case failed
}

/// The identity of a local file when the job was created. A resume refuses
/// to go on if any of it changed, since the server holds the old bytes.
public struct FileIdentity: Sendable, Hashable, Codable {
    /// Size in bytes.
    public var size: Int64
    /// Modification time, in nanoseconds since 1970.
    public var modificationTimeNanoseconds: Int64
    /// Inode number (a replaced file gets another).
    public var inode: UInt64
    /// The device holding the file.
    public var device: UInt64
}

/// One file of a job as the state store keeps it.
struct FileRecord: Sendable, Hashable, Codable {
    var path: String
    var identity: FileIdentity
    /// The chunk size in force for this file (the server may change it when
    /// the file is opened, before any chunk is sent).
    var chunkSize: Int
    /// True once the backend's open step answered and its handles are stored.
    var isOpen = false
    var handles = ServerHandles()
    /// The file's URL on the server once it is complete.
    var url: String?

    var size: Int64 { identity.size }
    var name: String { (path as NSString).lastPathComponent }
}

/// A job as the state store keeps it: everything but chunk progress, which
/// lives in per-file bitmaps.
///
/// `package`, with every member internal: a `JobStateStore` outside this
/// module stores records through `Codable` and reads their fields via
/// `JobListing`.
package struct JobRecord: Sendable, Hashable, Codable {
    var id: JobID
    var backend: String
    var target: String
    var createdAt: Date
    var updatedAt: Date
    var phase: JobPhase = .unfinished
    var lastError: String?
    var concurrency: Int
    /// True once the backend's job-level start step answered and its handles are stored.
    var isStarted = false
    var handles = ServerHandles()
    var files: [FileRecord]
}
