import AsyncHTTPClient
import FoundationEssentials
import Hummingbird
import Logging
import NIOCore
import NIOHTTP1
import Synchronization
import XferWire
import XferPrimitives

/// Where the receiver tells the application about uploads, as tusd's hooks do: a `POST` of a
/// JSON event to one URL (`xfer serve --hook-url URL`), or the event's JSON on the standard input
/// of an executable named after it (`xfer serve --hooks-dir DIR`).
public struct HookSettings: Sendable, Hashable {
    public enum Destination: Sendable, Hashable {
        /// Every event is POSTed here; the answer's status and JSON body decide.
        case url(String)
        /// The executable `DIRECTORY/<event>` (`pre-create`, `pre-finish`, `post-receive`,
        /// `post-finish`, `post-terminate`) runs with the event on its standard input (in the
        /// receiver's working directory, with an environment of its own: `PATH`, `HOME`, the
        /// locale, `TZ` and `XFER_HOOK_*`, never the receiver's credentials); exit status 0 is
        /// a yes and its standard output the answer's body; another status refuses, with its
        /// answer's `status` (a 4xx; else 403) and `message`. An event with no executable
        /// there is not hooked.
        case executables(directory: String)
    }

    public var destination: Destination
    /// How long one call may take; a `pre-create` that takes longer refuses the upload. A
    /// `pre-*` event also waits at most this long for a free slot (`concurrency`).
    public var timeout: Duration
    /// Calls of a `post-finish` or `post-terminate` event, the first included, before it is
    /// logged as lost (`post-receive` is called once).
    public var attempts: Int
    /// How many calls run at once (requests to the URL, processes of the directory). Past it,
    /// `pre-*` events wait (at most `timeout`, then the client gets 503 with `Retry-After`) and
    /// `post-*` events wait in a bounded line (`postBacklogLimit`), dropped and logged past it.
    public var concurrency: Int
    /// The shortest time between two `post-receive` events of one upload; nil: none are sent.
    public var progressInterval: Duration?

    /// 4 per core, at least 8: calls mostly wait (on the application, on a process's start).
    public static var defaultConcurrency: Int { max(8, 4 * System.coreCount) }
    public static let defaultProgressInterval: Duration = .seconds(2)
    /// `post-*` events accepted and not yet delivered (or lost) at most; `post-receive` events
    /// only while the line is less than half full, so that progress never crowds out a finish.
    public static let postBacklogLimit = 1024

    public init(_ destination: Destination, timeout: Duration = .seconds(5), attempts: Int = 3) {
        self.destination = destination
        self.timeout = timeout
        self.attempts = attempts
        concurrency = Self.defaultConcurrency
        progressInterval = Self.defaultProgressInterval
    }

    /// POSTs to `url`.
    public init(url: String, timeout: Duration = .seconds(5), attempts: Int = 3) {
        self.init(.url(url), timeout: timeout, attempts: attempts)
    }
}

/// What one receiver's hooks share across all its routes and requests: the cap on calls at
/// once, the line of `post-*` events, the pacing of progress, the files refused.
final class HookRuntime: Sendable {
    let slots: HookSlots
    let progress: ProgressPacing?
    let refusedFiles = RefusedFiles()
    /// `post-*` events accepted and not yet delivered or lost.
    private let backlog = Mutex(0)
    /// Events dropped since the last warning, and when that was: one line per 10 s at most,
    /// however hard the line is pushed.
    private let drops = Mutex<(count: Int, lastWarning: ContinuousClock.Instant?)>((0, nil))

    init(_ settings: HookSettings) {
        slots = HookSlots(limit: settings.concurrency)
        progress = settings.progressInterval.map { ProgressPacing(interval: $0) }
    }

    /// Takes a place in the post-* line if fewer than `limit` are taken.
    func admitPost(limit: Int) -> Bool {
        backlog.withLock { count in
            guard count < limit else { return false }
            count += 1
            return true
        }
    }

    func postDone() {
        backlog.withLock { $0 -= 1 }
    }

    /// Counts a dropped event; the number to warn about when a warning is due.
    func dropped(now: ContinuousClock.Instant = .now) -> Int? {
        drops.withLock { drops in
            drops.count += 1
            if let last = drops.lastWarning, now - last < .seconds(10) { return nil }
            defer { drops = (0, now) }
            return drops.count
        }
    }
}

