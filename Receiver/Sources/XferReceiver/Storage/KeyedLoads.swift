/// Values loaded per key, each load shared: the first lookup of a key starts its load and every
/// lookup meanwhile waits for that same one, so concurrent requests for one upload get one
/// object (the one whose turns they take) and its files are read once. One per registry of
/// uploads (the store's, tus's, sequence's).
///
/// Kept in the actor's state and used only from it:
///
///     private let uploads = KeyedLoads<String, Upload>()
///     let upload = try await uploads.value(for: id) { try await read(id) }
///
/// A load that finds the value leaves it ready: later lookups get it without waiting. One that
/// finds nothing, or fails, is forgotten, so the next lookup tries again: clients probing ids
/// must not grow the registry, a failure may pass, and an id nobody has yet may be created.
///
/// Not `Sendable`, so it cannot leave the actor that holds it; `value(for:)` runs on that actor
/// (`isolation`), so its state needs no lock of its own, as `KeyedTurns`'.
///
/// Bounded: a receiver that takes millions of uploads must not keep each one in memory (1.4 KiB
/// an upload was measured before this bound: 43 → 102 MiB over 40,000 small files).
/// - A value that is `settled` (a completed upload: nothing of it in memory differs from what a
///   fresh load would find) is dropped once the entries reach twice what the last sweep kept (at
///   least `sweepFloor`): a sweep costs O(entries) and comes after as many insertions, so O(1) a
///   lookup.
/// - A value no request holds (the registry's reference is its only one: `isKnownUniquelyReferenced`,
///   so nothing that could still take turns on it with a fresh copy exists) and that nobody looked
///   up for `idleLifetime` is dropped too, by the same sweeps and by `dropIdle`, which the
///   storage's upkeep calls now and then: an unfinished upload nobody sends to leaves memory, and
///   the next request loads it again from the store.
/// - The entries of every registry of a receiver count against one `UploadsInMemory`: when it is
///   full, `makeRoom` drops what no request holds, and failing that throws `ReceiverBusy` (a 503
///   with `Retry-After`), so what clients can make a receiver hold is bounded, whatever they declare.
final class KeyedLoads<Key: Hashable & Sendable, Value: AnyObject & Sendable> {
    private enum Entry {
        case loading(Task<Value?, any Error>)
        case ready(Value, lastUsed: ContinuousClock.Instant)
    }

    private var entries: [Key: Entry] = [:] {
        didSet { recount() }
    }
    private let settled: (Value) -> Bool
    private var sweepAt: Int
    static var sweepFloor: Int { 1024 }
    private let memory: UploadsInMemory?
    /// What this registry has counted in `memory`.
    private var counted = 0

    /// - Parameter settled: Whether a value may be dropped and loaded again when next asked for.
    /// - Parameter memory: The receiver's count of uploads in memory, which this registry's
    ///   entries are part of; nil: unbounded (tests of other things).
    init(settled: @escaping (Value) -> Bool = { _ in false }, memory: UploadsInMemory? = nil) {
        self.settled = settled
        self.memory = memory
        sweepAt = Self.sweepFloor
    }

    deinit {
        memory?.adjust(by: -counted)
    }

    /// The entries held now (for tests).
    var count: Int { entries.count }

    /// Whether `key` is in memory: loaded, or being loaded.
    func contains(_ key: Key) -> Bool { entries[key] != nil }

    /// Drops `key`'s value unless a request holds it (or it is being loaded); true when it is
    /// not in memory now.
    func dropUnlessHeld(_ key: Key) -> Bool {
        switch entries[key] {
        case nil: return true
        case .loading: return false
        case .ready(var value, let lastUsed):
            entries[key] = nil
            if isKnownUniquelyReferenced(&value) { return true }
            entries[key] = .ready(value, lastUsed: lastUsed)
            return false
        }
    }

    private func recount() {
        guard let memory, entries.count != counted else { return }
        memory.adjust(by: entries.count - counted)
        counted = entries.count
    }

    private func sweepIfDue() {
        guard entries.count >= sweepAt else { return }
        drop(idleFor: memory?.limits.idleUploadLifetime)
        sweepAt = max(Self.sweepFloor, 2 * entries.count)
    }

    /// Drops settled values, and values no request holds that nobody looked up for `idle`
    /// (`.zero`: every one no request holds; nil: none of the unsettled ones).
    private func drop(idleFor idle: Duration?, now: ContinuousClock.Instant = .now) {
        for key in Array(entries.keys) {
            guard case .ready(var value, let lastUsed)? = entries[key] else { continue }
            if settled(value) {
                entries[key] = nil
                continue
            }
            guard let idle, now - lastUsed >= idle else { continue }
            // Let go of the registry's reference: if that was the only one, the value is gone
            // for good; if a request still holds it, it goes back as it was.
            entries[key] = nil
            if !isKnownUniquelyReferenced(&value) { entries[key] = .ready(value, lastUsed: lastUsed) }
        }
    }

    /// Drops what `idleUploadLifetime` (or `idle`) says has been idle long enough; for the
    /// storage's upkeep, so that memory follows the uploads in use even when no new ones come.
    func dropIdle(after idle: Duration? = nil) {
        drop(idleFor: idle ?? memory?.limits.idleUploadLifetime)
        sweepAt = max(Self.sweepFloor, 2 * entries.count)
    }

    /// Makes room for one more entry in the receiver's count, dropping what no request holds
    /// (idle or not) when it is full; throws `ReceiverBusy` when even that leaves none.
    func makeRoom() throws(ReceiverBusy) {
        guard let memory, memory.isFull else { return }
        drop(idleFor: .zero)
        if memory.isFull { throw ReceiverBusy(memory.busyReason) }
    }

    /// The value for `key`: the ready one, else what the load under way finds, else what `load`
    /// finds (started here, once there is room for it: `makeRoom`). Nil when that load found
    /// nothing.
    ///
    /// The load is a task of its own, not part of the caller's: a caller that goes away must not
    /// cut short the lookup of the others waiting on it.
    func value(
        for key: Key, isolation: isolated (any Actor)? = #isolation,
        loading load: @escaping @Sendable () async throws -> Value?
    ) async throws -> Value? {
        let task: Task<Value?, any Error>
        switch entries[key] {
        case .ready(let value, _):
            entries[key] = .ready(value, lastUsed: .now)
            return value
        case .loading(let current):
            task = current
        case nil:
            try makeRoom()
            task = Task(operation: load)
            entries[key] = .loading(task)
        }
        let result = await task.result
        // Any waiter settles the entry (whichever resumes first), but only while this load still
        // stands for the key: a deletion, or a load after it, may have replaced it meanwhile.
        if case .loading(let current) = entries[key], current == task {
            entries[key] = (try? result.get())?.map { .ready($0, lastUsed: .now) }
            sweepIfDue()
        }
        return try result.get()
    }

    /// Makes `value` the one for `key`, ready: what was just created needs no load. (Its creator
    /// made room first: `makeRoom`.)
    func insert(_ value: Value, for key: Key) {
        entries[key] = .ready(value, lastUsed: .now)
        sweepIfDue()
    }

    /// Forgets `key` (its upload is deleted): the next lookup loads again, and a load under way
    /// no longer stands for it.
    func remove(_ key: Key) {
        entries[key] = nil
    }
}
