import Synchronization

/// How many hook calls (HTTP requests to `--hook-url`, processes of `--hooks-dir`) run at once:
/// at most `limit`, whatever the number of requests that reach the receiver. Without a cap a
/// burst of creations starts a process each, all at once; with one, the burst waits in line.
///
/// Two kinds of caller wait differently:
/// - a `pre-*` event has a client waiting for its answer: it goes ahead of every `post-*` event
///   still waiting, and waits at most its patience (the hook timeout), after which the caller
///   refuses the client (503 + `Retry-After`) rather than hold its request open for ever;
/// - a `post-*` event has no one waiting: it waits as long as it takes (every call it waits
///   behind ends within the hook timeout), its number bounded elsewhere (`HookRuntime`).
///
/// The waiting line holds one entry per waiting call: a pre-* entry is a request in flight,
/// post-* entries are bounded by the post-* backlog.
final class HookSlots: Sendable {
    let limit: Int

    private struct Waiter {
        let id: UInt64
        let urgent: Bool
        let continuation: CheckedContinuation<Bool, Never>
    }

    private struct State {
        var inUse = 0
        var waiting: [Waiter] = []
        var nextID: UInt64 = 0
    }

    private let state = Mutex(State())

    init(limit: Int) {
        precondition(limit >= 1, "a hook needs at least one slot")
        self.limit = limit
    }

    /// Waits for a slot; true once the caller holds one (it must `release` it), false when
    /// `patience` ran out first. `urgent`: a client waits (pre-* events).
    func acquire(urgent: Bool, patience: Duration?) async -> Bool {
        let limit = limit
        return await withCheckedContinuation { continuation in
            // The check and the place in line under one lock: a slot freed in between cannot be missed.
            let queued: UInt64? = state.withLock { state in
                if state.inUse < limit, state.waiting.isEmpty {
                    state.inUse += 1
                    return nil
                }
                state.nextID += 1
                let waiter = Waiter(id: state.nextID, urgent: urgent, continuation: continuation)
                if urgent, let firstPatient = state.waiting.firstIndex(where: { !$0.urgent }) {
                    state.waiting.insert(waiter, at: firstPatient)
                } else {
                    state.waiting.append(waiter)
                }
                return state.nextID
            }
            guard let queued else { return continuation.resume(returning: true) }
            if let patience {
                // Gives up the place in line once patience runs out (a no-op if granted before).
                Task { [self] in
                    try? await Task.sleep(for: patience)
                    self.giveUp(queued)
                }
            }
        }
    }

    /// Hands the slot to the first caller waiting, or frees it.
    func release() {
        let next: CheckedContinuation<Bool, Never>? = state.withLock { state in
            guard !state.waiting.isEmpty else {
                state.inUse -= 1
                return nil
            }
            // The slot passes on: `inUse` stays as it is.
            return state.waiting.removeFirst().continuation
        }
        next?.resume(returning: true)
    }

    private func giveUp(_ id: UInt64) {
        let waiter: CheckedContinuation<Bool, Never>? = state.withLock { state in
            guard let index = state.waiting.firstIndex(where: { $0.id == id }) else { return nil }
            return state.waiting.remove(at: index).continuation
        }
        waiter?.resume(returning: false)
    }
}
