import XCTest
import XferPrimitives

@testable import XferReceiver

/// A chunk's record on an object store is all in its key (so a completion lists and reads
/// nothing else): what is written must read back as the same piece, and keys that are not
/// records must not read as one.
final class ObjectChunkRecordTests: XCTestCase {
    private let meta = UploadMeta(
        formatVersion: UploadMeta.currentFormatVersion, protocolName: "patch", uploadId: "0123456789abcdef0123456789abcdef",
        fileName: "a.bin", size: 20 << 20, chunkSize: 8 << 20)
    private let prefix = "up/received/0123456789abcdef0123456789abcdef/"

    private func roundTrip(_ piece: ObjectUploadState.Piece, chunk: Int) throws -> ObjectUploadState.Piece {
        let key = prefix + ObjectChunkRecord.name(of: piece, chunk: chunk)
        XCTAssertEqual(ObjectChunkRecord.chunk(ofKey: key, under: prefix), chunk)
        return try XCTUnwrap(ObjectChunkRecord(key: key, under: prefix, meta: meta), key).piece
    }

    func testPartsAndStagedPiecesReadBackAsWritten() throws {
        let part = ObjectUploadState.Piece(
            chunk: 2, at: 8 << 20, length: 8 << 20, part: 2, staged: nil, etag: "9b2cf535f27731c974343645a3985328", crc: 0xDEAD_BEEF)
        XCTAssertEqual(try roundTrip(part, chunk: 2), part)
        let last = ObjectUploadState.Piece(
            chunk: 3, at: 16 << 20, length: 4 << 20, part: nil, staged: "chunk-3-a1b2c3d4", etag: "abc-1", crc: 7)
        XCTAssertEqual(try roundTrip(last, chunk: 3), last, "the last chunk's length follows from the size")
    }

    func testAnETagOfOtherCharactersIsKeptInHex() throws {
        for etag in ["a/b.c\"d", "xylophone"] {
            let piece = ObjectUploadState.Piece(chunk: 1, at: 0, length: 8 << 20, part: 1, staged: nil, etag: etag, crc: 1)
            XCTAssertEqual(try roundTrip(piece, chunk: 1).etag, etag)
        }
    }

    func testKeysThatAreNotRecordsAreRefused() {
        for name in ["", "1", "1/p.abc", "0/p.abc.1", "4/p.abc.1", "1/q.abc.1", "1/p.abc.zz", "x/p.abc.1", "1/p.xzz.1", "1/p.abc.1/more"] {
            XCTAssertNil(ObjectChunkRecord(key: prefix + name, under: prefix, meta: meta), name)
        }
    }
}
