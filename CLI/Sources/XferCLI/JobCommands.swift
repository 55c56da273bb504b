import ArgumentParser
import XferPrimitives
import FoundationEssentials
import Xfer

// `xfer resume`, `xfer list`, `xfer status`, `xfer cancel`: job management
// over the state store. See Docs/cli.md.

struct ResumeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "resume",
        abstract: "Resume unfinished jobs (all of them when none is named).",
        discussion: """
            Tokens and headers are never stored: pass --token/--header again. With several jobs, they run one \
            after another; the exit code is the largest of theirs (130 stops at once).
            """)

    @Argument(help: "Job ids, or unique prefixes of them (default: every unfinished or failed job).")
    var jobs: [String] = []

    @OptionGroup var state: StateLocation

    @Flag(help: "Print NDJSON events on stdout (each with a \"job\" member) instead of URLs.")
    var json = false

    @Option(help: "Requests in flight at once (default: what the job last used).")
    var concurrency: Int?

    @Option(help: "Attempts per request before a job fails (the first included).")
    var maxAttempts: Int = RetryPolicy().maximumAttempts

    @OptionGroup var credentials: CredentialArguments

    @OptionGroup var network: NetworkArguments

    @OptionGroup var rateLimit: RateLimitArguments

    @OptionGroup var output: OutputArguments

    @OptionGroup var aws: AWSProfileArgument

    @Option(help: "How long completed jobs stay listed, e.g. 0, 30m, 24h, 7d (default: $XFER_KEEP_FINISHED or 24h).")
    var keepFinished: DurationArgument?

    /// Before any job is looked up: one error, even with no job to resume.
    mutating func validate() throws {
        try TransferOptions(concurrency: concurrency, retry: RetryPolicy(maximumAttempts: maxAttempts)).validate()
    }

    mutating func run() async throws {
        var options = try credentials.transferOptions()
        options.concurrency = concurrency
        options.retry = RetryPolicy(maximumAttempts: maxAttempts)
        output.apply(to: &options)
        var transport = try network.transportOptions()
        rateLimit.apply(to: &transport)
        let engine = try TransferEngine(
            stateDirectory: state.directory, transport: transport,
            finishedJobRetention: try DurationArgument.retention(keepFinished))

        // Name every job up front, so a typo fails before anything is sent.
        var ids: [JobID] = []
        if jobs.isEmpty {
            for job in try engine.jobs() {
                switch job.state {
                case .unfinished, .failed:
                    ids.append(job.id)
                case .running:
                    // Not an error: that process is already finishing it.
                    if !json && !output.quiet { Terminal.error("skipping job \(job.id): running in pid \(job.runningProcess ?? 0)") }
                case .completed:
                    break
                }
            }
        } else {
            for name in jobs {
                let id = try engine.jobID(matching: name)
                if !ids.contains(id) { ids.append(id) }
            }
        }

        var worst: Int32 = 0
        for id in ids {
            let code = await resume(id, engine: engine, options: options, transport: transport)
            if code == XferError.interrupted.exitCode { throw ExitCode(code) }
            worst = max(worst, code)
        }
        if worst != 0 { throw ExitCode(worst) }
    }

    /// Runs one job to its end and returns its exit code; reports its
    /// failure (one line on stderr, or a `failed` event with --json).
    private func resume(_ id: JobID, engine: TransferEngine, options: TransferOptions, transport: TransportOptions) async -> Int32 {
        let job: TransferJob
        do throws(XferError) {
            let summary = try engine.details(of: id, files: .first(0)).summary
            if summary.direction == .sync {
                return await resumeSync(id, backend: summary.backend, engine: engine, options: options, transport: transport)
            }
            if summary.direction == .pull {
                let sources = try BuiltInSource.sources(forJobUsing: summary.backend, profile: aws, transport: transport)
                job = try await engine.resumePull(id, from: sources, options: options)
            } else {
                let backends = try BuiltInBackend.backends(forJobUsing: summary.backend, profile: aws, transport: transport)
                job = try await engine.resume(id, using: backends, options: options)
            }
        } catch {
            var error = error
            if error.kind == .invalidInput, let summary = try? engine.details(of: id).summary,
                !BuiltInBackend.isBuiltIn(summary.backend)
            {
                error = .invalidInput(
                    "job \(id) uses the '\(summary.backend)' backend, which xfer does not have built in; resume it from the program that pushed it")
            }
            report(error, job: id)
            return error.exitCode
        }
        let result = await JobWatcher.follow(job, json: json, output: output, tag: id)
        switch result {
        case .success:
            return 0
        case .failure(let error):
            // With --json the engine's own `failed` event already said it.
            if !json { Terminal.error(Self.message(error, job: id)) }
            return error.exitCode
        }
    }

    /// A sync goes on from its stage (listing, copying or deleting), as the same `xfer sync` would.
    private func resumeSync(_ id: JobID, backend name: String, engine: TransferEngine, options: TransferOptions, transport: TransportOptions) async
        -> Int32
    {
        let job: SyncJob
        do throws(XferError) {
            let backends = try BuiltInBackend.backends(forJobUsing: name, profile: aws, transport: transport).compactMap { $0 as? any ObjectSyncing }
            let sources = try BuiltInSource.sources(forJobUsing: name, profile: aws, transport: transport).compactMap { $0 as? any ObjectListing }
            job = try await engine.resumeSync(id, backends: backends, sources: sources, options: options)
        } catch {
            report(error, job: id)
            return error.exitCode
        }
        let printer = SyncPrinter(json: json, dryRun: false, verbose: output.verbose)
        switch await SyncWatcher.follow(job, printer: printer, output: output) {
        case .success(let report):
            printer.summary(report, quiet: output.quiet)
            return 0
        case .failure(let error):
            if !json { Terminal.error(Self.message(error, job: id)) } else { Terminal.out(EventJSON.failure(error, job: id)) }
            return error.exitCode
        }
    }

    private func report(_ error: XferError, job: JobID) {
        if json {
            Terminal.out(EventJSON.failure(error, job: job))
        } else {
            Terminal.error(Self.message(error, job: job))
        }
    }

    /// The error, prefixed with the job it concerns unless it names it already.
    static func message(_ error: XferError, job: JobID) -> String {
        let text = error.line
        return text.contains(job.rawValue) ? text : "job \(job): \(text)"
    }
}

