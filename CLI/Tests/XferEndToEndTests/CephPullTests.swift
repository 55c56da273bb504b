import Foundation
import XCTest
import XferTestSupport

/// `xfer pull` from a real S3 store: Ceph's RADOS Gateway on this machine.
final class CephPullTests: CephBucketTestCase {
    private var state: String { work.file("state") }

    private func xfer(_ arguments: [String]) throws -> RunResult {
        try runXfer(arguments, environment: CephGateway.environment)
    }

    /// Objects under the prefix of the kill test: 1,000 in `make test`; `make test-pull-prefix`
    /// runs it with the 5,000 of issue 31 (about 90 s on this machine).
    static let prefixObjects = Int(ProcessInfo.processInfo.environment["XFER_PULL_PREFIX_OBJECTS"] ?? "") ?? 1_000

    /// A pull killed twice while it fetches a prefix of small objects, then run to its end:
    /// every file byte-identical, and what was fetched twice is at most what was in flight
    /// at each kill (64 small requests).
    func testAPrefixOfSmallObjectsKilledTwiceArrivesWhole() throws {
        let count = Self.prefixObjects
        let tree = work.file("tree")
        var files: [String] = []
        for index in 0..<count {
            let directory = tree + "/d\(index / 100)"
            if index % 100 == 0 { try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true) }
            let path = directory + "/f\(index).bin"
            try makeTestFile(at: path, size: 1_000 + index % 300, seed: UInt64(index))
            files.append(path)
        }
        let push = try xfer(
            ["push", tree, "--backend", "s3", "--to", "s3://\(bucket!)/set/", "--endpoint", ceph.url, "--state", work.file("push-state"),
             "--quiet"])
        XCTAssertEqual(push.status, 0, push.stderr)

        let into = work.file("copy")
        let arguments = ["pull", "s3://\(bucket!)/set/", into, "--endpoint", ceph.url, "--state", state, "--json"]
        var fetched = 0
        for kill in [count / 6, count * 3 / 10] {
            let child = try ChildProcess(executable: xferExecutable, arguments: arguments, environment: CephGateway.environment)
            var seen = 0
            while seen < kill, child.readLine(where: { $0.contains("\"event\":\"chunk\"") }) != nil { seen += 1 }
            child.kill(SIGKILL)
            XCTAssertEqual(child.wait(), 128 + SIGKILL, "the pull must die unfinished: \(child.standardError)")
            fetched += seen
        }
        let last = try xfer(arguments)
        XCTAssertEqual(last.status, 0, last.stderr)
        fetched += last.events.filter { $0["event"] as? String == "chunk" }.count
        XCTAssertLessThanOrEqual(fetched, count + 2 * 64, "fetched again: more than was in flight at the kills")
        for file in files {
            let relative = String(file.dropFirst(tree.count + 1))
            XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: into + "/" + relative)), try Data(contentsOf: URL(fileURLWithPath: file)), relative)
        }
        let partials = ((FileManager.default.enumerator(atPath: into)?.allObjects as? [String]) ?? []).filter { $0.hasSuffix(".xfer-partial") }
        XCTAssertEqual(partials, [])
    }

    /// A multipart object: described first (its ranges carry no checksum), fetched in ranges,
    /// checked; replaced mid-pull, the new version lands.
    func testARangedObjectReplacedMidPullLandsAsTheNewVersion() throws {
        let first = work.file("v1.bin"), second = work.file("v2.bin")
        try makeTestFile(at: first, size: 12 << 20, seed: 1)
        try makeTestFile(at: second, size: 11 << 20 + 5, seed: 2)
        let put = { (file: String) throws in
            let result = try self.xfer(
                ["push", file, "--backend", "s3", "--to", "s3://\(self.bucket!)/obj.bin", "--endpoint", self.ceph.url,
                 "--state", self.work.file("push-state"), "--chunk-size", "5MiB", "--part-checksum", "crc32c", "--quiet"])
            XCTAssertEqual(result.status, 0, result.stderr)
        }
        try put(first)
        let target = work.file("obj.bin")
        let arguments = [
            "pull", "s3://\(bucket!)/obj.bin", target, "--endpoint", ceph.url, "--state", state, "--chunk-size", "1MiB",
            "--concurrency", "2", "--json",
        ]
        _ = try pushKilled(arguments, afterChunks: 3, environment: CephGateway.environment)
        try put(second)
        let resumed = try xfer(arguments)
        XCTAssertEqual(resumed.status, 0, resumed.stderr)
        XCTAssertEqual(try sha256sum(target), try sha256sum(second))
        XCTAssertTrue(resumed.events.contains { ($0["reason"] as? String ?? "").contains("changed") }, "\(resumed.events.suffix(3))")
    }
}
