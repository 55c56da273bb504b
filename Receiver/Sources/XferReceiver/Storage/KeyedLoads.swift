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
/// an upload was measured before this bound: 43 → 102 MiB over 40,000 small files). A value that
/// is `settled` (a completed upload: nothing of it in memory differs from what a fresh load would
/// find, and no request needs to take turns on it with another) is dropped once the entries reach
/// twice what the last sweep kept (at least `sweepFloor`): a sweep costs O(entries) and comes
/// after as many insertions, so O(1) a lookup, and what stays is the uploads under way plus at
/// most as many again.
final class KeyedLoads<Key: Hashable & Sendable, Value: Sendable> {
    private enum Entry {
        case loading(Task<Value?, any Error>)
        case ready(Value)
    }

    private var entries: [Key: Entry] = [:]
    private let settled: (Value) -> Bool
    private var sweepAt: Int
    static var sweepFloor: Int { 1024 }

    /// - Parameter settled: Whether a value may be dropped and loaded again when next asked for.
    init(settled: @escaping (Value) -> Bool = { _ in false }) {
        self.settled = settled
        sweepAt = Self.sweepFloor
    }

    /// The entries held now (for tests).
    var count: Int { entries.count }

    private func sweepIfDue() {
        guard entries.count >= sweepAt else { return }
        entries = entries.filter { _, entry in
            if case .ready(let value) = entry { return !settled(value) }
            return true
        }
        sweepAt = max(Self.sweepFloor, 2 * entries.count)
    }

    /// The value for `key`: the ready one, else what the load under way finds, else what `load`
    /// finds (started here). Nil when that load found nothing.
    ///
    /// The load is a task of its own, not part of the caller's: a caller that goes away must not
    /// cut short the lookup of the others waiting on it.
    func value(
        for key: Key, isolation: isolated (any Actor)? = #isolation,
        loading load: @escaping @Sendable () async throws -> Value?
    ) async throws -> Value? {
        let task: Task<Value?, any Error>
        switch entries[key] {
        case .ready(let value):
            return value
        case .loading(let current):
            task = current
        case nil:
            task = Task(operation: load)
            entries[key] = .loading(task)
        }
        let result = await task.result
        // Any waiter settles the entry (whichever resumes first), but only while this load still
        // stands for the key: a deletion, or a load after it, may have replaced it meanwhile.
        if case .loading(let current) = entries[key], current == task {
            entries[key] = (try? result.get())?.map { .ready($0) }
            sweepIfDue()
        }
        return try result.get()
    }

    /// Makes `value` the one for `key`, ready: what was just created needs no load.
    func insert(_ value: Value, for key: Key) {
        entries[key] = .ready(value)
        sweepIfDue()
    }

    /// Forgets `key` (its upload is deleted): the next lookup loads again, and a load under way
    /// no longer stands for it.
    func remove(_ key: Key) {
        entries[key] = nil
    }
}
