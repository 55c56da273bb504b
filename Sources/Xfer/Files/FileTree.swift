import FoundationEssentials
import Glibc

/// Which files of the directories pushed are taken, from `--include`,
/// `--exclude` and `--follow-symlinks` (patterns: see `PathGlob`).
///
/// - A file is taken when it matches at least one include (or none is
///   given) and no exclude: exclude wins, so `--include '*.jpg' --exclude
///   'tmp/**'` reads as "the JPEGs, but nothing from tmp".
/// - A directory an exclude matches (`node_modules`, `build/**`, `cache/`)
///   is pruned: never opened, which is what makes excluding a large
///   directory cheap. The same rule as .gitignore.
/// - Includes never prune: a file deep inside any directory may match.
/// - Selection applies below the directories named. A file named itself is
///   always taken: naming it is an explicit choice no filter should undo.
/// - Something skipped (a link not followed, a FIFO) or unreadable is
///   reported unless an exclude matches it: an exclude says "not this", an
///   include only says what to send, and a FIFO a user did not expect among
///   their files is worth a line.
public struct FileSelection: Sendable, Hashable {
    public let includes: [PathGlob]
    public let excludes: [PathGlob]
    /// Whether symbolic links below the paths named are followed (the paths
    /// named themselves always are, like `find -H`).
    public let followSymlinks: Bool

    /// Everything, links not followed.
    public init() {
        includes = []
        excludes = []
        followSymlinks = false
    }

    /// Parses the patterns up front, so a typo stops the push before anything
    /// is walked or stored.
    ///
    /// - Throws: `.invalidInput` naming the first malformed pattern.
    public init(includes: [String] = [], excludes: [String] = [], followSymlinks: Bool = false) throws(XferError) {
        self.includes = try includes.map { pattern throws(XferError) in try PathGlob(pattern) }
        self.excludes = try excludes.map { pattern throws(XferError) in try PathGlob(pattern) }
        self.followSymlinks = followSymlinks
    }

    /// Whether a regular file at `relativePath` (below a directory pushed) is
    /// taken, its directories having been entered.
    public func takes(_ relativePath: String) -> Bool {
        if excludes.contains(where: { $0.matches(relativePath) }) { return false }
        return includes.isEmpty || includes.contains { $0.matches(relativePath) }
    }

    /// Whether the directory at `relativePath` is entered.
    public func enters(_ relativePath: String) -> Bool {
        !excludes.contains { $0.matches(relativePath, isDirectory: true) || $0.matchesEverything(below: relativePath) }
    }

    /// Whether an exclude matches `relativePath` as a file: silences what is
    /// skipped without being a directory (a FIFO, a socket).
    func excludesFile(_ relativePath: String) -> Bool {
        excludes.contains { $0.matches(relativePath) }
    }

    /// Whether an exclude names `relativePath` as a file or as a directory:
    /// for what the walk reports without knowing which it is (a link not
    /// followed, an entry that vanished).
    func excludesEither(_ relativePath: String) -> Bool {
        !enters(relativePath) || excludesFile(relativePath)
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
    /// The path to open: the root as given joined with the relative path (a
    /// link followed keeps its own path, not its target's).
    public let path: String
    /// Where the file goes, relative to the directory named ('/'-separated,
    /// the directory's own name left out, as `aws s3 cp --recursive` and
    /// `rclone copy` do), or the file's name when the file itself was named.
    public let relativePath: String
    /// Which of the paths named it was found under (0-based).
    public let root: Int
    /// Size, modification time, inode and device, as the walk saw them: the
    /// engine compares them later to notice a file that changed.
    public let identity: FileIdentity

    /// The file's size in bytes.
    public var size: Int64 { identity.size }
}

/// Why a path was passed by without being sent, and without that being an
/// error. A value, so a front end can add its own advice (the CLI names
/// `--follow-symlinks`); `description` is one line of plain words.
public enum SkipReason: Sendable, Hashable, CustomStringConvertible {
    /// A symbolic link, and the selection does not follow links (`FileSelection.followSymlinks`).
    case symbolicLinkNotFollowed
    /// A symbolic link whose target does not exist.
    case danglingSymbolicLink
    /// A symbolic link whose target cannot be looked at (why, in words).
    case symbolicLinkUnreadable(String)
    /// A directory met again below itself: through a symbolic link, or mounted inside itself.
    case loop(throughLink: Bool)
    /// A FIFO, socket or device (never opened: opening a FIFO blocks).
    case notARegularFile(kind: String)
    /// A file an earlier run sent that is gone or unreadable now (why, in
    /// words): the server keeps its copy.
    case goneSinceSent(String)
    /// More paths were skipped than are reported one by one.
    case andMore(Int)

