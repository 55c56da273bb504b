import Crypto
import Foundation
import Hummingbird
import Logging
import NIOCore
import XCTest
import XferPrimitives

@testable import XferReceiver

/// Chunks checked by a digest other than CRC-32C (multipart's MD5, sequence's CRC-32) keep their
/// CRC-32C as their bytes pass, so completion combines them instead of reading the file back;
/// patch, whose completion answer carries the file's SHA-256, still hashes it.
final class DiskChunkCRCTests: XCTestCase {
    private var root = ""

    override func setUpWithError() throws {
        root = NSTemporaryDirectory() + "xfer-chunk-crc-" + UUID().uuidString
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: root)
    }

    func testChunksCheckedByMD5CompleteWithTheirCombinedCRC32CWherePatchHashesTheFile() async throws {
        let storage = try await DiskStorage.open(
            root: root, threadPool: .singleton, memory: UploadsInMemory(limits: ReceiverLimits()), expireAfter: nil,
            logger: Logger(label: "test"))
        let bytes = Array("0123456789abcdefghij".utf8)
        for protocolName in ["multipart", "patch"] {
            let upload = try await storage.create(
                NewUpload(protocolName: protocolName, path: RelativePath.validated("f.bin")!, size: bytes.count, chunkSize: 8))
            // The last chunk first: the CRCs combine in the file's order whatever order they came in.
            for chunk in [3, 1, 2] {
                let piece = Array(bytes[(chunk - 1) * 8..<min(chunk * 8, bytes.count)])
                let check = BodyWriter.Check(algorithm: .md5, expected: Array(Insecure.MD5.hash(data: piece)))
                try await upload.writeChunk(chunk, body: RequestBody(buffer: ByteBuffer(bytes: piece)), check: check)
            }
            guard case .completed(let record) = try await upload.complete() else { return XCTFail("\(protocolName): not completed") }
            XCTAssertEqual(record.crc32c, CRC32.hex(CRC32C.of(bytes)), protocolName)
            if protocolName == "patch" {
                XCTAssertEqual(record.sha256, SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined(), "patch reads it back")
            } else {
                XCTAssertNil(record.sha256, "combined, not read back")
            }
        }
    }
}
