import FoundationEssentials

/// An S3 answer that is not what the request wanted, classified once for
/// every client of the store: the `s3` backend turns it into the engine's
/// `BackendError` (`backendError`, in XferS3), `S3ObjectRequests`' callers throw or retry it as is.
///
/// Why one classification: whether an answer is worth another attempt is a
/// property of S3 (its error codes and statuses), not of who asked, and two
/// lists would drift apart. Only S3's `Code` and `Message` are kept: its
/// error documents also echo the string to sign, the canonical request and
/// the access key id, which must never reach a log.
public struct S3Failure: Error, Sendable, Hashable, CustomStringConvertible {
    /// What was being done, for messages (`PutObject s3://bucket/key`).
    public var operation: String
    /// The answer's HTTP status (200 for an error S3 sent inside a success).
    public var status: Int
    /// S3's error code (`SlowDown`, `NoSuchUpload`, ...), when the answer had one.
    public var code: String?
    /// S3's message, or what was wrong with an answer that could not be
    /// read; one line, at most 300 characters.
    public var message: String
    /// Whether the same request may succeed if sent again (S3 was busy, the
    /// answer was cut short, temporary credentials are being fetched again).
    public var isRetryable: Bool
    /// How long S3 asked to wait (`Retry-After`), when it said.
    public var retryAfter: Duration?
    /// S3 answered 200 and put an `<Error>` in the body (it does so for
    /// `CompleteMultipartUpload` and `UploadPartCopy`, whose answers start
    /// before the work is done).
    public var isErrorInSuccess: Bool

    /// A failure as given (tests, or a caller's own reading of an answer).
    public init(
        operation: String, status: Int, code: String?, message: String, isRetryable: Bool, retryAfter: Duration? = nil,
        isErrorInSuccess: Bool = false
    ) {
        self.operation = operation
        self.status = status
        self.code = code
        self.message = message
        self.isRetryable = isRetryable
        self.retryAfter = retryAfter
        self.isErrorInSuccess = isErrorInSuccess
    }

    /// Classifies `response`: by S3's error code first (some codes are
    /// worth a retry whatever the status, some are final whatever it is),
    /// then by status (5xx, 408 and 429 are retryable; an error inside a 200
    /// too, since the work may not have been done).
    ///
    /// - Parameter isErrorInSuccess: The answer was a 200 whose body is an `<Error>`.
    public init(_ response: AWSResponse, operation: String, isErrorInSuccess: Bool = false) {
        self.init(response, operation: operation, known: nil, isErrorInSuccess: isErrorInSuccess)
    }

    /// `known`: the answer's error, when the caller has parsed it already.
    package init(_ response: AWSResponse, operation: String, known: (code: String, message: String)?, isErrorInSuccess: Bool = false) {
        let error = known ?? response.s3Error
        let retryable: Bool
        if let code = error?.code, Self.retryableCodes.contains(code) {
            retryable = true
        } else if let code = error?.code, Self.finalCodes.contains(code) {
            retryable = false
        } else {
            retryable = isErrorInSuccess || response.isTransientStatus
        }
        self.init(
            operation: operation, status: response.status, code: error?.code, message: error?.message ?? "",
            isRetryable: retryable, retryAfter: response.retryAfter, isErrorInSuccess: isErrorInSuccess)
    }

    /// An answer that says success but cannot be read (cut short, or not the
    /// document the operation answers with): retryable, since a proxy or a
    /// busy store can cut an answer.
    package static func unreadable(_ response: AWSResponse, operation: String, _ what: String) -> S3Failure {
        S3Failure(operation: operation, status: response.status, code: nil, message: what, isRetryable: true)
    }

    /// Codes that mean "try again" whatever the status: S3 was busy or
    /// failed inside, the body arrived damaged (`BadDigest`, a SHA-256
    /// mismatch), or another conditional write of the key was in progress
    /// (`ConditionalRequestConflict`, AWS's 409 for racing conditional PUTs).
    package static let retryableCodes: Set<String> = [
        "SlowDown", "InternalError", "ServiceUnavailable", "RequestTimeout", "BadDigest", "XAmzContentSHA256Mismatch",
        "OperationAborted", "ConditionalRequestConflict",
    ]

    /// Codes that are final even inside a 200 or with a 5xx: the upload, the
    /// bucket or the credentials are not what the request assumed, or the
    /// clock is off. (Expired temporary credentials become retryable where
    /// they can be fetched again: `S3RequestSigner.reviewed(_:)`.)
    package static let finalCodes: Set<String> = [
        "NoSuchUpload", "NoSuchBucket", "NoSuchKey", "RequestTimeTooSkewed", "AccessDenied", "InvalidAccessKeyId",
        "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken", "TokenRefreshRequired", "PreconditionFailed",
    ]

    /// "HTTP 503" or "HTTP 200 with an error".
    package var statusText: String { isErrorInSuccess ? "HTTP 200 with an error" : "HTTP \(status)" }

    /// `: Code (Message)`, or nothing when the answer had no code.
    package var detail: String {
        guard let code else { return "" }
        return ": \(code)" + (message.isEmpty ? "" : " (\(message))")
    }

    /// `OPERATION: HTTP STATUS: Code (Message)`; for an answer that could not
    /// be read, `OPERATION: what was wrong`. Never credentials or signatures.
    public var description: String {
        if code == nil, !message.isEmpty { return "\(operation): \(message)" }
        return "\(operation): \(statusText)\(detail)"
    }
}

extension AWSResponse {
    /// S3's `<Error><Code>…</Code><Message>…</Message></Error>`, as
    /// "Code: Message". Only these two: S3's errors also echo the string to
    /// sign and the access key id, which stay out of messages.
    package var s3Error: (code: String, message: String)? {
        guard let document = S3XML(body), document.root == "Error", let code = document.fields["Code"] else { return nil }
        let message = (document.fields["Message"] ?? "").split(whereSeparator: \.isNewline).joined(separator: " ")
        return (code, String(message.prefix(300)))
    }
}