    public var description: String {
        switch self {
        case .symbolicLinkNotFollowed: return "symbolic link not followed"
        case .danglingSymbolicLink: return "dangling symbolic link (its target does not exist)"
        case .symbolicLinkUnreadable(let why): return "symbolic link not followed: \(why)"
        case .loop(let throughLink):
            return throughLink ? "symbolic link loop, not followed" : "directory loop (mounted inside itself), not followed"
        case .notARegularFile(let kind): return "not a regular file (\(kind))"
        case .goneSinceSent(let why): return "\(why), but it was sent before; the server keeps its copy"
        case .andMore(let count): return "and \(count) more paths skipped"
        }
    }
}

/// One thing a walk met.
public enum FileTreeEntry: Sendable, Hashable {
    /// A file to send.
    case file(FoundFile)
    /// Not sent, and not an error: a symbolic link not followed, a dangling
    /// link, a loop, a FIFO, socket or device.
    case skipped(path: String, reason: SkipReason)
    /// Cannot be sent: a directory that cannot be listed, an entry that
    /// vanished or changed while the walk looked at it, a name that is not
    /// UTF-8. The walk goes on with the rest. `relativePath` is empty for a
    /// directory named itself.
    case failed(path: String, relativePath: String, root: Int, reason: String)
}

/// The walk behind `xfer push DIR...`: the files below the paths named, as
/// a stream in an order that is the same on every machine.
///
/// - Paths named: a file yields itself, under its name. A directory yields
///   what is below it, relative to it. A symbolic link named is followed
///   (like `find -H`): naming it means its target. Each must exist and be a
///   file or a directory; `init` checks them all before anything is walked,
///   so a typo is one clear error, not a half-recorded job.
/// - Order: the paths named in the order given; inside a directory, entries
///   by the bytes of their UTF-8 names (`B` < `a` < `a.txt` < `a0`), so no
///   locale or file system changes it; depth first, a subdirectory walked
///   where its name falls among the files. A re-run meets the files in the
///   same order, which keeps resumed jobs and listings comparable.
/// - Symbolic links below a path named are reported and skipped unless the
///   selection follows them. Followed, a link to a file is that file under
///   the link's path; a link to a directory is walked there (so a directory
///   linked twice is sent twice, as `rclone -L` does); a directory already
///   on the path from the root (a loop, through a link or a bind mount) is
///   skipped, as is a dangling link.
/// - FIFOs, sockets and devices are skipped, never opened.
/// - A directory that cannot be listed, or an entry that vanishes before it
///   is looked at, is one `.failed` entry; the rest of the walk goes on.
///
/// Cost: the walk is a stream holding one sorted listing per directory on
/// the path from the root to where it is (names packed in one buffer), never
/// the whole tree. Per entry: its share of the `readdir` pass and one
/// `fstatat` relative to its directory's descriptor (no path lookup from
/// `/`); a second `fstatat` only to follow a link.
public struct FileTree: Sequence, Sendable {
    /// The paths named, as given.
    public let roots: [String]
    public let selection: FileSelection
    /// The file's name when exactly one path is named and it is a regular
    /// file (as it was when checked), else nil.
    public let namedFile: String?

    /// Checks every path named before anything is walked.
    ///
    /// - Throws: `.invalidInput` for the first path that does not exist,
    ///   cannot be looked at, or is neither a file nor a directory, as
    ///   `photos/: no such file or directory`.
    public init(roots: [String], selection: FileSelection = FileSelection()) throws(XferError) {
        var kinds: [mode_t] = []
        for root in roots { kinds.append(try Self.check(root, shownAs: root)) }
        self.roots = roots
        self.selection = selection
        namedFile =
            roots.count == 1 && kinds[0] == S_IFREG ? URL(fileURLWithPath: roots[0]).lastPathComponent : nil
    }

    /// The walk of `paths`, made absolute so every entry's path is; errors
    /// name the paths as the user typed them.
    public static func entries(of paths: [String], selection: FileSelection) throws(XferError) -> FileTree {
        for path in paths { try check(path, shownAs: path) }
        return try FileTree(roots: paths.map { URL(fileURLWithPath: $0).standardizedFileURL.path }, selection: selection)
    }

