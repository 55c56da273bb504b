import ArgumentParser
import FoundationEssentials
import Xfer
import XferS3

/// `xfer uploads list|abort`: the multipart uploads an S3 bucket holds
/// unfinished (billed until completed or aborted), each marked with the
/// local job that will continue it, if any. See Docs/cli.md.
struct UploadsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "uploads",
        abstract: "List or abort the multipart uploads an S3 bucket holds unfinished, marking those of local jobs.",
        subcommands: [UploadsListCommand.self, UploadsAbortCommand.self])
}

struct UploadsListCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list",
        abstract: "List the multipart uploads in progress under s3://BUCKET[/PREFIX], a page of S3's at a time.",
        discussion: """
            Each upload is marked with the local job that opened it and what that job will do with it \
            (resumable, running, finished, not resumable), or 'not a local job'.
            """)

    @OptionGroup var uploads: UploadsArguments

    @Flag(help: "Print one JSON object per upload instead of a table.")
    var json = false

    mutating func run() async throws {
        let uploads = self.uploads
        let json = self.json
        try await uploads.reportingFailures { () async throws(XferError) in
            let session = try uploads.session()
            let filter = AgeFilter(minimumAge: uploads.minimumAge, now: Date())
            var table = PagedTable(header: ["INITIATED", "AGE", "KEY", "UPLOAD ID", "LOCAL"], rightAligned: [1])
            try await session.forEachPage { page throws(XferError) in
                let shown = page.filter(filter.admits)
                if json {
                    for upload in shown {
                        Terminal.out(JSONValue.object(UploadText.members(upload, owner: session.owner(of: upload), now: filter.now)).text())
                    }
                } else {
                    table.print(shown.map { UploadText.row($0, owner: session.owner(of: $0), now: filter.now) })
                }
                return true
            }
        }
    }
}

struct UploadsAbortCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "abort",
        abstract: "Abort multipart uploads under s3://BUCKET[/PREFIX]: by id, by age, or all of them.",
        discussion: """
            Give one of --upload-id, --older-than or --all. Uploads a local job can still resume (or is sending \
            into now) are skipped unless --include-local; 'xfer cancel JOB' drops such a job and its uploads together.
            """)

    @Option(name: .customLong("upload-id"), help: ArgumentHelp("Abort this upload (repeatable).", valueName: "ID"))
    var uploadIDs: [String] = []

    @Option(help: "The key the --upload-id uploads are of (default: found by listing the target).")
    var key: String?

    @Flag(help: "Abort every upload under the target.")
    var all = false

    @Flag(help: "Print what would be aborted; abort nothing.")
    var dryRun = false

    @Flag(help: "Also abort uploads that local jobs can resume or are sending into.")
    var includeLocal = false

    @Flag(help: "Print one JSON object per upload instead of text.")
    var json = false

    @OptionGroup var uploads: UploadsArguments

    func validate() throws {
        let selectors = [!uploadIDs.isEmpty, uploads.olderThan != nil, all].filter { $0 }.count
        guard selectors == 1 else {
            throw ValidationError(
                selectors == 0
                    ? "say which uploads to abort: --upload-id ID, --older-than DURATION or --all"
                    : "give one of --upload-id, --older-than and --all")
        }
        if key != nil, uploadIDs.isEmpty { throw ValidationError("--key goes with --upload-id") }
        if let key, key.isEmpty { throw ValidationError("--key must not be empty") }
        if uploadIDs.contains(where: \.isEmpty) { throw ValidationError("--upload-id must not be empty") }
    }

    mutating func run() async throws {
        let command = self
        var failures = 0
        try await uploads.reportingFailures { () async throws(XferError) in
            let session = try command.uploads.session()
            let abort = UploadAbort(command: command, session: session)
            if let key = command.key {
                for id in command.uploadIDs {
                    let done = try await abort.handle(S3MultipartUpload(key: key, uploadID: id, initiated: nil))
                    if !done { failures += 1 }
                }
                return
            }
            var wanted = Set(command.uploadIDs)
            let filter = AgeFilter(minimumAge: command.uploads.minimumAge, now: Date())
            try await session.forEachPage { page throws(XferError) in
                for upload in page {
                    let selected = command.uploadIDs.isEmpty ? filter.admits(upload) : wanted.remove(upload.uploadID) != nil
                    guard selected else { continue }
                    let done = try await abort.handle(upload)
                    if !done { failures += 1 }
                }
                // By id: the listing ends once every id is found.
                return command.uploadIDs.isEmpty || !wanted.isEmpty
            }
            for id in command.uploadIDs where wanted.remove(id) != nil { abort.reportNotFound(id) }
        }
        if failures > 0 { throw ExitCode(ExitStatus.transferFailed) }
    }
}

