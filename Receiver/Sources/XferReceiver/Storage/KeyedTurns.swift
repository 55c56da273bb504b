/// Turns per key across an actor's suspensions: an actor serializes only
/// between suspension points, so a request that writes to disk (and waits
/// for it) needs a turn of its own on what it writes. One per upload (tus,
/// sequence), per source (multipart) or per chunk (patch).
///
/// Kept in the actor's state and used only from it:
///
///     while !turns.take(key) { await withCheckedContinuation { turns.queue(key, $0) } }
///     defer { turns.end(key) }
///
/// A woken waiter takes the turn again itself rather than being handed it, so
/// it re-checks whatever it waited on (e.g. whether the upload was deleted
/// meanwhile) and `wakeAll` can release every waiter at once.
struct KeyedTurns<Key: Hashable> {
    private var holders: Set<Key> = []
    private var waiters: [Key: [CheckedContinuation<Void, Never>]] = [:]

    /// Takes the turn on `key` when nobody holds it; false means queue and retry.
    mutating func take(_ key: Key) -> Bool {
        holders.insert(key).inserted
    }

    /// Whether someone holds the turn on `key`.
    func isTaken(_ key: Key) -> Bool {
        holders.contains(key)
    }

    /// Waits for the turn on `key` to end (call from the closure of `withCheckedContinuation`).
    mutating func queue(_ key: Key, _ waiter: CheckedContinuation<Void, Never>) {
        waiters[key, default: []].append(waiter)
    }

    /// Ends the turn on `key` and wakes the first waiter for it. The waiter
    /// then takes the turn like any caller: one that arrives meanwhile may
    /// take it first (order is not promised, exclusion is).
    mutating func end(_ key: Key) {
        holders.remove(key)
        guard var queue = waiters[key], !queue.isEmpty else { return }
        let next = queue.removeFirst()
        waiters[key] = queue.isEmpty ? nil : queue
        next.resume()
    }

    /// Wakes every waiter (each then finds what changed, e.g. a deletion).
    mutating func wakeAll() {
        let all = waiters
        waiters = [:]
        for queue in all.values {
            for waiter in queue { waiter.resume() }
        }
    }
}

/// The one key of an upload whose requests take turns as a whole.
enum WholeUpload: Hashable {
    case turn
}

/// An actor whose writing requests take turns as a whole (a tus or sequence
/// upload: deciding where the bytes go, writing and recording them must not
/// interleave with another request of the same upload).
protocol TakesTurns: Actor {
    var turns: KeyedTurns<WholeUpload> { get set }
}

extension TakesTurns {
    /// Runs `body` while no other request of this upload runs its own.
    nonisolated func exclusively<T>(_ body: () async throws -> T) async throws -> T {
        await takeTurn()
        do {
            let result = try await body()
            await endTurn()
            return result
        } catch {
            await endTurn()
            throw error
        }
    }

    private func takeTurn() async {
        while !turns.take(.turn) { await withCheckedContinuation { turns.queue(.turn, $0) } }
    }

    private func endTurn() {
        turns.end(.turn)
    }
}
