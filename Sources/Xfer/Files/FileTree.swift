import Foundation
import Glibc

/// Which files of the directories pushed are taken (files named directly
/// always are: naming a file is an explicit choice).
///
/// A file is taken when it matches at least one include (or none is given)
/// and no exclude: exclude wins. A directory matching an exclude is not
/// entered at all. Symbolic links inside directories are followed only with
/// `followSymlinks`; a link back into a directory being walked is a loop
/// and is skipped.
public struct FileSelection: Sendable, Hashable {
    public let includes: [PathGlob]
    public let excludes: [PathGlob]
    public let followSymlinks: Bool

    /// Everything, links not followed.
    public init() {
        includes = []
        excludes = []
        followSymlinks = false
    }

    /// Parses the patterns (see `PathGlob`); a malformed one is `.invalidInput`.
    public init(includes: [String] = [], excludes: [String] = [], followSymlinks: Bool = false) throws(XferError) {
        self.includes = try includes.map { pattern throws(XferError) in try PathGlob(pattern) }
        self.excludes = try excludes.map { pattern throws(XferError) in try PathGlob(pattern) }
        self.followSymlinks = followSymlinks
    }

    /// Whether a file at `relativePath` (inside a directory pushed) is taken.
    public func takes(_ relativePath: String) -> Bool {
        if excludes.contains(where: { $0.matches(relativePath) }) { return false }
        return includes.isEmpty || includes.contains { $0.matches(relativePath) }
    }

    /// Whether the directory at `relativePath` is entered.
    public func enters(_ relativePath: String) -> Bool {
        !excludes.contains { $0.matches(relativePath, isDirectory: true) || $0.matches(relativePath + "/", isDirectory: true) }
    }
}

extension FileSelection {
    init(_ rules: TreeRules) throws(XferError) {
        try self.init(includes: rules.includes, excludes: rules.excludes, followSymlinks: rules.followSymlinks)
    }

    var rules: TreeRules {
        TreeRules(includes: includes.map(\.description), excludes: excludes.map(\.description), followSymlinks: followSymlinks)
    }
}

/// A regular file a walk found.
public struct FoundFile: Sendable, Hashable {
    /// The absolute path.
    public let path: String
    /// The path relative to the directory named ('/'-separated), or the
    /// file's name when the file itself was named.
    public let relativePath: String
    /// Which of the paths named it was found under (0-based).
    public let root: Int
    /// Size, modification time, inode and device, as the walk saw them.
    public let identity: FileIdentity

    /// The file's size in bytes.
    public var size: Int64 { identity.size }
}

/// One thing a walk met.
public enum FileTreeEntry: Sendable, Hashable {
    /// A file to send.
    case file(FoundFile)
    /// Not sent, and not an error: a symbolic link not followed, a loop, a
    /// FIFO, socket or device (never opened).
    case skipped(path: String, reason: String)
    /// Cannot be sent: a directory that cannot be read, an entry that
    /// vanished while the walk looked at it.
    case failed(path: String, relativePath: String, root: Int, reason: String)
}

/// The walk behind `xfer push DIR...`: the paths named, in order; inside a
/// directory, entries sorted by the bytes of their names, depth first.
///
/// A stream: it holds one sorted listing per directory on the path from a
/// root to where it is, never the whole tree, so 100,000 files cost what
/// their deepest path does. One `readdir` pass and one `lstat` per entry.
public struct FileTree: Sequence, Sendable {
    public let roots: [String]
    public let selection: FileSelection
    private let rootKinds: [Bool]

    /// Checks every path named (it must be a file or a directory) before
    /// anything is walked; a missing one is `.invalidInput`.
    public init(roots: [String], selection: FileSelection = FileSelection()) throws(XferError) {
        self.roots = roots
        self.selection = selection
        var kinds: [Bool] = []
        for root in roots {
            var info = stat()
            guard stat(root, &info) == 0 else {
                throw .invalidInput("\(root): \(LocalFile.describe(errno))")
            }
            switch info.st_mode & S_IFMT {
            case S_IFREG: kinds.append(false)
            case S_IFDIR: kinds.append(true)
            default:
                throw .invalidInput("\(root) is not a regular file or a directory (a pipe, socket or device cannot be resumed)")
            }
        }
        rootKinds = kinds
    }

    /// The walk of `paths` (made absolute).
    public static func entries(of paths: [String], selection: FileSelection) throws(XferError) -> FileTree {
        try FileTree(roots: paths.map { URL(fileURLWithPath: $0).standardizedFileURL.path }, selection: selection)
    }

