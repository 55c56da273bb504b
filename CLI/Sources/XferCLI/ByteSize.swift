import ArgumentParser

/// A byte count as users write it: `4096`, `512KiB`, `8MiB`, `1GiB`
/// (binary), `5MB` (decimal), `64k` / `8m` (binary), up to `TiB`/`TB`.
struct ByteSize: ExpressibleByArgument, Hashable, CustomStringConvertible {
    let bytes: Int

    init(bytes: Int) { self.bytes = bytes }

    init?(argument: String) {
        let text = argument.trimmingCharacters(in: .whitespaces)
        let digits = text.prefix { $0.isNumber }
        guard !digits.isEmpty, let value = Int(digits) else { return nil }
        let unit = text.dropFirst(digits.count).lowercased()
        let multiplier: Int
        switch unit {
        case "", "b": multiplier = 1
        case "k", "kib": multiplier = 1 << 10
        case "m", "mib": multiplier = 1 << 20
        case "g", "gib": multiplier = 1 << 30
        case "t", "tib": multiplier = 1 << 40
        case "kb": multiplier = 1_000
        case "mb": multiplier = 1_000_000
        case "gb": multiplier = 1_000_000_000
        case "tb": multiplier = 1_000_000_000_000
        default: return nil
        }
        let (product, overflow) = value.multipliedReportingOverflow(by: multiplier)
        guard !overflow else { return nil }
        bytes = product
    }

    static var defaultCompletionKind: CompletionKind { .default }

    var description: String { Self.format(Int64(bytes)) }

    static func format(_ bytes: Int64) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var value = Double(bytes)
        var unit = 0
        while value >= 1024, unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        return unit == 0 ? "\(bytes) B" : String(format: "%.1f %@", value, units[unit])
    }
}

import Foundation
