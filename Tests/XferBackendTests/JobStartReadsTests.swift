import Synchronization
import XCTest
import XferBackendTesting
import XferIETF
import XferTus

@testable import Xfer

/// A job's start asks the server once, whatever its number of files: the
/// files are read from the store one at a time, and only when the answer
/// names a limit to check them against; never gathered into an array the
/// size of the job (100,000 files would be held for a check most servers skip).
final class JobStartReadsTests: XCTestCase {
    private final class Reads: Sendable {
        private let count = Mutex(0)
        func add() { count.withLock { $0 += 1 } }
        var value: Int { count.withLock { $0 } }
    }

    /// A view of `count` files of 10 bytes (file `large` of 10,000), counting each read.
    private func job(count: Int, large: Int, reads: Reads) -> JobContext {
        let files = JobFiles(count: count) { index in
            reads.add()
            let size: Int64 = index == large ? 10_000 : 10
            return FileContext(
                index: index, path: "/tmp/f\(index)", name: "f\(index)", size: size,
                plan: ChunkPlan(fileSize: size, chunkSize: 1 << 20), handles: ServerHandles())
        }
        return JobContext(
            id: JobID(rawValue: "0123456789abcdef"), target: "http://127.0.0.1:9/up/", handles: ServerHandles(), files: files,
            credentials: Credentials())
    }

    func testIETFReadsNoFileUnlessTheServerNamesALimit() throws {
        let reads = Reads()
        let start = IETFBackend().startJob(job(count: 100_000, large: 500, reads: reads))
        XCTAssertEqual(reads.value, 0, "building the request reads no file")
        _ = try start.outcome(for: HTTPResponse(status: 204))
        XCTAssertEqual(reads.value, 0, "an answer without Upload-Limit checks nothing")
        XCTAssertThrowsError(try start.outcome(for: HTTPResponse(status: 204, headers: ["Upload-Limit": "max-size=1000"]))) { error in
            XCTAssertTrue("\(error)".contains("f500 is 10000 bytes"), "\(error)")
        }
        XCTAssertEqual(reads.value, 501, "read up to the first file over the limit, no further")
    }

    func testTusReadsNoFileUnlessTheServerNamesAMaximum() throws {
        let reads = Reads()
        let start = TusBackend().startJob(job(count: 100_000, large: 7, reads: reads))
        XCTAssertEqual(reads.value, 0, "building the request reads no file")
        let offered: HTTPHeaders = ["Tus-Version": "1.0.0", "Tus-Resumable": "1.0.0", "Tus-Extension": "creation"]
        _ = try start.outcome(for: HTTPResponse(status: 204, headers: offered))
        XCTAssertEqual(reads.value, 0, "an answer without Tus-Max-Size checks nothing")
        var limited = offered
        limited.set("Tus-Max-Size", "1000")
        XCTAssertThrowsError(try start.outcome(for: HTTPResponse(status: 204, headers: limited))) { error in
            XCTAssertTrue("\(error)".contains("f7 is 10000 bytes"), "\(error)")
        }
        XCTAssertEqual(reads.value, 8)
    }
}
