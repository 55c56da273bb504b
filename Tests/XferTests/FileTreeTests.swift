import Foundation
import Glibc
import XCTest

@testable import Xfer

/// The walk behind `xfer push DIR...`, on real trees made in a fresh
/// temporary directory by each test.
final class FileTreeTests: XCTestCase {
    private var scratch: WalkScratch!

    override func setUpWithError() throws {
        scratch = try WalkScratch()
    }

    override func tearDown() {
        scratch.remove()
        scratch = nil
    }

    // MARK: Roots and order

    func testADirectoryYieldsItsFilesRelativeToItInByteOrder() throws {
        for name in ["a/b/c.txt", "a.txt", "a0", "B", "with space.bin", "照片/视频 01.mp4", "deep/x/y/z.dat"] {
            try scratch.file("tree/" + name, size: 3)
        }
        try scratch.file("tree/empty.txt", size: 0)
        let entries = try walk([scratch.path("tree")])
        XCTAssertEqual(entries, [
            "file B", "file a/b/c.txt", "file a.txt", "file a0", "file deep/x/y/z.dat", "file empty.txt",
            "file with space.bin", "file 照片/视频 01.mp4",
        ])
        let files = try FileTree(roots: [scratch.path("tree")]).compactMap(\.file)
        let empty = try XCTUnwrap(files.first { $0.relativePath == "empty.txt" })
        XCTAssertEqual(empty.path, scratch.path("tree/empty.txt"))
        XCTAssertEqual(empty.size, 0)
        XCTAssertEqual(empty.root, 0)
        var info = stat()
        XCTAssertEqual(stat(empty.path, &info), 0)
        XCTAssertEqual(empty.identity.inode, UInt64(info.st_ino))
        XCTAssertEqual(empty.identity.device, UInt64(info.st_dev))
        XCTAssertEqual(
            empty.identity.modificationTimeNanoseconds, Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec))
        XCTAssertEqual(files.first { $0.relativePath == "a0" }?.size, 3)
    }

    func testEmptyDirectoriesYieldNothing() throws {
        try scratch.directory("tree/empty/deeper/still")
        try scratch.directory("tree/also empty")
        XCTAssertEqual(try walk([scratch.path("tree")]), [])
    }

    func testOrderIsByBytesNotByLocaleOrDepth() throws {
        // '.' (0x2E) < '/' (0x2F) < '0' (0x30): a full-path sort would put
        // "a.txt" before "a/x"; the walk lists directory "a" where its name falls.
        for name in ["a0", "a.txt", "a/x", "B", "b", "Z", "é", "e", "_"] { try scratch.file("tree/" + name) }
        XCTAssertEqual(try walk([scratch.path("tree")]), [
            "file B", "file Z", "file _", "file a/x", "file a.txt", "file a0", "file b", "file e", "file é",
        ])
    }

    func testFileRootsAndDirectoryRootsMixedKeepTheOrderGiven() throws {
        try scratch.file("one.bin", size: 1)
        try scratch.file("dir/inner.bin", size: 2)
        try scratch.file("dir/sub/leaf.bin", size: 3)
        try scratch.file("two.tmp", size: 4)
        let tree = try FileTree(
            roots: [scratch.path("two.tmp"), scratch.path("dir") + "/", scratch.path("one.bin")],
            selection: FileSelection(excludes: ["*.tmp"]))
        let files = tree.compactMap(\.file)
        // A file named is taken even though an exclude matches it.
        XCTAssertEqual(files.map(\.relativePath), ["two.tmp", "inner.bin", "sub/leaf.bin", "one.bin"])
        XCTAssertEqual(files.map(\.root), [0, 1, 1, 2])
        XCTAssertEqual(files[2].path, scratch.path("dir/sub/leaf.bin"), "a trailing slash on the root is not doubled")
        XCTAssertEqual(files.map(\.size), [4, 2, 3, 1])
    }

    func testEntriesOfRelativePathsAreAbsolute() throws {
        try scratch.file("dir/f")
        let previous = FileManager.default.currentDirectoryPath
        XCTAssertTrue(FileManager.default.changeCurrentDirectoryPath(scratch.path))
        defer { _ = FileManager.default.changeCurrentDirectoryPath(previous) }
        let files = try FileTree.entries(of: ["dir"], selection: FileSelection()).compactMap(\.file)
        XCTAssertEqual(files.map(\.path), [scratch.path("dir/f")])
        XCTAssertThrowsError(try FileTree.entries(of: ["photos/"], selection: FileSelection())) { error in
            XCTAssertEqual("\(error)", "photos/: no such file or directory", "named as typed")
        }
    }

    func testABadRootIsOneErrorBeforeAnythingIsWalked() throws {
        try scratch.file("good")
        let missing = scratch.path("photos") + "/"
        XCTAssertThrowsError(try FileTree(roots: [scratch.path("good"), missing])) { error in
            XCTAssertEqual(error as? XferError, .invalidInput("\(missing): no such file or directory"))
        }
        XCTAssertEqual(mkfifo(scratch.path("fifo"), 0o644), 0)
        XCTAssertThrowsError(try FileTree(roots: [scratch.path("fifo")])) { error in
            XCTAssertTrue("\(error)".contains("not a regular file or a directory (FIFO)"), "\(error)")
            XCTAssertFalse("\(error)".contains("\n"))
        }
    }

    func testARootThatIsASymlinkIsFollowed() throws {
        try scratch.file("real/f.txt")
        try scratch.file("file.txt")
        try scratch.link("dirlink", to: "real")
        try scratch.link("filelink", to: "file.txt")
        let files = try FileTree(roots: [scratch.path("dirlink"), scratch.path("filelink")]).compactMap(\.file)
        XCTAssertEqual(files.map(\.relativePath), ["f.txt", "filelink"])
        XCTAssertEqual(files.map(\.path), [scratch.path("dirlink/f.txt"), scratch.path("filelink")])
    }

    // MARK: Symbolic links

    func testSymlinksBelowARootAreSkippedUnlessFollowed() throws {
        try scratch.file("target/t.txt", size: 5)
        try scratch.file("tree/file.txt", size: 7)
        try scratch.link("tree/to-file", to: "file.txt")
        try scratch.link("tree/to-dir", to: "../target")
        XCTAssertEqual(try walk([scratch.path("tree")]), [
            "file file.txt",
            "skipped to-dir: symbolic link not followed",
            "skipped to-file: symbolic link not followed",
        ])
        let followed = try FileTree(roots: [scratch.path("tree")], selection: FileSelection(followSymlinks: true))
        let files = followed.compactMap(\.file)
        XCTAssertEqual(files.map(\.relativePath), ["file.txt", "to-dir/t.txt", "to-file"])
        XCTAssertEqual(files.map(\.path), ["file.txt", "to-dir/t.txt", "to-file"].map { scratch.path("tree/" + $0) })
        XCTAssertEqual(files.map(\.size), [7, 5, 7], "a link followed has its target's size")
    }

    func testASymlinkLoopIsSkippedWhenFollowing() throws {
        try scratch.file("tree/a/b/f.txt")
        try scratch.link("tree/a/b/up", to: "..")
        try scratch.link("tree/a/self", to: ".")
        try scratch.link("tree/a/root", to: "../..")  // the directory holding the tree
        try scratch.link("tree/a/tree", to: "../../tree")
        let entries = try walk([scratch.path("tree")], FileSelection(includes: ["f.txt"], followSymlinks: true))
        XCTAssertEqual(entries, [
            "file a/b/f.txt",
            "skipped a/b/up: symbolic link loop, not followed",
            // root/ is walked (it is not on the path), but its "tree" is.
            "skipped a/root/tree: symbolic link loop, not followed",
            "skipped a/self: symbolic link loop, not followed",
            "skipped a/tree: symbolic link loop, not followed",
        ])
    }

    func testADanglingSymlinkIsSkippedWithItsReason() throws {
        try scratch.file("tree/f")
        try scratch.link("tree/gone", to: "nowhere")
        XCTAssertEqual(try walk([scratch.path("tree")]), [
            "file f", "skipped gone: symbolic link not followed",
        ])
        XCTAssertEqual(try walk([scratch.path("tree")], FileSelection(followSymlinks: true)), [
            "file f", "skipped gone: dangling symbolic link (its target does not exist)",
        ])
    }

    // MARK: What is not a file

    func testFIFOsAndSocketsAreSkippedWithoutBeingOpened() throws {
        try scratch.file("tree/a.txt")
        XCTAssertEqual(mkfifo(scratch.path("tree/pipe"), 0o644), 0)
        let socket = try scratch.unixSocket("tree/sock")
        defer { close(socket) }
        // Opening the FIFO would block this test forever.
        XCTAssertEqual(try walk([scratch.path("tree")]), [
            "file a.txt", "skipped pipe: not a regular file (FIFO)", "skipped sock: not a regular file (socket)",
        ])
        XCTAssertEqual(try walk([scratch.path("tree")], FileSelection(excludes: ["pipe", "sock"])), ["file a.txt"])
    }

    func testADeviceBelowARootIsSkipped() throws {
        try scratch.directory("tree")
        guard mknod(scratch.path("tree/null"), S_IFCHR | 0o666, dev_t((1 << 8) | 3)) == 0 else {
            throw XCTSkip("cannot make a device node here (needs CAP_MKNOD)")
        }
        XCTAssertEqual(try walk([scratch.path("tree")]), ["skipped null: not a regular file (character device)"])
    }

    // MARK: Failures

    func testAnUnreadableDirectoryFailsAloneAndTheWalkGoesOn() throws {
        try scratch.file("tree/a/f")
        try scratch.file("tree/locked/secret")
        try scratch.file("tree/z")
        XCTAssertEqual(chmod(scratch.path("tree/locked"), 0), 0)
        defer { chmod(scratch.path("tree/locked"), 0o755) }
        // Root reads through permissions: walk as nobody for a moment.
        var asRoot = false
        if geteuid() == 0 {
            XCTAssertEqual(chmod(scratch.path, 0o755), 0)
            guard seteuid(65534) == 0 else { throw XCTSkip("cannot drop to nobody to test permissions") }
            asRoot = true
        }
        let entries: [String]
        do {
            defer { if asRoot { XCTAssertEqual(seteuid(0), 0) } }
            entries = try walk([scratch.path("tree")])
        }
        XCTAssertEqual(entries, [
            "file a/f",
            "failed locked: cannot list this directory: permission denied (fix its permissions, or exclude it)",
            "file z",
        ])
    }

    func testAnEntryThatVanishesMidWalkFailsAlone() throws {
        for name in ["a", "b", "c", "d", "e.tmp"] { try scratch.file("tree/" + name) }
        let tree = try FileTree(roots: [scratch.path("tree")], selection: FileSelection(excludes: ["*.tmp"]))
        var walk = tree.makeIterator()
        XCTAssertEqual(walk.next()?.file?.relativePath, "a")
        // Listed already; gone before the walk looks at them.
        for name in ["c", "e.tmp"] { XCTAssertEqual(unlink(scratch.path("tree/" + name)), 0) }
        var rest: [FileTreeEntry] = []
        while let entry = walk.next() { rest.append(entry) }
        XCTAssertEqual(rest.map { scratch.describe($0) }, [
            "file b", "failed c: vanished during the walk (no such file or directory)", "file d",
        ], "an excluded entry that vanished is not reported")
        guard case .failed(let path, let relativePath, let root, _) = rest[1] else { return XCTFail() }
        XCTAssertEqual([path, relativePath], [scratch.path("tree/c"), "c"])
        XCTAssertEqual(root, 0)
    }

    func testARootThatVanishesAfterTheCheckFailsAlone() throws {
        try scratch.file("first")
        try scratch.file("second")
        let tree = try FileTree(roots: [scratch.path("first"), scratch.path("second")])
        XCTAssertEqual(unlink(scratch.path("first")), 0)
        XCTAssertEqual(tree.map { scratch.describe($0) }, [
            "failed first: vanished during the walk (no such file or directory)", "file second",
        ])
    }

    func testANameThatIsNotUTF8FailsAlone() throws {
        try scratch.file("tree/ok")
        let bytes = Array(scratch.path("tree/").utf8) + [0x62, 0x61, 0x64, 0xFF, 0]
        let descriptor = bytes.withUnsafeBufferPointer {
            creat(UnsafeRawPointer($0.baseAddress!).assumingMemoryBound(to: CChar.self), 0o644)
        }
        guard descriptor >= 0 else { throw XCTSkip("this file system refuses names that are not UTF-8") }
        close(descriptor)
        XCTAssertEqual(try walk([scratch.path("tree")]), [
            "failed bad\u{FFFD}: its name is not valid UTF-8; rename it to send it", "file ok",
        ])
    }

    // MARK: Selection

    func testIncludesAndExcludesCombineAndExcludeWins() throws {
        for name in ["a.jpg", "b.png", "x/y/c.jpg", "x/keep.txt", "tmp/d.jpg", "raw/e.jpg", "raw/deep/f.jpg"] {
            try scratch.file("tree/" + name)
        }
        let root = scratch.path("tree")
        XCTAssertEqual(try walk([root], FileSelection(includes: ["*.jpg"])), [
            "file a.jpg", "file raw/deep/f.jpg", "file raw/e.jpg", "file tmp/d.jpg", "file x/y/c.jpg",
        ])
        XCTAssertEqual(try walk([root], FileSelection(includes: ["*.jpg"], excludes: ["tmp/**", "raw/*.jpg"])), [
            "file a.jpg", "file raw/deep/f.jpg", "file x/y/c.jpg",
        ])
        XCTAssertEqual(try walk([root], FileSelection(includes: ["*.jpg"], excludes: ["*.jpg"])), [], "exclude wins")
        XCTAssertEqual(try walk([root], FileSelection(includes: ["/*.{jpg,png}", "x/**"])), [
            "file a.jpg", "file b.png", "file x/keep.txt", "file x/y/c.jpg",
        ])
        XCTAssertEqual(try walk([root], FileSelection(includes: ["raw/"])), ["file raw/deep/f.jpg", "file raw/e.jpg"])
        XCTAssertEqual(try walk([root], FileSelection(excludes: ["*.jpg", "*.png"])), ["file x/keep.txt"])
    }

    func testAnExcludedDirectoryIsNeverOpened() throws {
        for name in ["src/main.js", "node_modules/pkg/index.js", "node_modules/pkg/lib/deep.js", "a/node_modules/x.js",
            "build/out/bin", "cache/c1", "x/cache/c2", "cache.txt", "keep/cache"]
        {
            try scratch.file("tree/" + name)
        }
        let tree = try FileTree(
            roots: [scratch.path("tree")], selection: FileSelection(excludes: ["node_modules", "build/**", "cache/"]))
        var walk = tree.makeIterator()
        var relativePaths: [String] = []
        while let entry = walk.next() { relativePaths.append(try XCTUnwrap(entry.file).relativePath) }
        XCTAssertEqual(relativePaths, ["cache.txt", "keep/cache", "src/main.js"], "cache/ matches directories only")
        // tree, a, keep, src, x: none of node_modules, a/node_modules, build, cache, x/cache.
        XCTAssertEqual(walk.openedDirectoryCount, 5)
    }

    func testIncludesNeverPruneDirectories() throws {
        try scratch.file("tree/a/b/c/wanted.jpg")
        try scratch.file("tree/a/other.txt")
        let tree = try FileTree(roots: [scratch.path("tree")], selection: FileSelection(includes: ["a/**/wanted.jpg"]))
        var walk = tree.makeIterator()
        XCTAssertEqual(walk.next()?.file?.relativePath, "a/b/c/wanted.jpg")
        XCTAssertNil(walk.next())
        XCTAssertEqual(walk.openedDirectoryCount, 4)
    }

    func testExcludesSilenceWhatWouldBeSkipped() throws {
        try scratch.file("tree/f")
        try scratch.link("tree/link.tmp", to: "f")
        try scratch.link("tree/linkdir", to: ".")
        XCTAssertEqual(mkfifo(scratch.path("tree/pipe.tmp"), 0o644), 0)
        XCTAssertEqual(try walk([scratch.path("tree")], FileSelection(excludes: ["*.tmp", "linkdir/"])), ["file f"])
        // Includes do not: a FIFO among the files is worth a line.
        XCTAssertEqual(try walk([scratch.path("tree")], FileSelection(includes: ["*.jpg"])), [
            "skipped link.tmp: symbolic link not followed",
            "skipped linkdir: symbolic link not followed",
            "skipped pipe.tmp: not a regular file (FIFO)",
        ])
    }

    func testSelectionRules() throws {
        let selection = try FileSelection(includes: ["*.jpg", "docs/"], excludes: ["tmp/", "*.part.jpg", "build/**"])
        XCTAssertTrue(selection.takes("a.jpg"))
        XCTAssertTrue(selection.takes("x/y/a.jpg"))
        XCTAssertTrue(selection.takes("docs/readme.md"))
        XCTAssertFalse(selection.takes("readme.md"))
        XCTAssertFalse(selection.takes("a.part.jpg"))
        XCTAssertFalse(selection.takes("tmp/a.jpg"))
        XCTAssertFalse(selection.enters("tmp"))
        XCTAssertFalse(selection.enters("x/tmp"))
        XCTAssertFalse(selection.enters("build"))
        XCTAssertTrue(selection.enters("docs"))
        XCTAssertTrue(selection.enters("anything"), "includes never prune")
        XCTAssertEqual(try FileSelection(selection.rules), selection)
        let directoriesOnly = try FileSelection(excludes: ["tmp/"])
        XCTAssertTrue(directoriesOnly.takes("tmp"), "a file named tmp is not the directory tmp/")
        XCTAssertFalse(directoriesOnly.takes("tmp/a"))
        XCTAssertFalse(directoriesOnly.enters("tmp"))
        XCTAssertThrowsError(try FileSelection(excludes: ["ok", "[bad"])) { error in
            XCTAssertTrue("\(error)".contains("'[bad' has a '[' without its ']'"), "\(error)")
        }
    }

    // MARK: Scale and resources

    func testTwentyThousandFilesComeInOrder() throws {
        for d in 0..<37 {
            for e in 0..<5 { try scratch.directory("tree/d\(d)/e\(e)") }
        }
        var expected: [[String]] = []
        for index in 0..<20_000 {
            let path = "d\(index % 37)/e\(index % 5)/f\(index)\(index % 3 == 0 ? ".txt" : "")"
            let descriptor = creat(scratch.path("tree/" + path), 0o644)
            XCTAssertGreaterThanOrEqual(descriptor, 0)
            close(descriptor)
            expected.append(path.split(separator: "/").map(String.init))
        }
        for name in ["d1.txt", "d1!", "d10.txt"] {
            try scratch.file("tree/" + name)
            expected.append([name])
        }
        // Depth first, each directory by the bytes of its names: ordered by
        // components, not by whole paths ("d1!" < "d1/…" < "d1.txt" < "d10").
        expected.sort { $0.lexicographicallyPrecedes($1) { $0.utf8.lexicographicallyPrecedes($1.utf8) } }
        let tree = try FileTree(roots: [scratch.path("tree")])
        var walked: [String] = []
        walked.reserveCapacity(expected.count)
        for entry in tree { walked.append(try XCTUnwrap(entry.file).relativePath) }
        XCTAssertEqual(walked.count, expected.count)
        XCTAssertEqual(walked, expected.map { $0.joined(separator: "/") })
        XCTAssertEqual(walked.first, "d0/e0/f0.txt")
        XCTAssertEqual(walked.last, "d9/e4/f9999.txt")
    }

    func testATreeDeeperThanTheOpenDescriptorsIsWalked() throws {
        let depth = FileTree.maximumOpenDepth + 10
        let deep = (0..<depth).map { "d\($0)" }.joined(separator: "/")
        try scratch.file("tree/" + deep + "/leaf")
        try scratch.file("tree/" + deep + "/z/leaf")
        try scratch.link("tree/" + deep + "/z/up", to: "..")
        let entries = try walk([scratch.path("tree")], FileSelection(followSymlinks: true))
        XCTAssertEqual(entries, [
            "file \(deep)/leaf", "file \(deep)/z/leaf", "skipped \(deep)/z/up: symbolic link loop, not followed",
        ])
    }

    func testAnAbandonedWalkClosesItsDirectories() throws {
        try scratch.file("tree/a/b/c/d/f1")
        try scratch.file("tree/a/b/c/d/f2")
        let before = try openDescriptors()
        do {
            var walk = try FileTree(roots: [scratch.path("tree")]).makeIterator()
            XCTAssertNotNil(walk.next())
            XCTAssertGreaterThan(try openDescriptors(), before, "the directories on the path are open")
        }
        XCTAssertEqual(try openDescriptors(), before)
    }

    // MARK: Helpers

    /// The walk of `roots`, one line per entry (paths relative to the scratch tree's roots).
    private func walk(_ roots: [String], _ selection: FileSelection = FileSelection()) throws -> [String] {
        try FileTree(roots: roots, selection: selection).map { scratch.describe($0) }
    }

    private func openDescriptors() throws -> Int {
        try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count
    }
}

