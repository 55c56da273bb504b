import AsyncHTTPClient
import Foundation
import Hummingbird
import Logging
import NIOCore
import NIOHTTP1

/// Where the receiver tells the application about uploads, as tusd's hooks do: a `POST` of a
/// JSON event to one URL (`xfer serve --hook-url URL`), or the event's JSON on the standard input
/// of an executable named after it (`xfer serve --hooks-dir DIR`).
public struct HookSettings: Sendable, Hashable {
    public enum Destination: Sendable, Hashable {
        /// Every event is POSTed here; the answer's status and JSON body decide.
        case url(String)
        /// The executable `DIRECTORY/<event>` (`pre-create`, `post-finish`, `post-terminate`)
        /// runs with the event on its standard input (in the receiver's working directory and
        /// environment, less its credentials); exit status 0 is a yes and its standard output
        /// the answer's body; another status refuses, with its answer's `status` (a 4xx; else
        /// 403) and `message`. An event with no executable there is not hooked.
        case executables(directory: String)
    }

    public var destination: Destination
    /// How long one call may take; a `pre-create` that takes longer refuses the upload.
    public var timeout: Duration
    /// Calls of a `post-*` event, the first included, before it is logged as lost.
    public var attempts: Int

    public init(_ destination: Destination, timeout: Duration = .seconds(5), attempts: Int = 3) {
        self.destination = destination
        self.timeout = timeout
        self.attempts = attempts
    }

    /// POSTs to `url`.
    public init(url: String, timeout: Duration = .seconds(5), attempts: Int = 3) {
        self.init(.url(url), timeout: timeout, attempts: attempts)
    }
}

/// The calls to the application's hook, and with them the upload metrics (`ReceiverMetrics`):
/// the one place a protocol's routes report what happened to an upload.
///
/// Events, each `{"type": …, "protocol": …, "upload": {…}}`:
/// - `pre-create`, before anything is stored: `upload` has `path` and `size` when the protocol
///   says them (a multipart `preLoad.do` gives a `fileCount` instead) and tus's `metadata`,
///   decoded. A 2xx answer lets the upload be created, and a `metadata` object of strings in
///   it replaces the upload's (tus and ietf uploads keep it: tus's `HEAD` shows it, and
///   `post-finish` carries it); any other refuses it with the hook's status when it is a 4xx
///   (else 503) and the `message` of its JSON answer (else its first line), which the client
///   sees in its protocol's form. A hook that cannot be reached, times out or answers
///   metadata that cannot be kept refuses too (503): an upload the application did not
///   authorise is never stored.
/// - `post-finish`, once an upload is complete: `id`, `path`, `size` (and `metadata`).
/// - `post-terminate`, once a client deleted an upload: `id`.
///   A `post-*` event is delivered in the background, retried (`attempts`) and logged when
///   lost; it never holds or fails the upload.
struct UploadHooks: Sendable {
    let settings: HookSettings?
    let logger: Logger

    private static let client: HTTPClient = {
        var configuration = HTTPClient.Configuration()
        configuration.timeout = .init(connect: .seconds(5), read: .seconds(30))
        // A hook that refuses connections (down, not started yet) fails the call at once, not
        // after the whole timeout of retried connection attempts: a pre-create is the client's
        // 503 without a 5 s wait in between, and post-* events have retries of their own.
        configuration.connectionPool.retryConnectionEstablishment = false
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }()