    /// The kind of file at `path` (`S_IFREG` or `S_IFDIR`).
    @discardableResult
    private static func check(_ path: String, shownAs shown: String) throws(XferError) -> mode_t {
        var info = stat()
        guard stat(path, &info) == 0 else {
            throw .invalidInput("\(shown): \(describe(errno))")
        }
        let kind = info.st_mode & S_IFMT
        guard kind == S_IFREG || kind == S_IFDIR else {
            throw .invalidInput(
                "\(shown): not a regular file or a directory (\(describe(kind: kind))); name files or directories to push")
        }
        return kind
    }

    public func makeIterator() -> Iterator {
        Iterator(roots: roots, selection: selection)
    }

    /// How many directories deep the walk keeps descriptors open; deeper,
    /// it reads a listing, closes it and looks entries up by path, so no
    /// tree can exhaust the process's descriptors.
    static let maximumOpenDepth = 64

    /// The walk in progress. Copies share the open directories: advance one
    /// copy only. Abandoning it midway closes them.
    public struct Iterator: IteratorProtocol {
        private let roots: [String]
        private let selection: FileSelection
        private var nextRoot = 0
        private var root = 0
        /// The directories from the root to where the walk is.
        private var stack: [Listing] = []
        /// How many directories the walk opened (tests check what was pruned).
        private(set) var openedDirectoryCount = 0

        init(roots: [String], selection: FileSelection) {
            self.roots = roots
            self.selection = selection
        }

        public mutating func next() -> FileTreeEntry? {
            while true {
                guard let top = stack.last else {
                    guard nextRoot < roots.count else { return nil }
                    root = nextRoot
                    nextRoot += 1
                    if let entry = startRoot() { return entry }
                    continue
                }
                guard top.position < top.entries.count else {
                    stack.removeLast()
                    continue
                }
                let entry = top.entries[top.position]
                top.position += 1
                if let found = visit(entry, in: top) { return found }
            }
        }

        /// The root again (it may have changed since `init` checked it),
        /// following a link, as `find -H` does.
        private mutating func startRoot() -> FileTreeEntry? {
            var path = roots[root]
            while path.count > 1, path.hasSuffix("/") { path.removeLast() }
            let name = path.split(separator: "/").last.map(String.init) ?? path
            var info = stat()
            guard stat(path, &info) == 0 else {
                return .failed(path: path, relativePath: name, root: root, reason: Self.vanished(errno))
            }
            switch info.st_mode & S_IFMT {
            case S_IFREG:
                return .file(FoundFile(path: path, relativePath: name, root: root, identity: Self.identity(info)))
            case S_IFDIR:
                return enter(path: path, relative: "", info: info, from: nil, followingLink: true)
            case let kind:
                return .skipped(path: path, reason: .notARegularFile(kind: FileTree.describe(kind: kind)))
            }
        }

        private mutating func visit(_ entry: Listing.Entry, in parent: Listing) -> FileTreeEntry? {
            guard let name = parent.name(of: entry) else {
                let shown = parent.displayName(of: entry)
                return .failed(
                    path: parent.childPath(shown), relativePath: parent.childRelative(shown), root: root,
                    reason: "its name is not valid UTF-8; rename it to send it")
            }
            let path = parent.childPath(name)
            let relative = parent.childRelative(name)
            var info = stat()
            guard parent.status(of: entry, path: path, into: &info, followingLink: false) else {
                let code = errno
                let reported =
                    switch Int32(entry.type) {
                    case Int32(DT_REG): selection.takes(relative)
                    case Int32(DT_DIR): selection.enters(relative)
                    default: !selection.excludesEither(relative)
                    }
                guard reported else { return nil }
                return .failed(path: path, relativePath: relative, root: root, reason: Self.vanished(code))
            }
            var kind = info.st_mode & S_IFMT
            let isLink = kind == S_IFLNK
            if isLink {
                guard selection.followSymlinks else {
                    if selection.excludesEither(relative) { return nil }
                    return .skipped(path: path, reason: .symbolicLinkNotFollowed)
                }
                guard parent.status(of: entry, path: path, into: &info, followingLink: true) else {
                    if selection.excludesEither(relative) { return nil }
                    let code = errno
                    if code == ENOENT { return .skipped(path: path, reason: .danglingSymbolicLink) }
                    return .skipped(path: path, reason: .symbolicLinkUnreadable(FileTree.describe(code)))
                }
                kind = info.st_mode & S_IFMT
            }
            switch kind {
            case S_IFREG:
                guard selection.takes(relative) else { return nil }
                return .file(FoundFile(path: path, relativePath: relative, root: root, identity: Self.identity(info)))
            case S_IFDIR:
                guard selection.enters(relative) else { return nil }
                if stack.contains(where: { $0.device == UInt64(info.st_dev) && $0.inode == UInt64(info.st_ino) }) {
                    return .skipped(path: path, reason: .loop(throughLink: isLink || selection.followSymlinks))
                }
                return enter(path: path, relative: relative, info: info, from: (parent, entry), followingLink: isLink)
            default:
                if selection.excludesFile(relative) { return nil }
                return .skipped(path: path, reason: .notARegularFile(kind: FileTree.describe(kind: kind)))
            }
        }

