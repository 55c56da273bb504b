import Foundation
import XCTest
import XferTestSupport

/// Kill -9 torture: for each built-in backend, trials of a push SIGKILLed at
/// seeded random moments (several per trial), then re-run to the end. Each
/// trial checks the received bytes by SHA-256, that nothing acknowledged
/// before a kill was forgotten by the next run, and how many bytes were sent
/// more than once (the receiver counts every file byte it read, `GET /stats`).
///
/// `make test` runs the short version (2 trials per backend, 2 kills each).
/// `make torture` sets XFER_TORTURE_TRIALS, XFER_TORTURE_KILLS and
/// XFER_TORTURE_FAULTS (a `xfer serve --faults` spec) for the long one;
/// XFER_TORTURE_SEED changes the random moments.
///
/// A kill moment is "after the Nth chunk acknowledgement the push printed"
/// (N = 0: as soon as it started), so runs repeat for a seed without sleeps.
///
/// `testKill9TortureOnTwoReceiversOverCeph` runs the same trials against two
/// `xfer serve --storage s3://` over one bucket of the Ceph gateway, behind
/// haproxy's round robin, with faults injected by both (XFER_TORTURE_FAULTS,
/// else a default mix).
final class TortureTests: XCTestCase {
    struct Trial {
        var backend: String
        var number: Int
        var size: Int
        var kills = 0
        var forgotten = 0
        var resent = 0
        var identical = false
    }

    /// The backends tortured against `xfer serve`.
    static let backends = ["patch", "multipart", "sequence", "ietf"]

    private static func setting(_ name: String, default value: Int) -> Int {
        ProcessInfo.processInfo.environment[name].flatMap { Int($0) } ?? value
    }

    /// Where a torture's pushes go: one receiver on disk, or several over one object store
    /// behind a balancer. `received` adds up what every receiver read.
    private struct Receivers {
        var url: String
        var servers: [ServeProcess]
        var balancer: HAProxy?

        func received() throws -> Int {
            try servers.reduce(0) { $0 + int(try getJSON($1.url + "/stats")["payloadBytesReceived"]) }
        }

        func stop() {
            for server in servers { server.stop() }
        }
    }

    func testKill9Torture() throws {
        let faults = ProcessInfo.processInfo.environment["XFER_TORTURE_FAULTS"].flatMap { $0.isEmpty ? nil : $0 }
        let work = TemporaryDirectory("xfer-torture")
        let seed = UInt64(Self.setting("XFER_TORTURE_SEED", default: 42))
        try torture(work: work, chunk: 64 << 10, sizeInChunks: 24..<64, faults: faults, seed: seed) { backend in
            let serverArguments = faults.map { ["--faults", $0, "--fault-seed", String(seed)] } ?? []
            let server = try ServeProcess(root: work.file("server-\(backend)"), extraArguments: serverArguments)
            return Receivers(url: server.url, servers: [server])
        }
    }

    func testKill9TortureOnTwoReceiversOverCeph() throws {
        try XCTSkipIf(!FileManager.default.isExecutableFile(atPath: "/usr/sbin/haproxy"),
                      "haproxy is not installed (scripts/install-deps.sh installs it: `make test` runs that)")
        let faults = ProcessInfo.processInfo.environment["XFER_TORTURE_FAULTS"].flatMap { $0.isEmpty ? nil : $0 }
            ?? "503=0.03,429=0.01,reset=0.03,truncate=0.03,garble=0.02"
        let ceph = try CephGateway.shared()
        let bucket = try ceph.makeBucket()
        defer { try? ceph.removeBucket(bucket) }
        let work = TemporaryDirectory("xfer-torture-ceph")
        let seed = UInt64(Self.setting("XFER_TORTURE_SEED", default: 42))
        // 1 MiB chunks over 6-10 MiB files: parts and staged pieces both (patch's are 8 MiB, the
        // object storage's preferred chunk, above the part minimum).
        try torture(
            work: work, backends: Self.backends + ["tus"], chunk: 1 << 20, sizeInChunks: 6..<11, faults: faults, seed: seed, trialsByDefault: 1
        ) { backend in
            // The receivers' links name the balancer (--public-url): a receiver behind one is told.
            let ports = [try freeTCPPort(), try freeTCPPort()]
            let balancer = try HAProxy(backends: ports, directory: work.path)
            let servers = try ports.enumerated().map { index, port in
                try ServeProcess(
                    storage: [
                        "--storage", "s3://\(bucket)/\(backend)", "--endpoint", ceph.url, "--claim-lifetime", "2",
                        "--faults", faults, "--fault-seed", String(seed &+ UInt64(index)), "--public-url", balancer.url,
                    ], port: port, environment: CephGateway.environment)
            }
            try balancer.waitUntilServing()
            return Receivers(url: balancer.url, servers: servers, balancer: balancer)
        }
        XCTAssertEqual(try ceph.uploadsInProgress(bucket: bucket).count, 0, "no multipart upload is left unfinished")
    }

