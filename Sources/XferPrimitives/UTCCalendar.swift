#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#else
import Darwin
#endif

/// A UTC calendar date and time as seconds since 1970, written once for the dates xfer reads
/// (HTTP's, AWS's ISO 8601 times) without a date formatter, which is full Foundation's.
public enum UTCCalendar {
    /// Seconds since 1970-01-01T00:00:00Z, by `timegm(3)`; nil for a date that does not exist
    /// (31 February, hour 24), which `timegm` would carry into the next day or month.
    public static func seconds(year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int) -> Int? {
        guard (1...9999).contains(year), (1...12).contains(month), (1...31).contains(day), (0...23).contains(hour),
            (0...59).contains(minute), (0...60).contains(second)
        else { return nil }
        var fields = tm()
        fields.tm_year = Int32(year - 1900)
        fields.tm_mon = Int32(month - 1)
        fields.tm_mday = Int32(day)
        fields.tm_hour = Int32(hour)
        fields.tm_min = Int32(minute)
        fields.tm_sec = Int32(second)
        let seconds = timegm(&fields)
        guard fields.tm_mday == Int32(day), fields.tm_mon == Int32(month - 1) else { return nil }
        return Int(seconds)
    }
}
