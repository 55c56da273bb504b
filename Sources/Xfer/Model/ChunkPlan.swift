/// How a file of a given size is cut into chunks.
///
/// Every chunk has `chunkSize` bytes except the last, which holds the rest.
/// A zero-byte file has no chunks unless the protocol wants one empty chunk
/// to announce the file (multipart and sequence do; patch does not).
public struct ChunkPlan: Sendable, Hashable, Codable {
    /// The file's size in bytes.
    public let fileSize: Int64
    /// The size of every chunk but the last.
    public let chunkSize: Int
    /// The number of chunks.
    public let count: Int

    /// Cuts a file of `fileSize` bytes into chunks of `chunkSize` (> 0).
    public init(fileSize: Int64, chunkSize: Int, emptyFileHasOneChunk: Bool = false) {
        precondition(fileSize >= 0 && chunkSize > 0, "a plan needs a size ≥ 0 and a chunk size > 0")
        self.fileSize = fileSize
        self.chunkSize = chunkSize
        if fileSize == 0 {
            count = emptyFileHasOneChunk ? 1 : 0
        } else {
            let size = Int64(chunkSize)
            count = Int((fileSize + size - 1) / size)
        }
    }

    /// How the engine cuts a file of `fileSize` bytes for a backend with `traits`: the one plan
    /// the scheduler, the worker, streams and `details(of:)` all use (a chunk size of 0, as a
    /// record of an empty stream may hold, counts as 1).
    public init(fileSize: Int64, chunkSize: Int, traits: BackendTraits) {
        self.init(fileSize: fileSize, chunkSize: max(1, chunkSize), emptyFileHasOneChunk: traits.emptyFileHasOneChunk)
    }

    /// The byte offset of chunk `index` (0-based).
    public func offset(of index: Int) -> Int64 {
        precondition(index >= 0 && index < count, "chunk \(index) is outside 0..<\(count)")
        return Int64(index) * Int64(chunkSize)
    }

    /// The length in bytes of chunk `index` (0-based).
    public func length(of index: Int) -> Int {
        let start = offset(of: index)
        return Int(min(Int64(chunkSize), fileSize - start))
    }

    /// The half-open byte range of chunk `index`.
    public func range(of index: Int) -> Range<Int64> {
        let start = offset(of: index)
        return start..<(start + Int64(length(of: index)))
    }
}

extension FileRecord {
    /// The file's chunk plan as the engine sends it to a backend with `traits`.
    func chunkPlan(_ traits: BackendTraits) -> ChunkPlan {
        ChunkPlan(fileSize: size, chunkSize: chunkSize, traits: traits)
    }
}
