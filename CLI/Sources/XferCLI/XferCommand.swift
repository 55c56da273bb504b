import ArgumentParser
import XferPrimitives
import FoundationEssentials
import Xfer

#if canImport(Glibc)
    import Glibc
#endif

/// `xfer`: resumable, chunked uploads.
@main
struct XferCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "xfer",
        abstract: "Resumable, chunked file uploads that survive kill -9.",
        discussion: """
            Exit codes: 0 done; 1 transfer failed (state kept, resumable); 2 bad usage or input; \
            3 state locked or unusable; 130 interrupted (state saved).
            """,
        version: xferVersion,
        subcommands: [PushCommand.self, PullCommand.self, SyncCommand.self, ResumeCommand.self, ListCommand.self, StatusCommand.self, CancelCommand.self, UploadsCommand.self, ServeCommand.self])

    /// Runs the command and turns every failure into one line on stderr and
    /// a documented exit code, never a stack trace.
    static func main() async {
        // Past a file-size limit the kernel would kill the process mid-write; ignored, the write
        // fails with EFBIG instead and becomes the same clear error as a full disk.
        signal(SIGXFSZ, SIG_IGN)
        let code: Int32
        do {
            var command = try parseAsRoot(ServeEnvironment.arguments(Array(CommandLine.arguments.dropFirst())))
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
            code = ExitStatus.success
        } catch let error as XferError {
            Terminal.error(error.line)
            code = error.exitCode
        } catch {
            let exit = exitCode(for: error)
            if exit == .success {
                print(fullMessage(for: error))
                code = ExitStatus.success
            } else if let exitCode = error as? ExitCode {
                code = exitCode.rawValue
            } else {
                // Parse and validation errors: ArgumentParser's message (an
                // unknown --backend value lists the valid ones, past five as
                // a bulleted list of lines), on one line; the usage of the
                // command named is one `--help` away.
                let lines = message(for: error).split(separator: "\n").map { $0.trimmingSpacesAndTabs() }
                let listed = lines.dropFirst().filter { $0.hasPrefix("- ") }.map { $0.dropFirst(2) }
                let message = (lines.first ?? "invalid usage") + (listed.isEmpty ? "" : " " + listed.joined(separator: ", "))
                Terminal.error("\(message) (usage: 'xfer \(commandNamed.map { "\($0) " } ?? "")--help')")
                code = ExitStatus.badInput
            }
        }
        Terminal.flush()
        Glibc.exit(code)
    }
}

extension XferCommand {
    /// The subcommand the arguments name, if any, with the subcommand of
    /// its own they name (`uploads abort`), for the usage hint.
    static var commandNamed: String? {
        var commands = configuration.subcommands
        var named: [String] = []
        for argument in CommandLine.arguments.dropFirst() {
            guard let command = commands.first(where: { $0.configuration.commandName == argument }) else { break }
            named.append(argument)
            commands = command.configuration.subcommands
        }
        return named.isEmpty ? nil : named.joined(separator: " ")
    }
}

enum Terminal {
    static func error(_ message: String) {
        writeError("xfer: \(message.replacing("\n", with: " "))\n")
    }

    static func out(_ line: String) {
        write(line + "\n")
    }

    /// Writes `lines` in a few writes of up to `OutputLines.capacity` bytes each: a listing
    /// (10,000 jobs, a push's URLs) whose reader is a pipe wakes it a few times, not once a line.
    static func out(lines: some Sequence<String>) {
        var batch = OutputLines()
        for line in lines { batch.append(line) }
        batch.flush()
    }

    /// Lines gathered into writes of up to `capacity` bytes; `flush` writes what is left. For
    /// listings, not for what must be out before a kill (events, progress: `out`).
    struct OutputLines {
        static let capacity = 64 * 1024
        private var pending: [UInt8] = []

        mutating func append(_ line: String) {
            pending.append(contentsOf: line.utf8)
            pending.append(UInt8(ascii: "\n"))
            if pending.count >= Self.capacity { flush() }
        }

        mutating func flush() {
            guard !pending.isEmpty else { return }
            pending.withUnsafeBufferPointer { Terminal.writeAll($0, to: STDOUT_FILENO) }
            pending.removeAll(keepingCapacity: true)
        }
    }

    /// Writes `text` as it is (part of a line written in pieces).
    static func write(_ text: String) {
        writeAll(text, to: STDOUT_FILENO)
    }

    /// Writes `text` to standard error as it is (a progress line redrawn in place).
    static func writeError(_ text: String) {
        writeAll(text, to: STDERR_FILENO)
    }

    /// The whole of `text` with write(2), unbuffered as the lines were with Foundation's
    /// `FileHandle` (full Foundation, which a static binary pays for with ICU): a line is out
    /// before a kill. A closed pipe or a full disk ends the writing silently — there is nowhere
    /// left to report it.
    private static func writeAll(_ text: String, to descriptor: Int32) {
        var text = text
        text.withUTF8 { writeAll($0, to: descriptor) }
    }

    private static func writeAll(_ buffer: UnsafeBufferPointer<UInt8>, to descriptor: Int32) {
        var offset = 0
        while offset < buffer.count {
            let written = Glibc.write(descriptor, buffer.baseAddress! + offset, buffer.count - offset)
            if written < 0, errno == EINTR { continue }
            guard written > 0 else { return }
            offset += written
        }
    }

    static func flush() {
        fflush(nil)
    }

    static var stderrIsTerminal: Bool { isatty(STDERR_FILENO) == 1 }
}
