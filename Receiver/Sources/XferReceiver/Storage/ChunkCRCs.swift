import XferPrimitives

/// The CRC-32C each received chunk was checked against (its `Content-Digest`), so a
/// completion whose chunks all had one answers the file's CRC-32C combined from them, without
/// reading the file back and hashing it (the read-back's SHA-256 was half the receiver's CPU of
/// a patch upload). Four bytes and a bit per chunk; nothing until a chunk brings a CRC.
struct ChunkCRCs: Sendable {
    private var values: [UInt32] = []
    private var known: ChunkSet

    init(chunkCount: Int) { known = ChunkSet(chunkCount: chunkCount) }

    /// Records chunk `number`'s CRC-32C (1-based), or forgets it (`nil`: the chunk came without one).
    mutating func set(number: Int, _ crc: UInt32?) {
        guard let crc else {
            known.remove(number: number)
            return
        }
        if values.isEmpty { values = [UInt32](repeating: 0, count: known.capacity) }
        values[number - 1] = crc
        known.insert(number: number)
    }

    /// The file's CRC-32C when every chunk's is known; nil otherwise (or for an empty file).
    func combined(_ meta: UploadMeta) -> UInt32? {
        guard meta.chunkCount > 0, known.isComplete else { return nil }
        var crc = CRC32C.of([UInt8]())
        for number in 1...meta.chunkCount {
            crc = CRC32C.combine(crc, values[number - 1], lengthOfSecond: Int64(meta.byteRange(ofChunk: number).count))
        }
        return crc
    }

    /// `+n~<crc32c hex>`: the log record of a chunk received with its CRC-32C.
    static func record(chunk: Int, crc: UInt32) -> String { "+" + String(chunk) + "~" + CRC32.hex(crc) }
}
