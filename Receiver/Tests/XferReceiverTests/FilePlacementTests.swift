import Foundation
import XCTest

@testable import XferReceiver

#if canImport(Glibc)
import Glibc
#endif

/// `FileSystemOps.place`, how a completed upload's file reaches `downloads/<id>/<path>`: under a
/// first directory it creates itself, by name; under one that was there, a walk that follows no
/// symbolic link.
final class FilePlacementTests: XCTestCase {
    private var base = ""

    override func setUpWithError() throws {
        base = NSTemporaryDirectory() + "xfer-place-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: base + "/downloads", withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: base)
    }

    private func source(_ text: String) throws -> String {
        let path = base + "/" + UUID().uuidString
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
        return path
    }

    func testPlacesUnderANewDirectoryAndUnderOneThatWasThere() throws {
        let first = try source("one")
        try FileSystemOps.place(first, under: base + "/downloads", at: ["id1", "a", "b", "c.txt"])
        XCTAssertEqual(try String(contentsOfFile: base + "/downloads/id1/a/b/c.txt", encoding: .utf8), "one")
        XCTAssertFalse(FileManager.default.fileExists(atPath: first))

        // A publication a crash cut short, repaired: the upload's directory and part of the path exist.
        try FileManager.default.createDirectory(atPath: base + "/downloads/id2/a", withIntermediateDirectories: true)
        let second = try source("two")
        try FileSystemOps.place(second, under: base + "/downloads", at: ["id2", "a", "b", "c.txt"])
        XCTAssertEqual(try String(contentsOfFile: base + "/downloads/id2/a/b/c.txt", encoding: .utf8), "two")
    }

    func testALinkInADirectoryThatWasThereIsNotFollowed() throws {
        let outside = base + "/outside"
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: base + "/downloads/id3", withIntermediateDirectories: true)
        XCTAssertEqual(symlink(outside, base + "/downloads/id3/a"), 0)
        let file = try source("three")
        XCTAssertThrowsError(try FileSystemOps.place(file, under: base + "/downloads", at: ["id3", "a", "c.txt"]))
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: outside), [])
        XCTAssertTrue(FileManager.default.fileExists(atPath: file), "the file stays where it was")
    }
}
