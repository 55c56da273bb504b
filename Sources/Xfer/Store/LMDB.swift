import XferPrimitives
import CLMDB
import Glibc

/// An error code returned by LMDB.
struct LMDBError: Error, CustomStringConvertible {
    let code: Int32
    let operation: String

    /// Set when the message is complete on its own (not an LMDB return code's).
    var message: String? = nil

    var description: String {
        message ?? "\(operation): \(String(cString: mdb_strerror(code)))"
    }

    var isMapFull: Bool { code == MDB_MAP_FULL }
    var isMapResized: Bool { code == MDB_MAP_RESIZED }
}

@inline(__always)
private func check(_ code: Int32, _ operation: @autoclosure () -> String) throws(LMDBError) {
    if code != 0 { throw LMDBError(code: code, operation: operation()) }
}

/// A named database inside an environment.
///
/// LMDB checks its page structure but not the bytes of a value: garbage that
/// lands inside a valid page (a bad disk, a stray write) would read back as
/// data. In a `checksummed` database every value carries a CRC-32 of its key
/// and value, so such damage is an error, never a silently wrong answer.
struct LMDBDatabase: Sendable, Hashable {
    fileprivate let handle: MDB_dbi
    let name: String
    let checksummed: Bool

    /// The same database, its values read and written as stored (for migrating a layout).
    var raw: LMDBDatabase { LMDBDatabase(handle: handle, name: name, checksummed: false) }
    var sealed: LMDBDatabase { LMDBDatabase(handle: handle, name: name, checksummed: true) }
}

/// An LMDB environment: one memory-mapped file shared by every process that
/// opens the same directory.
///
/// Write transactions must begin and commit on one thread, and the map can be
/// resized only while this process has no transaction open. Both rules are
/// kept here: `write` runs its body synchronously (it cannot suspend), and a
/// reader–writer lock lets `grow` wait for readers to finish.
final class LMDBEnvironment: @unchecked Sendable {
    // @unchecked: `env` is only touched under `gate`, and LMDB itself
    // serialises writers across threads and processes.
    private let env: OpaquePointer
    private let gate = ReadWriteLock()
    private var databases: [String: LMDBDatabase] = [:]

    /// Opens (creating if needed) the environment in `directory`.
    init(directory: String, mapSize: Int, maxDatabases: Int) throws(LMDBError) {
        var env: OpaquePointer?
        try check(mdb_env_create(&env), "mdb_env_create")
        guard let env else { throw LMDBError(code: EINVAL, operation: "mdb_env_create") }
        do {
            try check(mdb_env_set_maxdbs(env, MDB_dbi(maxDatabases)), "mdb_env_set_maxdbs")
            try check(mdb_env_set_mapsize(env, mapSize), "mdb_env_set_mapsize")
            try check(mdb_env_set_maxreaders(env, 256), "mdb_env_set_maxreaders")
            // NOTLS: read transactions are not tied to a thread (async callers hop).
            // NOMETASYNC: data pages are fsynced at each commit, the meta page at
            // the next one; a system crash can undo only the last commit, never
            // corrupt the file. SIGKILL loses nothing committed in any mode.
            let flags = UInt32(MDB_NOTLS | MDB_NOMETASYNC)
            try check(mdb_env_open(env, directory, flags, 0o600), "mdb_env_open \(directory)")
            try Self.checkNotTruncated(env, directory: directory)
        } catch {
            mdb_env_close(env)
            throw error
        }
        self.env = env
    }

    deinit {
        mdb_env_close(env)
    }

    /// LMDB trusts its meta page: a data file cut short after it (a bad copy,
    /// a full disk) is mapped anyway, and reading the missing pages kills the
    /// process with SIGBUS. Refusing such a file up front turns that crash into
    /// an error. Files only grow and pages are written before the meta page
    /// that names them, so a healthy file, even mid-commit elsewhere, passes.
    private static func checkNotTruncated(_ env: OpaquePointer, directory: String) throws(LMDBError) {
        var info = MDB_envinfo()
        var stat = MDB_stat()
        var fd: Int32 = -1
        try check(mdb_env_info(env, &info), "mdb_env_info \(directory)")
        try check(mdb_env_stat(env, &stat), "mdb_env_stat \(directory)")
        try check(mdb_env_get_fd(env, &fd), "mdb_env_get_fd \(directory)")
        var file = Glibc.stat()
        guard fstat(fd, &file) == 0 else { throw LMDBError(code: errno, operation: "fstat \(directory)/data.mdb") }
        let needed = (Int64(info.me_last_pgno) + 1) * Int64(stat.ms_psize)
        if Int64(file.st_size) < needed {
            throw LMDBError(
                code: MDB_CORRUPTED,
                operation: "\(directory)/data.mdb is truncated (\(file.st_size) bytes, its pages need \(needed))")
        }
    }

