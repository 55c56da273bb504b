import Foundation
import XferPrimitives
import Xfer
import XferPatch

/// `xfer-store-bench`: the state store's commit rate on its own, and a real
/// push, each with LMDB (the product's store) and SQLite (for comparison).
@main
struct XferStoreBench {
    static let usage = """
        usage:
          xfer-store-bench commit-rate [--chunks N] [--committers N[,N…]] [--rounds N] [--dir DIR]
          xfer-store-bench push --file PATH --url URL [--store lmdb|sqlite] [--chunk-size BYTES]
                                [--concurrency N] [--state DIR]
          xfer-store-bench check --url URL [--dir DIR]   (both stores must read back the same)
          xfer-store-bench seed-resume --state DIR --job ID --chunks N [--file F] [--batch B]
          xfer-store-bench seed-jobs --state DIR --template DIR --count N [--files K]
        """

    static func main() async {
        var arguments = Array(CommandLine.arguments.dropFirst())
        guard !arguments.isEmpty else { fail(usage) }
        let command = arguments.removeFirst()
        do {
            let options = try Options(arguments)
            switch command {
            case "commit-rate": try await commitRate(options)
            case "push": try await push(options)
            case "seed-resume": try await Seed.resume(options)
            case "seed-jobs": try await Seed.jobs(options)
            case "check":
                guard let url = options.value("url") else { throw BenchError.usage(usage) }
                let directory = try scratchDirectory(options.value("dir"), label: "check")
                try await StoreCheck.run(url: url, directory: directory)
                try? FileManager.default.removeItem(atPath: directory)
            default: fail(usage)
            }
        } catch {
            fail("xfer-store-bench: \(error)")
        }
    }

    // MARK: commit-rate

    enum StoreKind: String, CaseIterable {
        case lmdb, sqlite

        func open(_ directory: String) throws(XferError) -> any JobStateStore {
            switch self {
            case .lmdb: return try TransferEngine.defaultStateStore(directory: directory)
            case .sqlite: return try SQLiteStateStore(directory: directory)
            }
        }
    }

    /// Each committer marks its share of the chunks done one at a time, as a
    /// worker does when its request is acknowledged; every store gets a fresh
    /// directory. Rounds alternate which store goes first, so drift in the
    /// disk's speed (other I/O, writeback) hits both alike.
    static func commitRate(_ options: Options) async throws {
        let chunks = try options.int("chunks", default: 4096)
        let rounds = try options.int("rounds", default: 5)
        let committerCounts = try (options.value("committers") ?? "8,1").split(separator: ",").map { text in
            guard let count = Int(text), count > 0 else { throw BenchError.usage("bad --committers \(text)") }
            return count
        }
        let base = try scratchDirectory(options.value("dir"), label: "commit-rate")
        print("commit-rate: \(chunks) chunks, \(rounds) rounds, state under \(base)")
        var summary: [String] = []
        for committers in committerCounts {
            var rates: [StoreKind: [Double]] = [:]
            var cpu: [StoreKind: [Double]] = [:]
            for round in 0..<rounds {
                let order: [StoreKind] = round % 2 == 0 ? [.lmdb, .sqlite] : [.sqlite, .lmdb]
                for kind in order {
                    let directory = "\(base)/\(kind.rawValue)-c\(committers)-r\(round)"
                    let (rate, cpuPerCommit) = try await measureCommits(
                        kind: kind, directory: directory, chunks: chunks, committers: committers)
                    rates[kind, default: []].append(rate)
                    cpu[kind, default: []].append(cpuPerCommit)
                    print("  committers=\(committers) round=\(round + 1) \(kind.rawValue): "
                          + String(format: "%.0f commits/s, %.1f µs CPU/commit", rate, cpuPerCommit))
                    try? FileManager.default.removeItem(atPath: directory)
                }
            }
            let lmdb = median(rates[.lmdb] ?? [])
            let sqlite = median(rates[.sqlite] ?? [])
            let lmdbCPU = median(cpu[.lmdb] ?? [])
            let sqliteCPU = median(cpu[.sqlite] ?? [])
            print(String(format: "committers=%d median: lmdb %.0f/s (%.1f µs CPU), sqlite %.0f/s (%.1f µs CPU), lmdb/sqlite %.2fx",
                         committers, lmdb, lmdbCPU, sqlite, sqliteCPU, lmdb / sqlite))
            summary.append(String(format: "{\"committers\":%d,\"chunks\":%d,\"rounds\":%d,\"lmdb_commits_per_s\":%.0f,\"sqlite_commits_per_s\":%.0f,\"ratio\":%.3f,\"lmdb_cpu_us_per_commit\":%.1f,\"sqlite_cpu_us_per_commit\":%.1f}",
                                  committers, chunks, rounds, lmdb, sqlite, lmdb / sqlite, lmdbCPU, sqliteCPU))
        }
        for line in summary { print(line) }
        try? FileManager.default.removeItem(atPath: base)
    }

