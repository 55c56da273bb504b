import FoundationEssentials

/// What an HTTP answer's status and dates mean, read once: for the engine's retries and for
/// the S3 requests of XferS3Core, which do not depend on the engine.
public enum HTTPAnswerRules {
    /// Whether `status` says "try again later": 5xx, 408 (the server timed the request out) and
    /// 429 (too many requests). The one rule every retry follows.
    public static func isTransient(_ status: Int) -> Bool { status >= 500 || status == 408 || status == 429 }

    /// A `Retry-After` value: seconds, or an HTTP date (then the time until it, never negative);
    /// nil for anything else.
    public static func retryAfter(_ value: String, now: Date = Date()) -> Duration? {
        let trimmed = value.trimmingSpacesAndTabs()
        if let seconds = Int(trimmed), seconds >= 0 { return .seconds(seconds) }
        guard let date = date(trimmed) else { return nil }
        return .seconds(max(0, Int(date.timeIntervalSince(now).rounded(.up))))
    }

    /// An HTTP date, as in `Retry-After` and `Last-Modified`; nil for anything else. RFC 9110
    /// (5.6.7) has recipients accept three forms, and so does this:
    /// - IMF-fixdate, what every current server sends: `Sun, 06 Nov 1994 08:49:37 GMT`;
    /// - RFC 850's: `Sunday, 06-Nov-94 08:49:37 GMT` (a two-digit year is taken in 1970–2069);
    /// - C's asctime: `Sun Nov  6 08:49:37 1994`.
    /// Read by hand rather than with a date formatter: those are in full Foundation, whose ICU
    /// data is most of a static binary; and a fixed format needs no locale.
    public static func date(_ text: String) -> Date? {
        let words = text.trimmingSpacesAndTabs().split(separator: " ", omittingEmptySubsequences: true)
        var day: Int, month: Int, year: Int, time: Substring
        switch words.count {
        case 6 where words[5] == "GMT" && words[0].hasSuffix(","):
            // IMF-fixdate: weekday, day, month, year, time, GMT.
            guard words[1].count == 2, let d = Int(words[1]), let m = monthNumber(words[2]), words[3].count == 4, let y = Int(words[3]) else { return nil }
            (day, month, year, time) = (d, m, y, words[4])
        case 4 where words[3] == "GMT" && words[0].hasSuffix(","):
            // RFC 850: weekday, dd-Mon-yy, time, GMT.
            let parts = words[1].split(separator: "-", omittingEmptySubsequences: false)
            guard parts.count == 3, parts[0].count == 2, let d = Int(parts[0]), let m = monthNumber(parts[1]), parts[2].count == 2, let y = Int(parts[2]) else { return nil }
            (day, month, year, time) = (d, m, y < 70 ? 2000 + y : 1900 + y, words[2])
        case 5:
            // asctime: weekday, month, day (space-padded), time, year.
            guard let m = monthNumber(words[1]), let d = Int(words[2]), words[4].count == 4, let y = Int(words[4]) else { return nil }
            (day, month, year, time) = (d, m, y, words[3])
        default:
            return nil
        }
        let clock = time.split(separator: ":", omittingEmptySubsequences: false)
        guard clock.count == 3, clock.allSatisfy({ $0.count == 2 && $0.allSatisfy(\.isASCII) }),
            let hour = Int(clock[0]), let minute = Int(clock[1]), let second = Int(clock[2]),
            let seconds = UTCCalendar.seconds(year: year, month: month, day: day, hour: hour, minute: minute, second: second)
        else { return nil }
        return Date(timeIntervalSince1970: TimeInterval(seconds))
    }

    private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    private static func monthNumber(_ name: Substring) -> Int? {
        months.firstIndex { $0 == name }.map { $0 + 1 }
    }
}