// MARK: Shared pieces

/// What both subcommands take: where the uploads are, how to reach the
/// server, where the local jobs are, and how old an upload must be.
struct UploadsArguments: ParsableArguments {
    @Argument(help: ArgumentHelp(
        "The bucket, and the key prefix as S3 matches it ('s3://b/in' also covers 'inbox/…'; 's3://b/in/' does not).",
        valueName: "s3://BUCKET[/PREFIX]"))
    var target: String

    @Option(help: ArgumentHelp("Only uploads started at least this long ago: 90m, 36h, 7d (0: all).", valueName: "DURATION"))
    var olderThan: String?

    @Option(help: "Attempts per request before the command fails (the first included).")
    var maxAttempts: Int = RetryPolicy().maximumAttempts

    @OptionGroup var server: S3ServerArguments

    @OptionGroup var aws: AWSProfileArgument

    @OptionGroup var state: StateLocation

    @OptionGroup var network: NetworkArguments

    func validate() throws {
        do {
            _ = try S3Location(parsing: target)
        } catch {
            throw ValidationError(error.description)
        }
        if let olderThan, DurationArgument(argument: olderThan) == nil {
            throw ValidationError("--older-than must look like 90s, 30m, 36h or 7d, not '\(olderThan.prefix(20))'")
        }
        try TransferOptions(retry: RetryPolicy(maximumAttempts: maxAttempts)).validate()
    }

    /// `--older-than`, checked in `validate()`.
    var minimumAge: Duration? { olderThan.flatMap(DurationArgument.init(argument:))?.duration }

    /// The listing, and the local jobs' uploads into its bucket (read once).
    func session() throws(XferError) -> UploadsSession {
        let transport = try network.transportOptions()
        let backend = try server.backend(profile: aws, transport: transport)
        let listing: S3UploadListing
        do { listing = try backend.uploads(under: target) } catch { throw .invalidInput(error.description) }
        let engine = try TransferEngine(stateDirectory: state.directory, transport: transport)
        let local = try engine.localUploads(of: backend.name, identifiedBy: S3Backend.uploadID) { target, handles in
            listing.sharesBucket(withJobTarget: target, handles: handles)
        }
        return UploadsSession(engine: engine, listing: listing, local: local, retry: RetryPolicy(maximumAttempts: maxAttempts))
    }

    /// Runs `body`; an error it throws becomes one line on stderr and its
    /// exit code.
    func reportingFailures(_ body: () async throws(XferError) -> Void) async throws {
        do {
            try await body()
        } catch {
            Terminal.error(UploadText.message(error))
            throw ExitCode(error.exitCode)
        }
    }
}

/// One command's view of a bucket's uploads: the listing, the local jobs'
/// uploads, and the engine that sends.
struct UploadsSession {
    let engine: TransferEngine
    let listing: S3UploadListing
    /// Local files' uploads into the bucket, by upload id.
    let local: [String: LocalUpload]
    let retry: RetryPolicy

    /// The local file that opened `upload`, if any.
    func owner(of upload: S3MultipartUpload) -> LocalUpload? {
        guard let file = local[upload.uploadID], upload.isOpened(byFileWith: file.handles) else { return nil }
        return file
    }

