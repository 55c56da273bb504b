import XCTest

@testable import XferReceiver

/// The receiver reads an upload's log a record at a time from its bytes; what
/// it accepts and refuses decides which chunks a restarted receiver reports.
final class ChunkRecordTests: XCTestCase {
    private func record(_ text: String) -> ChunkRecord? {
        ChunkRecord(Array(text.utf8)[...])
    }

    func testReadsTheFormsAnUploadWrites() {
        XCTAssertEqual(record("+12"), ChunkRecord(received: true, number: 12))
        XCTAssertEqual(record("-3"), ChunkRecord(received: false, number: 3))
        XCTAssertEqual(record("+7~0a1b2c3d"), ChunkRecord(received: true, number: 7, crc: 0x0a1b_2c3d))
        let sha = String(repeating: "ab", count: 32)
        XCTAssertEqual(record("+1.\(sha)"), ChunkRecord(received: true, number: 1, digest: sha))
    }

    func testRefusesTornAndForeignRecords() {
        for text in ["", "+", "12", "+0", "+-1", "+12a", "+1~0A1B2C3D", "+1~0a1b2c3", "+1.abc", "*1", "+1~", "+1.",
                     "+1234567890123456789012"] {
            XCTAssertNil(record(text), text)
        }
    }

    /// Records are split on `;`; a newline inside one means it was torn (never counted).
    func testSplitsALogIntoCompleteRecords() {
        let log = Array("\n+1;\n+2;\n+3\n+4;\n-2;\n+5".utf8)
        var seen: [String] = []
        DurableLog.forEachRecord(in: log[...]) { seen.append(String(decoding: $0, as: UTF8.self)) }
        XCTAssertEqual(seen, ["+1", "+2", "+4", "-2"])
    }
}