    /// Opens or creates a named database. Call once per name at start-up, and
    /// never inside `write`: creating one takes the writer lock that holds.
    ///
    /// An existing database is opened in a read-only transaction: a write
    /// transaction would wait for LMDB's writer lock, and a process that
    /// merely wants to report "this job is locked" must not queue behind
    /// another process's commits (or a stopped one).
    func database(named name: String, checksummed: Bool = false) throws -> LMDBDatabase {
        if let existing = gate.withReadLock({ databases[name] }) { return checksummed ? existing.sealed : existing.raw }
        let db = try openExisting(name) ?? write { txn throws(LMDBError) in try txn.openDatabase(name) }
        gate.withWriteLock { databases[name] = db }
        return checksummed ? db.sealed : db.raw
    }

    private func openExisting(_ name: String) throws(LMDBError) -> LMDBDatabase? {
        try gate.withReadLock { () throws(LMDBError) -> LMDBDatabase? in
            var txn: OpaquePointer?
            try check(mdb_txn_begin(env, nil, UInt32(MDB_RDONLY), &txn), "mdb_txn_begin (open)")
            var dbi: MDB_dbi = 0
            let code = mdb_dbi_open(txn, name, 0, &dbi)
            if code == MDB_NOTFOUND {
                mdb_txn_abort(txn)
                return nil
            }
            guard code == 0 else {
                mdb_txn_abort(txn)
                throw LMDBError(code: code, operation: "mdb_dbi_open \(name)")
            }
            // Committing (not aborting) keeps the handle open for the environment.
            try check(mdb_txn_commit(txn), "mdb_txn_commit (open)")
            return LMDBDatabase(handle: dbi, name: name, checksummed: false)
        }
    }

    /// Runs `body` in a read-only transaction.
    func read<T>(_ body: (LMDBTransaction) throws -> T) throws -> T {
        while true {
            do {
                return try gate.withReadLock { () throws -> T in
                    var txn: OpaquePointer?
                    try check(mdb_txn_begin(env, nil, UInt32(MDB_RDONLY), &txn), "mdb_txn_begin (read)")
                    defer { mdb_txn_abort(txn) }
                    return try body(LMDBTransaction(txn: txn!))
                }
            } catch let error as LMDBError where error.isMapResized {
                // Another process grew the map; adopt its size and retry.
                gate.withWriteLock { _ = mdb_env_set_mapsize(env, 0) }
            }
        }
    }

    /// Runs `body` in a write transaction and commits it. If the map is full,
    /// the map is doubled and `body` runs again in a fresh transaction, so
    /// `body` must be repeatable (derive everything from what it reads).
    func write<T, E: Error>(_ body: (LMDBTransaction) throws(E) -> T) throws -> T {
        while true {
            do {
                return try gate.withReadLock { () throws -> T in
                    var txn: OpaquePointer?
                    try check(mdb_txn_begin(env, nil, 0, &txn), "mdb_txn_begin (write)")
                    let transaction = LMDBTransaction(txn: txn!)
                    let value: T
                    do {
                        value = try body(transaction)
                    } catch {
                        mdb_txn_abort(txn)
                        throw error
                    }
                    try check(mdb_txn_commit(txn), "mdb_txn_commit")
                    return value
                }
            } catch let error as LMDBError where error.isMapFull {
                try grow()
            } catch let error as LMDBError where error.isMapResized {
                gate.withWriteLock { _ = mdb_env_set_mapsize(env, 0) }
            }
        }
    }

    /// Flushes everything committed to disk, whatever the flags.
    func sync() throws(LMDBError) {
        try check(mdb_env_sync(env, 1), "mdb_env_sync")
    }

    var mapSize: Int {
        var info = MDB_envinfo()
        mdb_env_info(env, &info)
        return info.me_mapsize
    }

    private func grow() throws {
        try gate.withWriteLock { () throws(LMDBError) in
            var info = MDB_envinfo()
            mdb_env_info(env, &info)
            try check(mdb_env_set_mapsize(env, info.me_mapsize * 2), "mdb_env_set_mapsize (grow)")
        }
    }
}

/// A transaction handed to a `read` or `write` body. Valid only inside it.
struct LMDBTransaction {
    fileprivate let txn: OpaquePointer

