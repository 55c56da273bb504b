import CSQLite

/// An SQLite result code with what was being done.
struct SQLiteError: Error, CustomStringConvertible {
    let code: Int32
    let message: String

    var description: String { "\(message) (sqlite code \(code))" }
}

/// A value bound to a statement parameter.
enum SQLiteValue {
    case int(Int64)
    case text(String)
    case blob([UInt8])
}

/// One SQLite connection and its prepared statements. Every C pointer of
/// SQLite stays inside this type and `SQLiteRow`.
///
/// Opened in multi-thread mode (no per-call mutex): a connection is used by
/// one thread at a time — the store's writer queue, or a reader holding it
/// checked out of the pool — which is also why it is `@unchecked Sendable`.
final class SQLiteConnection: @unchecked Sendable {
    private let db: OpaquePointer
    /// Prepared once per SQL text: preparing costs more than most of the
    /// statements the store runs, and LMDB has no such cost to compare with.
    private var statements: [String: OpaquePointer] = [:]

    init(path: String) throws(SQLiteError) {
        var handle: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX
        let code = sqlite3_open_v2(path, &handle, flags, nil)
        guard code == SQLITE_OK, let handle else {
            let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? "out of memory"
            sqlite3_close_v2(handle)
            throw SQLiteError(code: code, message: "cannot open \(path): \(message)")
        }
        db = handle
        // A checkpoint or another connection's commit can hold the lock
        // briefly; waiting beats failing a commit the engine would retry.
        sqlite3_busy_timeout(db, 10_000)
    }

    deinit {
        for statement in statements.values { sqlite3_finalize(statement) }
        sqlite3_close_v2(db)
    }

    /// Runs SQL without parameters or results (pragmas, DDL, BEGIN/COMMIT).
    func execute(_ sql: String) throws(SQLiteError) {
        var error: UnsafeMutablePointer<CChar>?
        let code = sqlite3_exec(db, sql, nil, nil, &error)
        if code != SQLITE_OK {
            let message = error.map { String(cString: $0) } ?? String(cString: sqlite3_errmsg(db))
            sqlite3_free(error)
            throw SQLiteError(code: code, message: "\(sql): \(message)")
        }
    }

    /// Runs a statement that returns no rows.
    func run(_ sql: String, _ values: [SQLiteValue] = []) throws {
        try query(sql, values) { _ in false }
    }

    /// Runs a statement, handing each row to `body` until it returns false.
    /// Errors `body` throws pass through unchanged.
    func query(_ sql: String, _ values: [SQLiteValue] = [], _ body: (SQLiteRow) throws -> Bool) throws {
        let statement = try prepared(sql)
        defer {
            sqlite3_reset(statement)
            sqlite3_clear_bindings(statement)
        }
        for (index, value) in values.enumerated() {
            let position = Int32(index + 1)
            let code: Int32
            switch value {
            case .int(let number):
                code = sqlite3_bind_int64(statement, position, number)
            case .text(let text):
                code = sqlite3_bind_text(statement, position, text, -1, Self.transient)
            case .blob(let bytes):
                // A zero-length blob must still bind as a blob, not NULL.
                code = bytes.withUnsafeBytes { buffer in
                    sqlite3_bind_blob(statement, position, buffer.baseAddress ?? UnsafeRawPointer(bitPattern: 1), Int32(buffer.count), Self.transient)
                }
            }
            guard code == SQLITE_OK else { throw failure(code, sql) }
        }
        while true {
            let code = sqlite3_step(statement)
            if code == SQLITE_DONE { return }
            guard code == SQLITE_ROW else { throw failure(code, sql) }
            guard try body(SQLiteRow(statement: statement)) else { return }
        }
    }

    private func prepared(_ sql: String) throws(SQLiteError) -> OpaquePointer {
        if let statement = statements[sql] { return statement }
        var statement: OpaquePointer?
        let code = sqlite3_prepare_v3(db, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, nil)
        guard code == SQLITE_OK, let statement else { throw failure(code, sql) }
        statements[sql] = statement
        return statement
    }

    private func failure(_ code: Int32, _ sql: String) -> SQLiteError {
        SQLiteError(code: code, message: "\(sql): \(String(cString: sqlite3_errmsg(db)))")
    }

    /// SQLITE_TRANSIENT (a cast macro Swift does not import): SQLite copies
    /// bound values, since Swift's buffers only live for the call.
    private static let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
}

/// The current row of a running statement; valid only inside the `query`
/// callback that received it.
struct SQLiteRow {
    fileprivate let statement: OpaquePointer

    func int(_ column: Int32) -> Int64 { sqlite3_column_int64(statement, column) }

    func isNull(_ column: Int32) -> Bool { sqlite3_column_type(statement, column) == SQLITE_NULL }

    func blob(_ column: Int32) -> [UInt8] {
        // Pointer first, then length: SQLite's documented order.
        let base = sqlite3_column_blob(statement, column)
        let count = Int(sqlite3_column_bytes(statement, column))
        guard count > 0, let base else { return [] }
        return Array(UnsafeRawBufferPointer(start: base, count: count))
    }

    func text(_ column: Int32) -> String {
        guard let base = sqlite3_column_text(statement, column) else { return "" }
        let count = Int(sqlite3_column_bytes(statement, column))
        return String(decoding: UnsafeBufferPointer(start: base, count: count), as: UTF8.self)
    }
}
