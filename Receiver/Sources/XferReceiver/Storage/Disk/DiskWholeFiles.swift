import FoundationEssentials
import Hummingbird
import Logging
import NIOCore
import NIOPosix
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// `PUT /raw/NAME` on disk: `ROOT/raw/NAME`.
extension DiskStorage: WholeFileStoring {
    /// Streamed as chunk bodies are (`BodyWriter`: pwrite into the page cache), synced with one
    /// fdatasync at the end, then renamed into place under `ROOT/raw/`.
    func storeWhole<Body: AsyncSequence>(_ body: Body, name: String, limit: Int, declaredLength: Int?) async throws -> Int
    where Body.Element == ByteBuffer {
        // The routes checked it; checked again where it becomes a path, whoever calls.
        guard RelativePath.isValidComponent(name) else { throw UploadError.corrupt("an unsafe name reached the storage") }
        let io = uploads.io
        let directory = uploads.layout.root + "/raw"
        let partial = directory + "/.partial-" + UploadID.generate()
        try await io.run { try FileSystemOps.makeDirectory(directory) }
        let file = try POSIXFile.open(partial, O_WRONLY | O_CREAT | O_EXCL, mode: 0o644)
        let statistics = self.statistics
        let writer = BodyWriter(limit: limit, sync: .fileData(io), counted: { statistics.received($0) })
        let written: Int
        do {
            defer { file.close() }
            written = try await writer.write(body, to: .file(file), at: 0).count
        } catch {
            try? FileManager.default.removeItem(atPath: partial)
            throw error
        }
        try await io.run {
            try FileSystemOps.rename(partial, to: directory + "/" + name)
            try FileSystemOps.syncDirectory(directory)
        }
        return written
    }
}