    fileprivate func openDatabase(_ name: String) throws(LMDBError) -> LMDBDatabase {
        var dbi: MDB_dbi = 0
        try check(mdb_dbi_open(txn, name, UInt32(MDB_CREATE), &dbi), "mdb_dbi_open \(name)")
        return LMDBDatabase(handle: dbi, name: name, checksummed: false)
    }

    /// The value stored under `key`, copied out of the map.
    func get(_ db: LMDBDatabase, _ key: [UInt8]) throws(LMDBError) -> [UInt8]? {
        guard let value = try lookup(db, key) else { return nil }
        return try Self.unsealed(value, key: key, in: db)
    }

    /// The value at `key` as LMDB holds it (valid until the transaction ends), or nil.
    private func lookup(_ db: LMDBDatabase, _ key: [UInt8]) throws(LMDBError) -> MDB_val? {
        var value = MDB_val()
        let code = key.withUnsafeBytes { raw in
            var k = MDB_val(mv_size: raw.count, mv_data: UnsafeMutableRawPointer(mutating: raw.baseAddress))
            return mdb_get(txn, db.handle, &k, &value)
        }
        if code == MDB_NOTFOUND { return nil }
        try check(code, "mdb_get")
        return value
    }

    func put(_ db: LMDBDatabase, _ key: [UInt8], _ value: [UInt8]) throws(LMDBError) {
        let value = db.checksummed ? Self.sealed(value, key: key) : value
        let code = key.withUnsafeBytes { k in
            value.withUnsafeBytes { v in
                var kv = MDB_val(mv_size: k.count, mv_data: UnsafeMutableRawPointer(mutating: k.baseAddress))
                var vv = MDB_val(mv_size: v.count, mv_data: UnsafeMutableRawPointer(mutating: v.baseAddress))
                return mdb_put(txn, db.handle, &kv, &vv, 0)
            }
        }
        try check(code, "mdb_put")
    }

    /// Whether `key` is in `db`, without copying or checking its value.
    func contains(_ db: LMDBDatabase, _ key: [UInt8]) throws(LMDBError) -> Bool {
        try lookup(db, key) != nil
    }

    /// Calls `body` for every key that starts with `prefix`, in key order, until it returns
    /// false; the values are neither copied nor checked.
    func forEachKey(_ db: LMDBDatabase, prefix: [UInt8], _ body: (_ key: [UInt8]) throws -> Bool) throws {
        try walk(db, prefix: prefix, from: nil) { key, _ in try body(key) }
    }

    /// Deletes `key`; deleting a missing key is not an error.
    func delete(_ db: LMDBDatabase, _ key: [UInt8]) throws(LMDBError) {
        let code = key.withUnsafeBytes { raw in
            var k = MDB_val(mv_size: raw.count, mv_data: UnsafeMutableRawPointer(mutating: raw.baseAddress))
            return mdb_del(txn, db.handle, &k, nil)
        }
        if code == MDB_NOTFOUND { return }
        try check(code, "mdb_del")
    }

    /// Calls `body` for every key that starts with `prefix`, in key order,
    /// until it returns false; from `start` on when given (a key at or after
    /// `prefix`, to page through a range).
    func forEach(
        _ db: LMDBDatabase, prefix: [UInt8], from start: [UInt8]? = nil,
        _ body: (_ key: [UInt8], _ value: [UInt8]) throws -> Bool
    ) throws {
        try walk(db, prefix: prefix, from: start) { key, value in try body(key, Self.unsealed(value, key: key, in: db)) }
    }

    /// The cursor under `forEach` and `forEachKey`: each key that starts with `prefix`, with its
    /// value as LMDB holds it (valid until the transaction ends).
    private func walk(
        _ db: LMDBDatabase, prefix: [UInt8], from start: [UInt8]?, _ body: (_ key: [UInt8], _ value: MDB_val) throws -> Bool
    ) throws {
        var cursor: OpaquePointer?
        try check(mdb_cursor_open(txn, db.handle, &cursor), "mdb_cursor_open")
        defer { mdb_cursor_close(cursor) }
        var key = MDB_val()
        var value = MDB_val()
        let first = start ?? prefix
        var code: Int32 = first.withUnsafeBytes { raw in
            key = MDB_val(mv_size: raw.count, mv_data: UnsafeMutableRawPointer(mutating: raw.baseAddress))
            if raw.count == 0 { return mdb_cursor_get(cursor, &key, &value, MDB_FIRST) }
            return mdb_cursor_get(cursor, &key, &value, MDB_SET_RANGE)
        }
        while code == 0 {
            let k = Self.bytes(key)
            guard k.starts(with: prefix) else { return }
            guard try body(k, value) else { return }
            code = mdb_cursor_get(cursor, &key, &value, MDB_NEXT)
        }
        if code != MDB_NOTFOUND { try check(code, "mdb_cursor_get") }
    }

