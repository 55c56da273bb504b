import ArgumentParser
import FoundationEssentials
import Xfer

/// How xfer talks to the server: timeouts, TLS trust and proxy. Shared by every
/// command that sends requests (push, resume, cancel) so they agree.
struct NetworkArguments: ParsableArguments {
    @Option(help: "Seconds allowed to open a connection (DNS, TCP, TLS) before the attempt fails and is retried.")
    var connectTimeout: Double = 15

    @Option(help: "Seconds a request may make no progress (under 1 KiB/s, or waiting for an answer) before it is abandoned and retried.")
    var lowSpeedTime: Double = 30

    @Option(name: .customLong("cacert"), help: "PEM file of the CAs to trust instead of the system's (private CAs).", completion: .file())
    var caCertificate: String?

    @Flag(help: "Do not verify the server's TLS certificate (test servers only; prints a warning).")
    var insecure = false

    @Flag(help: "Experimental: take HTTP/2 over TLS where the server offers it (default: HTTP/1.1, a connection per request in flight; see Docs/cli.md; prints a warning).")
    var http2 = false

    @Option(help: ArgumentHelp(
        "Send every request through this proxy (http://, https://, socks5://...; a user:password@ in it is never printed), or 'none' to ignore the proxy environment variables (default: http_proxy, HTTPS_PROXY, NO_PROXY... as curl reads them).",
        valueName: "URL|none"))
    var proxy: String?

    /// Checks the values and prints the --insecure warning (once per command).
    func transportOptions() throws(XferError) -> TransportOptions {
        var transport = TransportOptions()
        // curl counts these in whole milliseconds; below 0.1 s every request would time out.
        for (name, seconds) in [("--connect-timeout", connectTimeout), ("--low-speed-time", lowSpeedTime)]
        where !(seconds.isFinite && seconds >= 0.1 && seconds <= 86_400) {
            throw .invalidInput("\(name) must be between 0.1 and 86400 seconds")
        }
        transport.connectTimeout = .milliseconds(Int64(connectTimeout * 1000))
        transport.lowSpeedTime = .milliseconds(Int64(lowSpeedTime * 1000))
        if let caCertificate {
            guard FileManager.default.isReadableFile(atPath: caCertificate) else {
                throw .invalidInput("--cacert \(caCertificate): no such readable file")
            }
            transport.caCertificatePath = caCertificate
        }
        if let proxy {
            do {
                transport.proxy = proxy == "none" ? .none : try .checked(proxy)
            } catch {
                throw .invalidInput("--proxy: \(error); or 'none' for no proxy")
            }
        }
        transport.allowsHTTP2 = http2
        if http2 {
            Terminal.error(
                "warning: --http2 is experimental: far from the server it measured 4.5 times slower for a large file, and this libcurl's HTTP/2 uploads can spin a core (fixed in curl 8.0)")
        }
        if insecure {
            transport.verifyTLS = false
            Terminal.error("warning: --insecure: the server's TLS certificate is not verified; anyone on the path can read and change this transfer")
        }
        return transport
    }
}
