import Crypto
import Foundation
import XCTest
import XferTestSupport

/// `xfer push DIR`: trees with the awkward parts of real ones (nesting, empty
/// files, spaces and non-ASCII names, symbolic links and a loop, a FIFO, an
/// unreadable file, filters), against real servers; and a tree of thousands
/// of files pushed with SIGKILL twice and resumed, on every backend.
final class TreePushTests: XCTestCase {
    var work: TemporaryDirectory!

    override func setUp() {
        work = TemporaryDirectory("xfer-tree")
    }

    override func tearDown() {
        work = nil
    }

    private var state: String { work.file("state") }

    /// Files of the awkward tree, relative path → size.
    private let treeFiles: [(String, Int)] = [
        ("a/b/c.txt", 3000),
        ("a/with space.bin", 70_000),
        ("照片/视频 01.mp4", 150_000),
        ("empty.txt", 0),
        ("deep/x/y/z.dat", 1),
        ("top.bin", 5000),
    ]

    /// Makes the awkward tree under `root` and returns it.
    private func makeTree(_ name: String = "tree") throws -> String {
        let root = work.file(name)
        for (index, (path, size)) in treeFiles.enumerated() {
            let file = root + "/" + path
            try FileManager.default.createDirectory(
                atPath: (file as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try makeTestFile(at: file, size: size, seed: UInt64(100 + index))
        }
        // Excluded by the filters below.
        try FileManager.default.createDirectory(atPath: root + "/node_modules/pkg", withIntermediateDirectories: true)
        try makeTestFile(at: root + "/node_modules/pkg/index.js", size: 10)
        try makeTestFile(at: root + "/a/scratch.tmp", size: 10)
        // A loop, a link to a file, a FIFO.
        XCTAssertEqual(symlink("..", root + "/a/b/up"), 0)
        XCTAssertEqual(symlink("../top.bin", root + "/a/link.bin"), 0)
        XCTAssertEqual(mkfifo(root + "/a/pipe", 0o644), 0)
        return root
    }

    private func push(_ arguments: [String], environment: [String: String] = [:]) throws -> RunResult {
        try runXfer(["push"] + arguments + ["--state", state], environment: environment)
    }

    func testATreeReachesTheReceiverUnderItsRelativePaths() throws {
        let server = try ServeProcess(root: work.file("served"))
        let tree = try makeTree()
        let result = try push([tree, "--backend", "patch", "--to", server.url, "--exclude", "node_modules", "--exclude", "*.tmp"])
        XCTAssertEqual(result.status, 0, result.stderr)
        // Not followed without --follow-symlinks, and never opened: one line each.
        XCTAssertTrue(result.stderr.contains("skipping \(tree)/a/pipe"), result.stderr)
        XCTAssertTrue(result.stderr.contains("skipping \(tree)/a/b/up"), result.stderr)
        XCTAssertTrue(result.stderr.contains("skipping \(tree)/a/link.bin: symbolic link not followed (use --follow-symlinks)"), result.stderr)
        XCTAssertEqual(result.stdout.count, treeFiles.count, result.stdout.joined(separator: "\n"))
        for (path, _) in treeFiles {
            let encoded = path.split(separator: "/").map { String($0).addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "" }
            let url = try XCTUnwrap(
                result.stdout.first { line in
                    let decoded = line.removingPercentEncoding ?? line
                    return decoded.hasSuffix("/" + path)
                }, "no URL for \(path) in \(result.stdout) (\(encoded))")
            XCTAssertEqual(try downloadSHA256(url, into: work), try sha256sum(tree + "/" + path), path)
        }
        XCTAssertFalse(result.stdout.contains { $0.contains("node_modules") || $0.contains("scratch") })
    }

    func testFollowingSymlinksSendsTheLinkedFileAndStopsAtTheLoop() throws {
        let server = try ServeProcess(root: work.file("served"))
        let tree = try makeTree()
        let result = try push([
            tree, "--backend", "patch", "--to", server.url, "--follow-symlinks", "--include", "*.bin", "--json",
        ])
        XCTAssertEqual(result.status, 0, result.stderr)
        let skipped = result.events.filter { $0["event"] as? String == "fileSkipped" }.compactMap { $0["path"] as? String }
        XCTAssertTrue(skipped.contains("\(tree)/a/b/up"), "\(skipped)")
        XCTAssertTrue(skipped.contains("\(tree)/a/pipe"), "\(skipped)")
        let completed = try XCTUnwrap(result.lastEvent)
        let paths = (completed["files"] as? [[String: Any]] ?? []).compactMap { $0["path"] as? String }
        XCTAssertEqual(Set(paths), ["\(tree)/a/link.bin", "\(tree)/a/with space.bin", "\(tree)/top.bin"])
    }

    func testADryRunListsTheTreeAndSendsNothing() throws {
        let tree = try makeTree()
        let result = try push([tree, "--backend", "patch", "--to", "http://127.0.0.1:9", "--dry-run", "--exclude", "node_modules/"])
        XCTAssertEqual(result.status, 0, result.stderr)
        let listed = result.stdout.map { String($0.split(separator: " ", maxSplits: 1).first ?? "") }
        XCTAssertTrue(result.stdout.contains { $0.hasPrefix("照片/视频 01.mp4") }, result.stdout.joined(separator: "\n"))
        XCTAssertTrue(result.stdout.contains { $0.hasPrefix("a/scratch.tmp") })
        XCTAssertFalse(listed.contains { $0.hasPrefix("node_modules") })
        XCTAssertTrue(result.stderr.contains("would send 7 files"), result.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: state), "a dry run touches no state")
    }

    func testAnUnreadableFileFailsAloneAndARerunSendsOnlyIt() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv") else { throw XCTSkip("setpriv is needed") }
        let server = try ServeProcess(root: work.file("served"))
        let tree = try makeTree()
        let secret = tree + "/a/b/c.txt"
        // Root reads through permissions: run xfer as nobody, with everything
        // readable to nobody but one file.
        chmod(work.path, 0o755)
        try run("/bin/chmod", ["-R", "a+rX", tree])
        chmod(secret, 0o000)
        let state = work.file("nobody-state")
        XCTAssertEqual(mkdir(state, 0o777), 0)
        chmod(state, 0o777)
        func pushAsNobody() throws -> RunResult {
            let child = try ChildProcess(executable: "/usr/bin/setpriv", arguments: [
                "--reuid=65534", "--regid=65534", "--clear-groups", xferExecutable, "push", tree, "--backend", "patch",
                "--to", server.url, "--state", state + "/s", "--exclude", "node_modules", "--exclude", "*.tmp", "--json",
            ])
            let lines = child.readRemaining()
            return RunResult(status: child.wait(), stdout: lines, stderr: child.standardError)
        }
        if getuid() != 0 { throw XCTSkip("needs root to drop to nobody") }
        let first = try pushAsNobody()
        XCTAssertEqual(first.status, 1, first.stderr)
        let failed = first.events.filter { $0["event"] as? String == "fileFailed" }
        XCTAssertEqual(failed.compactMap { $0["path"] as? String }, [secret])
        XCTAssertEqual(first.events.filter { $0["event"] as? String == "fileCompleted" }.count, treeFiles.count - 1)
        let message = try XCTUnwrap(first.lastEvent?["message"] as? String)
        XCTAssertTrue(message.contains("\(treeFiles.count - 1) files sent, 1 failed: \(secret)"), message)

        chmod(secret, 0o644)
        let second = try pushAsNobody()
        XCTAssertEqual(second.status, 0, second.stderr)
        let sentAgain = second.events.filter { $0["event"] as? String == "fileCompleted" }.compactMap { $0["path"] as? String }
        XCTAssertEqual(sentAgain, [secret], "the re-run sends only what failed")
        XCTAssertEqual(int(second.lastEvent?["bytesSent"]), 3000)
    }

