import XCTest

@testable import XferWire

/// The `patch` protocol's bodies: what the client backend writes, the receiver reads, and the
/// other way round, through the same types.
final class PatchWireTests: XCTestCase {
    private func parseCreate(_ text: String) throws -> PatchCreateRequest {
        var text = text
        return try text.withUTF8 { try PatchCreateRequest(parsing: UnsafeRawBufferPointer($0)) }
    }

    func testTheCreateRequestRoundTrips() throws {
        let create = PatchCreateRequest(fileName: "dir/视频 \"01\".mp4", size: 1 << 40, chunkSize: 8 << 20)
        XCTAssertEqual(try parseCreate(create.json.text()), create)
        XCTAssertEqual(try parseCreate(create.json.text(.utf8)), create)
    }

    func testTheCreateRequestsTypesArePartOfTheContract() {
        for text in [
            #"{"fileName":"a","size":"3","chunkSize":1}"#, #"{"fileName":1,"size":3,"chunkSize":1}"#,
            #"{"fileName":"a","size":3.5,"chunkSize":1}"#, #"{"fileName":"a","size":3}"#, #"{"fileName":"a","size":1e999,"chunkSize":1}"#,
            #"{"fileName":"a","size":3,"size":4,"chunkSize":1}"#, #"["fileName"]"#, "", "{", "null",
            #"{"fileName":"a","size":99999999999999999999,"chunkSize":1}"#,
        ] {
            XCTAssertThrowsError(try parseCreate(text), text)
        }
    }

