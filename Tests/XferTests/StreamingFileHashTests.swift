import Foundation
import XCTest
import XferTestSupport

@testable import Xfer

final class StreamingFileHashTests: XCTestCase {
    /// A resumed job feeds only chunks past a large acknowledged prefix: the
    /// hash must still cover the whole file (hashed in the background).
    func testAFeedPastALargeGapStillHashesTheWholeFile() async throws {
        let dir = TemporaryDirectory()
        let path = dir.file("sparse.bin")
        let size = Int(StreamingFileHash.largestInlineGap) + (3 << 20)
        XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: nil))
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        try handle.truncate(atOffset: UInt64(size - (1 << 20)))
        try handle.seekToEnd()
        let tail = (0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        try handle.write(contentsOf: Data(tail))
        try handle.close()

        let file = try LocalFile(path: path)
        let hash = StreamingFileHash(file: file)
        try hash.feed(offset: Int64(size - (1 << 20)), bytes: tail)
        let digest = try await hash.finish()
        XCTAssertEqual(digest, try sha256sum(path))
    }

    func testSmallGapsAreFilledInline() async throws {
        let dir = TemporaryDirectory()
        let path = dir.file("a.bin")
        try makeTestFile(at: path, size: 3 << 20)
        let file = try LocalFile(path: path)
        let hash = StreamingFileHash(file: file)
        // The second MiB arrives first, then the third; the first is read from disk.
        try hash.feed(offset: 1 << 20, bytes: try file.read(offset: 1 << 20, length: 1 << 20))
        try hash.feed(offset: 2 << 20, bytes: try file.read(offset: 2 << 20, length: 1 << 20))
        let digest = try await hash.finish()
        XCTAssertEqual(digest, try sha256sum(path))
    }

    /// Chunks' passes feed from several threads at once, in blocks, out of
    /// order and with repeats (retries): whoever holds the turn hashes, the
    /// others skip, and every skipped byte is read back — the digest is the
    /// file's.
    func testConcurrentFeedersInAnyOrderGiveTheFilesDigest() async throws {
        let dir = TemporaryDirectory()
        let path = dir.file("c.bin")
        let chunk = 1 << 20
        let block = 64 << 10
        try makeTestFile(at: path, size: 24 * chunk + 12_345)
        let file = try LocalFile(path: path)
        for round in 0..<4 {
            let hash = StreamingFileHash(file: file)
            var chunks = Array(0..<25)
            chunks.shuffle()
            chunks += chunks.prefix(round * 3)  // a few retried chunks
            try await withThrowingTaskGroup(of: Void.self) { group in
                for index in chunks {
                    group.addTask {
                        let start = Int64(index * chunk)
                        let length = Int(min(Int64(chunk), file.identity.size - start))
                        var at = 0
                        while at < length {
                            let n = min(block, length - at)
                            try hash.feed(offset: start + Int64(at), bytes: try file.read(offset: start + Int64(at), length: n))
                            at += n
                        }
                    }
                }
                try await group.waitForAll()
            }
            let digest = try await hash.finish()
            XCTAssertEqual(digest, try sha256sum(path), "round \(round)")
        }
    }
}
