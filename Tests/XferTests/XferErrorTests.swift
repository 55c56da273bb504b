import Testing
@testable import Xfer

/// The library speaks no CLI: its errors say what happened and what would
/// help as values; no message names a flag, a command or an exit code. (A
/// backend's remedy reaching the CLI's line is checked end to end:
/// `SequencePushTests`, an expired upToken ends in "re-run with --restart".)
@Suite struct XferErrorTests {
    static let errors: [XferError] = [
        .invalidInput("the chunk size must be between 1 byte and 1 GiB, not 0"),
        .invalidInput("a.bin is new since this job started", remedy: .startOver),
        .fileChanged(path: "a.bin", detail: "size 1 → 2 bytes"),
        .fileUnreadable(path: "a.bin", reason: "permission denied"),
        .stateUnavailable("/s is not writable", remedy: .useAnotherStateDirectory),
        .jobLocked(job: JobID(rawValue: "0123456789abcdef"), pid: 42),
        .unknownJob("nope"),
        .transferFailed("send chunk 1/2 of a.bin: HTTP 500"),
        .transferFailed("the server forgot the upload (again after opening it anew)", remedy: .startOver),
        .verificationFailed("the server's SHA-256 differs"),
        .interrupted,
    ]

    @Test func remediesFollowTheKindOfError() {
        #expect(XferError.transferFailed("x").remedy == .runAgain)
        #expect(XferError.transferFailed("x", remedy: .startOver).remedy == .startOver)
        #expect(XferError.interrupted.remedy == .runAgain)
        #expect(XferError.fileChanged(path: "a", detail: "d").remedy == .startOver)
        #expect(XferError.unknownJob("x").remedy == .listJobs)
        #expect(XferError.jobLocked(job: JobID(rawValue: "x"), pid: nil).remedy == .waitForHolder)
        #expect(XferError.fileUnreadable(path: "a", reason: "r").remedy == nil)
        #expect(XferError.invalidInput("x").remedy == nil)
    }

    /// A program maps errors by `kind` and reads their fields by name; the
    /// exit codes are the ones the CLI documents (Docs/cli.md).
    @Test func kindsCarryTheirExitCodesAndFieldsByName() {
        #expect(XferError.invalidInput("x").exitCode == 2)
        #expect(XferError.unknownJob("x").exitCode == 2)
        #expect(XferError.stateUnavailable("x").exitCode == 3)
        #expect(XferError.transferFailed("x").exitCode == 1)
        #expect(XferError.interrupted.exitCode == 130)
        #expect(Set(XferError.Kind.allCases.map(\.exitCode)) == [1, 2, 3, 130])
        let locked = XferError.jobLocked(job: JobID(rawValue: "0123456789abcdef"), pid: 7)
        #expect(locked.kind == .jobLocked && locked.job == JobID(rawValue: "0123456789abcdef") && locked.holderProcessID == 7)
        let changed = XferError.fileChanged(path: "a.bin", detail: "size 1 → 2 bytes")
        #expect(changed.path == "a.bin" && changed.reason == "size 1 → 2 bytes")
        #expect(XferError.transferFailed("HTTP 500").reason == "HTTP 500")
        #expect(XferError.transferFailed("HTTP 500").message == "transfer failed: HTTP 500")
    }

    @Test(arguments: errors)
    func messagesAreOneLineAndNameNoFlag(_ error: XferError) {
        for text in [error.message, error.description] {
            #expect(!text.contains("--"), "\(text)")
            #expect(!text.contains("xfer "), "\(text)")
            #expect(!text.contains("\n"), "\(text)")
        }
        #expect(error.description.hasPrefix(error.message))
    }
}
