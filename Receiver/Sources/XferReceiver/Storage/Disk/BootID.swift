import XferPrimitives

/// Which boot of the machine this is: Linux's `/proc/sys/kernel/random/boot_id`, a random UUID
/// made at every boot, as 32 lowercase hex digits (a valid log record).
///
/// A record written in the same sync round as the bytes it describes can only lose them to a
/// crash of the machine (a killed process leaves its writes in the page cache), and a crash of the
/// machine means another boot: a record of this boot needs no check, one of an earlier boot is
/// checked against its bytes (`DiskUpload.completeInItsCreationRound`).
enum BootID {
    /// Nil where the kernel does not say (then every such record is checked).
    static let current: String? = {
        guard let bytes = try? FileSystemOps.readAll("/proc/sys/kernel/random/boot_id") else { return nil }
        let digits = bytes.filter { $0 != UInt8(ascii: "-") && $0 != UInt8(ascii: "\n") }
        guard digits.count == 32, digits.allSatisfy(Hex.isLowercaseDigit) else { return nil }
        return String(decoding: digits, as: UTF8.self)
    }()
}
