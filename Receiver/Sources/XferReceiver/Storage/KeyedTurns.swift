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
    /// The bodies holders are still receiving, where a later request may cut them (`takeOver`).
    private var receiving: [Key: BodyInFlight] = [:]
    /// Requests waiting to take over each key's turn: a body its holder starts receiving meanwhile
    /// is cut at once (the later request wins, as it would had it come after).
    private var takers: [Key: Int] = [:]

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

    /// Says that the holder of `key` is receiving `body`: a request taking over (`takeOver`) cuts
    /// it. Forgotten when the turn ends.
    mutating func holderReceives(_ key: Key, _ body: BodyInFlight) {
        guard holders.contains(key) else { return }
        receiving[key] = body
        if takers[key, default: 0] > 0 { body.cut() }
    }

    /// Waits for the turn on `key` as `queue` does, after cutting the body its holder is still
    /// receiving (see `BodyInFlight.cut`) and any body a holder starts receiving while this waits:
    /// the holder then settles what arrived, as for any cut body, and ends its turn.
    mutating func takeOver(_ key: Key, _ waiter: CheckedContinuation<Void, Never>) {
        receiving[key]?.cut()
        takers[key, default: 0] += 1
        queue(key, waiter)
    }

    /// Called by a request woken from `takeOver`, whether or not it then gets the turn.
    mutating func tookOver(_ key: Key) {
        let left = takers[key, default: 1] - 1
        takers[key] = left > 0 ? left : nil
    }

    /// Ends the turn on `key` and wakes the first waiter for it. The waiter
    /// then takes the turn like any caller: one that arrives meanwhile may
    /// take it first (order is not promised, exclusion is).
    mutating func end(_ key: Key) {
        holders.remove(key)
        receiving[key] = nil
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
        try await inTurn(takingOver: false, receiving: nil, body)
    }

    /// Runs `body` in this upload's turn, as `exclusively`, after cutting the body of a request
    /// that holds the turn while it still receives one (`BodyInFlight.cut`): that request then
    /// settles what arrived as for any cut body and ends its turn, so this one waits for the
    /// storage's work, never for a client. Work that receives no body (a concatenation, a
    /// creation's state) is waited for. `receiving`: this request's own body, which a later
    /// request may cut in turn.
    nonisolated func takingOver<T>(receiving inFlight: BodyInFlight?, _ body: () async throws -> T) async throws -> T {
        try await inTurn(takingOver: true, receiving: inFlight, body)
    }

    /// Says, from inside this upload's turn, that the request holding it now receives `body`
    /// (a creation announcing its URL before its body: see `OffsetUploadStore.create`).
    func receiveInTurn(_ body: BodyInFlight) {
        turns.holderReceives(.turn, body)
    }

    private nonisolated func inTurn<T>(takingOver: Bool, receiving inFlight: BodyInFlight?, _ body: () async throws -> T) async throws -> T {
        await takeTurn(takingOver: takingOver, receiving: inFlight)
        do {
            let result = try await body()
            await endTurn()
            return result
        } catch {
            await endTurn()
            throw error
        }
    }

    private func takeTurn(takingOver: Bool, receiving inFlight: BodyInFlight?) async {
        while !turns.take(.turn) {
            if takingOver {
                await withCheckedContinuation { turns.takeOver(.turn, $0) }
                turns.tookOver(.turn)
            } else {
                await withCheckedContinuation { turns.queue(.turn, $0) }
            }
        }
        if let inFlight { turns.holderReceives(.turn, inFlight) }
    }

    private func endTurn() {
        turns.end(.turn)
    }
}
