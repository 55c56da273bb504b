import ArgumentParser
import Xfer

/// `--limit-rate`: one budget for all the requests of the command.
struct RateLimitArguments: ParsableArguments {
    @Option(help: ArgumentHelp(
        "Send at most RATE bytes per second in all, across every request in flight, e.g. 500K, 10M, 1G (K = 1024, as curl).",
        valueName: "RATE"))
    var limitRate: ByteSize?

    /// Before anything is looked up; the bounds are the library's.
    func validate() throws {
        var transport = TransportOptions()
        apply(to: &transport)
        try transport.validate()
    }

    func apply(to transport: inout TransportOptions) {
        transport.maximumSendRate = limitRate.map { Int64($0.bytes) }
    }
}
