import Synchronization
import Testing
@testable import XferReceiver

/// `KeyedLoads` stays bounded: settled values (completed uploads) are dropped once the entries
/// double, the others kept and never loaded again.
@Suite struct KeyedLoadsTests {
    final class Upload: Sendable {
        let id: Int
        let done: Bool
        init(id: Int, done: Bool) {
            self.id = id
            self.done = done
        }
    }

    final class Counter: Sendable {
        let value = Atomic<Int>(0)
    }

    actor Registry {
        let loads = KeyedLoads<Int, Upload>(settled: { $0.done })
        let reloads = Counter()

        func add(_ upload: Upload) { loads.insert(upload, for: upload.id) }
        var count: Int { loads.count }

        func lookUp(_ id: Int, done: Bool) async throws -> Upload? {
            try await loads.value(for: id) { [reloads] in
                reloads.value.add(1, ordering: .relaxed)
                return Upload(id: id, done: done)
            }
        }
    }

    @Test func settledValuesGoAndUnsettledOnesStay() async throws {
        let registry = Registry()
        let floor = KeyedLoads<Int, Upload>.sweepFloor
        // 100 under way, then many completed: what is held stays near the floor, not the total.
        for id in 0..<100 { await registry.add(Upload(id: id, done: false)) }
        for id in 100..<(20 * floor) { await registry.add(Upload(id: id, done: true)) }
        let held = await registry.count
        #expect(held <= 2 * floor, "\(held) entries held for \(20 * floor) uploads")
        // The uploads under way are still the same objects: not one is loaded again.
        for id in 0..<100 {
            let found = try await registry.lookUp(id, done: false)
            #expect(found?.done == false)
        }
        #expect(registry.reloads.value.load(ordering: .relaxed) == 0)
        // A dropped completed upload is simply loaded again when asked for.
        #expect(try await registry.lookUp(100, done: true)?.id == 100)
        #expect(registry.reloads.value.load(ordering: .relaxed) == 1)
    }

    @Test func withoutSettledValuesNothingIsDropped() async {
        let registry = Registry()
        let total = 3 * KeyedLoads<Int, Upload>.sweepFloor
        for id in 0..<total { await registry.add(Upload(id: id, done: false)) }
        #expect(await registry.count == total)
    }
}