    /// The pull mode: files served by one `xfer serve` whose downloads meet the faults a
    /// client fetching ranges meets (503, 429, connections cut mid-body: `--fault-downloads`),
    /// each pulled in ranges and SIGKILLed at random moments, then run to its end. Every
    /// file must end byte-identical, every range reported done must still be done at the
    /// next start, and no range reported done is fetched again.
    func testKill9PullTorture() throws {
        let faults = ProcessInfo.processInfo.environment["XFER_TORTURE_FAULTS"].flatMap { $0.isEmpty ? nil : $0 }
            ?? "503=0.03,429=0.01,reset=0.03,truncate=0.03"
        let seed = UInt64(Self.setting("XFER_TORTURE_SEED", default: 42))
        let trials = Self.setting("XFER_TORTURE_TRIALS", default: 3)
        let kills = Self.setting("XFER_TORTURE_KILLS", default: 2)
        let work = TemporaryDirectory("xfer-torture-pull")
        let server = try ServeProcess(
            root: work.file("server"), extraArguments: ["--faults", faults, "--fault-seed", String(seed), "--fault-downloads"])
        var random = SeededRandom(seed: seed)
        let chunk = 256 << 10
        var identical = 0
        var killed = 0
        for number in 1...max(1, trials) {
            let chunks = 16 + Int(random.next() % 32)
            let size = (chunks - 1) * chunk + 1 + Int(random.next() % UInt64(chunk))
            let file = work.file("source-\(number).bin")
            try makeTestFile(at: file, size: size, seed: random.next())
            let push = try runXfer(
                ["push", file, "--backend", "patch", "--to", server.url, "--state", work.file("push-state"), "--max-attempts", "30"])
            XCTAssertEqual(push.status, 0, push.stderr)
            let url = try XCTUnwrap(push.stdout.last)
            let target = work.file("copy-\(number).bin")
            let arguments = ["pull", url, target, "--state", work.file("state"), "--chunk-size", String(chunk), "--concurrency", "4",
                             "--max-attempts", "30", "--json"]
            // Ranges and bytes reported done, from the `chunk` events read (those printed before a
            // kill but not read yet included).
            var committed = 0
            var committedBytes = 0
            var forgotten = 0
            var finished = false
            func take(_ line: String) -> String? {
                guard let event = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else { return nil }
                let kind = event["event"] as? String
                if kind == "started" { forgotten += max(0, committedBytes - int(event["doneBytes"])) }
                if kind == "chunk" {
                    committed += 1
                    committedBytes += int(event["bytes"])
                }
                if kind == "completed" { finished = true }
                return kind
            }
            for _ in 0..<max(0, kills) where !finished {
                let pull = try ChildProcess(executable: xferExecutable, arguments: arguments)
                let moment = 1 + Int(random.next() % UInt64(chunks / 2))
                var seen = 0
                while !finished, seen < moment, let line = pull.readLine() {
                    if take(line) == "chunk" { seen += 1 }
                }
                if !finished { pull.kill(SIGKILL) }
                for line in pull.readRemaining() { _ = take(line) }
                if pull.wait() == 128 + SIGKILL { killed += 1 }
            }
            if !finished {
                let last = try runXfer(arguments)
                XCTAssertEqual(last.status, 0, "pull trial \(number): \(last.stderr)")
                for line in last.stdout { _ = take(line) }
            }
            let same = (try? sha256sum(target)) == (try sha256sum(file))
            if same { identical += 1 }
            XCTAssertTrue(same, "pull trial \(number) must end byte-identical")
            XCTAssertEqual(forgotten, 0, "pull trial \(number): ranges reported done were forgotten")
            // A range committed at the kill whose event was not printed yet is not counted: at most `chunks`.
            XCTAssertLessThanOrEqual(committed, chunks, "pull trial \(number): a range reported done was fetched again")
            print("torture pull trial \(number): size=\(size) ranges=\(chunks) identical=\(same) forgotten=\(forgotten)")
        }
        print("torture summary pull: trials=\(max(1, trials)) kills=\(killed) identical=\(identical)/\(max(1, trials)) faults=\(faults) seed=\(seed)")
        server.stop()
    }

