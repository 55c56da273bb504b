import ArgumentParser
import FoundationEssentials
import Xfer

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// `xfer serve`'s settings from the environment, for a service manager's `EnvironmentFile=`
/// (packaging/xfer-serve.service reads /etc/default/xfer-serve): each option of `xfer serve`
/// that takes a value falls back, when the command line does not give it, to `XFER_SERVE_` and
/// its long name in capitals with `_` for `-` (`--public-url`: `XFER_SERVE_PUBLIC_URL`). An
/// empty variable is unset, so that a defaults file can list every one.
///
/// How: each variable set becomes `--option=VALUE` put before the command line's arguments,
/// and ArgumentParser parses the lot, so a value is checked exactly as the option's own (its
/// type, its ranges in `run`), and the help and the man page describe one set of options. The
/// `=` form keeps a value that starts with `-` a value. The command line wins option by
/// option: a variable is skipped when the command line names its option at all. Prepending
/// alone would not do that for a repeatable option (`--cors-origin`), whose values would add
/// to the variable's instead of replacing them.
///
/// Which options: those ArgumentParser's own description of the command lists (the JSON of
/// `--experimental-dump-help`, which the man page is made from too) as options shown in the
/// help, so an option added to `ServeCommand` gets its variable with no list to keep here. Not
/// the test switches (ServeTestSwitches: hidden, and no deployment sets them), and not
/// `--auth-token`: the token has its variable already, `$XFER_AUTH_TOKEN`, and arriving as
/// `--auth-token` it would be warned about as being on the command line, which it is not.
enum ServeEnvironment {
    static let prefix = "XFER_SERVE_"

    /// One option the environment may set.
    struct Setting: Sendable {
        /// `--public-url`
        let option: String
        /// `XFER_SERVE_PUBLIC_URL`
        let variable: String
        let isRepeating: Bool
    }

    /// The sentence `xfer serve --help` (and so the man page) gives the rule in.
    static let help = """
        Every option that takes a value, but --auth-token, may be set in the environment instead: \
        \(prefix) then its name in capitals with _ for - (--public-url: \(prefix)PUBLIC_URL; \
        a repeatable option's values separated by spaces). An empty variable is unset; \
        an option on the command line wins over its variable.
        """

    static let settings: [Setting] = {
        struct Dump: Decodable {
            struct Command: Decodable { var arguments: [Argument]? }
            struct Argument: Decodable {
                struct Name: Decodable {
                    var kind: String
                    var name: String
                }
                var kind: String
                var shouldDisplay: Bool?
                var isRepeating: Bool?
                var names: [Name]?
            }
            var command: Command
        }
        let dump: Dump
        do {
            dump = try JSONDecoder().decode(Dump.self, from: Data(ServeCommand._dumpHelp().utf8))
        } catch {
            // Only a swift-argument-parser whose format changed gets here; PackagingTests would fail.
            fatalError("xfer serve: cannot read ArgumentParser's description of its options: \(error)")
        }
        return (dump.command.arguments ?? []).compactMap { argument in
            guard argument.kind == "option", argument.shouldDisplay ?? true,
                let long = argument.names?.first(where: { $0.kind == "long" })?.name, long != "auth-token"
            else { return nil }
            let variable = prefix + String(long.uppercased().map { $0 == "-" ? "_" : $0 })
            return Setting(option: "--" + long, variable: variable, isRepeating: argument.isRepeating ?? false)
        }
    }()

    /// The process's variable `name`, nil when unset or empty.
    static func variable(_ name: String) -> String? {
        guard let value = getenv(name) else { return nil }
        let text = String(cString: value)
        return text.isEmpty ? nil : text
    }

    /// The settings the environment gives to a command line (less the program's name): none
    /// unless it runs `xfer serve`, nor when it asks for help (a bad variable must not hide
    /// the help that explains it), nor for an option the command line names.
    static func applied(to arguments: [String], environment: (String) -> String? = variable) -> [(Setting, String)] {
        guard arguments.first == "serve" else { return [] }
        // After `--` nothing is an option (serve takes no positional argument, but the rule is ArgumentParser's).
        let given = arguments.dropFirst().prefix { $0 != "--" }
        if given.contains(where: { ["-h", "--help", "--experimental-dump-help"].contains($0) }) { return [] }
        return settings.compactMap { setting in
            guard let value = environment(setting.variable) else { return nil }
            guard !given.contains(where: { $0 == setting.option || $0.hasPrefix(setting.option + "=") }) else { return nil }
            return (setting, value)
        }
    }

    /// `arguments` with what the environment sets put first, each variable checked on its own so
    /// that a bad value is named by its variable: "The value 'notaport' is invalid for XFER_SERVE_PORT".
    static func arguments(_ arguments: [String], environment: (String) -> String? = variable) throws(XferError) -> [String] {
        var settings: [String] = []
        for (setting, value) in applied(to: arguments, environment: environment) {
            let values = setting.isRepeating ? value.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init) : [value]
            let options = values.map { "\(setting.option)=\($0)" }
            do {
                _ = try ServeCommand.parse(options)
            } catch {
                var message = ServeCommand.message(for: error).split(separator: "\n").first.map(String.init) ?? "invalid value"
                message = naming([setting], in: message)
                throw .invalidInput(message.contains(setting.variable) ? message : "\(setting.variable): \(message)")
            }
            settings += options
        }
        return settings.isEmpty ? arguments : [arguments[0]] + settings + arguments.dropFirst()
    }

    /// `error` with every option the environment set named by its variable instead (`--port
    /// must be between 0 and 65535` for `XFER_SERVE_PORT=70000`): what `xfer serve` checks once
    /// parsed is said of the variable the operator wrote, not of an option nobody typed.
    static func attributed(_ error: XferError, arguments: [String] = Array(CommandLine.arguments.dropFirst())) -> XferError {
        var error = error
        error.message = naming(applied(to: arguments).map(\.0), in: error.message)
        return error
    }

    /// `message` with `--option`, `--option <value>` and `'--option <value>'` (ArgumentParser's
    /// way) replaced by the variable, for each of `settings`; `--hook-url` does not match `--hook-url-file`.
    static func naming(_ settings: [Setting], in message: String) -> String {
        var message = message
        for setting in settings {
            // Option names are letters, digits and dashes: nothing to escape.
            guard let pattern = try? Regex("'?\(setting.option)(?: <[^>]*>)?'?(?![A-Za-z0-9-])") else { continue }
            message = message.replacing(pattern, with: setting.variable)
        }
        return message
    }
}

extension ServeCommand {
    /// `serve()` (ServeCommand.swift), its errors naming the variables the environment set.
    mutating func run() async throws {
        do {
            try await serve()
        } catch let error as XferError {
            throw ServeEnvironment.attributed(error)
        }
    }
}