    func testTheCreatedAnswerRoundTrips() throws {
        let created = PatchCreated(uploadId: "u/1 é", chunkSize: 1 << 20)
        XCTAssertEqual(try PatchCreated(parsing: JSONValue.parse(created.body)), created)
        XCTAssertEqual(String(decoding: created.body, as: UTF8.self), #"{"chunkSize":1048576,"uploadId":"u/1 é"}"#)
        XCTAssertThrowsError(try PatchCreated(parsing: ["uploadId": ""]))
        XCTAssertEqual(try PatchCreated(parsing: ["uploadId": 42]).uploadId, "42", "servers' answers are read leniently")
    }

    func testTheStatusRunsReadBackCutToTheFile() throws {
        let body = PatchStatus.body(
            uploadId: "u", fileName: "a", size: 10, chunkSize: 1, bytesReceived: 6, received: [1, 2, 3, 7, 8, 9],
            receivedRanges: [1...3, 7...9])
        let json = try JSONValue.parse(body)
        XCTAssertEqual(try PatchChunkList.indexes(inRunsNamed: "receivedRanges", of: json, chunkCount: 10), [0, 1, 2, 6, 7, 8])
        XCTAssertEqual(try PatchChunkList.indexes(inRunsNamed: "receivedRanges", of: json, chunkCount: 8), [0, 1, 2, 6, 7])
        XCTAssertEqual(json["received"]?.arrayValue?.compactMap(\.intValue), [1, 2, 3, 7, 8, 9])
        XCTAssertNil(try PatchChunkList.indexes(inRunsNamed: "missingRanges", of: json, chunkCount: 10))
    }

    func testHostileRunsAreBoundedByTheFile() throws {
        // A server naming 2^62 chunks cannot make the client hold more than its own file's.
        let json: JSONValue = ["missingRanges": [[-5, .int(Int64(1) << 62)]]]
        XCTAssertEqual(try PatchChunkList.indexes(inRunsNamed: "missingRanges", of: json, chunkCount: 3), [0, 1, 2])
        for bad: JSONValue in [[[1]], [[1, 2, 3]], ["x"], [[1, "y"]], [[.number(1.5), 2]]] {
            XCTAssertThrowsError(try PatchChunkList.indexes(inRunsNamed: "r", of: ["r": bad], chunkCount: 3), "\(bad)")
        }
    }

    func testTheMissingAnswerIsBounded() throws {
        let count = 1 << 24
        let body = PatchMissing.body(count: count, numbers: 1...count, runs: (0..<1_000_000).lazy.map { $0 * 3 + 1...$0 * 3 + 1 })
        XCTAssertLessThan(body.count, 64 * 1024)
        let json = try JSONValue.parse(body)
        XCTAssertEqual(json["missingCount"]?.intValue, count)
        XCTAssertEqual(json["missing"]?.arrayValue?.count, PatchMissing.numbersListed)
        XCTAssertEqual(try PatchChunkList.indexes(inRunsNamed: "missingRanges", of: json, chunkCount: count)?.count, PatchMissing.runsListed)
    }

    func testTheCompletedAnswerRoundTrips() throws {
        for completed in [
            PatchCompleted(url: "http://h/downloads/a%20b", crc32c: "deadbeef", sha256: String(repeating: "a", count: 64)),
            PatchCompleted(url: "/d/x", crc32c: nil, sha256: "ff"), PatchCompleted(url: "/d/x", crc32c: "00000001", sha256: nil),
        ] {
            XCTAssertEqual(try PatchCompleted(parsing: JSONValue.parse(completed.body)), completed)
        }
        XCTAssertEqual(PatchCompleted(url: "/", crc32c: "DEADBEEF", sha256: nil).crc32cValue, 0xDEAD_BEEF)
        XCTAssertNil(PatchCompleted(url: "/", crc32c: "beef", sha256: nil).crc32cValue)
        XCTAssertThrowsError(try PatchCompleted(parsing: ["crc32c": "deadbeef"]), "no url")
    }

    func testTheWholeCreationNamesItsFileInTheQuery() {
        let names = ["a.bin", "dir/视频 \"01\".mp4", "a&b=c?d#e%f+g", ""]
        for name in names {
            let path = PatchWholeCreation.path(fileName: name)
            XCTAssertTrue(path.hasPrefix("/uploads?fileName="), path)
            XCTAssertEqual(PatchWholeCreation.fileName(inQuery: path.dropFirst("/uploads?".count)), name, path)
        }
        XCTAssertEqual(PatchWholeCreation.fileName(inQuery: "x=1&fileName=a%2Fb&y"), "a/b", "among other parameters")
        XCTAssertEqual(PatchWholeCreation.fileName(inQuery: "fileName=a+b"), "a+b", "no form decoding: + is +")
        for query in ["", "filename=a", "fileName", "fileNames=a", "fileName=%zz", "fileName=%C3", "fileName=%"] {
            XCTAssertNil(PatchWholeCreation.fileName(inQuery: query), query)
        }
    }

    func testAServerThatTakesWholeFilesNamesTheirMediaType() {
        XCTAssertTrue(PatchWholeCreation.accepts(PatchWholeCreation.acceptPost))
        XCTAssertTrue(PatchWholeCreation.accepts("Application/Octet-Stream; q=1"))
        for header in [nil, "", "application/json", "application/octet-streamx", "text/plain, application/*"] {
            XCTAssertFalse(PatchWholeCreation.accepts(header), "\(header ?? "nil")")
        }
        XCTAssertEqual(
            IETFField.limits(PatchWholeCreation.limit(maximumSize: 1 << 40, maximumBody: 64 << 20)),
            ["max-size": 1 << 40, "max-append-size": 64 << 20])
    }

    func testTheWholeCreationsAnswerRoundTrips() throws {
        for created in [
            PatchCreatedWhole(uploadId: "u1", completed: PatchCompleted(url: "http://h/downloads/i/a%20b", crc32c: "deadbeef", sha256: nil)),
            PatchCreatedWhole(uploadId: "u2", completed: PatchCompleted(url: "/d/x", crc32c: nil, sha256: String(repeating: "a", count: 64))),
            PatchCreatedWhole(uploadId: "u3", completed: PatchCompleted(url: "/d/y", crc32c: nil, sha256: nil)),
        ] {
            XCTAssertEqual(try PatchCreatedWhole(parsing: JSONValue.parse(created.body)), created)
            XCTAssertEqual(try PatchCreated(parsing: JSONValue.parse(created.body)).uploadId, created.uploadId, "also read as a creation")
        }
        XCTAssertThrowsError(try PatchCreatedWhole(parsing: ["url": "/d/x"]), "no uploadId")
        XCTAssertThrowsError(try PatchCreatedWhole(parsing: ["uploadId": "u"]), "no url")
    }
}