    /// Sends what `make` builds, with the retries of a push; each retry is
    /// a note on stderr.
    func send<Outcome: Sendable>(_ operation: String, _ make: () -> Exchange<Outcome>) async throws(XferError) -> Outcome {
        try await engine.send(operation, retry: retry) { attempt, delay, reason in
            let seconds = Double(delay.components.seconds) + Double(delay.components.attoseconds) / 1e18
            Terminal.error("retrying in \(ProgressText.duration(seconds)) (attempt \(attempt) failed: \(reason))")
        } _: { () throws(BackendError) in
            make()
        }
    }

    /// Hands `body` the listing a page at a time, as S3 sends them, until
    /// `body` answers false: only one page is ever held.
    func forEachPage(_ body: ([S3MultipartUpload]) async throws(XferError) -> Bool) async throws(XferError) {
        var marker: S3UploadPage.Marker?
        repeat {
            let after = marker
            let page = try await send("list the multipart uploads in \(listing.target)") { listing.listPage(after: after) }
            guard try await body(page.uploads) else { return }
            marker = page.next
        } while marker != nil
    }
}

/// Which uploads `--older-than` takes: those started at least `minimumAge`
/// before `now` (all without the option). An upload whose start S3 did not
/// say is never old enough: an abort must not guess.
struct AgeFilter {
    let minimumAge: Duration?
    let now: Date

    func admits(_ upload: S3MultipartUpload) -> Bool {
        guard let minimumAge, minimumAge > .zero else { return true }
        guard let initiated = upload.initiated else { return false }
        return now.timeIntervalSince(initiated) >= Double(minimumAge.components.seconds)
    }
}

/// `abort`'s handling of one upload: skip a local job's, or say what would
/// be done, or abort it; and report each as a line.
struct UploadAbort {
    let command: UploadsAbortCommand
    let session: UploadsSession

    /// Whether it went as it should (false: the abort failed).
    func handle(_ upload: S3MultipartUpload) async throws(XferError) -> Bool {
        let owner = session.owner(of: upload)
        if let owner, owner.state.keepsUpload, !command.includeLocal {
            let job = owner.job.rawValue
            report(
                upload, owner: owner, result: "skipped",
                text: "skipped \(describe(upload)): belongs to job \(job) (\(UploadText.state(owner.state)), \(owner.path)); "
                    + "cancel the job with 'xfer cancel \(job)', or pass --include-local to abort it anyway")
            return true
        }
        if command.dryRun {
            report(upload, owner: owner, result: "wouldAbort", text: "would abort \(describe(upload))\(UploadText.ownerSuffix(owner))")
            return true
        }
        let listing = session.listing
        do {
            let outcome = try await session.send("abort upload \(upload.uploadID) of \(listing.url(ofKey: upload.key))") {
                listing.abort(key: upload.key, uploadID: upload.uploadID)
            }
            switch outcome {
            case .aborted:
                report(upload, owner: owner, result: "aborted", text: "aborted \(describe(upload))\(UploadText.ownerSuffix(owner))")
            case .alreadyGone:
                report(upload, owner: owner, result: "alreadyGone", text: "already gone \(describe(upload))")
            }
            return true
        } catch {
            if error.kind == .interrupted { throw error }
            let message = UploadText.message(error)
            Terminal.error(message)
            if command.json { report(upload, owner: owner, result: "failed", text: "", message: message) }
            return false
        }
    }

    /// An `--upload-id` the listing did not hold.
    func reportNotFound(_ id: String) {
        let message = "upload \(id) is not in progress under \(session.listing.target) (aborted or completed already, or under another prefix)"
        if command.json {
            var members = UploadText.ownerMembers(nil)
            members["key"] = .null
            members["uploadId"] = .string(id)
            members["result"] = .string("notFound")
            members["message"] = .string(message)
            Terminal.out(JSONValue.object(members).text())
        } else {
            Terminal.error("warning: \(message)")
        }
    }

    private func describe(_ upload: S3MultipartUpload) -> String {
        "\(session.listing.url(ofKey: upload.key)) \(upload.uploadID)"
    }