/// The calls to the application's hook, and with them the upload metrics (`ReceiverMetrics`):
/// the one place a protocol's routes report what happened to an upload.
///
/// Events, each `{"type": …, "protocol": …, "upload": {…}}` (Docs/cli.md, "Hooks", has them
/// all, with what a refusal does in each protocol):
/// - `pre-create`, before anything is stored: `upload` has `path` and `size` when the protocol
///   says them — `sizeIsDeferred: true` and `maximumSize` instead when it does not (a raw PUT
///   without `Content-Length`) —, tus's `metadata` (decoded); a multipart `preLoad.do` gives
///   a `fileCount` for the source, then each of its files is asked about at its first
///   fragment with its `id`, `sourceId`, `path` and `size`. A 2xx answer lets the upload be
///   created, and a `metadata` object of strings in it replaces the upload's (tus and ietf
///   uploads keep it: tus's `HEAD` shows it, and `post-finish` carries it); any other refuses
///   it with the hook's status when it is a 4xx (else 503) and the `message` of its JSON
///   answer (else its first line), which the client sees in its protocol's form. A hook that
///   cannot be reached, times out, has no free slot within its timeout or answers metadata
///   that cannot be kept refuses too (503, `Retry-After`): an upload the application did not
///   authorise is never stored.
/// - `pre-finish`, once every byte is in and the file assembled, before anyone is told (the
///   client's answer, `post-finish`): `id`, `path`, `size` (and `metadata`). A 2xx lets the
///   upload complete; anything else — a refusal, or no answer — discards it for good (the
///   file, its bytes, its upload) and the client gets the refusal: the application never has
///   a file it did not accept published under its name.
/// - `post-receive`, while bytes arrive: `id`, `path`, `size`, `received` (bytes acknowledged
///   so far); at most one per upload per `progressInterval` (per receiver process), one call.
/// - `post-finish`, once an upload is complete: `id`, `path`, `size` (and `metadata`).
/// - `post-terminate`, once a client deleted an upload: `id`.
///   A `post-*` event is delivered in the background, retried (`attempts`) and logged when
///   lost; it never holds or fails the upload.
///
/// No event carries a request header: the client's `Authorization` never reaches a hook.
struct UploadHooks: Sendable {
    let settings: HookSettings?
    let logger: Logger
    private let runtime: HookRuntime?
    /// Where the storage keeps a completed upload's file on a filesystem of this machine
    /// (`PublishedFileLocating`), told to `pre-finish` and `post-finish` as `file`; nil for a
    /// storage that keeps none.
    private let locate: (@Sendable (_ id: String) async -> String?)?

    init(settings: HookSettings?, logger: Logger, locate: (@Sendable (_ id: String) async -> String?)? = nil) {
        self.settings = settings
        self.logger = logger
        self.locate = locate
        runtime = settings.map(HookRuntime.init)
    }

    private static let client: HTTPClient = {
        var configuration = HTTPClient.Configuration()
        configuration.timeout = .init(connect: .seconds(5), read: .seconds(30))
        // A hook that refuses connections (down, not started yet) fails the call at once, not
        // after the whole timeout of retried connection attempts: a pre-create is the client's
        // 503 without a 5 s wait in between, and post-* events have retries of their own.
        configuration.connectionPool.retryConnectionEstablishment = false
        // A redirect could carry an event (and the URL's own credentials) elsewhere.
        configuration.redirectConfiguration = .disallow
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }()

    /// How long a client refused for want of the hook is told to wait before trying again.
    static let retryAfterSeconds = 2

    /// What a blocking event's call came to.
    enum Verdict {
        /// A 2xx answer (an executable's exit status 0), with its body.
        case allowed(body: String)
        /// The application said no: its status (a 4xx, or 503 for another answer) and words.
        case refused(status: Int, message: String)
        /// No answer: unreachable, too slow, or no free slot within the timeout (for the log).
        case unanswered(reason: String)
    }

    /// Whether `event` is hooked at all: every event is POSTed to a URL; a directory hooks
    /// those it has an executable for (a stat each time, so a hook added later counts).
    private func hooks(_ event: String, _ settings: HookSettings) -> Bool {
        switch settings.destination {
        case .url: return true
        case .executables(let directory): return FileManager.default.fileExists(atPath: directory + "/" + event)
        }
    }

    /// Asks the hook about a blocking event, in its turn (`HookSlots`).
    private func ask(_ event: String, protocolName: String, upload: [String: JSONValue]) async -> Verdict {
        guard let settings, let runtime, hooks(event, settings) else { return .allowed(body: "") }
        guard await runtime.slots.acquire(urgent: true, patience: settings.timeout) else {
            return .unanswered(reason: "\(runtime.slots.limit) hook calls already running (--hook-concurrency) for longer than the hook timeout")
        }
        defer { runtime.slots.release() }
        let answer: (status: Int, body: String)
        do {
            answer = try await call(settings, event: event, protocolName: protocolName, upload: upload)
        } catch {
            return .unanswered(reason: "\(error)")
        }
        guard (200..<300).contains(answer.status) else {
            let status = (400..<500).contains(answer.status) ? answer.status : 503
            return .refused(status: status, message: Self.message(in: answer.body) ?? "refused by the upload hook (\(answer.status))")
        }
        return .allowed(body: answer.body)
    }