struct ListCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list",
        abstract: "List jobs: one line each with id, state, backend, files, progress, age and target.")

    @Flag(help: "Include completed jobs still kept (see --keep-finished on push and resume).")
    var all = false

    @OptionGroup var state: StateLocation

    @Flag(help: "Print a JSON array of jobs instead of a table.")
    var json = false

    mutating func run() async throws {
        let engine = try TransferEngine(stateDirectory: state.directory)
        let jobs = try engine.jobs(includingCompleted: all)
        let now = Date()
        if json {
            Terminal.out(JSONValue.array(jobs.map { .object(JobJSON.summary($0, now: now)) }).text())
            return
        }
        guard !jobs.isEmpty else { return }
        var rows = [["JOB", "STATE", "BACKEND", "FILES", "DONE", "AGE", "TARGET"]]
        for job in jobs {
            rows.append([
                job.id.rawValue, job.state.rawValue, job.direction == .sync ? "\(job.backend) sync" : job.backend, String(job.fileCount),
                JobText.progress(done: job.doneBytes, total: job.totalBytes), JobText.age(of: job.createdAt, now: now),
                job.target,
            ])
        }
        Terminal.out(lines: JobText.table(rows, rightAligned: [3, 5]))
    }
}

struct StatusCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show one job in detail: per file chunks done, server handles (secrets redacted), URLs, last error.")

    @Argument(help: "The job id, or a unique prefix of it.")
    var job: String

    @OptionGroup var state: StateLocation

    @Flag(help: "Print one JSON object instead of text.")
    var json = false

    @Flag(help: "Describe every file (by default the first \(StatusCommand.shownFiles) and every failed one).")
    var files = false

    /// A job may hold 100,000 files: status stays a screenful unless asked.
    static let shownFiles = 20

    mutating func run() async throws {
        let engine = try TransferEngine(stateDirectory: state.directory)
        let details = try engine.details(
            of: try engine.jobID(matching: job), files: files ? .all : .first(Self.shownFiles), using: BuiltInBackend.describingJobs)
        let now = Date()
        if json {
            var object = JobJSON.summary(details.summary, now: now)
            object["concurrency"] = .int(details.concurrency)
            object["handles"] = JobJSON.handles(details.handles)
            func describe(_ file: JobDetails.File) -> JSONValue {
                var members: [String: JSONValue] = [
                    "index": .int(file.index), "path": .string(file.path), "relativePath": .string(file.relativePath),
                    "size": .int(file.size), "chunkSize": .int(file.chunkSize), "chunkCount": .int(file.chunkCount),
                    "chunksDone": .int(file.chunksDone), "doneBytes": .int(file.doneBytes), "open": .bool(file.isOpen),
                    "handles": JobJSON.handles(file.handles),
                ]
                members["url"] = file.url.map(JSONValue.string) ?? .null
                members["failure"] = file.failure.map(JSONValue.string) ?? .null
                return .object(members)
            }
            object["files"] = .array(details.files.map(describe))
            object["failed"] = .array(details.failedFiles.map(describe))
            Terminal.out(JSONValue.object(object).text())
            return
        }
        let summary = details.summary
        var rows: [[String]] = [
            ["job", summary.id.rawValue],
            ["state", summary.state.rawValue + (summary.runningProcess.map { " (pid \($0))" } ?? "")],
            summary.direction == .pull ? ["source", summary.backend] : ["backend", summary.backend],
            [summary.direction == .pull ? "destination" : "target", summary.target],
            ["created", "\(JobText.timestamp(summary.createdAt)) (\(JobText.age(of: summary.createdAt, now: now)) ago)"],
            ["updated", "\(JobText.timestamp(summary.updatedAt)) (\(JobText.age(of: summary.updatedAt, now: now)) ago)"],
            ["progress", JobText.progress(done: summary.doneBytes, total: summary.totalBytes)],
            ["files", "\(summary.completedFiles)/\(summary.fileCount) \(summary.direction == .pull ? "pulled" : "sent")" + (summary.failedFiles > 0 ? ", \(summary.failedFiles) failed" : "")],
        ]
        if let error = summary.lastError { rows.append(["last error", error]) }
        if !details.handles.isEmpty { rows.append(["handles", JobText.handles(details.handles)]) }
        var output = Terminal.OutputLines()
        defer { output.flush() }
        for line in JobText.table(rows, rightAligned: []) { output.append(line) }
        for file in details.files {
            output.append("file \(file.index + 1): \(file.path)")
            var fileRows: [[String]] = [
                ["  size", "\(JobText.bytes(file.size)) in \(file.chunkCount) chunk\(file.chunkCount == 1 ? "" : "s") of \(JobText.bytes(Int64(file.chunkSize)))"],
                ["  done", "\(file.chunksDone)/\(file.chunkCount) chunks, \(JobText.bytes(file.doneBytes))"],
            ]
            if let url = file.url { fileRows.append(["  url", url]) }
            if !file.handles.isEmpty { fileRows.append(["  handles", JobText.handles(file.handles)]) }
            if let failure = file.failure { fileRows.append(["  failed", failure]) }
            for line in JobText.table(fileRows, rightAligned: []) { output.append(line) }
        }
        if details.files.count < summary.fileCount {
            output.append("… \(summary.fileCount - details.files.count) more files (--files lists them all)")
        }
        let shown = Set(details.files.map(\.index))
        for file in details.failedFiles where !shown.contains(file.index) {
            output.append("failed file \(file.index + 1): \(file.path): \(file.failure ?? "")")
        }
    }
}

