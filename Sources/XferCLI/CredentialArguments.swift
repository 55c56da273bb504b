import ArgumentParser
import Foundation
import Xfer

/// What the server needs to accept requests: never stored, never printed. Shared by every command
/// that sends requests (push, resume, cancel).
struct CredentialArguments: ParsableArguments {
    @Option(help: "Credential for the server (never printed).")
    var token: String?

    @Option(name: .customLong("header"), help: "Extra request header \"Name: value\" (repeatable; values never printed).")
    var headers: [String] = []

    /// Checked options carrying the credentials (the rest at their defaults).
    func transferOptions() throws(XferError) -> TransferOptions {
        var extraHeaders = HTTPHeaders()
        for header in headers {
            let (name, value) = try Self.parseHeader(header)
            extraHeaders.add(name, value)
        }
        if let token, token.contains(where: { $0.isNewline }) {
            throw .invalidInput("--token must not contain line breaks")
        }
        return TransferOptions(extraHeaders: extraHeaders, credentials: Credentials(token: token))
    }

    /// Splits "Name: value", refusing what would break the request or
    /// smuggle another header in. The value is never echoed back.
    static func parseHeader(_ text: String) throws(XferError) -> (String, String) {
        guard let colon = text.firstIndex(of: ":") else {
            throw .invalidInput("--header must look like \"Name: value\" (no colon found)")
        }
        let name = text[..<colon].trimmingCharacters(in: .whitespaces)
        let value = text[text.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        let tokenCharacters = CharacterSet(charactersIn: "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
        guard !name.isEmpty, name.unicodeScalars.allSatisfy(tokenCharacters.contains) else {
            throw .invalidInput("--header has an invalid field name '\(name.prefix(40))'")
        }
        guard !value.unicodeScalars.contains(where: { $0 == "\r" || $0 == "\n" || $0 == "\0" }) else {
            throw .invalidInput("--header \(name): the value must not contain line breaks")
        }
        return (name, value)
    }
}
