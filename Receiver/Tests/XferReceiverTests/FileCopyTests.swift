import Foundation
import XCTest

@testable import XferReceiver

#if canImport(Glibc)
import Glibc
#endif

/// `POSIXFile.copyAll`, the copy a tus final upload is made with: in the kernel on one filesystem,
/// through a buffer where the kernel refuses (another filesystem: `/dev/shm` is tmpfs), the same
/// bytes either way, and a source shorter than asked is an error, not a short file.
final class FileCopyTests: XCTestCase {
    private var paths: [String] = []

    override func tearDown() {
        for path in paths { try? FileManager.default.removeItem(atPath: path) }
    }

    private func file(in directory: String, bytes: [UInt8]) throws -> String {
        let path = directory + "/xfer-copy-" + UUID().uuidString
        paths.append(path)
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        return path
    }

    private func copy(_ source: String, into destination: String, count: Int, at offset: Int) throws {
        let input = try POSIXFile.open(source, O_RDONLY)
        defer { input.close() }
        let output = try POSIXFile.open(destination, O_WRONLY)
        defer { output.close() }
        try output.copyAll(from: input, count: count, at: offset)
    }

    func testCopiesTheSameBytesOnOneFilesystemAndAcrossTwo() throws {
        let bytes = (0..<(3 << 20) + 17).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 9) }
        var sources = [try file(in: NSTemporaryDirectory(), bytes: bytes)]
        if FileManager.default.fileExists(atPath: "/dev/shm") { sources.append(try file(in: "/dev/shm", bytes: bytes)) }
        for source in sources {
            let destination = try file(in: NSTemporaryDirectory(), bytes: Array("head".utf8))
            try copy(source, into: destination, count: bytes.count, at: 4)
            XCTAssertEqual(Array(try Data(contentsOf: URL(fileURLWithPath: destination))), Array("head".utf8) + bytes, source)
        }
    }

    func testASourceShorterThanAskedFails() throws {
        for directory in [NSTemporaryDirectory(), "/dev/shm"] where FileManager.default.fileExists(atPath: directory) {
            let source = try file(in: directory, bytes: Array(repeating: 7, count: 100))
            let destination = try file(in: NSTemporaryDirectory(), bytes: [])
            XCTAssertThrowsError(try copy(source, into: destination, count: 101, at: 0), directory)
        }
    }
}