    public func makeIterator() -> Iterator {
        Iterator(tree: self)
    }

    public struct Iterator: IteratorProtocol {
        private struct Level {
            let path: String
            let relative: String
            let names: [String]
            var position = 0
            let device: UInt64
            let inode: UInt64
        }

        private let tree: FileTree
        private var nextRoot = 0
        private var root = 0
        private var stack: [Level] = []

        init(tree: FileTree) {
            self.tree = tree
        }

        public mutating func next() -> FileTreeEntry? {
            while true {
                if stack.isEmpty {
                    guard nextRoot < tree.roots.count else { return nil }
                    root = nextRoot
                    nextRoot += 1
                    let path = tree.roots[root]
                    var info = stat()
                    guard stat(path, &info) == 0 else {
                        let name = (path as NSString).lastPathComponent
                        return .failed(path: path, relativePath: name, root: root, reason: LocalFile.describe(errno))
                    }
                    if tree.rootKinds[root] == false || info.st_mode & S_IFMT == S_IFREG {
                        let name = (path as NSString).lastPathComponent
                        return .file(FoundFile(path: path, relativePath: name, root: root, identity: LocalFile.identity(of: info)))
                    }
                    if let failure = enter(path, relative: "", info: info) { return failure }
                    continue
                }
                let top = stack.count - 1
                guard stack[top].position < stack[top].names.count else {
                    stack.removeLast()
                    continue
                }
                let name = stack[top].names[stack[top].position]
                stack[top].position += 1
                let path = stack[top].path == "/" ? "/" + name : stack[top].path + "/" + name
                let relative = stack[top].relative.isEmpty ? name : stack[top].relative + "/" + name
                if let entry = visit(path, relative: relative) { return entry }
            }
        }

        private mutating func visit(_ path: String, relative: String) -> FileTreeEntry? {
            var info = stat()
            guard lstat(path, &info) == 0 else {
                return .failed(path: path, relativePath: relative, root: root, reason: LocalFile.describe(errno))
            }
            var kind = info.st_mode & S_IFMT
            if kind == S_IFLNK {
                guard tree.selection.followSymlinks else {
                    return .skipped(path: path, reason: "symbolic link not followed (use --follow-symlinks)")
                }
                guard stat(path, &info) == 0 else {
                    return .skipped(path: path, reason: "symbolic link to nothing (\(LocalFile.describe(errno)))")
                }
                kind = info.st_mode & S_IFMT
            }
            switch kind {
            case S_IFREG:
                guard tree.selection.takes(relative) else { return nil }
                return .file(FoundFile(path: path, relativePath: relative, root: root, identity: LocalFile.identity(of: info)))
            case S_IFDIR:
                guard tree.selection.enters(relative) else { return nil }
                let device = UInt64(info.st_dev)
                let inode = UInt64(info.st_ino)
                if stack.contains(where: { $0.device == device && $0.inode == inode }) {
                    return .skipped(path: path, reason: "symbolic link loop, not followed")
                }
                return enter(path, relative: relative, info: info)
            case S_IFIFO:
                return .skipped(path: path, reason: "not a regular file (a FIFO)")
            case S_IFSOCK:
                return .skipped(path: path, reason: "not a regular file (a socket)")
            case S_IFCHR, S_IFBLK:
                return .skipped(path: path, reason: "not a regular file (a device)")
            default:
                return .skipped(path: path, reason: "not a regular file")
            }
        }

        /// Lists `path` (sorted) onto the stack; a directory that cannot be read fails alone.
        private mutating func enter(_ path: String, relative: String, info: stat) -> FileTreeEntry? {
            guard let directory = opendir(path) else {
                return .failed(path: path, relativePath: relative, root: root, reason: LocalFile.describe(errno))
            }
            defer { closedir(directory) }
            var names: [String] = []
            while let entry = readdir(directory) {
                let name = withUnsafePointer(to: entry.pointee.d_name) { pointer in
                    pointer.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) }
                }
                if name == "." || name == ".." { continue }
                names.append(name)
            }
            // By the bytes of the names: the same order on every machine and locale.
            names.sort { $0.utf8.lexicographicallyPrecedes($1.utf8) }
            stack.append(
                Level(path: path, relative: relative, names: names, device: UInt64(info.st_dev), inode: UInt64(info.st_ino)))
            return nil
        }
    }
}

/// The walk as the engine takes it.
typealias FileTreeWalker = FileTree
