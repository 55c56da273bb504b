import FoundationEssentials

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#else
import Darwin
#endif

/// The reason a file-system call failed, in the system's words ("Permission denied", "No space
/// left on device"): what a one-line error needs. FoundationEssentials' errors describe
/// themselves as `CocoaError(code: …, userInfo: […])`, and the localized descriptions are in
/// full Foundation, which a static binary pays for with ICU.
public enum SystemErrorReason {
    public static func of(_ error: any Error) -> String {
        if let error = error as? POSIXError { return text(error.code.rawValue) }
        if let error = error as? CocoaError {
            if let underlying = error.underlying as? POSIXError { return text(underlying.code.rawValue) }
            switch error.code {
            case .fileNoSuchFile, .fileReadNoSuchFile: return text(ENOENT)
            case .fileReadNoPermission, .fileWriteNoPermission: return text(EACCES)
            case .fileWriteOutOfSpace: return text(ENOSPC)
            case .fileWriteVolumeReadOnly: return text(EROFS)
            case .fileWriteFileExists: return text(EEXIST)
            default: return "file error \(error.code.rawValue)"
            }
        }
        return String(describing: error)
    }

    private static func text(_ code: Int32) -> String { String(cString: strerror(code)) }
}
