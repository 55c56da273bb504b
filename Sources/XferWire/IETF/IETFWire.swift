// The IETF resumable uploads draft's headers (structured fields, RFC 8941), written once: the
// client backend (Backends/IETF) and the receiver's routes (Receiver/.../Protocols/IETF) both
// read and write them with these. Its digests are HTTP/ContentDigest's.

/// The header names and fixed values of the draft.
public enum IETFField {
    public static let uploadComplete = "Upload-Complete"
    /// Interop version 3's inverse of `Upload-Complete`, still met on servers.
    public static let uploadIncomplete = "Upload-Incomplete"
    public static let uploadOffset = "Upload-Offset"
    public static let uploadLength = "Upload-Length"
    public static let uploadLimit = "Upload-Limit"
    public static let uploadDraftInteropVersion = "Upload-Draft-Interop-Version"
    /// The body of an append (PATCH).
    public static let partialUpload = "application/partial-upload"

    /// An sf-boolean: `?1` or `?0` (spaces around allowed); nil for anything else.
    public static func boolean(_ text: some StringProtocol) -> Bool? {
        switch HTTPNumber.trimmed(text) {
        case "?1": true
        case "?0": false
        default: nil
        }
    }

    public static func boolean(_ value: Bool) -> String { value ? "?1" : "?0" }

    /// A non-negative sf-integer: ASCII digits only, at most 15 (RFC 8941's bound), spaces
    /// around allowed; nil for anything else (a sign, a fraction, an overflow).
    public static func integer(_ text: some StringProtocol) -> Int? {
        HTTPNumber.nonNegative(text, maximumDigits: 15)
    }

    /// `Upload-Limit`'s integer members (`max-size=N, min-size=0, expires=S`), names lowercased;
    /// members that are not a name and an sf-integer are skipped.
    public static func limits(_ header: String?) -> [String: Int] {
        var limits: [String: Int] = [:]
        for member in (header ?? "").split(separator: ",") {
            let parts = member.split(separator: "=", maxSplits: 1)
            if parts.count == 2, let value = integer(parts[1]) { limits[String(HTTPNumber.trimmed(parts[0])).lowercased()] = value }
        }
        return limits
    }

    /// `Upload-Limit` holding `max-size`, and `expires` (seconds) when uploads expire.
    public static func limit(maximumSize: Int, expiresAfterSeconds: Int64? = nil) -> String {
        "max-size=\(maximumSize)" + (expiresAfterSeconds.map { ", expires=\($0)" } ?? "")
    }
}

/// The problem types (RFC 9457) the draft defines, with their members.
public enum IETFProblem {
    private static let registry = "https://iana.org/assignments/http-problem-types#"

    /// 409: an append's `Upload-Offset` is not the upload's; members `expected-offset` and
    /// `provided-offset`.
    public static let mismatchingOffset = registry + "mismatching-upload-offset"
    public static let expectedOffset = "expected-offset"
    public static let providedOffset = "provided-offset"
    /// 400: the length a request implies differs from the upload's.
    public static let inconsistentLength = registry + "inconsistent-upload-length"
    /// 400: an append to an upload that is complete (interop version 6's type; later drafts let
    /// the server choose).
    public static let completedUpload = registry + "completed-upload"
}
