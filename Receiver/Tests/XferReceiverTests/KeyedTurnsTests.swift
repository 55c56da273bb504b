import NIOCore
import NIOEmbedded
import Testing
@testable import XferReceiver

/// `KeyedTurns`, the receiver's one per-key exclusion, driven from an actor
/// as the storage actors drive it: no two holders of one key at once, other
/// keys unaffected, every waiter served, and `wakeAll` releasing waiters.
@Suite struct KeyedTurnsTests {
    actor Guarded {
        var turns = KeyedTurns<Int>()
        var inside: [Int: Int] = [:]
        var most: [Int: Int] = [:]
        var deleted = false

        func run(_ key: Int) async -> Bool {
            while !turns.take(key) {
                if deleted { return false }
                await withCheckedContinuation { turns.queue(key, $0) }
                if deleted { return false }
            }
            inside[key, default: 0] += 1
            most[key] = max(most[key] ?? 0, inside[key]!)
            await Task.yield()  // a suspension inside the turn, where an actor alone would interleave
            inside[key]! -= 1
            turns.end(key)
            return true
        }

        func holdForever(_ key: Int) -> Bool { turns.take(key) }

        func delete() {
            deleted = true
            turns.wakeAll()
        }
    }

    @Test func oneHolderPerKeyAndEveryoneServed() async {
        let guarded = Guarded()
        let served = await withTaskGroup(of: Bool.self) { group in
            for index in 0..<200 { group.addTask { await guarded.run(index % 3) } }
            return await group.reduce(0) { $0 + ($1 ? 1 : 0) }
        }
        #expect(served == 200)
        #expect(await guarded.most == [0: 1, 1: 1, 2: 1])
    }

    @Test func wakeAllReleasesWaitersToFindTheChange() async {
        let guarded = Guarded()
        #expect(await guarded.holdForever(7))
        let waiters = (0..<5).map { _ in Task { await guarded.run(7) } }
        // Each waiter is queued once the actor has run it; deleting wakes those queued and
        // turns away those not yet queued: none of them gets the turn, none is left waiting.
        await guarded.delete()
        for waiter in waiters { #expect(await waiter.value == false) }
    }

    actor OffsetLike: TakesTurns {
        var turns = KeyedTurns<WholeUpload>()
    }

    /// A connection a test can watch being closed.
    private func connection() async throws -> NIOAsyncTestingChannel {
        let channel = NIOAsyncTestingChannel()
        try await channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 9)).get()
        return channel
    }

    @Test func aTakerCutsTheBodyItsHolderStillReceivesAndGetsTheTurnOnceThatSettled() async throws {
        let upload = OffsetLike()
        let channel = try await connection()
        let inFlight = BodyInFlight(arrivingOn: channel)
        let inTurn = AsyncStream<Void>.makeStream()
        let holder = Task {
            try await upload.takingOver(receiving: inFlight) {
                inTurn.continuation.yield()
                // Its body goes on until its connection is closed: the holder then settles.
                try await channel.closeFuture.get()
                return "settled"
            }
        }
        var holding = inTurn.stream.makeAsyncIterator()
        await holding.next()
        // The taker gets the turn only after the holder's connection was closed and its turn ended.
        let holderStillActive = try await upload.takingOver(receiving: nil) { channel.isActive }
        #expect(holderStillActive == false)
        #expect(try await holder.value == "settled")
    }

    @Test func aBodyThatEndedIsNotCut() async throws {
        let channel = try await connection()
        let inFlight = BodyInFlight(arrivingOn: channel)
        for try await _ in inFlight.watching(AsyncStream<ByteBuffer> { $0.finish() }) {}
        inFlight.cut()
        #expect(channel.isActive, "a request whose body ended is settling: its answer must not be lost")
        let other = try await connection()
        BodyInFlight(arrivingOn: other).cut()
        try await other.closeFuture.get()
        #expect(!other.isActive)
    }
}