    func testARerunSendsFilesAddedSinceAndReportsDeletedOnes() throws {
        let server = try ServeProcess(root: work.file("served"))
        let tree = work.file("grow")
        try FileManager.default.createDirectory(atPath: tree + "/sub", withIntermediateDirectories: true)
        for index in 0..<5 { try makeTestFile(at: tree + "/f\(index).bin", size: 1000 + index, seed: UInt64(index)) }
        let arguments = [tree, "--backend", "patch", "--to", server.url, "--json"]
        let first = try push(arguments)
        XCTAssertEqual(first.status, 0, first.stderr)
        XCTAssertEqual(first.events.first?["totalFiles"] as? Int, 5)

        try makeTestFile(at: tree + "/sub/new.bin", size: 777, seed: 50)
        try FileManager.default.removeItem(atPath: tree + "/f1.bin")
        let second = try push(arguments)
        XCTAssertEqual(second.status, 0, second.stderr)
        XCTAssertEqual(second.events.first?["resumed"] as? Bool, true)
        XCTAssertEqual(second.events.first?["totalFiles"] as? Int, 6)
        let completed = second.events.filter { $0["event"] as? String == "fileCompleted" }.compactMap { $0["path"] as? String }
        XCTAssertEqual(completed, [tree + "/sub/new.bin"], "only the new file is sent")
        XCTAssertEqual(int(second.lastEvent?["bytesSent"]), 777)
        // Deleted after it was sent: reported, and its copy on the server stays listed.
        let deleted = second.events.filter { $0["event"] as? String == "fileSkipped" }
        XCTAssertEqual(deleted.compactMap { $0["path"] as? String }, [tree + "/f1.bin"])
        XCTAssertTrue((deleted.first?["reason"] as? String ?? "").contains("no such file"), "\(deleted)")
        XCTAssertEqual((second.lastEvent?["files"] as? [[String: Any]])?.count, 6)

    }

