import ArgumentParser
import XferPrimitives
import FoundationEssentials
import Xfer

#if canImport(Glibc)
    import Glibc
#endif

/// What the server needs to accept requests: never stored, never printed. Shared by every command
/// that sends requests (push, resume, cancel).
struct CredentialArguments: ParsableArguments {
    @Option(help: "Credential for the server (never printed). Prefer $XFER_TOKEN or --token-file: other users can see a command line.")
    var token: String?

    @Option(
        help: ArgumentHelp("Read the credential from the first line of FILE (never printed; warns when others can read FILE).", valueName: "FILE"),
        completion: .file())
    var tokenFile: String?

    @Option(name: .customLong("header"), help: "Extra request header \"Name: value\" (repeatable; values never printed).")
    var headers: [String] = []

    /// The environment variable holding the token when no option names one.
    static let tokenVariable = "XFER_TOKEN"

    func validate() throws {
        guard token == nil || tokenFile == nil else {
            throw ValidationError("give the token with --token or --token-file, not both")
        }
    }

    /// Checked options carrying the credentials (the rest at their defaults).
    func transferOptions(environment: [String: String] = ProcessInfo.processInfo.environment) throws(XferError)
        -> TransferOptions
    {
        var extraHeaders = HTTPHeaders()
        for header in headers {
            let (name, value) = try Self.parseHeader(header)
            extraHeaders.add(name, value)
        }
        return TransferOptions(extraHeaders: extraHeaders, credentials: Credentials(token: try resolvedToken(environment: environment)))
    }

    /// The token: what an option names wins over the environment, which a
    /// shell may have exported long ago; an empty $XFER_TOKEN counts as unset.
    func resolvedToken(environment: [String: String]) throws(XferError) -> String? {
        let found: (token: String, source: String)
        if let token {
            found = (token, "--token")
        } else if let tokenFile {
            found = (try TokenFile.firstLine(of: tokenFile), "--token-file \(tokenFile)")
        } else if let variable = environment[Self.tokenVariable], !variable.isEmpty {
            found = (variable, Self.tokenVariable)
        } else {
            return nil
        }
        // It becomes a header value (or a form field): a line break would end it early.
        guard !found.token.containsLineBreak else {
            throw .invalidInput("\(found.source) must not contain line breaks")
        }
        return found.token
    }

    /// Splits "Name: value", refusing what would break the request or
    /// smuggle another header in. The value is never echoed back.
    static func parseHeader(_ text: String) throws(XferError) -> (String, String) {
        guard let colon = text.firstIndex(of: ":") else {
            throw .invalidInput("--header must look like \"Name: value\" (no colon found)")
        }
        let name = text[..<colon].trimmingSpacesAndTabs()
        let value = text[text.index(after: colon)...].trimmingSpacesAndTabs()
        // RFC 9110's token characters.
        let tokenCharacters = Set("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ".utf8)
        guard !name.isEmpty, name.utf8.allSatisfy(tokenCharacters.contains) else {
            throw .invalidInput("--header has an invalid field name '\(name.prefix(40))'")
        }
        guard !value.containsLineBreak else {
            throw .invalidInput("--header \(name): the value must not contain line breaks")
        }
        return (name, value)
    }
}

private extension StringProtocol {
    /// CR, LF or NUL: each would end a header line early (or the C string curl gets).
    var containsLineBreak: Bool { unicodeScalars.contains { $0 == "\r" || $0 == "\n" || $0 == "\0" } }
}

/// `--token-file`: a token kept in a file, so that it is neither on the
/// command line (`ps` shows it to every user) nor in the shell's history.
enum TokenFile {
    /// A token is short; a file without a line break this far in is not a token file.
    static let maximumLineLength = 64 * 1024

    /// The file's first line without its line ending. Warns (one line on
    /// stderr) when the file's mode lets others read it, or its group when
    /// this process owns it.
    /// `option` names the file in errors and the warning (`xfer serve`'s
    /// `--auth-token-file` and `--hook-url-file` read theirs here too).
    static func firstLine(of path: String, option: String = "--token-file") throws(XferError) -> String {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw .invalidInput("\(option) \(path): \(String(cString: strerror(errno)))") }
        defer { close(descriptor) }
        // Read only up to the first line break: what follows is none of xfer's business
        // (and a pipe from `<(...)` may never end).
        var line: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while line.count <= maximumLineLength {
            let count = read(descriptor, &buffer, buffer.count)
            if count < 0 {
                if errno == EINTR { continue }
                throw .invalidInput("\(option) \(path): \(String(cString: strerror(errno)))")
            }
            if count == 0 { break }
            if let newline = buffer[..<count].firstIndex(of: UInt8(ascii: "\n")) {
                line += buffer[..<newline]
                break
            }
            line += buffer[..<count]
        }
        guard line.count <= maximumLineLength else {
            throw .invalidInput("\(option) \(path): no line break in its first \(maximumLineLength / 1024) KiB; is it a token file?")
        }
        if line.last == UInt8(ascii: "\r") { line.removeLast() }
        guard !line.isEmpty else { throw .invalidInput("\(option) \(path): its first line is empty") }
        guard let token = String(validating: line, as: UTF8.self) else {
            throw .invalidInput("\(option) \(path): its first line is not UTF-8 text")
        }
        // Only once it is known to be the token: a file that is refused needs no second line.
        // Readers besides this process: others, or the group of a file this process owns. A file
        // it reads through its group (the package's service token, root:xfer-serve 0640) is
        // shared with that group on purpose, and chmod 600 would lock the reader out.
        var info = stat()
        if fstat(descriptor, &info) == 0, info.st_mode & 0o004 != 0 || (info.st_mode & 0o040 != 0 && info.st_uid == geteuid()) {
            Terminal.error("warning: \(option) \(path) can be read by other users (mode \(String(info.st_mode & 0o777, radix: 8))); chmod 600 it")
        }
        return token
    }
}