    /// The refusal a client of `form` gets for `verdict` (not `.allowed`); `unanswered` is
    /// what it is told when the hook gave no answer.
    private func refusal(for verdict: Verdict, event: String, form: Refusal.Form, unanswered: String) -> Refusal {
        switch verdict {
        case .allowed: preconditionFailure("an allowed event is not refused")
        case .refused(let status, let message):
            return Self.refusal(form, status: status, message: message, retryAfter: status == 503 ? Self.retryAfterSeconds : nil)
        case .unanswered(let reason):
            logger.warning("\(event) hook did not answer; refused", metadata: ["reason": "\(reason)"])
            return Self.refusal(form, status: 503, message: unanswered, retryAfter: Self.retryAfterSeconds)
        }
    }

    /// Asks the hook whether the upload may be created; throws the refusal, in `form`, when not.
    /// Returns the metadata the hook gave the upload, replacing `metadata`; nil when it gave none.
    /// `size` nil: the size is not known yet (a raw PUT without `Content-Length`); the hook
    /// hears `sizeIsDeferred` and the most it may be, `maximumSize`. `extra`: more of what the
    /// protocol knows (a multipart file's `id` and `sourceId`).
    @discardableResult
    func preCreate(
        _ protocolName: String, path: String?, size: Int?, maximumSize: Int? = nil, fileCount: Int? = nil,
        metadata: [String: String]? = nil, extra: [String: JSONValue] = [:], form: Refusal.Form
    ) async throws -> [String: String]? {
        guard settings != nil else { return nil }
        var upload = extra
        if let path {
            upload["path"] = .string(path)
            upload["sizeIsDeferred"] = .bool(size == nil)
        }
        if let size { upload["size"] = .int(size) } else if path != nil, let maximumSize { upload["maximumSize"] = .int(maximumSize) }
        if let fileCount { upload["fileCount"] = .int(fileCount) }
        if let metadata { upload["metadata"] = .object(metadata.mapValues { .string($0) }) }
        let verdict = await ask("pre-create", protocolName: protocolName, upload: upload)
        guard case .allowed(let body) = verdict else {
            throw refusal(for: verdict, event: "pre-create", form: form, unanswered: "the upload hook did not answer; try again later")
        }
        switch Self.metadata(in: body) {
        case .none: return nil
        case .some(let given?): return given
        case .some(nil):
            logger.warning("pre-create hook answered metadata that is not an object of strings; upload refused")
            throw Self.refusal(form, status: 503, message: "the upload hook's answer could not be used; try again later")
        }
    }

    /// `preCreate` for an offset upload (tus's, the IETF draft's): the hook hears the upload's
    /// metadata, and what it gives instead is kept in `info`, as tus's `Upload-Metadata`.
    func preCreate(_ protocolName: String, info: inout OffsetUploadInfo, path: String, size: Int, form: Refusal.Form) async throws {
        guard let replaced = try await preCreate(protocolName, path: path, size: size, metadata: info.metadataText, form: form) else { return }
        guard let header = TusMetadata.header(replaced) else {
            logger.warning("pre-create hook answered metadata keys an upload cannot hold; upload refused")
            throw Self.refusal(form, status: 503, message: "the upload hook's answer could not be used; try again later")
        }
        info.metadata = header.isEmpty ? nil : header
    }

    /// Whether `preCreateFile` would ask anything: without hooks a route need not look first
    /// whether a file exists.
    var asksBeforeCreating: Bool { settings != nil }

    /// `preCreate` for a file that its first fragment creates (multipart's): `id` is known, and
    /// a file the application refused stays refused — the rest of its fragments get the same
    /// answer without a call each (`RefusedFiles`).
    func preCreateFile(_ protocolName: String, id: String, sourceId: String, path: String, size: Int, form: Refusal.Form) async throws {
        guard let runtime else { return }
        let description = RefusedFiles.description(path: path, size: size)
        if let refused = runtime.refusedFiles.refusal(of: id, description: description) {
            throw Self.refusal(form, status: refused.status, message: refused.message)
        }
        do {
            try await preCreate(protocolName, path: path, size: size, extra: ["id": .string(id), "sourceId": .string(sourceId)], form: form)
        } catch let refused as Refusal where (400..<500).contains(refused.code) {
            // The application's no (not a hook that could not answer, which may answer next time).
            runtime.refusedFiles.remember(id, .init(description: description, status: refused.code, message: refused.message))
            throw refused
        }
    }