    // MARK: Thousands of files, killed twice

    /// A tree of `count` small files in nested directories; returns relative paths.
    private func makeManyFiles(_ root: String, count: Int) throws -> [String] {
        var paths: [String] = []
        for index in 0..<count {
            let path = "d\(index % 10)/e\(index % 7)/file \(index).bin"
            let file = root + "/" + path
            if index < 70 {
                try FileManager.default.createDirectory(
                    atPath: (file as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            }
            try makeTestFile(at: file, size: 512 + index % 1500, seed: UInt64(index))
            paths.append(path)
        }
        return paths
    }

    /// Pushes `tree`, SIGKILLs the push twice (after a third and two thirds of
    /// the files), then runs it to the end; returns the final run's events.
    private func pushKilledTwice(
        _ tree: String, count: Int, arguments: [String], environment: [String: String] = [:]
    ) throws -> RunResult {
        for _ in 0..<2 {
            let child = try ChildProcess(
                executable: xferExecutable, arguments: ["push", tree] + arguments + ["--state", state, "--json"],
                environment: environment)
            // Each file is one chunk: chunks count files (multipart completes files only at its end).
            var acknowledged = 0
            while acknowledged < count / 3, let line = child.readLine() {
                if line.contains("\"event\":\"chunk\"") { acknowledged += 1 }
            }
            child.kill(SIGKILL)
            XCTAssertEqual(child.wait(), 128 + SIGKILL, "the push ended before it was killed: \(child.standardError.suffix(500))")
        }
        let result = try runXfer(["push", tree] + arguments + ["--state", state, "--json"], environment: environment)
        XCTAssertEqual(result.status, 0, result.stderr.suffix(2000).description)
        XCTAssertEqual(result.events.first?["resumed"] as? Bool, true)
        XCTAssertGreaterThan(int(result.events.first?["doneBytes"]), 0, "the kills came after files were sent")
        XCTAssertLessThan(int(result.lastEvent?["bytesSent"]), int(result.events.first?["totalBytes"]), "everything was sent again")
        return result
    }

    /// Files in the killed-twice trees: 2,000 in `make test` (thousands still,
    /// and the suite stays within its time); `XFER_TREE_FILES=N` for more.
    static let manyFiles = ProcessInfo.processInfo.environment["XFER_TREE_FILES"].flatMap { Int($0) } ?? 2_000

    /// Every file the last run reports, byte-identical at the place its URL names
    /// on an xfer serve root (downloads/<id>/<relative path>).
    private func assertServed(_ result: RunResult, tree: String, paths: [String], root: String) throws {
        let files = try XCTUnwrap(result.lastEvent?["files"] as? [[String: Any]])
        XCTAssertEqual(files.count, paths.count)
        var seen = Set<String>()
        var wrong: [String] = []
        // Over the object store there is no directory to read: every file is fetched through
        // its URL instead (one curl for all of them), to the place it would have on disk.
        if SuiteStorage.isObjectStore {
            var config = ""
            for file in files {
                guard let url = file["url"] as? String, let served = URL(string: url)?.path else { continue }
                try FileManager.default.createDirectory(
                    atPath: ((root + served) as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
                config += "url = \"\(url)\"\noutput = \"\(root + served)\"\n"
            }
            try config.write(toFile: work.file("downloads.curl"), atomically: true, encoding: .utf8)
            let fetch = try runToEnd("/usr/bin/curl", ["-fsS", "--parallel", "--parallel-max", "8", "--config", work.file("downloads.curl")])
            XCTAssertEqual(fetch.status, 0, fetch.stderr.suffix(500).description)
        }
        for file in files {
            let path = try XCTUnwrap(file["path"] as? String)
            let url = try XCTUnwrap(file["url"] as? String)
            let relative = String(path.dropFirst(tree.count + 1))
            seen.insert(relative)
            // URL.path is percent-decoded: the path the receiver stored the file at.
            let served = try XCTUnwrap(URL(string: url)?.path)
            let id = served.split(separator: "/").dropFirst().first.map(String.init) ?? ""
            // On disk, where the receiver published it (downloads/<id>/<path>, or a small file's
            // downloads/<id>.<name>); over the object store, where the fetch above put it.
            let stored = SuiteStorage.isObjectStore ? root + served : publishedPath(root: root, id: id, relative)
            if !served.hasPrefix("/downloads/") || !served.hasSuffix("/" + relative) {
                wrong.append("\(url) is not under downloads/<id>/\(relative)")
            } else if FileManager.default.contents(atPath: stored) != FileManager.default.contents(atPath: path) {
                wrong.append("\(stored) differs from \(path)")
            }
        }
        // One failure naming a few, not thousands of lines.
        XCTAssertTrue(wrong.isEmpty, "\(wrong.count) files wrong, e.g. \(wrong.prefix(3))")
        XCTAssertEqual(seen, Set(paths))
    }

    func testThousandsOfFilesKilledTwiceArriveIntactWithPatch() throws {
        try killedTwiceOnServe(backend: "patch")
    }

    func testThousandsOfFilesKilledTwiceArriveIntactWithMultipart() throws {
        // xfer serve takes at most 1,000 files in one multipart source (preLoad.do's fileCount).
        try killedTwiceOnServe(backend: "multipart", count: 1_000)
    }

    func testThousandsOfFilesKilledTwiceArriveIntactWithSequence() throws {
        try killedTwiceOnServe(backend: "sequence")
    }

    private func killedTwiceOnServe(backend: String, count: Int = TreePushTests.manyFiles) throws {
        let served = work.file("served")
        let server = try ServeProcess(root: served)
        let tree = work.file("many")
        let paths = try makeManyFiles(tree, count: count)
        let result = try pushKilledTwice(
            tree, count: paths.count, arguments: ["--backend", backend, "--to", server.url, "--concurrency", "8"])
        try assertServed(result, tree: tree, paths: paths, root: served)
    }

    func testThousandsOfFilesKilledTwiceArriveIntactWithS3() throws {
        let s3 = try S3Server()
        try s3.makeBucket("tree")
        let tree = work.file("many")
        let paths = try makeManyFiles(tree, count: Self.manyFiles)
        let result = try pushKilledTwice(
            tree, count: paths.count,
            arguments: ["--backend", "s3", "--to", "s3://tree/up", "--endpoint", s3.url, "--concurrency", "8"],
            environment: S3Server.environment)
        let files = try XCTUnwrap(result.lastEvent?["files"] as? [[String: Any]])
        XCTAssertEqual(files.count, paths.count)
        // Every object by key, with its ETag: a single PUT's ETag is the MD5 of its bytes.
        let objects = try s3.objects(bucket: "tree")
        XCTAssertEqual(Set(objects.keys), Set(paths.map { "up/" + $0 }))
        var wrong: [String] = []
        for path in paths {
            let bytes = try XCTUnwrap(FileManager.default.contents(atPath: tree + "/" + path))
            let md5 = Insecure.MD5.hash(data: bytes).map { String(format: "%02x", $0) }.joined()
            if objects["up/" + path] != "\"\(md5)\"" { wrong.append(path) }
        }
        XCTAssertTrue(wrong.isEmpty, "\(wrong.count) objects differ, e.g. \(wrong.prefix(3))")
    }

    func testThousandsOfFilesKilledTwiceArriveIntactWithTus() throws {
        let server = try TusServer(directory: work.file("tus"))
        let tree = work.file("many")
        let count = Self.manyFiles
        let paths = try makeManyFiles(tree, count: count)
        let result = try pushKilledTwice(
            tree, count: paths.count, arguments: ["--backend", "tus", "--to", server.url, "--concurrency", "8"])
        let files = try XCTUnwrap(result.lastEvent?["files"] as? [[String: Any]])
        XCTAssertEqual(files.count, paths.count)
        // The server keeps each upload in a file named by its id (the URL's last segment).
        var wrong: [String] = []
        for file in files {
            let path = try XCTUnwrap(file["path"] as? String)
            let id = try XCTUnwrap((file["url"] as? String)?.split(separator: "/").last.map(String.init))
            let stored = work.file("tus") + "/uploads/" + id
            if FileManager.default.contents(atPath: stored) != FileManager.default.contents(atPath: path) { wrong.append(path) }
        }
        XCTAssertTrue(wrong.isEmpty, "\(wrong.count) files differ, e.g. \(wrong.prefix(3))")
    }

    private func run(_ executable: String, _ arguments: [String]) throws {
        let child = try ChildProcess(executable: executable, arguments: arguments)
        _ = child.readRemaining()
        guard child.wait() == 0 else { throw HarnessError("\(executable) failed: \(child.standardError)") }
    }
}