    private func report(_ upload: S3MultipartUpload, owner: LocalUpload?, result: String, text: String, message: String? = nil) {
        guard command.json else { return Terminal.out(text) }
        var members = UploadText.ownerMembers(owner)
        members["key"] = .string(upload.key)
        members["uploadId"] = .string(upload.uploadID)
        members["result"] = .string(result)
        members["message"] = message.map(JSONValue.string) ?? .null
        Terminal.out(JSONValue.object(members).text())
    }
}

extension LocalUpload.State {
    /// Whether the local job still needs the upload (resuming continues it,
    /// or a process is sending into it now).
    var keepsUpload: Bool {
        switch self {
        case .resumable, .running: return true
        case .finished, .notResumable: return false
        }
    }
}

/// How an upload is shown: a table row, or the members of its JSON object.
enum UploadText {
    /// An error's message alone: no job's state is kept or resumed here, so
    /// neither a remedy nor "transfer failed" (the request says what failed).
    static func message(_ error: XferError) -> String {
        if error.kind == .transferFailed, let message = error.reason { return message }
        return error.message
    }

    static func row(_ upload: S3MultipartUpload, owner: LocalUpload?, now: Date) -> [String] {
        [
            upload.initiated.map(JobJSON.timestamp) ?? "?", upload.initiated.map { JobText.age(of: $0, now: now) } ?? "?", upload.key,
            upload.uploadID, owner.map { "job \($0.job) (\(state($0.state)))" } ?? "not a local job",
        ]
    }

    static func members(_ upload: S3MultipartUpload, owner: LocalUpload?, now: Date) -> [String: JSONValue] {
        var members = ownerMembers(owner)
        members["key"] = .string(upload.key)
        members["uploadId"] = .string(upload.uploadID)
        members["initiated"] = upload.initiated.map { .string(JobJSON.timestamp($0)) } ?? .null
        members["ageSeconds"] = upload.initiated.map { .int(max(0, Int(now.timeIntervalSince($0)))) } ?? .null
        members["storageClass"] = upload.storageClass.map(JSONValue.string) ?? .null
        return members
    }

    /// `job`, `jobState`, `pid` and `path`: null for an upload no local job opened.
    static func ownerMembers(_ owner: LocalUpload?) -> [String: JSONValue] {
        var members: [String: JSONValue] = ["job": .null, "jobState": .null, "pid": .null, "path": .null]
        guard let owner else { return members }
        members["job"] = .string(owner.job.rawValue)
        members["path"] = .string(owner.path)
        switch owner.state {
        case .resumable: members["jobState"] = .string("resumable")
        case .running(let pid):
            members["jobState"] = .string("running")
            members["pid"] = .int(pid)
        case .finished: members["jobState"] = .string("finished")
        case .notResumable: members["jobState"] = .string("notResumable")
        }
        return members
    }

    static func state(_ state: LocalUpload.State) -> String {
        switch state {
        case .resumable: return "resumable"
        case .running(let pid): return "running, pid \(pid)"
        case .finished: return "finished"
        case .notResumable: return "not resumable"
        }
    }

    /// ` (job JOB, STATE)`, or nothing for an upload no local job opened.
    static func ownerSuffix(_ owner: LocalUpload?) -> String {
        owner.map { " (job \($0.job), \(state($0.state)))" } ?? ""
    }
}

/// A table printed as its rows arrive, a page at a time: each column is as
/// wide as its widest cell so far, so a listing never has to be held whole
/// to be aligned (a later, wider page shifts only its own rows).
struct PagedTable {
    let header: [String]
    let rightAligned: Set<Int>
    private var widths: [Int] = []

    init(header: [String], rightAligned: Set<Int>) {
        self.header = header
        self.rightAligned = rightAligned
    }

    mutating func print(_ rows: [[String]]) {
        guard !rows.isEmpty else { return }
        let first = widths.isEmpty
        widths = JobText.columnWidths(first ? [header] + rows : rows, atLeast: widths)
        var output = Terminal.OutputLines()
        if first { output.append(JobText.line(header, widths: widths, rightAligned: rightAligned)) }
        for row in rows { output.append(JobText.line(row, widths: widths, rightAligned: rightAligned)) }
        output.flush()
    }
}
