import Foundation

/// What an HTTP answer's status and dates mean, read once: for the engine's retries and for
/// the S3 requests of XferS3Core, which do not depend on the engine.
public enum HTTPAnswerRules {
    /// Whether `status` says "try again later": 5xx, 408 (the server timed the request out) and
    /// 429 (too many requests). The one rule every retry follows.
    public static func isTransient(_ status: Int) -> Bool { status >= 500 || status == 408 || status == 429 }

    /// A `Retry-After` value: seconds, or an HTTP date (then the time until it, never negative);
    /// nil for anything else.
    public static func retryAfter(_ value: String, now: Date = Date()) -> Duration? {
        let trimmed = value.trimmingCharacters(in: .whitespaces)
        if let seconds = Int(trimmed), seconds >= 0 { return .seconds(seconds) }
        guard let date = date(trimmed) else { return nil }
        return .seconds(max(0, Int(date.timeIntervalSince(now).rounded(.up))))
    }

    /// An HTTP date (RFC 9110's IMF-fixdate, `Sun, 06 Nov 1994 08:49:37 GMT`), as in
    /// `Retry-After` and `Last-Modified`; nil for anything else.
    public static func date(_ text: String) -> Date? {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        return formatter.date(from: text.trimmingCharacters(in: .whitespaces))
    }
}