struct CancelCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cancel",
        abstract: "Ask the server to drop a job's upload, then delete the job's local state.",
        discussion: """
            The server is asked best-effort (patch: DELETE /uploads/{id}; multipart: delete.do; s3: AbortMultipartUpload; tus: DELETE when offered; sequence has no \
            such call); the local state goes either way. A job another process runs is refused with exit 3.
            """)

    @Argument(help: "The job id, or a unique prefix of it.")
    var job: String

    @OptionGroup var state: StateLocation

    @Flag(help: "Print one JSON object instead of text.")
    var json = false

    @OptionGroup var credentials: CredentialArguments

    @OptionGroup var network: NetworkArguments

    @OptionGroup var aws: AWSProfileArgument

    mutating func run() async throws {
        let options = try credentials.transferOptions()
        let transport = try network.transportOptions()
        let engine = try TransferEngine(stateDirectory: state.directory, transport: transport)
        let id = try engine.jobID(matching: job)
        let backends = try BuiltInBackend.backends(
            forJobUsing: try engine.details(of: id).summary.backend, profile: aws, transport: transport)
        let report = try await engine.cancelJob(id, using: backends, options: options)
        if json {
            var object: [String: JSONValue] = [
                "job": .string(report.job.rawValue), "cancelled": .bool(true),
                "requests": .array(
                    report.requests.map { request in
                        .object([
                            "method": .string(request.method), "url": .string(request.url),
                            "status": request.status.map { .int($0) } ?? .null,
                            "error": request.error.map(JSONValue.string) ?? .null,
                            "succeeded": .bool(request.succeeded),
                        ])
                    }),
            ]
            object["serverNotAsked"] = report.serverNotAsked.map(JSONValue.string) ?? .null
            Terminal.out(JSONValue.object(object).text())
            return
        }
        Terminal.out("cancelled \(report.job)")
        for request in report.requests {
            let outcome = request.status.map { "HTTP \($0)" } ?? request.error ?? "no answer"
            Terminal.out("  \(request.method) \(request.url): \(outcome)")
            if !request.succeeded {
                Terminal.error("warning: the server did not confirm \(request.method) \(request.url) (\(outcome)); it may still hold the upload")
            }
        }
        if let reason = report.serverNotAsked { Terminal.out("  \(reason)") }
    }
}

