import Synchronization

/// When each upload last had a `post-receive` event: at most one per upload per `interval`.
///
/// Only uploads whose last event is younger than the interval need remembering (an older one
/// constrains nothing), and at most `capacity` of them are: past that, the expired ones are
/// forgotten, and if all are fresh the event is skipped. Progress is a courtesy; memory that
/// grows with the number of uploads a client can start is not.
final class ProgressPacing: Sendable {
    let interval: Duration
    let capacity: Int
    private let lastEvent = Mutex<[String: ContinuousClock.Instant]>([:])

    init(interval: Duration, capacity: Int = 4096) {
        self.interval = interval
        self.capacity = capacity
    }

    /// Whether upload `key` may have an event now (and, if so, its time is noted).
    func admits(_ key: String, now: ContinuousClock.Instant = .now) -> Bool {
        let interval = interval
        let capacity = capacity
        return lastEvent.withLock { table in
            if let last = table[key] {
                guard now - last >= interval else { return false }
            } else if table.count >= capacity {
                table = table.filter { now - $0.value < interval }
                guard table.count < capacity else { return false }
            }
            table[key] = now
            return true
        }
    }
}

/// multipart files the application refused (`pre-create` answered a 4xx), so that the rest of
/// a refused file's fragments — a client sends them whatever the first one's answer, several at
/// once — are refused with the same answer without asking the hook again for each.
///
/// Bounded: the `capacity` most recent refusals, the oldest forgotten first. A forgotten file
/// costs one more hook call, never a wrong answer: the hook is asked as if for the first time.
/// A refusal holds for the description the hook saw (name and size): a fragment describing the
/// file otherwise is asked about anew.
final class RefusedFiles: Sendable {
    struct Refused: Sendable {
        var description: Int
        var status: Int
        var message: String
    }

    private struct State {
        var refused: [String: Refused] = [:]
        /// Ids in the order they were refused, a ring of `capacity`: the next to forget at `next`.
        var order: [String] = []
        var next = 0
    }

    let capacity: Int
    private let state = Mutex(State())

    init(capacity: Int = 1024) {
        self.capacity = capacity
    }

    /// What identifies the file the hook was asked about (this process only).
    static func description(path: String, size: Int) -> Int {
        var hasher = Hasher()
        hasher.combine(path)
        hasher.combine(size)
        return hasher.finalize()
    }

    /// The refusal remembered for file `id` described so; nil when there is none.
    func refusal(of id: String, description: Int) -> Refused? {
        state.withLock { state in
            guard let refused = state.refused[id], refused.description == description else { return nil }
            return refused
        }
    }

    func remember(_ id: String, _ refused: Refused) {
        let capacity = capacity
        state.withLock { state in
            if state.refused.updateValue(refused, forKey: id) != nil { return }
            if state.order.count < capacity {
                state.order.append(id)
            } else {
                state.refused[state.order[state.next]] = nil
                state.order[state.next] = id
                state.next = (state.next + 1) % capacity
            }
        }
    }
}