        /// Opens and lists a directory onto the stack; one that cannot be
        /// read fails alone.
        private mutating func enter(
            path: String, relative: String, info: stat, from parent: (Listing, Listing.Entry)?, followingLink: Bool
        ) -> FileTreeEntry? {
            // Not following a link, refuse one: the entry was a directory
            // when looked at, and a link swapped in since is not walked.
            let flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC | (followingLink ? 0 : O_NOFOLLOW)
            let descriptor = parent.map { $0.0.open($0.1, path: path, flags: flags) } ?? Glibc.open(path, flags)
            guard descriptor >= 0 else {
                return .failed(path: path, relativePath: relative, root: root, reason: Self.unlistable(errno))
            }
            openedDirectoryCount += 1
            let listing = Listing(
                path: path, relative: relative, device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
            if let code = listing.read(descriptor, keepOpen: stack.count < FileTree.maximumOpenDepth) {
                return .failed(path: path, relativePath: relative, root: root, reason: Self.unlistable(code))
            }
            stack.append(listing)
            return nil
        }

        private static func identity(_ info: stat) -> FileIdentity {
            FileIdentity(
                size: Int64(info.st_size),
                modificationTimeNanoseconds: Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec),
                inode: UInt64(info.st_ino),
                device: UInt64(info.st_dev))
        }

        private static func vanished(_ code: Int32) -> String {
            switch code {
            case ENOENT: return "vanished during the walk (no such file or directory)"
            case EACCES: return "cannot look at it: permission denied (fix its directory's permissions, or exclude it)"
            default: return "cannot look at it: \(FileTree.describe(code))"
            }
        }

        private static func unlistable(_ code: Int32) -> String {
            switch code {
            case EACCES: return "cannot list this directory: permission denied (fix its permissions, or exclude it)"
            case ENOENT: return "vanished during the walk (no such file or directory)"
            case ELOOP, ENOTDIR: return "changed during the walk (no longer a directory)"
            case EMFILE, ENFILE: return "cannot list this directory: too many open files (raise 'ulimit -n')"
            default: return "cannot list this directory: \(FileTree.describe(code))"
            }
        }
    }

    static func describe(_ code: Int32) -> String {
        switch code {
        case ENOENT: return "no such file or directory"
        case EACCES: return "permission denied"
        case ELOOP: return "too many levels of symbolic links"
        case ENOTDIR: return "a component of the path is not a directory"
        case ENAMETOOLONG: return "file name too long"
        default: return String(cString: strerror(code)).lowercased()
        }
    }

    static func describe(kind: mode_t) -> String {
        switch kind {
        case S_IFIFO: return "FIFO"
        case S_IFSOCK: return "socket"
        case S_IFCHR: return "character device"
        case S_IFBLK: return "block device"
        case S_IFLNK: return "symbolic link"
        default: return "unknown kind"
        }
    }
}

/// One directory on the walk's current path: its sorted names, and (near
/// the top) its open descriptor, which the entries are looked up and opened
/// relative to. A class so the descriptor is closed once, however the walk
/// ends.
private final class Listing {
    struct Entry {
        /// Where the name starts in `names`; it ends at a NUL.
        let offset: UInt32
        /// `d_type` from `readdir` (`DT_UNKNOWN` on some file systems): says
        /// what a vanished entry was, for the selection.
        let type: UInt8
    }

