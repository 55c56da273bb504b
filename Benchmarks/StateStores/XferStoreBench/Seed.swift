import Foundation
import Xfer

/// Seeding state directories for the resume and listing benchmarks (Benchmarks/run.py).
///
/// Both go through the engine's own store (`TransferEngine.defaultStateStore`) and its own
/// `StateChange`s, so what they leave is what the product would have written.
enum Seed {
    /// `seed-resume --state DIR --job ID --chunks N [--file F] [--batch B]`
    ///
    /// Marks chunks 0..<N of file F of an existing job acknowledged, as a push would have after
    /// the server acknowledged them. The job itself (record, upload id) must already be there,
    /// written by a real `xfer push` that was killed after its `started` event.
    static func resume(_ options: Options) async throws {
        guard let state = options.value("state"), let job = options.value("job") else {
            throw BenchError.usage("seed-resume --state DIR --job ID --chunks N [--file F] [--batch B]")
        }
        let chunks = try options.int("chunks", default: 1)
        let file = Int(options.value("file") ?? "0") ?? 0
        let batch = try options.int("batch", default: 8192)
        let store = try TransferEngine.defaultStateStore(directory: state)
        let id = JobID(rawValue: job)
        guard try store.job(id) != nil, let record = try store.file(job: id, index: file) else {
            throw BenchError.failed("no job \(job) with file \(file) in \(state)")
        }
        let plan = ChunkPlan(fileSize: record.size, chunkSize: max(1, record.chunkSize))
        let start = ContinuousClock.now
        var next = 0
        while next < chunks {
            let end = min(chunks, next + batch)
            try await store.commit(.markDone(job: id, file: file, chunks: Array(next..<end), plan: plan, receipts: [:]))
            next = end
        }
        try store.sync()
        let done = try store.fileProgress(job: id, file: file).chunksDone
        print(String(format: "{\"job\":\"%@\",\"file\":%d,\"marked\":%d,\"chunksDone\":%d,\"seconds\":%.3f}",
                     job, file, chunks, done, (ContinuousClock.now - start).seconds))
    }

    /// `seed-jobs --state DIR --template DIR --count N [--files K]`
    ///
    /// Copies the (only or first) job of the template state directory N times into DIR with fresh
    /// ids, K files each with distinct paths, alternately completed (every chunk acknowledged) and
    /// unfinished (half of them), with creation times spread over the last day.
    static func jobs(_ options: Options) async throws {
        guard let state = options.value("state"), let templateDirectory = options.value("template") else {
            throw BenchError.usage("seed-jobs --state DIR --template DIR --count N [--files K]")
        }
        let count = try options.int("count", default: 10_000)
        let filesPerJob = try options.int("files", default: 3)
        let source = try TransferEngine.defaultStateStore(directory: templateDirectory)
        guard let template = try source.listings().first?.record,
            let baseFile = try source.file(job: template.id, index: 0)
        else { throw BenchError.failed("no job with a file in \(templateDirectory)") }
        let plan = ChunkPlan(fileSize: baseFile.size, chunkSize: max(1, baseFile.chunkSize))
        let chunksPerFile = plan.count

        let store = try TransferEngine.defaultStateStore(directory: state)
        let now = Date().timeIntervalSince1970
        let start = ContinuousClock.now
        var pending: [StateChange] = []
        for index in 0..<count {
            let id = JobID(rawValue: String(format: "%016llx", UInt64(0x5eed_0000_0000_0000) &+ UInt64(index) &* 0x9e37_79b9))
            let completed = index % 2 == 0
            var record = template
            record.id = id
            record.createdAt = Date(timeIntervalSince1970: now - 86_000 + Double(index) * 86_000 / Double(count))
            record.updatedAt = Date(timeIntervalSince1970: now - 60)
            record.phase = completed ? .completed : .unfinished
            var files: [(index: Int, record: FileRecord)] = []
            var roots: [String] = []
            for fileIndex in 0..<filesPerJob {
                var file = baseFile
                file.path = baseFile.path + ".\(index).\(fileIndex)"
                file.relativePath = (file.path as NSString).lastPathComponent
                file.root = fileIndex
                if completed { file.url = "http://127.0.0.1:1/downloads/\(id)/f\(fileIndex)" }
                files.append((fileIndex, file))
                roots.append(file.path)
            }
            record.rootCount = roots.count
            record.firstRoot = roots[0]
            pending.append(.createJob(record, roots: roots))
            pending.append(.putFiles(job: id, files: files))
            let doneCount = completed ? chunksPerFile : chunksPerFile / 2
            for fileIndex in 0..<filesPerJob where doneCount > 0 {
                pending.append(.markDone(job: id, file: fileIndex, chunks: Array(0..<doneCount), plan: plan, receipts: [:]))
            }
            if pending.count >= 2000 {
                try await store.commit(pending)
                pending.removeAll(keepingCapacity: true)
            }
        }
        if !pending.isEmpty { try await store.commit(pending) }
        try store.sync()
        let listed = try store.listings().count
        print(String(format: "{\"jobs\":%d,\"files_per_job\":%d,\"chunks_per_file\":%d,\"listed\":%d,\"seconds\":%.3f}",
                     count, filesPerJob, chunksPerFile, listed, (ContinuousClock.now - start).seconds))
    }
}
