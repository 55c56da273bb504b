import Crypto
import Foundation
import XCTest
import XferTestSupport

/// `xfer sync DIR s3://…` when the store fails (Docs/reliability.md, "Syncs"): through the
/// store-fault proxy (Tests/Tools/storefaults.py) in front of the Ceph gateway. Answers lost
/// after the store applied a conditional write or a delete, errors on the listing, and a sync
/// killed after each store request of its run in turn: every time the destination ends equal to
/// the directory, nothing is reported as a conflict that was the sync's own write, and every
/// object replaced or deleted is in the backup with the bytes it had.
final class SyncStoreFaultTests: CephProxiedBucketTestCase {

    private func arguments(_ tree: String, _ prefix: String, state: String, viaProxy: Bool = true, _ extra: [String] = []) -> [String] {
        ["sync", tree, "s3://\(bucket!)/\(prefix)", "--endpoint", viaProxy ? proxy.url : ceph.url, "--state", state, "--json", "--progress", "none"]
            + extra
    }

    /// Key → ETag (each object one PutObject or CopyObject here: its ETag is its MD5).
    private func listing(_ prefix: String) throws -> [String: String] { try ceph.etags(bucket: bucket, prefix: prefix) }

    /// Relative path → MD5 of every file under `tree`.
    private func digests(_ tree: String) throws -> [String: String] {
        var found: [String: String] = [:]
        for case let path as String in FileManager.default.enumerator(atPath: tree) ?? FileManager.DirectoryEnumerator() {
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: tree + "/" + path, isDirectory: &isDirectory), !isDirectory.boolValue else { continue }
            found[path] = Insecure.MD5.hash(data: try Data(contentsOf: URL(fileURLWithPath: tree + "/" + path)))
                .map { String(format: "%02x", $0) }.joined()
        }
        return found
    }

    /// Two trees: `old` synced first, `new` with two files rewritten (another size), two
    /// deleted, two added.
    private func makeTrees() throws -> (old: String, new: String) {
        let old = work.file("old")
        let new = work.file("new")
        for index in 0..<8 {
            try FileManager.default.createDirectory(atPath: old + "/d\(index % 2)", withIntermediateDirectories: true)
            try makeTestFile(at: old + "/d\(index % 2)/f\(index)", size: 500 + index, seed: UInt64(index + 1))
        }
        try FileManager.default.copyItem(atPath: old, toPath: new)
        try makeTestFile(at: new + "/d0/f0", size: 900, seed: 100)
        try makeTestFile(at: new + "/d1/f1", size: 901, seed: 101)
        try FileManager.default.removeItem(atPath: new + "/d0/f2")
        try FileManager.default.removeItem(atPath: new + "/d1/f3")
        try makeTestFile(at: new + "/d0/n1", size: 300, seed: 102)
        try makeTestFile(at: new + "/d1/n2", size: 301, seed: 103)
        return (old, new)
    }

    /// The store applied these requests and their answers were lost (the connection closed, or a
    /// 500 in place of the answer); the listing failed twice. The sync retries: its own new
    /// objects and replacements found by their write token are not conflicts, its deletes found
    /// gone are done.
    func testLostAnswersAndAFailingListingEndInTheSameDestination() throws {
        let (old, new) = try makeTrees()
        let state = work.file("state")
        XCTAssertEqual(try runXfer(arguments(old, "t", state: state, viaProxy: false), environment: CephGateway.environment).status, 0)
        try proxy.add(["method": "GET", "path": "list-type=2", "action": "fail", "status": 503, "times": 2])
        try proxy.add(["method": "PUT", "header": "If-None-Match", "action": "drop", "times": 1])
        try proxy.add(["method": "PUT", "header": "If-Match", "action": "error", "status": 500, "times": 1])
        try proxy.add(["method": "DELETE", "action": "drop", "times": 1])
        let result = try runXfer(arguments(new, "t", state: state, ["--delete"]), environment: CephGateway.environment)
        XCTAssertEqual(result.status, 0, result.stderr)
        // The writes found their own objects: no failure reported, not even for a moment.
        XCTAssertEqual(result.events.filter { $0["event"] as? String == "fileFailed" }.count, 0, result.stdout.joined(separator: "\n"))
        XCTAssertFalse(result.stderr.contains("failed"), result.stderr)
        XCTAssertEqual(try listing("t/"), try digests(new))
        let actions = Set(try proxy.log().map { "\($0["method"] ?? "") \($0["action"] ?? "")" })
        for expected in ["GET fail", "PUT drop", "PUT error", "DELETE drop"] {
            XCTAssertTrue(actions.contains(expected), "the fault \(expected) happened: \(actions)")
        }
    }

    /// Killed after the k-th store request of a sync with --delete and --backup-dir (the request
    /// applied, its answer never delivered), for every k of the run, then run again to its end:
    /// the destination equals the directory and every object replaced or deleted is in the
    /// backup as it was.
    func testASyncKilledAfterEachStoreRequestLosesNothing() throws {
        let (old, new) = try makeTrees()
        let before = try digests(old)
        let after = try digests(new)

        // How many requests a whole run makes.
        let probeState = work.file("probe-state")
        XCTAssertEqual(try runXfer(arguments(old, "probe", state: probeState, viaProxy: false), environment: CephGateway.environment).status, 0)
        try proxy.reset()
        let whole = try runXfer(
            arguments(new, "probe", state: probeState, ["--delete", "--backup-dir", "s3://\(bucket!)/probe-b"]), environment: CephGateway.environment)
        XCTAssertEqual(whole.status, 0, whole.stderr)
        let requests = try proxy.log().count
        XCTAssertGreaterThanOrEqual(requests, 11, "a listing, 4 backups, 4 writes and 2 deletes at least")

        var killed = 0
        for k in 1...requests {
            let state = work.file("state-\(k)")
            XCTAssertEqual(try runXfer(arguments(old, "t\(k)", state: state, viaProxy: false), environment: CephGateway.environment).status, 0)
            let sync = arguments(new, "t\(k)", state: state, ["--delete", "--backup-dir", "s3://\(bucket!)/b\(k)"])
            try proxy.reset()
            try proxy.stop(after: k)
            let child = try ChildProcess(executable: xferExecutable, arguments: sync, environment: CephGateway.environment)
            if try proxy.waitUntilStopped(timeout: 60) {
                child.kill(SIGKILL)
                XCTAssertEqual(child.wait(), 128 + SIGKILL, "k=\(k): \(child.standardError)")
                killed += 1
            } else {
                XCTAssertEqual(child.wait(), 0, "k=\(k) ended before its k-th request: \(child.standardError)")
            }
            try proxy.release()
            try proxy.reset()
            let rest = try runXfer(sync, environment: CephGateway.environment)
            XCTAssertEqual(rest.status, 0, "k=\(k): \(rest.stderr)")
            XCTAssertEqual(try listing("t\(k)/"), after, "k=\(k): the destination is the directory")
            let backups = try listing("b\(k)/")
            for key in ["d0/f0", "d1/f1", "d0/f2", "d1/f3"] {
                XCTAssertEqual(backups[key], before[key], "k=\(k): \(key) is kept as it was")
            }
        }
        XCTAssertGreaterThan(killed, requests / 2, "most runs were killed at their request")
    }
}