    /// Deletes every key that starts with `prefix`, through a cursor: no key
    /// is held in memory (a sync's job may hold millions).
    func deleteAll(_ db: LMDBDatabase, prefix: [UInt8]) throws {
        var cursor: OpaquePointer?
        try check(mdb_cursor_open(txn, db.handle, &cursor), "mdb_cursor_open")
        defer { mdb_cursor_close(cursor) }
        var key = MDB_val()
        var value = MDB_val()
        while true {
            // Sought again after each delete: where a deleting cursor stands is LMDB's detail.
            let code: Int32 = prefix.withUnsafeBytes { raw in
                key = MDB_val(mv_size: raw.count, mv_data: UnsafeMutableRawPointer(mutating: raw.baseAddress))
                if raw.count == 0 { return mdb_cursor_get(cursor, &key, &value, MDB_FIRST) }
                return mdb_cursor_get(cursor, &key, &value, MDB_SET_RANGE)
            }
            if code == MDB_NOTFOUND { return }
            try check(code, "mdb_cursor_get")
            let matches = key.mv_size >= prefix.count
                && prefix.withUnsafeBytes { raw in raw.count == 0 || memcmp(key.mv_data, raw.baseAddress!, raw.count) == 0 }
            guard matches else { return }
            try check(mdb_cursor_del(cursor, 0), "mdb_cursor_del")
        }
    }

    private static func checksum(_ key: [UInt8], _ value: UnsafeRawBufferPointer) -> UInt32 {
        var crc = CRC32()
        crc.update(key)
        crc.update(value)
        return crc.value
    }

    /// `value` followed by the CRC-32 of key and value (4 bytes, big-endian), in one allocation.
    private static func sealed(_ value: [UInt8], key: [UInt8]) -> [UInt8] {
        let crc = value.withUnsafeBytes { checksum(key, $0) }
        var stored: [UInt8] = []
        stored.reserveCapacity(value.count + 4)
        stored.append(contentsOf: value)
        stored.append(UInt8(crc >> 24))
        stored.append(UInt8(crc >> 16 & 0xFF))
        stored.append(UInt8(crc >> 8 & 0xFF))
        stored.append(UInt8(crc & 0xFF))
        return stored
    }

    /// The value LMDB holds at `stored` (valid until the transaction ends), its CRC checked where
    /// the database keeps one, copied once: a file's record is read several times a small file,
    /// and copying the stored bytes before checking them was one allocation more each time.
    private static func unsealed(_ stored: MDB_val, key: [UInt8], in db: LMDBDatabase) throws(LMDBError) -> [UInt8] {
        guard stored.mv_size > 0, let data = stored.mv_data else {
            if db.checksummed { throw damaged(db) }
            return []
        }
        let raw = UnsafeRawBufferPointer(start: data, count: stored.mv_size)
        guard db.checksummed else { return Array(raw) }
        guard raw.count >= 4 else { throw damaged(db) }
        let value = UnsafeRawBufferPointer(rebasing: raw[..<(raw.count - 4)])
        let crc = raw[(raw.count - 4)...].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        guard crc == checksum(key, value) else { throw damaged(db) }
        return Array(value)
    }

    private static func damaged(_ db: LMDBDatabase) -> LMDBError {
        LMDBError(
            code: MDB_CORRUPTED, operation: "checksum",
            message: "a value in '\(db.name)' fails its checksum: the state file is damaged")
    }

    private static func bytes(_ value: MDB_val) -> [UInt8] {
        guard value.mv_size > 0, let data = value.mv_data else { return [] }
        return Array(UnsafeRawBufferPointer(start: data, count: value.mv_size))
    }
}

/// A pthread reader–writer lock, for the one place that needs shared reads
/// with an exclusive resize.
final class ReadWriteLock: @unchecked Sendable {
    private let lock: UnsafeMutablePointer<pthread_rwlock_t>

    init() {
        lock = .allocate(capacity: 1)
        pthread_rwlock_init(lock, nil)
    }

    deinit {
        pthread_rwlock_destroy(lock)
        lock.deallocate()
    }

    func withReadLock<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
        pthread_rwlock_rdlock(lock)
        defer { pthread_rwlock_unlock(lock) }
        return try body()
    }

    func withWriteLock<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
        pthread_rwlock_wrlock(lock)
        defer { pthread_rwlock_unlock(lock) }
        return try body()
    }
}
