import Foundation
import XCTest

@testable import Xfer
@testable import XferCLI

/// The lines `--json` writes directly are the lines the generic path writes.
final class EventJSONTests: XCTestCase {
    private func generic(_ members: [String: JSONValue]) -> String {
        String(decoding: JSONValue.object(members).encoded, as: UTF8.self)
    }

    func testDirectLinesMatchTheGenericOnes() throws {
        XCTAssertEqual(
            EventJSON.line(for: .chunkStored(file: 3, chunk: 7, bytes: 4096, doneBytes: 1 << 40, totalBytes: (1 << 40) + 9)),
            generic([
                "event": "chunk", "file": .int(3), "chunk": .int(7), "bytes": .int(4096), "doneBytes": .int(1 << 40),
                "totalBytes": .int((1 << 40) + 9),
            ]))
        let path = "/data/naïve \"vidéo\"\n视频.bin"
        let url = "http://127.0.0.1:1/downloads/x/na%C3%AFve"
        XCTAssertEqual(
            EventJSON.line(for: .fileCompleted(file: 12, path: path, url: url)),
            generic(["event": "fileCompleted", "file": .int(12), "path": .string(path), "url": .string(url)]))
        let report = JobReport(
            job: JobID(rawValue: "0123456789abcdef"), files: JobReport.Files([.init(path: path, url: url, size: 5), .init(path: "/b", url: "u", size: 0)]),
            bytesSent: 10, bytesResumed: 2)
        var line = ""
        EventJSON.completed(report, job: nil, pieceSize: 16) { line += $0 }
        XCTAssertEqual(EventJSON.line(for: .completed(report)), line)
        XCTAssertEqual(
            line,
            generic([
                "event": "completed", "job": "0123456789abcdef", "bytesSent": .int(10), "bytesResumed": .int(2),
                "files": .array([
                    .object(["path": .string(path), "url": .string(url), "size": .int(5)]),
                    .object(["path": "/b", "url": "u", "size": .int(0)]),
                ]),
            ]))
        XCTAssertNoThrow(try JSONSerialization.jsonObject(with: Data(line.utf8)))
    }
}
