import Testing

@testable import Xfer

/// The send rate limit's arithmetic, on a scripted clock: each test says
/// what time it is, nothing sleeps.
struct SendBudgetTests {
    private let t0 = ContinuousClock.now

    private func at(_ milliseconds: Int64) -> ContinuousClock.Instant {
        t0 + .milliseconds(milliseconds)
    }

    @Test func aBucketStartsFullAndRefillsAtItsRate() {
        var bucket = TokenBucket(rate: 1000, capacity: 500, now: t0)
        #expect(bucket.take(upTo: 800) == 500, "a full bucket gives its capacity, no more")
        #expect(bucket.take(upTo: 1) == 0)
        bucket.refill(at: at(100))
        #expect(bucket.tokens == 100)
        bucket.refill(at: at(50))
        #expect(bucket.tokens == 100, "time never runs backwards for the bucket")
        bucket.refill(at: at(10_000))
        #expect(bucket.tokens == 500, "never more than the capacity")
    }

    @Test func frequentRefillsLoseNoFractions() {
        // 3 bytes a second, refilled every millisecond: each step earns 0.003
        // of a token, which rounding alone would lose every time.
        var bucket = TokenBucket(rate: 3, capacity: 10, now: t0)
        _ = bucket.take(upTo: 10)
        for millisecond in 1...2000 { bucket.refill(at: at(Int64(millisecond))) }
        #expect(bucket.tokens == 6)
    }

    @Test func aHugeRateDoesNotOverflow() {
        var bucket = TokenBucket(rate: TransportOptions.sendRates.upperBound, capacity: 1 << 40, now: t0)
        _ = bucket.take(upTo: 1 << 40)
        bucket.refill(at: t0 + .seconds(86_400))
        #expect(bucket.tokens == 1 << 40)
    }

    @Test func theDelayIsTheTimeTheMissingTokensTake() {
        var bucket = TokenBucket(rate: 1000, capacity: 1000, now: t0)
        #expect(bucket.delay(until: 10) == .zero)
        _ = bucket.take(upTo: 1000)
        #expect(bucket.delay(until: 250) == .milliseconds(250))
        #expect(bucket.delay(until: 5000) == .seconds(1), "at most a full bucket is waited for")
        bucket.giveBack(100)
        #expect(bucket.delay(until: 250) == .milliseconds(150))
    }

    @Test func theBurstIsATenthOfASecondButNeverTiny() {
        #expect(SendBudget.burst(for: 16 << 20) == (16 << 20) / 10)
        #expect(SendBudget.burst(for: 100 << 10) == 16 << 10)
        #expect(SendBudget.burst(for: 4 << 10) == 4 << 10, "never more than a second's worth")
    }

    @Test func waitingRequestsShareEachRoundEquallyInTurn() {
        var budget = SendBudget(rate: 1000, now: t0)  // capacity 1000: a second's worth
        budget.wait(1, need: 10_000)
        budget.wait(2, need: 10_000)
        budget.wait(3, need: 10_000)
        budget.wait(4, need: 100)
        let first = budget.grants(at: t0)
        #expect(first.map(\.request) == [1, 2, 3, 4], "every waiting request is served, oldest first")
        #expect(first.map(\.bytes) == [250, 250, 250, 100], "equal shares, never more than a request needs")
        #expect(!budget.isAnyoneWaiting)
        #expect(budget.bucket.tokens == 150, "what nobody needed stays for the next round")

        budget.wait(2, need: 9_750)
        budget.wait(1, need: 9_750)
        #expect(budget.grants(at: at(100)) == [], "not before half a burst is there")
        #expect(budget.delayUntilNextGrant(at: at(100)) == .milliseconds(250))
        let second = budget.grants(at: at(350))
        #expect(second.map(\.request) == [2, 1], "served in the order they began to wait")
        #expect(second.map(\.bytes) == [250, 250])
    }

    @Test func crumbsGoToTheOldestFirstAndTheRestKeepTheirPlace() {
        var budget = SendBudget(rate: 1 << 10, now: t0)  // capacity 1 KiB
        for request in 1...5 { budget.wait(UInt64(request), need: 1) }
        budget.wait(1, need: 4096)  // waiting already: keeps its place, needs more
        #expect(budget.grants(at: t0).map(\.request) == [1, 2, 3, 4, 5])
        var budget2 = SendBudget(rate: 1 << 10, now: t0)
        for request in 1...2000 { budget2.wait(UInt64(request), need: 10) }
        let grants = budget2.grants(at: t0)
        #expect(grants.count == 1024 && grants.allSatisfy { $0.bytes == 1 }, "a token each while they last")
        #expect(grants.first?.request == 1 && grants.last?.request == 1024)
        budget2.finish(1500, unused: 0)
        let next = budget2.grants(at: t0 + .seconds(1))
        #expect(next.first?.request == 1025, "the unserved come first next round")
        #expect(!next.contains { $0.request == 1500 }, "a finished request no longer waits")
    }

    @Test func aFinishedRequestGivesBackWhatItDidNotSend() {
        var budget = SendBudget(rate: 1 << 20, now: t0)
        budget.wait(9, need: 1 << 30)
        let grant = budget.grants(at: t0)
        #expect(grant.first?.bytes == budget.bucket.capacity)
        #expect(budget.bucket.tokens == 0)
        budget.finish(9, unused: 1000)
        #expect(budget.bucket.tokens == 1000)
        #expect(budget.delayUntilNextGrant(at: t0) == nil, "nobody waits")
    }

    @Test func sendRatesAreValidated() throws {
        var options = TransportOptions()
        try options.validate()
        options.maximumSendRate = 1 << 10
        try options.validate()
        for rate: Int64 in [0, -1, 1023, (1 << 40) + 1] {
            options.maximumSendRate = rate
            #expect(throws: XferError.self) { try options.validate() }
        }
    }
}