    private func torture(
        work: TemporaryDirectory, backends: [String] = TortureTests.backends, chunk: Int, sizeInChunks: Range<Int>, faults: String?, seed: UInt64,
        trialsByDefault: Int = 2,
        receivers makeReceivers: (String) throws -> Receivers
    ) throws {
        let trials = Self.setting("XFER_TORTURE_TRIALS", default: trialsByDefault)
        let kills = Self.setting("XFER_TORTURE_KILLS", default: 2)
        var random = SeededRandom(seed: seed)
        var results: [Trial] = []

        for backend in backends {
            let server = try makeReceivers(backend)
            for number in 1...max(1, trials) {
                let chunks = sizeInChunks.lowerBound + Int(random.next() % UInt64(sizeInChunks.count))
                let size = (chunks - 1) * chunk + 1 + Int(random.next() % UInt64(chunk))
                let file = work.file("\(backend)-\(number).bin")
                try makeTestFile(at: file, size: size, seed: random.next())
                // The IETF draft's uploads are created under /resumable/, tus's under /files/.
                let target = backend == "ietf" ? server.url + "/resumable/" : backend == "tus" ? server.url + "/files/" : server.url
                let arguments = ["push", file, "--backend", backend, "--to", target, "--state", work.file("state"),
                                 "--chunk-size", String(chunk), "--concurrency", "3", "--max-attempts", "30", "--json"]
                var trial = Trial(backend: backend, number: number, size: size)
                let receivedBefore = try server.received()
                var acknowledged = 0
                // A run may finish before its kill moment comes (nothing left
                // but the last steps); its own `completed` event ends the trial.
                var finalURL: String?
                for _ in 0..<max(0, kills) {
                    let push = try ChildProcess(executable: xferExecutable, arguments: arguments)
                    let moment = Int(random.next() % UInt64(chunks / 2 + 1))
                    var seen = 0
                    var finished = false
                    while let line = push.readLine() {
                        let event = (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any]
                        let kind = event?["event"] as? String
                        switch kind {
                        case "started":
                            trial.forgotten += max(0, acknowledged - int(event?["doneBytes"]))
                        case "chunk":
                            seen += 1
                            acknowledged = max(acknowledged, int(event?["doneBytes"]))
                        case "completed":
                            finished = true
                            finalURL = (event?["files"] as? [[String: Any]])?.first?["url"] as? String
                        default:
                            break
                        }
                        if finished || (moment == 0 && kind == "started") || (moment > 0 && seen >= moment) { break }
                    }
                    if !finished { push.kill(SIGKILL) }
                    for line in push.readRemaining() where line.contains("\"event\":\"completed\"") {
                        let event = (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any]
                        finished = true
                        finalURL = (event?["files"] as? [[String: Any]])?.first?["url"] as? String
                    }
                    let status = push.wait()
                    if finished { break }
                    if status == 128 + SIGKILL { trial.kills += 1 }
                }
                if finalURL == nil {
                    let last = try runXfer(arguments)
                    XCTAssertEqual(last.status, 0, "\(backend) trial \(number): \(last.stderr)")
                    if let started = last.events.first, started["event"] as? String == "started" {
                        trial.forgotten += max(0, acknowledged - int(started["doneBytes"]))
                    }
                    finalURL = completedURL(last)
                }
                if let url = finalURL {
                    trial.identical = try downloadSHA256(url, into: work) == sha256sum(file)
                }
                trial.resent = try server.received() - receivedBefore - size
                if faults == nil {
                    // Without faults only a kill makes a re-send, and at most what was in flight.
                    XCTAssertLessThanOrEqual(trial.resent, trial.kills * 3 * chunk, "\(backend) trial \(number): re-sent more than in flight")
                }
                XCTAssertTrue(trial.identical, "\(backend) trial \(number) must end byte-identical")
                XCTAssertEqual(trial.forgotten, 0, "\(backend) trial \(number): acknowledged chunks were forgotten")
                print("torture \(backend) trial \(number): size=\(size) kills=\(trial.kills) identical=\(trial.identical) "
                      + "forgotten=\(trial.forgotten) resent=\(trial.resent)")
                results.append(trial)
                try? FileManager.default.removeItem(atPath: file)
            }
            server.stop()
        }

        for backend in backends {
            let mine = results.filter { $0.backend == backend }
            let resent = mine.map(\.resent)
            print("torture summary \(backend): trials=\(mine.count) kills=\(mine.map(\.kills).reduce(0, +)) "
                  + "identical=\(mine.filter(\.identical).count)/\(mine.count) "
                  + "maxResent=\(resent.max().map(String.init) ?? "n/a") faults=\(faults ?? "none") seed=\(seed)")
        }
    }
}

/// xorshift64*: the same seed gives the same kill moments and files.
struct SeededRandom {
    private var state: UInt64

    init(seed: UInt64) {
        state = seed &* 0x9E37_79B9_7F4A_7C15 | 1
    }

    mutating func next() -> UInt64 {
        state ^= state >> 12
        state ^= state << 25
        state ^= state >> 27
        return state &* 0x2545_F491_4F6C_DD1D
    }
}