// MARK: Shared pieces

/// A duration as options take it: `0`, `90s`, `30m`, `24h`, `7d` (how long
/// completed jobs are kept; how old an upload is).
struct DurationArgument: ExpressibleByArgument, Hashable {
    let duration: Duration

    init?(argument: String) {
        let text = argument.trimmingSpacesAndTabs().lowercased()
        let digits = text.prefix { $0.isNumber }
        guard !digits.isEmpty, let value = Int(digits), value <= 100 * 365 * 86_400 else { return nil }
        let unit: Int
        switch text.dropFirst(digits.count) {
        case "", "s": unit = 1
        case "m": unit = 60
        case "h": unit = 3600
        case "d": unit = 86_400
        default: return nil
        }
        let (seconds, overflow) = value.multipliedReportingOverflow(by: unit)
        guard !overflow else { return nil }
        duration = .seconds(seconds)
    }

    /// How long completed jobs are kept: the option, else
    /// `$XFER_KEEP_FINISHED`, else the engine's default.
    static func retention(_ option: DurationArgument?) throws(XferError) -> Duration {
        if let option { return option.duration }
        guard let value = ProcessInfo.processInfo.environment["XFER_KEEP_FINISHED"], !value.isEmpty else {
            return TransferEngine.defaultFinishedJobRetention
        }
        guard let parsed = DurationArgument(argument: value) else {
            throw .invalidInput("XFER_KEEP_FINISHED must look like 0, 90s, 30m, 24h or 7d, not '\(value.prefix(20))'")
        }
        return parsed.duration
    }
}