extension FileTreeEntry {
    fileprivate var file: FoundFile? {
        if case .file(let file) = self { return file }
        return nil
    }
}

/// A temporary directory for one test, removed after it.
private final class WalkScratch {
    let path: String

    init() throws {
        var template = Array((NSTemporaryDirectory() as NSString).appendingPathComponent("xfer-walk-XXXXXX").utf8CString)
        guard let made = mkdtemp(&template) else { throw XCTSkip("mkdtemp failed: errno \(errno)") }
        path = String(cString: made)
    }

    func path(_ relative: String) -> String { path + "/" + relative }

    func directory(_ relative: String) throws {
        try FileManager.default.createDirectory(atPath: path(relative), withIntermediateDirectories: true)
    }

    func file(_ relative: String, size: Int = 0) throws {
        let full = path(relative)
        try directory((relative as NSString).deletingLastPathComponent)
        let descriptor = creat(full, 0o644)
        guard descriptor >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno)!) }
        defer { close(descriptor) }
        if size > 0 { XCTAssertEqual(write(descriptor, [UInt8](repeating: 7, count: size), size), size) }
    }

    func link(_ relative: String, to target: String) throws {
        try directory((relative as NSString).deletingLastPathComponent)
        guard symlink(target, path(relative)) == 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno)!) }
    }

    /// A bound Unix socket at `relative`; close the descriptor returned.
    func unixSocket(_ relative: String) throws -> Int32 {
        let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno)!) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path(relative).utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
            close(descriptor)
            throw XCTSkip("the temporary directory's path is too long for a Unix socket")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes) }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard bound == 0 else {
            close(descriptor)
            throw POSIXError(POSIXErrorCode(rawValue: errno)!)
        }
        return descriptor
    }

    /// One line for an entry: its kind, the path below its root, and the reason.
    func describe(_ entry: FileTreeEntry) -> String {
        switch entry {
        case .file(let file):
            return "file \(file.relativePath)"
        case .skipped(let path, let reason):
            return "skipped \(belowRoot(path)): \(reason)"
        case .failed(let path, _, _, let reason):
            return "failed \(belowRoot(path)): \(reason)"
        }
    }

    /// `path` without the scratch directory and the root's own name (the
    /// first component below it).
    private func belowRoot(_ path: String) -> String {
        let inside = path.hasPrefix(self.path + "/") ? String(path.dropFirst(self.path.count + 1)) : path
        guard let slash = inside.firstIndex(of: "/") else { return inside }
        return String(inside[inside.index(after: slash)...])
    }

    func remove() {
        try? FileManager.default.removeItem(atPath: path)
    }
}