    /// The metadata of a hook's JSON answer: nil when there is none, `.some(nil)` when it is
    /// not an object whose values are all strings.
    static func metadata(in body: String) -> [String: String]?? {
        guard let given = (try? JSONValue.parse(body))?.objectValue?["metadata"], given != .null else { return .none }
        guard let members = given.objectValue else { return .some(nil) }
        var metadata: [String: String] = [:]
        for (key, value) in members {
            guard let text = value.strictString else { return .some(nil) }
            metadata[key] = text
        }
        return .some(metadata)
    }

    /// An upload was created: the metric (the hook heard of it in `pre-create`).
    func created(_ protocolName: String) {
        ReceiverMetrics.upload(protocolName, .created)
    }

    /// Every byte of an upload is in and its file assembled: asks `pre-finish`. On a yes the
    /// upload is complete (the metric, `post-finish` in the background); on anything else it is
    /// discarded (`discard`: deletes it with its file) and the refusal, in `form`, thrown.
    func finish(
        _ protocolName: String, id: String, path: String, size: Int, metadata: [String: String]? = nil, form: Refusal.Form,
        discard: () async throws -> Bool
    ) async throws {
        var upload: [String: JSONValue] = ["id": .string(id), "path": .string(path), "size": .int(size)]
        if let metadata { upload["metadata"] = .object(metadata.mapValues { .string($0) }) }
        // Asked only when someone will hear it: a lookup of the upload, where nobody listens, is waste.
        if settings != nil, let locate, let file = await locate(id) { upload["file"] = .string(file) }
        let verdict = await ask("pre-finish", protocolName: protocolName, upload: upload)
        guard case .allowed = verdict else {
            do {
                _ = try await discard()
            } catch {
                logger.error("an upload refused by pre-finish could not be discarded", metadata: ["id": "\(id)", "reason": "\(error)"])
            }
            ReceiverMetrics.upload(protocolName, .refused)
            throw refusal(for: verdict, event: "pre-finish", form: form, unanswered: "the upload hook did not answer; the upload was discarded: send it again")
        }
        ReceiverMetrics.upload(protocolName, .completed)
        let event = upload
        deliver("post-finish", protocolName: protocolName) { event }
    }

    /// A file that no `pre-finish` is asked about is complete (a raw PUT's, in place when its
    /// body ends): the metric and `post-finish`.
    func stored(_ protocolName: String, id: String, path: String, size: Int) {
        ReceiverMetrics.upload(protocolName, .completed)
        deliver("post-finish", protocolName: protocolName) { ["id": .string(id), "path": .string(path), "size": .int(size)] }
    }

    /// Bytes of an upload were acknowledged: `post-receive`, unless this upload had one less
    /// than `progressInterval` ago. `received` (the bytes acknowledged so far) is asked only
    /// when the event goes out, in the background.
    func received(_ protocolName: String, id: String, path: String, size: Int, received: @escaping @Sendable () async throws -> Int) {
        guard let settings, let runtime, let pacing = runtime.progress, pacing.admits(protocolName + "/" + id),
            hooks("post-receive", settings)
        else { return }
        deliver("post-receive", protocolName: protocolName, progress: true) {
            guard let bytes = try? await received() else { return nil }
            return ["id": .string(id), "path": .string(path), "size": .int(size), "received": .int(bytes)]
        }
    }

    /// `received` for an upload whose chunks arrive in any order: the bytes of those acknowledged.
    func received(_ protocolName: String, upload: any ChunkedUpload) {
        let meta = upload.meta
        received(protocolName, id: meta.uploadId, path: meta.fileName, size: meta.size) {
            let chunks = try await upload.receivedChunks()
            guard !chunks.isEmpty else { return 0 }
            // Every chunk is chunkSize bytes but the file's last one.
            let last = meta.chunkCount
            return chunks.count * meta.chunkSize - (chunks.contains(last) ? meta.chunkSize - meta.byteRange(ofChunk: last).count : 0)
        }
    }

    /// A client deleted an upload: the metric, and `post-terminate` in the background.
    func terminated(_ protocolName: String, id: String) {
        ReceiverMetrics.upload(protocolName, .terminated)
        deliver("post-terminate", protocolName: protocolName) { ["id": .string(id)] }
    }

