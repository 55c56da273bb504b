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

    actor BoundedRegistry {
        let memory: UploadsInMemory
        let loads: KeyedLoads<Int, Upload>

        init(limit: Int) {
            var limits = ReceiverLimits()
            limits.uploadsInMemory = limit
            memory = UploadsInMemory(limits: limits)
            loads = KeyedLoads(settled: { $0.done }, memory: memory)
        }

        func add(_ upload: Upload) throws {
            try loads.makeRoom()
            loads.insert(upload, for: upload.id)
        }
        func dropIdle(after idle: Duration) { loads.dropIdle(after: idle) }
        var count: Int { loads.count }
    }

    /// Full, a registry lets go of what no request holds; what one holds stays, and when every
    /// entry is held a new one is refused (503 for the client) instead of growing.
    @Test func aFullRegistryDropsWhatNobodyHoldsAndRefusesTheRest() async throws {
        let registry = BoundedRegistry(limit: 3)
        let held = Upload(id: 1, done: false)
        try await registry.add(held)
        try await registry.add(Upload(id: 2, done: false))
        try await registry.add(Upload(id: 3, done: false))
        #expect(registry.memory.uploadCount == 3)
        // Room is made by dropping 2 and 3 (nobody holds them); 1 is held here.
        try await registry.add(Upload(id: 4, done: false))
        #expect(await registry.count == 2)
        #expect(registry.memory.uploadCount == 2)
        let alsoHeld = [Upload(id: 5, done: false), Upload(id: 6, done: false)]
        try await registry.add(alsoHeld[0])
        // 1, 4 (unheld: dropped for 6) and 5.
        try await registry.add(alsoHeld[1])
        #expect(await registry.count == 3)
        // 1, 5 and 6 are held: nothing can go.
        await #expect(throws: ReceiverBusy.self) { try await registry.add(Upload(id: 7, done: false)) }
        #expect(registry.memory.uploadCount == 3)
        withExtendedLifetime((held, alsoHeld)) {}
    }

    /// Idle unfinished values nobody holds leave with the upkeep; recently used or held ones stay.
    @Test func idleValuesLeaveWithTheUpkeep() async throws {
        let registry = BoundedRegistry(limit: 100)
        let held = Upload(id: 1, done: false)
        try await registry.add(held)
        try await registry.add(Upload(id: 2, done: false))
        await registry.dropIdle(after: .seconds(3600))
        #expect(await registry.count == 2, "nothing was idle that long")
        await registry.dropIdle(after: .zero)
        #expect(await registry.count == 1, "the unheld one left, the held one stayed")
        #expect(registry.memory.uploadCount == 1)
        withExtendedLifetime(held) {}
    }
}