/// Text renderings shared by `list` and `status`.
enum JobText {
    static func progress(done: Int64, total: Int64) -> String {
        let percent = total > 0 ? Int((Double(done) / Double(total) * 100).rounded(.down)) : 100
        return "\(bytes(done)) / \(bytes(total)) \(percent)%"
    }

    /// `512 B`, `64.0 KiB`, `2.5 MiB`.
    static func bytes(_ count: Int64) -> String { ByteSize.format(count) }

    /// `42s`, `17m`, `5h`, `3d`.
    static func age(of date: Date, now: Date) -> String {
        let seconds = max(0, Int(now.timeIntervalSince(date)))
        if seconds < 60 { return "\(seconds)s" }
        if seconds < 3600 { return "\(seconds / 60)m" }
        if seconds < 86_400 { return "\(seconds / 3600)h" }
        return "\(seconds / 86_400)d"
    }

    static func timestamp(_ date: Date) -> String {
        JobJSON.timestamp(date)
    }

    /// `key=value` pairs sorted by key; secret values arrive already redacted.
    static func handles(_ handles: [String: String]) -> String {
        handles.keys.sorted().map { "\($0)=\(handles[$0] ?? "")" }.joined(separator: " ")
    }

    /// Columns padded to their widest cell, separated by two spaces.
    static func table(_ rows: [[String]], rightAligned: Set<Int>) -> [String] {
        let widths = columnWidths(rows)
        return rows.map { line($0, widths: widths, rightAligned: rightAligned) }
    }

    /// The widest cell of each column (`at least`: widths already given).
    static func columnWidths(_ rows: [[String]], atLeast given: [Int] = []) -> [Int] {
        let columns = max(rows.map(\.count).max() ?? 0, given.count)
        return (0..<columns).map { column in
            max(column < given.count ? given[column] : 0, rows.map { column < $0.count ? $0[column].count : 0 }.max() ?? 0)
        }
    }

    /// `row` padded to `widths` (the last column, when left-aligned, not padded).
    static func line(_ row: [String], widths: [Int], rightAligned: Set<Int>) -> String {
        row.enumerated().map { column, cell -> String in
            let padding = String(repeating: " ", count: max(0, widths[column] - cell.count))
            if column == row.count - 1, !rightAligned.contains(column) { return cell }
            return rightAligned.contains(column) ? padding + cell : cell + padding
        }.joined(separator: "  ")
    }
}

/// JSON renderings shared by `list`, `status` and `cancel`. Only fields that
/// cannot hold a secret: handles arrive redacted, the target without
/// password or query, and tokens and headers are never stored.
enum JobJSON {
    static func summary(_ job: JobSummary, now: Date) -> [String: JSONValue] {
        [
            "id": .string(job.id.rawValue), "backend": .string(job.backend), "target": .string(job.target),
            "files": .array(job.paths.map(JSONValue.string)), "fileCount": .int(job.fileCount),
            "completedFiles": .int(job.completedFiles), "failedFiles": .int(job.failedFiles),
            "totalBytes": .int(job.totalBytes), "doneBytes": .int(job.doneBytes), "state": .string(job.state.rawValue),
            "pid": job.runningProcess.map { .int($0) } ?? .null,
            "createdAt": .string(timestamp(job.createdAt)), "updatedAt": .string(timestamp(job.updatedAt)),
            "ageSeconds": .int(max(0, Int(now.timeIntervalSince(job.createdAt)))),
            "lastError": job.lastError.map(JSONValue.string) ?? .null, "direction": .string(job.direction.rawValue),
        ]
    }

    static func handles(_ handles: [String: String]) -> JSONValue {
        .object(handles.mapValues(JSONValue.string))
    }

    /// RFC 3339 in UTC, e.g. `2025-01-31T12:00:00Z`.
    static func timestamp(_ date: Date) -> String {
        date.ISO8601Format()
    }
}