    /// Sends a post-* event in the background, in its turn, with retries (one call for
    /// progress); dropped, and logged, when the line of waiting events is full. `upload` makes
    /// the event's `upload` when its turn comes (nil: nothing to send after all).
    private func deliver(
        _ event: String, protocolName: String, progress: Bool = false, upload: @escaping @Sendable () async -> [String: JSONValue]?
    ) {
        guard let settings, let runtime, progress || hooks(event, settings) else { return }
        let limit = progress ? HookSettings.postBacklogLimit / 2 : HookSettings.postBacklogLimit
        guard runtime.admitPost(limit: limit) else {
            // Progress is skipped quietly: the next one will say more.
            if !progress, let count = runtime.dropped() {
                logger.warning(
                    "hook events dropped: \(HookSettings.postBacklogLimit) already wait for the hook",
                    metadata: ["event": "\(event)", "dropped": "\(count)"])
            }
            return
        }
        let logger = logger
        let attempts = progress ? 1 : max(1, settings.attempts)
        Task {
            defer { runtime.postDone() }
            guard let upload = await upload() else { return }
            for attempt in 1...attempts {
                _ = await runtime.slots.acquire(urgent: false, patience: Duration?.none)
                let answer = try? await call(settings, event: event, protocolName: protocolName, upload: upload)
                runtime.slots.release()
                if let answer, (200..<300).contains(answer.status) { return }
                if attempt < attempts { try? await Task.sleep(for: .milliseconds(250 << attempt)) }
            }
            if !progress { logger.error("\(event) hook lost after \(attempts) attempts", metadata: ["protocol": "\(protocolName)"]) }
        }
    }

    private func call(
        _ settings: HookSettings, event: String, protocolName: String, upload: [String: JSONValue]
    ) async throws -> (status: Int, body: String) {
        let body = JSONValue.object(["type": .string(event), "protocol": .string(protocolName), "upload": .object(upload)]).text(.utf8)
        switch settings.destination {
        case .url(let url):
            var request = HTTPClientRequest(url: url)
            request.method = .POST
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(string: body))
            let timeout = settings.timeout.components
            let milliseconds = timeout.seconds * 1000 + timeout.attoseconds / 1_000_000_000_000_000
            let response = try await Self.client.execute(request, timeout: .milliseconds(max(1, milliseconds)))
            let answer = try await response.body.collect(upTo: 64 << 10)
            return (Int(response.status.code), String(buffer: answer))
        case .executables(let directory):
            let executable = directory + "/" + event
            // No executable for this event (removed since): it is not hooked (as tusd's file hooks).
            guard FileManager.default.fileExists(atPath: executable) else { return (204, "") }
            let outcome = try await HookProcess.run(
                executable, input: body, environment: HookProcess.environment(event: event), timeout: settings.timeout)
            guard let exitStatus = outcome.exitStatus else { throw HookProcess.Failure.cannotStart("the hook was ended by a signal") }
            return (exitStatus == 0 ? 200 : Self.refusalStatus(in: outcome.output), outcome.output)
        }
    }

    /// The status an executable that refused asks for: its answer's `status` when a 4xx, else 403.
    static func refusalStatus(in body: String) -> Int {
        guard let status = (try? JSONValue.parse(body))?.objectValue?["status"]?.strictInteger, (400..<500).contains(status)
        else { return 403 }
        return status
    }

    /// The `message` of a JSON answer, else its first line; at most 200 characters, one line.
    static func message(in body: String) -> String? {
        if let message = (try? JSONValue.parse(body))?.objectValue?["message"]?.strictString, !message.isEmpty {
            return String(message.prefix(200)).replacing("\n", with: " ")
        }
        let line = body.split(whereSeparator: \.isNewline).first.map(String.init)?.trimmingSpacesAndTabs() ?? ""
        return line.isEmpty ? nil : String(line.prefix(200))
    }

    /// A refusal in `form`; `retryAfter` (seconds) for a refusal worth trying again later.
    static func refusal(_ form: Refusal.Form, status: Int, message: String, retryAfter: Int? = nil) -> Refusal {
        let httpStatus = HTTPResponse.Status(code: status)
        var headers: HTTPFields = [:]
        if let retryAfter { headers[.retryAfter] = String(retryAfter) }
        switch form {
        case .error: return .error(httpStatus, message, headers: headers)
        case .envelope:
            return Refusal(form: .envelope, status: status >= 500 ? .serviceUnavailable : .ok, code: status, message: message, headers: headers)
        case .problem: return .problem(httpStatus, message, headers: headers)
        }
    }
}