    /// Commits per second, and process CPU time per commit in µs (the
    /// bench's own tasks cost the same with either store).
    static func measureCommits(kind: StoreKind, directory: String, chunks: Int, committers: Int) async throws -> (Double, Double) {
        let store = try kind.open(directory)
        let job = JobID(rawValue: "00000000000000bb")
        let plan = ChunkPlan(fileSize: Int64(chunks), chunkSize: 1)
        let cpuStart = processCPUSeconds()
        let start = ContinuousClock.now
        try await withThrowingTaskGroup(of: Void.self) { group in
            for committer in 0..<committers {
                group.addTask {
                    for chunk in stride(from: committer, to: chunks, by: committers) {
                        try await store.commit(.markDone(job: job, file: 0, chunks: [chunk], plan: plan, receipts: [:]))
                    }
                }
            }
            try await group.waitForAll()
        }
        let elapsed = ContinuousClock.now - start
        let cpu = processCPUSeconds() - cpuStart
        // Every acknowledgement must be readable back, or the rate means nothing.
        let done = try store.doneChunks(job: job, file: 0, capacity: chunks)
        guard done.count == chunks else {
            throw BenchError.failed("\(kind.rawValue) holds \(done.count) of \(chunks) chunks after committing them all")
        }
        return (Double(chunks) / elapsed.seconds, cpu / Double(chunks) * 1e6)
    }

    static func processCPUSeconds() -> Double {
        var usage = rusage()
        getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
        func seconds(_ time: timeval) -> Double { Double(time.tv_sec) + Double(time.tv_usec) / 1e6 }
        return seconds(usage.ru_utime) + seconds(usage.ru_stime)
    }

    // MARK: push

    /// One real push through the engine with the patch backend.
    static func push(_ options: Options) async throws {
        guard let file = options.value("file"), let url = options.value("url") else { throw BenchError.usage(usage) }
        guard let kind = StoreKind(rawValue: options.value("store") ?? "lmdb") else {
            throw BenchError.usage("--store takes lmdb or sqlite")
        }
        let chunkSize = try options.int("chunk-size", default: 64 << 10)
        let concurrency = try options.int("concurrency", default: 8)
        let state = try scratchDirectory(options.value("state"), label: "push-\(kind.rawValue)")
        let size = try (FileManager.default.attributesOfItem(atPath: file)[.size] as? NSNumber)?.int64Value ?? 0
        let chunks = ChunkPlan(fileSize: size, chunkSize: chunkSize).count

        let engine: TransferEngine
        switch kind {
        case .lmdb: engine = try TransferEngine(stateDirectory: state)  // exactly what the product opens
        case .sqlite: engine = try TransferEngine(stateDirectory: state, store: SQLiteStateStore(directory: state))
        }
        let start = ContinuousClock.now
        let job = try await engine.push(
            [file], to: url, using: PatchBackend(),
            options: TransferOptions(chunkSize: chunkSize, concurrency: concurrency), restart: true)
        let report = try await job.report
        let elapsed = (ContinuousClock.now - start).seconds
        print("{\"store\":\"\(kind.rawValue)\",\"bytes\":\(size),\"chunk_size\":\(chunkSize),\"chunks\":\(chunks),"
            + "\"concurrency\":\(concurrency),\"bytes_sent\":\(report.bytesSent),"
            + String(format: "\"seconds\":%.3f,\"chunks_per_s\":%.0f,\"mib_per_s\":%.1f}",
                     elapsed, Double(chunks) / elapsed, Double(size) / elapsed / 1_048_576))
        if options.value("state") == nil { try? FileManager.default.removeItem(atPath: state) }
    }

    // MARK: Helpers

    static func scratchDirectory(_ given: String?, label: String) throws -> String {
        if let given {
            try FileManager.default.createDirectory(atPath: given, withIntermediateDirectories: true)
            return given
        }
        // Under the working directory rather than /tmp, which may be a tmpfs
        // where fsync costs nothing and durability comparisons mean nothing.
        let path = FileManager.default.currentDirectoryPath + "/.xfer-store-bench-\(label)-\(getpid())"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    static func median(_ values: [Double]) -> Double {
        guard !values.isEmpty else { return .nan }
        let sorted = values.sorted()
        let middle = sorted.count / 2
        return sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
    }

    static func fail(_ message: String) -> Never {
        FileHandle.standardError.write(Data((message + "\n").utf8))
        exit(2)
    }
}

enum BenchError: Error, CustomStringConvertible {
    case usage(String)
    case failed(String)

    var description: String {
        switch self {
        case .usage(let text), .failed(let text): return text
        }
    }
}

/// `--name value` pairs.
struct Options {
    private var values: [String: String] = [:]

    init(_ arguments: [String]) throws {
        var index = 0
        while index < arguments.count {
            let name = arguments[index]
            guard name.hasPrefix("--"), index + 1 < arguments.count else {
                throw BenchError.usage("unexpected '\(name)'\n\(XferStoreBench.usage)")
            }
            values[String(name.dropFirst(2))] = arguments[index + 1]
            index += 2
        }
    }

    func value(_ name: String) -> String? { values[name] }

    func int(_ name: String, default fallback: Int) throws -> Int {
        guard let text = values[name] else { return fallback }
        guard let value = Int(text), value > 0 else { throw BenchError.usage("--\(name) takes a positive integer, not \(text)") }
        return value
    }
}

extension Duration {
    var seconds: Double {
        let (whole, fraction) = components
        return Double(whole) + Double(fraction) / 1e18
    }
}