    let path: String
    let relative: String
    let device: UInt64
    let inode: UInt64
    /// The names back to back, each NUL-terminated: one allocation for a
    /// directory, and each name is ready for `fstatat` as it is.
    private(set) var names: [UInt8] = []
    private(set) var entries: [Entry] = []
    var position = 0
    /// Open while the walk is inside this directory, unless it is deep.
    private var directory: OpaquePointer?

    init(path: String, relative: String, device: UInt64, inode: UInt64) {
        self.path = path
        self.relative = relative
        self.device = device
        self.inode = inode
    }

    deinit {
        if let directory { closedir(directory) }
    }

    /// Reads every name of the directory open at `descriptor` (taking it
    /// over) and sorts them by their bytes; nil, or the error.
    func read(_ descriptor: Int32, keepOpen: Bool) -> Int32? {
        guard let directory = fdopendir(descriptor) else {
            let code = errno
            close(descriptor)
            return code
        }
        while true {
            // Only readdir's own errno counts (growing `names` may touch it).
            errno = 0
            guard let entry = readdir(directory) else { break }
            let length = withUnsafeMutablePointer(to: &entry.pointee.d_name) { name in
                name.withMemoryRebound(to: UInt8.self, capacity: 256) { bytes -> Int in
                    let length = strlen(UnsafeRawPointer(bytes).assumingMemoryBound(to: CChar.self))
                    if bytes[0] == UInt8(ascii: "."), length == 1 || (length == 2 && bytes[1] == UInt8(ascii: ".")) {
                        return 0
                    }
                    names.append(contentsOf: UnsafeBufferPointer(start: bytes, count: length + 1))
                    return length
                }
            }
            if length > 0 {
                entries.append(Entry(offset: UInt32(names.count - length - 1), type: entry.pointee.d_type))
            }
        }
        let code = errno
        if code != 0 {
            closedir(directory)
            return code
        }
        // NUL-terminated and NUL-free, so strcmp (which compares unsigned
        // bytes) is the byte order.
        names.withUnsafeBufferPointer { buffer in
            let base = UnsafeRawPointer(buffer.baseAddress!).assumingMemoryBound(to: CChar.self)
            entries.sort { strcmp(base + Int($0.offset), base + Int($1.offset)) < 0 }
        }
        if keepOpen {
            self.directory = directory
        } else {
            closedir(directory)
        }
        return nil
    }

    /// The name, or nil when it is not valid UTF-8.
    func name(of entry: Entry) -> String? {
        withName(entry) { String(validating: $0, as: UTF8.self) }
    }

    /// The name with invalid UTF-8 replaced, to show.
    func displayName(of entry: Entry) -> String {
        withName(entry) { String(decoding: $0, as: UTF8.self) }
    }

    private func withName<Result>(_ entry: Entry, _ body: (UnsafeBufferPointer<UInt8>) -> Result) -> Result {
        names.withUnsafeBufferPointer { buffer in
            let start = buffer.baseAddress! + Int(entry.offset)
            return body(UnsafeBufferPointer(start: start, count: strlen(UnsafeRawPointer(start).assumingMemoryBound(to: CChar.self))))
        }
    }

    func childPath(_ name: String) -> String {
        path == "/" ? "/" + name : path + "/" + name
    }

    func childRelative(_ name: String) -> String {
        relative.isEmpty ? name : relative + "/" + name
    }

    /// `fstatat` on the entry, relative to this directory (or by `path` when
    /// it is no longer open); errno says why not.
    func status(of entry: Entry, path: String, into info: inout stat, followingLink: Bool) -> Bool {
        let flags = followingLink ? 0 : AT_SYMLINK_NOFOLLOW
        guard let directory else { return fstatat(AT_FDCWD, path, &info, flags) == 0 }
        return names.withUnsafeBufferPointer { buffer in
            let name = UnsafeRawPointer(buffer.baseAddress! + Int(entry.offset)).assumingMemoryBound(to: CChar.self)
            return fstatat(dirfd(directory), name, &info, flags) == 0
        }
    }

    /// Opens the entry relative to this directory (or by `path`).
    func open(_ entry: Entry, path: String, flags: Int32) -> Int32 {
        guard let directory else { return Glibc.open(path, flags) }
        return names.withUnsafeBufferPointer { buffer in
            let name = UnsafeRawPointer(buffer.baseAddress! + Int(entry.offset)).assumingMemoryBound(to: CChar.self)
            return openat(dirfd(directory), name, flags)
        }
    }
}

/// The walk as the engine takes it.
typealias FileTreeWalker = FileTree
