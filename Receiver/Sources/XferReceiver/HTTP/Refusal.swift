import XferWire
import HTTPTypes
import Hummingbird
import Logging

/// A request the receiver will not act on, in the wire form of the protocol that refuses it.
///
/// Handlers throw it; it is an `HTTPResponseError`, so it renders itself as Hummingbird renders
/// any such error. Every protocol's routes sit in a group behind a `RefusalMiddleware`, which
/// renders it at the route, so that the router's middleware (tus's `Tus-Resumable`, the test
/// hooks that hold or damage answers) handle a refusal as they handle every other answer;
/// Hummingbird's own rendering happens outside all of them (`RouterResponder`).
struct Refusal: HTTPResponseError {
    /// How a protocol writes a refusal.
    enum Form: Sendable {
        /// `{"error": message}` with the status: patch, tus, raw (and the receiver's own refusals:
        /// a missing token, an unknown endpoint).
        case error
        /// `{"code","msg","data":{}}`: multipart and sequence, whose clients read `code`, so the
        /// HTTP status is 200 unless a client must retry (500, 503).
        case envelope
        /// RFC 9457 problem details, `application/problem+json`: the IETF resumable uploads.
        case problem
    }

    /// A problem type and its extension members (RFC 9457), for `.problem`.
    struct Problem: Sendable {
        var type: String
        var members: [(name: String, value: Int)] = []
    }

    let form: Form
    let status: HTTPResponse.Status
    /// The envelope's `code`; an `.error` refusal has only its status.
    let code: Int
    let message: String
    /// Headers beyond the form's own (tus's `Upload-Offset` on a 409, `Allow` on a 405).
    let headers: HTTPFields
    /// A `.problem` refusal's type when it has one (else "about:blank").
    var problem: Problem? = nil

    static func error(_ status: HTTPResponse.Status, _ message: String, headers: HTTPFields = [:]) -> Refusal {
        Refusal(form: .error, status: status, code: Int(status.code), message: message, headers: headers)
    }

    static func envelope(_ code: Int, _ message: String, status: HTTPResponse.Status = .ok) -> Refusal {
        Refusal(form: .envelope, status: status, code: code, message: message, headers: [:])
    }

    static func problem(
        _ status: HTTPResponse.Status, _ message: String, type: Problem? = nil, headers: HTTPFields = [:]
    ) -> Refusal {
        Refusal(form: .problem, status: status, code: Int(status.code), message: message, headers: headers, problem: type)
    }

    /// What a client of `form` gets when the receiver's own storage failed: a 500, which clients
    /// retry, with none of the details (`storageFailure(_:logger:answer:)` logs them).
    static func storageError(_ form: Form) -> Refusal {
        switch form {
        case .error: .error(.internalServerError, "storage error")
        case .envelope: .envelope(500, "storage error", status: .internalServerError)
        case .problem: .problem(.internalServerError, "storage error")
        }
    }

    /// The receiver holds as much as its limits let it (`ReceiverBusy`): 503 with `Retry-After`,
    /// which every protocol's clients retry.
    static func busy(_ form: Form, _ busy: ReceiverBusy) -> Refusal {
        let headers: HTTPFields = [.retryAfter: String(ReceiverBusy.retryAfter)]
        return switch form {
        case .error: .error(.serviceUnavailable, busy.description, headers: headers)
        case .envelope: Refusal(form: .envelope, status: .serviceUnavailable, code: 503, message: busy.description, headers: headers)
        case .problem: .problem(.serviceUnavailable, busy.description, headers: headers)
        }
    }

    /// Patch and tus say the same of an id they do not know, or of an upload deleted under a request.
    static let unknownUpload = Refusal.error(.notFound, "unknown upload")

    /// A `multipart/form-data` body that could not be read (`FormFailure`), as multipart and
    /// sequence, which stream one, answer it; nil for any other error.
    @Sendable static func unreadableForm(_ error: any Error) -> Refusal? {
        (error as? FormFailure).map { .envelope(400, $0.description) }
    }

    var response: Response {
        var response =
            switch form {
            case .error: JSONResponse.error(status, message)
            case .envelope: Envelope(code: code, msg: message).response(status)
            case .problem: problemResponse
            }
        for field in headers { response.headers[field.name] = field.value }
        return response
    }

    /// Problem details (`ErrorBody.problem`): the title is the message (there is one per refusal).
    private var problemResponse: Response {
        var response = JSONResponse.make(
            status, body: ErrorBody.problem(type: problem?.type, title: message, status: code, members: problem?.members ?? []))
        response.headers[.contentType] = ErrorBody.problemMediaType
        return response
    }

    func response(from request: Request, context: some RequestContext) throws -> Response {
        response
    }
}

/// The answer of multipart and sequence, refusals included: `{"code","msg","data"}`.
extension Envelope {
    /// HTTP 200 unless told otherwise: the code is what these protocols' clients read.
    func response(_ status: HTTPResponse.Status = .ok) -> Response {
        JSONResponse.make(status, body: body)
    }
}

/// The one way a protocol's handlers' errors become answers: a `Refusal` as itself, an error the
/// protocol answers as a refusal (`refusing`) as that, and anything else as a failure of the
/// receiver's own storage: the protocol's 500, through `storageFailure(_:logger:answer:)`, which
/// logs it. Anything else includes Hummingbird's own `HTTPResponseError`s (a body read past its
/// limit, say): a handler lets one through only by mistake, and the operator must see it.
///
/// Added to each protocol's route group, so it sits inside the router's middleware (see `Refusal`).
struct RefusalMiddleware<Context: RequestContext>: RouterMiddleware {
    let form: Refusal.Form
    let logger: Logger
    /// Errors of the store or of a body parser that this protocol answers as refusals.
    let refusing: @Sendable (any Error) -> Refusal?

    init(form: Refusal.Form, logger: Logger, refusing: @escaping @Sendable (any Error) -> Refusal? = { _ in nil }) {
        self.form = form
        self.logger = logger
        self.refusing = refusing
    }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let response: Response
        do {
            return try await next(request, context)
        } catch let refused as Refusal {
            response = try refused.response(from: request, context: context)
        } catch let busy as ReceiverBusy {
            response = Refusal.busy(form, busy).response
        } catch {
            if let refused = refusing(error) {
                response = try refused.response(from: request, context: context)
            } else {
                response = storageFailure(error, logger: logger, answer: Refusal.storageError(form).response)
            }
        }
        // A HEAD answer has no body (tus answers HEAD; Hummingbird does not drop a body for it).
        return request.method == .head ? Response(status: response.status, headers: response.headers) : response
    }
}

extension RelativePath {
    /// The path `text` names, or the refusal `refusing` words from the problem's message.
    static func parse(_ text: String, field: String, refusing: (String) -> Refusal) throws(Refusal) -> RelativePath {
        switch parse(text) {
        case .success(let path): return path
        case .failure(let problem): throw refusing(problem.message(field))
        }
    }
}
