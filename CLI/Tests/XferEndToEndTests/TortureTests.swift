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

    func testKill9Torture() throws {
        let trials = Self.setting("XFER_TORTURE_TRIALS", default: 2)
        let kills = Self.setting("XFER_TORTURE_KILLS", default: 2)
        let seed = UInt64(Self.setting("XFER_TORTURE_SEED", default: 42))
        let faults = ProcessInfo.processInfo.environment["XFER_TORTURE_FAULTS"].flatMap { $0.isEmpty ? nil : $0 }
        let chunk = 64 << 10
        var random = SeededRandom(seed: seed)
        var results: [Trial] = []
        let work = TemporaryDirectory("xfer-torture")

        for backend in Self.backends {
            let serverArguments = faults.map { ["--faults", $0, "--fault-seed", String(seed)] } ?? []
            let server = try ServeProcess(root: work.file("server-\(backend)"), extraArguments: serverArguments)
            for number in 1...max(1, trials) {
                let chunks = 24 + Int(random.next() % 40)
                let size = (chunks - 1) * chunk + 1 + Int(random.next() % UInt64(chunk))
                let file = work.file("\(backend)-\(number).bin")
                try makeTestFile(at: file, size: size, seed: random.next())
                // The IETF draft's uploads are created under /resumable/.
                let target = backend == "ietf" ? server.url + "/resumable/" : server.url
                let arguments = ["push", file, "--backend", backend, "--to", target, "--state", work.file("state"),
                                 "--chunk-size", String(chunk), "--concurrency", "3", "--max-attempts", "30", "--json"]
                var trial = Trial(backend: backend, number: number, size: size)
                let receivedBefore = int(try getJSON(server.url + "/stats")["payloadBytesReceived"])
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
                trial.resent = int(try getJSON(server.url + "/stats")["payloadBytesReceived"]) - receivedBefore - size
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

        for backend in Self.backends {
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