    /// Asks the hook whether the upload may be created; throws the refusal, in `form`, when not.
    /// Returns the metadata the hook gave the upload, replacing `metadata`; nil when it gave none.
    @discardableResult
    func preCreate(
        _ protocolName: String, path: String?, size: Int?, fileCount: Int? = nil, metadata: [String: String]? = nil, form: Refusal.Form
    ) async throws -> [String: String]? {
        guard let settings else { return nil }
        var upload: [String: JSONValueLite] = [:]
        if let path { upload["path"] = .string(path) }
        if let size { upload["size"] = .int(size) }
        if let fileCount { upload["fileCount"] = .int(fileCount) }
        if let metadata { upload["metadata"] = .object(metadata.mapValues { .string($0) }) }
        let answer: (status: Int, body: String)
        do {
            answer = try await call(settings, event: "pre-create", protocolName: protocolName, upload: upload)
        } catch {
            logger.warning("pre-create hook failed; upload refused", metadata: ["reason": "\(error)"])
            throw Self.refusal(form, status: 503, message: "the upload hook did not answer; try again later")
        }
        guard (200..<300).contains(answer.status) else {
            let status = (400..<500).contains(answer.status) ? answer.status : 503
            throw Self.refusal(form, status: status, message: Self.message(in: answer.body) ?? "refused by the upload hook (\(answer.status))")
        }
        switch Self.metadata(in: answer.body) {
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

    /// The `metadata` of a hook's JSON answer: nil when there is none, `.some(nil)` when it is
    /// not an object whose values are all strings.
    static func metadata(in body: String) -> [String: String]?? {
        guard let data = body.data(using: .utf8), let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
            let given = object["metadata"], !(given is NSNull)
        else { return .none }
        guard let members = given as? [String: Any] else { return .some(nil) }
        var metadata: [String: String] = [:]
        for (key, value) in members {
            guard let text = value as? String else { return .some(nil) }
            metadata[key] = text
        }
        return .some(metadata)
    }

    /// An upload was created: the metric (the hook heard of it in `pre-create`).
    func created(_ protocolName: String) {
        ReceiverMetrics.upload(protocolName, .created)
    }

    /// An upload is complete: the metric, and `post-finish` in the background.
    func finished(_ protocolName: String, id: String, path: String, size: Int, metadata: [String: String]? = nil) {
        ReceiverMetrics.upload(protocolName, .completed)
        var upload: [String: JSONValueLite] = ["id": .string(id), "path": .string(path), "size": .int(size)]
        if let metadata { upload["metadata"] = .object(metadata.mapValues { .string($0) }) }
        deliver("post-finish", protocolName: protocolName, upload: upload)
    }

    /// A client deleted an upload: the metric, and `post-terminate` in the background.
    func terminated(_ protocolName: String, id: String) {
        ReceiverMetrics.upload(protocolName, .terminated)
        deliver("post-terminate", protocolName: protocolName, upload: ["id": .string(id)])
    }

    private func deliver(_ event: String, protocolName: String, upload: [String: JSONValueLite]) {
        guard let settings else { return }
        let logger = logger
        Task {
            for attempt in 1...max(1, settings.attempts) {
                if let answer = try? await call(settings, event: event, protocolName: protocolName, upload: upload),
                    (200..<300).contains(answer.status)
                {
                    return
                }
                if attempt < settings.attempts { try? await Task.sleep(for: .milliseconds(250 << attempt)) }
            }
            logger.error("\(event) hook lost after \(settings.attempts) attempts", metadata: ["protocol": "\(protocolName)"])
        }
    }

    private func call(
        _ settings: HookSettings, event: String, protocolName: String, upload: [String: JSONValueLite]
    ) async throws -> (status: Int, body: String) {
        let body = JSONValueLite.object(["type": .string(event), "protocol": .string(protocolName), "upload": .object(upload)]).text
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
            // No executable for this event: it is not hooked (as tusd's file hooks).
            guard FileManager.default.fileExists(atPath: executable) else { return (204, "") }
            let outcome = try await HookProcess.run(executable, input: body, timeout: settings.timeout)
            guard let exitStatus = outcome.exitStatus else { throw HookProcess.Failure.cannotStart("the hook was ended by a signal") }
            return (exitStatus == 0 ? 200 : Self.refusalStatus(in: outcome.output), outcome.output)
        }
    }

    /// The status an executable that refused asks for: its answer's `status` when a 4xx, else 403.
    static func refusalStatus(in body: String) -> Int {
        guard let data = body.data(using: .utf8), let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
            let status = object["status"] as? Int, (400..<500).contains(status)
        else { return 403 }
        return status
    }

    /// The `message` of a JSON answer, else its first line; at most 200 characters, one line.
    static func message(in body: String) -> String? {
        if let data = body.data(using: .utf8), let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
            let message = object["message"] as? String, !message.isEmpty
        {
            return String(message.prefix(200)).replacingOccurrences(of: "\n", with: " ")
        }
        let line = body.split(whereSeparator: \.isNewline).first.map(String.init)?.trimmingCharacters(in: .whitespaces) ?? ""
        return line.isEmpty ? nil : String(line.prefix(200))
    }

    static func refusal(_ form: Refusal.Form, status: Int, message: String) -> Refusal {
        let httpStatus = HTTPResponse.Status(code: status)
        switch form {
        case .error: return .error(httpStatus, message)
        case .envelope: return .envelope(status, message, status: status >= 500 ? .serviceUnavailable : .ok)
        case .problem: return .problem(httpStatus, message)
        }
    }
}

/// The few JSON values an event holds, written in a stable order.
enum JSONValueLite: Sendable {
    case string(String), int(Int), object([String: JSONValueLite])

    var text: String {
        switch self {
        case .int(let value): return String(value)
        case .string(let value):
            var text = JSONText()
            text.string(value)
            return String(decoding: text.bytes, as: UTF8.self)
        case .object(let members):
            return "{" + members.keys.sorted().map { key in JSONValueLite.string(key).text + ":" + members[key]!.text }.joined(separator: ",") + "}"
        }
    }
}
