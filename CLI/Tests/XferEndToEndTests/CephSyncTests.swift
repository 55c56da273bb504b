import Foundation
import XCTest
import XferTestSupport

/// `xfer sync DIR s3://BUCKET/PREFIX` against a real S3 store: Ceph's RADOS Gateway on this machine.
final class CephSyncTests: CephBucketTestCase {
    private var tree: String { work.file("tree") }
    private var state: String { work.file("state") }

    private func xfer(_ arguments: [String]) throws -> RunResult {
        try runXfer(arguments, environment: CephGateway.environment)
    }

    private func syncArguments(_ extra: [String] = [], prefix: String = "p") -> [String] {
        ["sync", tree, "s3://\(bucket!)/\(prefix)", "--endpoint", ceph.url, "--state", state, "--json", "--progress", "none"] + extra
    }

    /// Runs a sync to its end; its decisions by key, its plan, its summary.
    private func sync(_ extra: [String] = [], expecting status: Int32 = 0, file: StaticString = #filePath, line: UInt = #line) throws
        -> (decisions: [String: (action: String, reason: String)], planned: [String: Any], result: RunResult)
    {
        let result = try xfer(syncArguments(extra))
        XCTAssertEqual(result.status, status, result.stderr, file: file, line: line)
        var decisions: [String: (action: String, reason: String)] = [:]
        for event in result.events where event["event"] as? String == "decision" {
            decisions[event["key"] as? String ?? ""] = (event["action"] as? String ?? "", event["reason"] as? String ?? "")
        }
        let planned = result.events.first { $0["event"] as? String == "planned" } ?? [:]
        return (decisions, planned, result)
    }

    private func makeTree(files: Int, size: Int = 700) throws -> [String] {
        var names: [String] = []
        for index in 0..<files {
            let name = "d\(index % 4)/f\(index).txt"
            try FileManager.default.createDirectory(atPath: tree + "/d\(index % 4)", withIntermediateDirectories: true)
            try makeTestFile(at: tree + "/" + name, size: size + index, seed: UInt64(index + 1))
            names.append(name)
        }
        return names
    }

    private func keys(prefix: String = "p/") throws -> [String: Int] {
        let answer = try ceph.awsJSON(["list-objects-v2", "--bucket", bucket, "--prefix", prefix])
        var found: [String: Int] = [:]
        for object in answer["Contents"] as? [[String: Any]] ?? [] {
            found[String((object["Key"] as? String ?? "").dropFirst(prefix.count))] = int(object["Size"])
        }
        return found
    }

    private func setModificationTime(_ path: String, _ date: Date) throws {
        try FileManager.default.setAttributes([.modificationDate: date], ofItemAtPath: path)
    }

    // MARK: Decisions

    /// The default: size and the time kept with each object. A re-run copies nothing and asks
    /// nothing per key (what it wrote it knows from the listing); a touched file is copied, a
    /// file rewritten with its size and time kept is not — --checksum finds exactly that one.
    func testDecisionsBySizeTimeAndChecksum() throws {
        let names = try makeTree(files: 40)
        try makeTestFile(at: tree + "/big.bin", size: 6 << 20 + 3, seed: 99)

        let first = try sync(["--chunk-size", "5MiB"])
        XCTAssertEqual(first.decisions.count, 41)
        XCTAssertTrue(first.decisions.values.allSatisfy { $0.action == "copy" && $0.reason == "not on the destination" })
        XCTAssertEqual(try keys().count, 41)
        let head = try ceph.awsJSON(["head-object", "--bucket", bucket, "--key", "p/" + names[0]])
        let kept = (head["Metadata"] as? [String: String])?["mtime"]
        let attributes = try FileManager.default.attributesOfItem(atPath: tree + "/" + names[0])
        let mtime = try XCTUnwrap(attributes[.modificationDate] as? Date).timeIntervalSince1970
        XCTAssertEqual(Double(try XCTUnwrap(kept, "x-amz-meta-mtime")) ?? 0, mtime, accuracy: 0.000_01)

        let again = try sync()
        XCTAssertTrue(again.decisions.values.allSatisfy { $0.action == "skip" && $0.reason == "same size and modification time" })
        XCTAssertEqual(int(again.planned["copies"]), 0)
        XCTAssertEqual(int(again.planned["described"]), 0, "a re-run must know its objects from the listing alone")

        // Touched: the time differs. Rewritten in place with its size and time kept: the same,
        // except to --checksum.
        try setModificationTime(tree + "/" + names[1], Date(timeIntervalSince1970: 1_600_000_000))
        let rewritten = tree + "/" + names[2]
        // `touch -r` keeps the nanoseconds (a `Date` would round them off).
        XCTAssertEqual(try runToEnd("/usr/bin/touch", ["-r", rewritten, work.file("time-of-rewritten")]).status, 0)
        var bytes = try Data(contentsOf: URL(fileURLWithPath: rewritten))
        bytes[10] ^= 0xff
        try bytes.write(to: URL(fileURLWithPath: rewritten))
        XCTAssertEqual(try runToEnd("/usr/bin/touch", ["-r", work.file("time-of-rewritten"), rewritten]).status, 0)

        let dry = try sync(["--dry-run"])
        XCTAssertEqual(dry.decisions.filter { $0.value.action == "copy" }.map(\.key), [names[1]])
        XCTAssertEqual(dry.decisions[names[1]]?.reason, "modification time differs")
        let touched = try sync()
        XCTAssertEqual(touched.decisions.filter { $0.value.action == "copy" }.map(\.key), [names[1]], "the run does what the dry run said")
        XCTAssertEqual(try sync(["--size-only"]).decisions.filter { $0.value.action == "copy" }.count, 0)

        // --checksum: every object a sync wrote keeps its file's CRC-32C (the multipart one too),
        // and xfer remembers it: compared with no request and no read but of the changed file.
        let checked = try sync(["--checksum"])
        XCTAssertEqual(Set(checked.decisions.filter { $0.value.action == "copy" }.map(\.key)), [names[2]])
        XCTAssertEqual(checked.decisions[names[2]]?.reason, "checksum differs")
        XCTAssertEqual(checked.decisions["big.bin"]?.reason, "same size and checksum")
        XCTAssertEqual(int(checked.planned["described"]), 0)
        let checkedAgain = try sync(["--checksum"])
        XCTAssertEqual(checkedAgain.decisions.filter { $0.value.action == "copy" }.count, 0, "\(checkedAgain.decisions)")
        XCTAssertEqual(int(checkedAgain.planned["described"]), 0)
        let stored = try XCTUnwrap(ceph.download(bucket: bucket, key: "p/" + names[2], to: work.file("back")) as String?)
        XCTAssertFalse(stored.isEmpty)
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: work.file("back"))), bytes)
    }

    /// Objects another tool wrote (no time kept with them): described once, the same when not
    /// older than the file (as `aws s3 sync` decides), and known from the listing after that.
    func testObjectsAnotherToolWroteAreDescribedOnce() throws {
        let names = try makeTree(files: 12)
        for name in names { try setModificationTime(tree + "/" + name, Date(timeIntervalSinceNow: -3600)) }
        try ceph.aws(["s3", "sync", tree, "s3://\(bucket!)/p", "--only-show-errors"])
        let first = try sync()
        XCTAssertTrue(first.decisions.values.allSatisfy { $0.action == "skip" }, "\(first.decisions)")
        XCTAssertEqual(first.decisions[names[0]]?.reason, "same size, destination not older (no time kept on it)")
        XCTAssertEqual(int(first.planned["described"]), 12)
        let second = try sync()
        XCTAssertEqual(int(second.planned["described"]), 0)
        XCTAssertTrue(second.decisions.values.allSatisfy { $0.action == "skip" })

        // --checksum on objects with no CRC of theirs: their MD5 ETags against the files' MD5s,
        // once; the CRC-32Cs are remembered, and the next run reads and asks nothing.
        let checked = try sync(["--checksum"])
        XCTAssertTrue(checked.decisions.values.allSatisfy { $0.action == "skip" && $0.reason == "same size and checksum" }, "\(checked.decisions)")
        XCTAssertEqual(int(checked.planned["described"]), 12)
        let checkedAgain = try sync(["--checksum"])
        XCTAssertTrue(checkedAgain.decisions.values.allSatisfy { $0.action == "skip" })
        XCTAssertEqual(int(checkedAgain.planned["described"]), 0)
    }

    // MARK: Listing as key ranges

    /// A re-run lists each remote side as key ranges at once, split at every 960th key it knows
    /// there (`SyncKeyRanges.stride`; S3's `start-after`; 2,100 keys: three ranges). Whatever changed since — keys another
    /// tool added inside a range, just after a split key, before the first and after the last, split
    /// keys deleted — every key is listed once and decided right, both ways.
    func testARerunListsKeyRangesEachKeyOnce() throws {
        let names = try makeTree(files: 2100, size: 10)
        XCTAssertEqual(try sync().decisions.count, names.count)
        let sorted = names.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        let splits = [sorted[959], sorted[1919]]

        // Another tool: keys added, the split keys deleted.
        let added = splits.map { $0 + "0" } + [sorted[500] + "x", sorted.last! + "z", "0first"]
        let staging = work.file("staging")
        func make(_ path: String, size: Int, seed: UInt64) throws {
            try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try makeTestFile(at: path, size: size, seed: seed)
        }
        for key in added { try make(staging + "/" + key, size: 3, seed: 5) }
        try ceph.aws(["s3", "cp", staging, "s3://\(bucket!)/p", "--recursive", "--only-show-errors"])
        for key in splits { try ceph.aws(["s3", "rm", "s3://\(bucket!)/p/\(key)", "--only-show-errors"]) }
        // New files, one just after a split key.
        let fresh = [splits[1] + "n", "d9/new.txt"]
        for name in fresh { try make(tree + "/" + name, size: 4, seed: 6) }

        let again = try sync(["--delete"])
        let decided = again.result.events.filter { $0["event"] as? String == "decision" }
        XCTAssertEqual(decided.count, names.count + added.count + fresh.count, "a key decided twice, or one not at all")
        XCTAssertEqual(again.decisions.count, names.count + added.count + fresh.count)
        for key in added { XCTAssertEqual(again.decisions[key]?.action, "delete", key) }
        for key in splits + fresh { XCTAssertEqual(again.decisions[key]?.action, "copy", key) }
        XCTAssertEqual(again.decisions.values.filter { $0.action == "skip" }.count, names.count - splits.count)
        XCTAssertEqual(Set(try keys().keys), Set(names + fresh))

        // The other way: a prefix into a directory, listed as ranges on its re-run.
        let into = work.file("into")
        let down = ["sync", "s3://\(bucket!)/p", into, "--endpoint", ceph.url, "--state", work.file("down-state"), "--json", "--progress", "none"]
        XCTAssertEqual(try xfer(down).status, 0)
        try ceph.aws(["s3", "cp", staging, "s3://\(bucket!)/p", "--recursive", "--only-show-errors"])
        try ceph.aws(["s3", "rm", "s3://\(bucket!)/p/\(sorted[960])", "--only-show-errors"])
        try makeTestFile(at: into + "/" + splits[0] + "local", size: 3, seed: 7)
        let down2 = try xfer(down + ["--delete"])
        XCTAssertEqual(down2.status, 0, down2.stderr)
        let downDecided = down2.events.filter { $0["event"] as? String == "decision" }
        var expected = Set(names + fresh + added)
        expected.remove(sorted[960])
        XCTAssertEqual(downDecided.count, expected.count + 2, "a key decided twice, or one not at all")
        let changed = downDecided.filter { $0["action"] as? String != "skip" }.map { "\($0["action"] as? String ?? ""):\($0["key"] as? String ?? "")" }
        XCTAssertEqual(Set(changed), Set(added.map { "copy:" + $0 } + ["delete:" + sorted[960], "delete:" + splits[0] + "local"]))
        let local = Set(((FileManager.default.enumerator(atPath: into)?.allObjects as? [String]) ?? []).filter {
            var isDirectory: ObjCBool = false
            return FileManager.default.fileExists(atPath: into + "/" + $0, isDirectory: &isDirectory) && !isDirectory.boolValue
        })
        XCTAssertEqual(local, expected)
    }

    /// Killed while listing its ranges, a re-run goes on with each range from its own cursor. Through
    /// the store-fault proxy (its log says what was listed): 1,000 keys known, so two ranges; 50 keys
    /// another tool added to the first make it two pages. The second page's request proves the first
    /// committed; it and the second range's only request are held, and the sync is killed then.
    func testAKilledRangedListingGoesOnFromEachRangesCursor() throws {
        let proxy = try StoreFaultProxy(upstream: ceph.url)
        let names = try makeTree(files: 1000, size: 10)
        let arguments = [
            "sync", tree, "s3://\(bucket!)/p", "--endpoint", proxy.url, "--state", state, "--json", "--progress", "none", "--delete",
        ]
        XCTAssertEqual(try xfer(arguments).status, 0)
        let sorted = names.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        let split = sorted[959]
        let staging = work.file("staging")
        let added = (0..<50).map { sorted[10] + "-\($0)" }
        for key in added {
            try FileManager.default.createDirectory(atPath: staging + "/" + (key as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try makeTestFile(at: staging + "/" + key, size: 3, seed: 5)
        }
        try ceph.aws(["s3", "cp", staging, "s3://\(bucket!)/p", "--recursive", "--only-show-errors"])

        try proxy.reset()
        let startAfterSplit = "start-after=" + NSRegularExpression.escapedPattern(for: ("p/" + split).replacingOccurrences(of: "/", with: "%2F"))
        try proxy.add(["method": "GET", "path": startAfterSplit, "action": "delay", "delay": 60])
        try proxy.add(["method": "GET", "path": "continuation-token=", "action": "delay", "delay": 60])
        let child = try ChildProcess(executable: xferExecutable, arguments: arguments, environment: CephGateway.environment)
        func listed(_ log: [[String: Any]], _ pattern: String) -> [[String: Any]] {
            log.filter { ($0["target"] as? String ?? "").range(of: pattern, options: .regularExpression) != nil }
        }
        let deadline = Date(timeIntervalSinceNow: 60)
        var log: [[String: Any]] = []
        repeat {
            log = try proxy.log()
            if !listed(log, startAfterSplit).isEmpty && !listed(log, "continuation-token=").isEmpty { break }
            usleep(20_000)  // polling the proxy's log, not waiting for a moment
        } while Date() < deadline
        XCTAssertEqual(listed(log, "list-type=2").count, 3, "\(log)")
        child.kill(SIGKILL)
        XCTAssertEqual(child.wait(), 128 + SIGKILL, child.standardError)

        try proxy.reset()
        let again = try xfer(arguments)
        XCTAssertEqual(again.status, 0, again.stderr)
        let relisted = listed(try proxy.log(), "list-type=2")
        // The first range goes on from its stored token, the second from its split; nothing from the start.
        XCTAssertEqual(relisted.count, 2, "\(relisted)")
        XCTAssertEqual(listed(relisted, "continuation-token=").count, 1, "\(relisted)")
        XCTAssertEqual(listed(relisted, startAfterSplit).count, 1, "\(relisted)")
        let decided = again.events.filter { $0["event"] as? String == "decision" }
        XCTAssertEqual(decided.count, names.count + added.count, "a key decided twice, or one not at all")
        let deleted = decided.filter { $0["action"] as? String == "delete" }.map { $0["key"] as? String ?? "" }
        XCTAssertEqual(Set(deleted), Set(added))
        XCTAssertEqual(Set(try keys().keys), Set(names))
    }

    // MARK: Deletes

    /// --delete runs after the copies; --max-delete refuses a plan that deletes more, before
    /// anything is copied (an empty or wrong source is the usual cause); excluded keys are
    /// neither copied nor deleted.
    func testDeleteGuards() throws {
        let names = try makeTree(files: 8)
        _ = try sync()
        try FileManager.default.createDirectory(atPath: tree + "/cache", withIntermediateDirectories: true)
        try ceph.aws(["s3", "cp", tree + "/" + names[0], "s3://\(bucket!)/p/cache/kept.txt", "--only-show-errors"])
        for name in names.prefix(5) { try FileManager.default.removeItem(atPath: tree + "/" + name) }
        try makeTestFile(at: tree + "/new.txt", size: 10, seed: 7)

        let refused = try sync(["--delete", "--max-delete", "4", "--exclude", "cache"], expecting: 1)
        XCTAssertTrue(refused.result.stderr.contains("more than the 4 allowed"), refused.result.stderr)
        XCTAssertEqual(refused.decisions.filter { $0.value.action == "delete" }.count, 5)
        XCTAssertNil(refused.decisions["cache/kept.txt"], "an excluded key takes no part")
        XCTAssertNil(try keys()["new.txt"], "nothing is copied when the deletes are refused")
        XCTAssertEqual(try keys().count, 9)

        // The same plan, allowed: it goes on (no new listing) and deletes after copying.
        let done = try sync(["--delete", "--max-delete", "5", "--exclude", "cache"])
        XCTAssertEqual(done.planned["resumed"] as? Bool, true)
        XCTAssertEqual(int(done.planned["deletes"]), 5)
        XCTAssertEqual(done.result.events.filter { $0["event"] as? String == "deleted" }.count, 5)
        XCTAssertEqual(Set(try keys().keys), Set(names.suffix(3) + ["new.txt", "cache/kept.txt"]))
    }

    // MARK: Conflicts

    /// An object written by someone else between the listing and the copy is not overwritten:
    /// the file fails as a conflict, the sync fails, and no planned delete runs after it.
    func testAConflictIsReportedNotOverwrittenAndStopsTheDeletes() throws {
        let names = try makeTree(files: 3)
        _ = try sync()
        try FileManager.default.removeItem(atPath: tree + "/" + names[0])
        // One PutObject (below the part size) slowed to ~4 s: certainly in flight when the sync is killed.
        try makeTestFile(at: tree + "/zz.bin", size: 4 << 20, seed: 5)
        let child = try ChildProcess(
            executable: xferExecutable, arguments: syncArguments(["--delete", "--limit-rate", "1MiB"]), environment: CephGateway.environment)
        XCTAssertNotNil(child.readLine { $0.contains("\"event\":\"planned\"") }, child.standardError)
        child.kill(SIGKILL)
        XCTAssertEqual(child.wait(), 128 + SIGKILL)
        try makeTestFile(at: work.file("theirs.bin"), size: 1234, seed: 6)
        try ceph.aws(["s3", "cp", work.file("theirs.bin"), "s3://\(bucket!)/p/zz.bin", "--only-show-errors"])

        let resumed = try sync(["--delete"], expecting: 1)
        XCTAssertTrue(resumed.result.stderr.contains("changed on the destination since the sync listed it"), resumed.result.stderr)
        let failed = resumed.result.events.filter { $0["event"] as? String == "fileFailed" }
        XCTAssertEqual(failed.count, 1, "the conflict is reported once, after the sync checked it was not its own write")
        XCTAssertTrue((failed.first?["path"] as? String ?? "").hasSuffix("zz.bin"), "\(failed)")
        XCTAssertEqual(try keys()["zz.bin"], 1234, "the other writer's object stays")
        XCTAssertNotNil(try keys()[names[0]], "no delete after a failed copy")

        let replanned = try sync(["--delete", "--restart"])
        XCTAssertEqual(replanned.decisions["zz.bin"]?.reason, "size differs")
        XCTAssertEqual(try keys()["zz.bin"], 4 << 20)
        XCTAssertNil(try keys()[names[0]])
    }

    // MARK: Kills

    /// Killed while copying, twice, then run to its end: every key right, and no file sent more
    /// than once beyond what was in flight at each kill.
    func testAKilledSyncGoesOnWithoutCopyingTwice() throws {
        let names = try makeTree(files: 300, size: 2000)
        var completed = 0
        for kill in [60, 150] {
            // Paced (~100 files a second): the events this test reads lag behind the sync by what
            // the pipe holds, and an unpaced sync, faster with every release, had finished the
            // second run's files before the test had read 150 of them (CI, 2026-12-07).
            let child = try ChildProcess(
                executable: xferExecutable, arguments: syncArguments(["--limit-rate", "200KiB"]), environment: CephGateway.environment)
            var seen = 0
            while seen < kill, child.readLine(where: { $0.contains("\"event\":\"fileCompleted\"") }) != nil { seen += 1 }
            child.kill(SIGKILL)
            XCTAssertEqual(child.wait(), 128 + SIGKILL, "the sync must die unfinished: \(child.standardError)")
            completed += seen
        }
        let last = try sync()
        XCTAssertEqual(last.planned["resumed"] as? Bool, true)
        completed += last.result.events.filter { $0["event"] as? String == "fileCompleted" }.count
        XCTAssertLessThanOrEqual(completed, 300 + 2 * 64, "copied again: more than was in flight at the kills")
        XCTAssertEqual(try keys().count, 300)
        let back = work.file("back")
        for name in names.prefix(5) {
            _ = try ceph.download(bucket: bucket, key: "p/" + name, to: back)
            XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: back)), try Data(contentsOf: URL(fileURLWithPath: tree + "/" + name)), name)
        }
        let after = try sync()
        XCTAssertEqual(int(after.planned["copies"]), 0)
        XCTAssertEqual(int(after.planned["described"]), 0)
    }

    // MARK: More than one machine

    /// Four processes, each running its share K/4 with its own state, over one bucket: every key
    /// copied by exactly one, and the destination-only keys deleted by exactly one.
    func testShardsCoverEveryKeyExactlyOnce() throws {
        let names = try makeTree(files: 200, size: 300)
        try FileManager.default.createDirectory(atPath: work.file("extra"), withIntermediateDirectories: true)
        for index in 0..<20 { try makeTestFile(at: work.file("extra") + "/x\(index)", size: 10, seed: UInt64(index)) }
        try ceph.aws(["s3", "cp", "--recursive", work.file("extra"), "s3://\(bucket!)/p/gone/", "--only-show-errors"])
        var children: [ChildProcess] = []
        for shard in 0..<4 {
            let arguments = [
                "sync", tree, "s3://\(bucket!)/p", "--endpoint", ceph.url, "--state", work.file("state\(shard)"), "--json",
                "--progress", "none", "--delete", "--shard", "\(shard)/4",
            ]
            children.append(try ChildProcess(executable: xferExecutable, arguments: arguments, environment: CephGateway.environment))
        }
        var copied: [String] = []
        var deleted: [String] = []
        for child in children {
            while let line = child.readLine() {
                guard let event = (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any] else { continue }
                if event["event"] as? String == "decision", event["action"] as? String == "copy" { copied.append(event["key"] as? String ?? "") }
                if event["event"] as? String == "deleted" { deleted.append(event["key"] as? String ?? "") }
            }
            XCTAssertEqual(child.wait(), 0, child.standardError)
        }
        XCTAssertEqual(copied.count, 200)
        XCTAssertEqual(Set(copied), Set(names))
        XCTAssertEqual(deleted.count, 20)
        XCTAssertEqual(Set(deleted).count, 20)
        XCTAssertEqual(Set(try keys().keys), Set(names))
    }

    /// --files-from takes the paths it names (no walk); one that is not there fails the sync
    /// after the others were copied; the destination's other keys are left alone.
    func testFilesFromCopiesWhatTheManifestNames() throws {
        let names = try makeTree(files: 30)
        try ceph.aws(["s3", "cp", tree + "/" + names[0], "s3://\(bucket!)/p/elsewhere.txt", "--only-show-errors"])
        let manifest = work.file("manifest")
        try (["# a manifest", "./" + names[1], names[2], "", names[3], "missing.txt"].joined(separator: "\n") + "\n")
            .write(toFile: manifest, atomically: true, encoding: .utf8)
        let run = try sync(["--files-from", manifest], expecting: 1)
        XCTAssertTrue(run.result.stderr.contains("missing.txt"), run.result.stderr)
        XCTAssertEqual(Set(run.decisions.keys), Set([names[1], names[2], names[3]]))
        XCTAssertEqual(Set(try keys().keys), Set([names[1], names[2], names[3], "elsewhere.txt"]))
    }

    // MARK: From S3 into a directory

    /// `xfer sync s3://BUCKET/PREFIX DIR`: the files arrive whole with their objects' times, a
    /// re-run copies nothing and asks nothing, a changed object is fetched again, a killed sync
    /// goes on, and --delete removes only local files the walk saw.
    func testSyncFromS3IntoADirectory() throws {
        let names = try makeTree(files: 120, size: 900)
        try makeTestFile(at: tree + "/big.bin", size: 9 << 20, seed: 3)
        _ = try sync(["--chunk-size", "5MiB"])
        let into = work.file("into")
        let down = ["sync", "s3://\(bucket!)/p", into, "--endpoint", ceph.url, "--state", work.file("down-state"), "--json", "--progress", "none"]

        // Killed once while fetching, then to its end.
        let child = try ChildProcess(executable: xferExecutable, arguments: down + ["--chunk-size", "1MiB"], environment: CephGateway.environment)
        var seen = 0
        while seen < 40, child.readLine(where: { $0.contains("\"event\":\"fileCompleted\"") }) != nil { seen += 1 }
        child.kill(SIGKILL)
        XCTAssertEqual(child.wait(), 128 + SIGKILL, child.standardError)
        let first = try xfer(down + ["--chunk-size", "1MiB"])
        XCTAssertEqual(first.status, 0, first.stderr)
        for name in names + ["big.bin"] {
            XCTAssertEqual(
                try Data(contentsOf: URL(fileURLWithPath: into + "/" + name)), try Data(contentsOf: URL(fileURLWithPath: tree + "/" + name)), name)
        }
        let partials = ((FileManager.default.enumerator(atPath: into)?.allObjects as? [String]) ?? []).filter { $0.hasSuffix(".xfer-partial") }
        XCTAssertEqual(partials, [])

        let again = try xfer(down)
        XCTAssertEqual(again.status, 0, again.stderr)
        let planned = try XCTUnwrap(again.events.first { $0["event"] as? String == "planned" })
        XCTAssertEqual(int(planned["copies"]), 0, again.stdout.joined(separator: "\n"))
        XCTAssertEqual(int(planned["described"]), 0)

        // Another object at a key (same size), a local file the source lacks, one it lacks but excluded.
        try makeTestFile(at: work.file("other"), size: 900 + 5, seed: 77)
        try ceph.aws(["s3", "cp", work.file("other"), "s3://\(bucket!)/p/\(names[5])", "--only-show-errors"])
        try makeTestFile(at: into + "/local-only.txt", size: 10, seed: 1)
        try makeTestFile(at: into + "/keep.log", size: 10, seed: 1)
        let third = try xfer(down + ["--delete", "--exclude", "*.log"])
        XCTAssertEqual(third.status, 0, third.stderr)
        let decisions = third.events.filter { $0["event"] as? String == "decision" && $0["action"] as? String != "skip" }
        XCTAssertEqual(Set(decisions.map { $0["key"] as? String ?? "" }), [names[5], "local-only.txt"])
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: into + "/" + names[5])), try Data(contentsOf: URL(fileURLWithPath: work.file("other"))))
        XCTAssertFalse(FileManager.default.fileExists(atPath: into + "/local-only.txt"))
        XCTAssertTrue(FileManager.default.fileExists(atPath: into + "/keep.log"))
    }

    /// Files pulled by a sync get the modification time their objects keep (`x-amz-meta-mtime`,
    /// read from the answer to their GET, not asked for first), to the nanosecond: a sync back
    /// from that directory, with state of its own, finds every file unchanged.
    func testAPulledFileGetsTheTimeItsObjectKeeps() throws {
        let names = try makeTree(files: 8)
        try setModificationTime(tree + "/" + names[0], Date(timeIntervalSince1970: 1_500_000_000.123456789))
        _ = try sync()
        let into = work.file("into")
        let down = try xfer(["sync", "s3://\(bucket!)/p", into, "--endpoint", ceph.url, "--state", work.file("down-state"), "--json", "--progress", "none"])
        XCTAssertEqual(down.status, 0, down.stderr)
        XCTAssertEqual(int(down.events.first { $0["event"] as? String == "planned" }?["described"]), 0, "no object asked for first")
        for name in names {
            var pulled = stat()
            var original = stat()
            XCTAssertEqual(stat(into + "/" + name, &pulled), 0)
            XCTAssertEqual(stat(tree + "/" + name, &original), 0)
            XCTAssertEqual(pulled.st_mtim.tv_sec, original.st_mtim.tv_sec, name)
            XCTAssertEqual(pulled.st_mtim.tv_nsec, original.st_mtim.tv_nsec, name)
        }
        let back = try xfer(["sync", into, "s3://\(bucket!)/p", "--endpoint", ceph.url, "--state", work.file("back-state"), "--json", "--progress", "none"])
        XCTAssertEqual(back.status, 0, back.stderr)
        XCTAssertEqual(int(back.events.first { $0["event"] as? String == "planned" }?["copies"]), 0, back.stdout.joined(separator: "\n"))
        // And the pulling side knows the times it gave: its re-run copies and asks nothing.
        let again = try xfer(["sync", "s3://\(bucket!)/p", into, "--endpoint", ceph.url, "--state", work.file("down-state"), "--json", "--progress", "none"])
        let planned = again.events.first { $0["event"] as? String == "planned" }
        XCTAssertEqual(int(planned?["copies"]), 0)
        XCTAssertEqual(int(planned?["described"]), 0)
    }

    // MARK: From one prefix to another

    /// `xfer sync s3://B/P s3://B/Q`: copied inside the store (no byte through this machine),
    /// objects above the single-request limit (lowered here to 6 MiB) part by part; killed while
    /// copying the parts, it goes on with the parts left; a re-run copies and asks nothing;
    /// --delete removes what the source lacks.
    func testSyncBetweenPrefixesCopiesInsideTheStore() throws {
        let names = try makeTree(files: 20)
        try makeTestFile(at: tree + "/big.bin", size: 26 << 20 + 11, seed: 4)
        _ = try sync(["--chunk-size", "5MiB"])
        try ceph.aws(["s3", "cp", tree + "/" + names[0], "s3://\(bucket!)/q/stale.txt", "--only-show-errors"])
        let copy = [
            "sync", "s3://\(bucket!)/p", "s3://\(bucket!)/q", "--endpoint", ceph.url, "--state", work.file("copy-state"), "--json",
            "--progress", "none", "--copy-limit", "6MiB", "--chunk-size", "5MiB", "--delete", "--concurrency", "1",
        ]
        // Killed after the second part of the large object (parts come one at a time here).
        let child = try ChildProcess(executable: xferExecutable, arguments: copy, environment: CephGateway.environment)
        var parts = 0
        while parts < 2, child.readLine(where: { $0.contains("\"event\":\"chunk\"") && $0.contains("\"file\":0,") }) != nil { parts += 1 }
        child.kill(SIGKILL)
        XCTAssertEqual(child.wait(), 128 + SIGKILL, child.standardError)
        XCTAssertEqual(parts, 2, "the large object is copied part by part")

        let finished = try xfer(copy)
        XCTAssertEqual(finished.status, 0, finished.stderr)
        // big.bin is the first key, so file 0 (the small objects report one chunk each too).
        let copiedParts = finished.events.filter { $0["event"] as? String == "chunk" && int($0["file"]) == 0 }.count
        XCTAssertLessThanOrEqual(copiedParts, 6 - 2 + 1, "parts copied before the kill are not copied again (one may have been in flight)")
        XCTAssertEqual(Set(try keys(prefix: "q/").keys), Set(names + ["big.bin"]), "stale.txt deleted, everything else there")
        XCTAssertEqual(try keys(prefix: "q/")["big.bin"], 26 << 20 + 11)
        _ = try ceph.download(bucket: bucket, key: "q/big.bin", to: work.file("big-back"))
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: work.file("big-back"))), try Data(contentsOf: URL(fileURLWithPath: tree + "/big.bin")))
        XCTAssertEqual(try ceph.uploadsInProgress(bucket: bucket).count, 0)

        let again = try xfer(copy)
        XCTAssertEqual(again.status, 0, again.stderr)
        let planned = try XCTUnwrap(again.events.first { $0["event"] as? String == "planned" })
        XCTAssertEqual(int(planned["copies"]), 0)
        XCTAssertEqual(int(planned["described"]), 0, "a re-run knows both sides' objects from their listings")
    }

    // MARK: --backup-dir

    private func object(_ key: String) throws -> Data {
        let path = work.file("fetched-\(UUID().uuidString)")
        _ = try ceph.download(bucket: bucket, key: key, to: path)
        return try Data(contentsOf: URL(fileURLWithPath: path))
    }

    private func bytes(_ path: String) throws -> Data { try Data(contentsOf: URL(fileURLWithPath: path)) }

    /// Into a store: what a sync replaces or deletes is copied server-side to the backup prefix
    /// first, with its bytes and its kept time; a backup place inside the destination, on another
    /// endpoint or not on S3 is refused before anything is stored (exit 2).
    func testBackupDirKeepsWhatASyncReplacesOrDeletesInTheStore() throws {
        let names = try makeTree(files: 12)
        _ = try sync()
        let old0 = try bytes(tree + "/" + names[0])
        let old1 = try bytes(tree + "/" + names[1])
        try makeTestFile(at: tree + "/" + names[0], size: 1234, seed: 99)
        try FileManager.default.removeItem(atPath: tree + "/" + names[1])

        for (place, message) in [
            ("s3://\(bucket!)/p/old", "overlaps the destination"), ("s3://\(bucket!)", "overlaps the destination"),
            (work.file("local"), "name s3://BUCKET/PREFIX"),
        ] {
            let refused = try xfer(syncArguments(["--delete", "--backup-dir", place]))
            XCTAssertEqual(refused.status, 2, refused.stderr)
            XCTAssertTrue(refused.stderr.contains(message), refused.stderr)
        }
        XCTAssertEqual(try object("p/" + names[0]), old0, "a refused sync changed nothing")

        let (_, _, result) = try sync(["--delete", "--backup-dir", "s3://\(bucket!)/backup/1"])
        let summary = try XCTUnwrap(result.events.first { $0["event"] as? String == "synced" })
        XCTAssertEqual(int(summary["backedUp"]), 2)
        XCTAssertEqual(Set(try keys(prefix: "backup/1/").keys), [names[0], names[1]])
        XCTAssertEqual(try object("backup/1/" + names[0]), old0)
        XCTAssertEqual(try object("backup/1/" + names[1]), old1)
        XCTAssertEqual(try object("p/" + names[0]), try bytes(tree + "/" + names[0]))
        XCTAssertNil(try keys()[names[1]])
        let head = try ceph.awsJSON(["head-object", "--bucket", bucket, "--key", "backup/1/" + names[0]])
        XCTAssertNotNil((head["Metadata"] as? [String: Any])?["mtime"], "the backup keeps the object's metadata")

        // Nothing changed: nothing backed up again.
        let (_, _, again) = try sync(["--delete", "--backup-dir", "s3://\(bucket!)/backup/1"])
        XCTAssertEqual(int(again.events.first { $0["event"] as? String == "synced" }?["backedUp"]), 0)
    }

    /// Into a directory: a file the sync replaces is hard-linked into the backup directory first
    /// (same inode, old bytes), a file it deletes is renamed there; one inside the directory is refused.
    func testBackupDirKeepsWhatASyncReplacesOrDeletesInADirectory() throws {
        let names = try makeTree(files: 10)
        _ = try sync()
        let into = work.file("into")
        let backup = work.file("kept")
        let down = ["sync", "s3://\(bucket!)/p", into, "--endpoint", ceph.url, "--state", work.file("down-state"), "--json", "--progress", "none"]
        XCTAssertEqual(try xfer(down).status, 0)
        let old = try bytes(into + "/" + names[2])
        var before = stat()
        XCTAssertEqual(stat(into + "/" + names[2], &before), 0)
        try makeTestFile(at: work.file("other"), size: 700 + 2, seed: 55)
        try ceph.aws(["s3", "cp", work.file("other"), "s3://\(bucket!)/p/\(names[2])", "--only-show-errors"])
        try makeTestFile(at: into + "/local-only.txt", size: 10, seed: 1)

        let inside = try xfer(down + ["--delete", "--backup-dir", into + "/old"])
        XCTAssertEqual(inside.status, 2, inside.stderr)
        XCTAssertTrue(inside.stderr.contains("overlaps the directory"), inside.stderr)

        let result = try xfer(down + ["--delete", "--backup-dir", backup])
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(int(result.events.first { $0["event"] as? String == "synced" }?["backedUp"]), 2)
        XCTAssertEqual(try bytes(into + "/" + names[2]), try bytes(work.file("other")))
        XCTAssertEqual(try bytes(backup + "/" + names[2]), old)
        var kept = stat()
        XCTAssertEqual(stat(backup + "/" + names[2], &kept), 0)
        XCTAssertEqual(kept.st_ino, before.st_ino, "the replaced file itself is kept, not a copy")
        XCTAssertFalse(FileManager.default.fileExists(atPath: into + "/local-only.txt"))
        XCTAssertTrue(FileManager.default.fileExists(atPath: backup + "/local-only.txt"))
        let leftovers = ((FileManager.default.enumerator(atPath: backup)?.allObjects as? [String]) ?? []).filter { $0.hasSuffix(".xfer-backup") }
        XCTAssertEqual(leftovers, [])
    }

    /// Between prefixes: the backup is copied inside the store before the replacement's copy.
    func testBackupDirBetweenPrefixes() throws {
        let names = try makeTree(files: 6)
        _ = try sync()
        let copy = [
            "sync", "s3://\(bucket!)/p", "s3://\(bucket!)/q", "--endpoint", ceph.url, "--state", work.file("copy-state"), "--json",
            "--progress", "none", "--delete", "--backup-dir", "s3://\(bucket!)/qb",
        ]
        XCTAssertEqual(try xfer(copy).status, 0)
        let old = try object("q/" + names[3])
        try makeTestFile(at: tree + "/" + names[3], size: 4321, seed: 8)
        _ = try sync()
        try ceph.aws(["s3", "cp", work.file("tree/" + names[0]), "s3://\(bucket!)/q/extra.txt", "--only-show-errors"])
        let result = try xfer(copy)
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(Set(try keys(prefix: "qb/").keys), [names[3], "extra.txt"])
        XCTAssertEqual(try object("qb/" + names[3]), old)
        XCTAssertEqual(try object("q/" + names[3]), try bytes(tree + "/" + names[3]))
    }
}
