import Foundation
import XCTest
import XferTestSupport

/// TLS verification (on by default, `--cacert`, `--insecure`) against a local
/// HTTPS front with a certificate made by the test, and the receiver's
/// `--auth-token`.
final class SecurityTests: XCTestCase {
    var work: TemporaryDirectory!

    override func setUp() {
        work = TemporaryDirectory("xfer-sec")
    }

    override func tearDown() {
        work = nil
    }

    func testTLSIsVerifiedByDefaultAndCACertOrInsecureWork() throws {
        let server = try ServeProcess(root: work.file("server"))
        let front = try TLSFront(upstreamPort: server.port, in: work)
        let (httpsURL, cert) = (front.url, front.certificate)
        let file = work.file("a.bin")
        try makeTestFile(at: file, size: 300_000)
        let base = ["push", file, "--backend", "patch", "--to", httpsURL, "--chunk-size", "64KiB"]

        let refused = try runXfer(base + ["--state", work.file("state1")])
        XCTAssertEqual(refused.status, 1, refused.stderr)
        XCTAssertTrue(refused.stderr.lowercased().contains("certificate"), refused.stderr)
        XCTAssertEqual(refused.stderr.split(separator: "\n").count, 1, refused.stderr)

        let trusted = try runXfer(base + ["--state", work.file("state2"), "--cacert", cert])
        XCTAssertEqual(trusted.status, 0, trusted.stderr)
        XCTAssertEqual(trusted.stderrWithoutProgress, "", "nothing to warn about")
        // The receiver names its plain-HTTP self in URLs; fetch the same path from it directly.
        let path = try XCTUnwrap(trusted.stdout.first.flatMap { URLComponents(string: $0)?.path })
        XCTAssertEqual(try downloadSHA256(server.url + path, into: work), try sha256sum(file))

        let insecure = try runXfer(base + ["--state", work.file("state3"), "--insecure"])
        XCTAssertEqual(insecure.status, 0, insecure.stderr)
        XCTAssertTrue(insecure.stderr.contains("warning: --insecure"), insecure.stderr)
        XCTAssertEqual(insecure.stderrWithoutProgress.split(separator: "\n").count, 1, insecure.stderr)

        let missing = try runXfer(base + ["--state", work.file("state4"), "--cacert", work.file("nope.pem")])
        XCTAssertEqual(missing.status, 2, missing.stderr)
        XCTAssertTrue(missing.stderr.contains("--cacert"), missing.stderr)
    }

    func testAuthTokenIsRequiredOnEveryRequestOfEveryBackend() throws {
        let token = "tok-\(UUID().uuidString)"
        let server = try ServeProcess(root: work.file("server"), extraArguments: ["--auth-token", token])
        let file = work.file("a.bin")
        try makeTestFile(at: file, size: 200_000)

        for backend in ["patch", "multipart", "sequence"] {
            let base = ["push", file, "--backend", backend, "--to", server.url, "--chunk-size", "64KiB"]
            let anonymous = try runXfer(base + ["--state", work.file("\(backend)-1")])
            XCTAssertEqual(anonymous.status, 1, "\(backend): \(anonymous.stderr)")
            XCTAssertTrue(anonymous.stderr.contains("401"), "\(backend): \(anonymous.stderr)")

            let wrong = try runXfer(base + ["--state", work.file("\(backend)-2"), "--token", "tok-wrong"])
            XCTAssertEqual(wrong.status, 1, "\(backend): \(wrong.stderr)")
            XCTAssertTrue(wrong.stderr.contains("401"), "\(backend): \(wrong.stderr)")
            XCTAssertFalse(wrong.stderr.contains("tok-wrong"), "the token is never printed")

            let good = try runXfer(base + ["--state", work.file("\(backend)-3"), "--token", token])
            XCTAssertEqual(good.status, 0, "\(backend): \(good.stderr)")
            let url = try XCTUnwrap(good.stdout.first)
            XCTAssertFalse(good.stdout.joined().contains(token) || good.stderr.contains(token), "the token is never printed")

            // Downloads need it too.
            let denied = try ChildProcess(executable: "/usr/bin/curl", arguments: ["-s", "-o", "/dev/null", "-w", "%{http_code}", url])
            XCTAssertEqual(denied.readLine(), "401", backend)
            denied.wait()
            let copy = work.file("\(backend)-copy.bin")
            let allowed = try ChildProcess(executable: "/usr/bin/curl", arguments: [
                "-fsS", "-o", copy, "-H", "Authorization: Bearer \(token)", url,
            ])
            _ = allowed.readRemaining()
            XCTAssertEqual(allowed.wait(), 0, allowed.standardError)
            XCTAssertEqual(try sha256sum(copy), try sha256sum(file), backend)
        }
        // The refused attempts stored nothing: the only file bytes taken are the three good pushes'.
        let stats = try ChildProcess(executable: "/usr/bin/curl", arguments: ["-fsS", "-H", "Authorization: Bearer \(token)", server.url + "/stats"])
        let body = stats.readRemaining().joined()
        XCTAssertEqual(stats.wait(), 0)
        let received = int((try JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any])?["payloadBytesReceived"])
        XCTAssertEqual(received, 3 * 200_000)
    }

    /// The token off the command line: from $XFER_TOKEN or the first line of
    /// --token-file, for push, resume and cancel. An option wins over the
    /// environment, a file others can read gets a one-line warning, and the
    /// token appears in no output.
    func testTokenComesFromXferTokenOrTokenFileAndIsNeverPrinted() throws {
        let token = "tok-\(UUID().uuidString)"
        let server = try ServeProcess(root: work.file("server"), extraArguments: ["--auth-token", token])
        let file = work.file("a.bin")
        try makeTestFile(at: file, size: 200_000)
        let privateFile = work.file("token"), sharedFile = work.file("token-shared")
        // Only the first line counts, without its CR LF.
        try "\(token)\r\nnot part of the token\n".write(toFile: privateFile, atomically: true, encoding: .utf8)
        try "\(token)\n".write(toFile: sharedFile, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(privateFile, 0o600), 0)
        XCTAssertEqual(chmod(sharedFile, 0o644), 0)

        var outputs: [String] = []
        func xfer(_ arguments: [String], token variable: String = "") throws -> RunResult {
            let result = try runXfer(arguments, environment: ["XFER_TOKEN": variable])
            outputs.append(result.stdout.joined(separator: "\n") + result.stderr)
            return result
        }
        func push(_ name: String, _ extra: [String], token variable: String = "", backend: String = "patch") throws -> RunResult {
            try xfer(["push", file, "--backend", backend, "--to", server.url, "--state", work.file(name), "--max-attempts", "1"] + extra,
                     token: variable)
        }

        for backend in ["patch", "sequence"] {
            let fromEnvironment = try push("env-\(backend)", [], token: token, backend: backend)
            XCTAssertEqual(fromEnvironment.status, 0, "\(backend): \(fromEnvironment.stderr)")
            XCTAssertEqual(fromEnvironment.stderrWithoutProgress, "", backend)
        }
        let fromFile = try push("file", ["--token-file", privateFile])
        XCTAssertEqual(fromFile.status, 0, fromFile.stderr)
        XCTAssertEqual(fromFile.stderrWithoutProgress, "", "a private file is nothing to warn about")

        let shared = try push("shared", ["--token-file", sharedFile])
        XCTAssertEqual(shared.status, 0, shared.stderr)
        XCTAssertEqual(shared.stderrWithoutProgress.split(separator: "\n").count, 1, shared.stderr)
        XCTAssertTrue(shared.stderr.contains("warning: --token-file \(sharedFile) can be read by other users"), shared.stderr)

        let optionWins = try push("option-wins", ["--token", "tok-wrong"], token: token)
        XCTAssertEqual(optionWins.status, 1, optionWins.stderr)
        XCTAssertTrue(optionWins.stderr.contains("401"), optionWins.stderr)
        let fileWins = try push("file-wins", ["--token-file", privateFile], token: "tok-wrong")
        XCTAssertEqual(fileWins.status, 0, fileWins.stderr)

        // resume and cancel take them too (the token is never stored with the job).
        let big = work.file("big.bin")
        try makeTestFile(at: big, size: 8 << 20)
        func killedPush(state: String) throws -> String {
            try pushKilledAfterFirstChunk(
                ["push", big, "--backend", "patch", "--to", server.url, "--state", state, "--chunk-size", "64KiB",
                 "--concurrency", "1", "--json", "--token-file", privateFile], environment: ["XFER_TOKEN": ""])
        }
        let resumeState = work.file("resumed")
        let resumed = try killedPush(state: resumeState)
        let anonymous = try xfer(["resume", resumed, "--state", resumeState, "--max-attempts", "1"])
        XCTAssertEqual(anonymous.status, 1, anonymous.stderr)
        XCTAssertTrue(anonymous.stderr.contains("401"), anonymous.stderr)
        let resume = try xfer(["resume", resumed, "--state", resumeState], token: token)
        XCTAssertEqual(resume.status, 0, resume.stderr)
        XCTAssertEqual(resume.stdout.count, 1, "the file's URL: \(resume.stdout)")

        let cancelState = work.file("cancelled")
        let cancelled = try killedPush(state: cancelState)
        let cancel = try xfer(["cancel", cancelled, "--state", cancelState, "--token-file", privateFile])
        XCTAssertEqual(cancel.status, 0, cancel.stderr)
        XCTAssertTrue(cancel.stdout.joined(separator: "\n").contains("DELETE \(server.url)/uploads/"), "\(cancel.stdout)")
        XCTAssertTrue(cancel.stdout.joined(separator: "\n").contains("HTTP 204"), "the server took the token: \(cancel.stdout)")

        for output in outputs {
            XCTAssertFalse(output.contains(token), "the token is never printed: \(output)")
        }
    }

    /// The state directory and everything in it are private to the user, even
    /// when the umask would let others read them.
    func testStateFilesArePrivateWhateverTheUmask() throws {
        let server = try ServeProcess(root: work.file("server"))
        let file = work.file("a.bin")
        try makeTestFile(at: file, size: 100_000)
        let state = work.file("state")
        let shell = try ChildProcess(executable: "/bin/sh", arguments: [
            "-c", "umask 000; exec \"$0\" \"$@\"", xferExecutable, "push", file, "--backend", "patch", "--to", server.url, "--state", state,
        ])
        _ = shell.readRemaining()
        XCTAssertEqual(shell.wait(), 0, shell.standardError)
        var checked = 0
        let enumerator = try XCTUnwrap(FileManager.default.enumerator(atPath: state))
        for case let relative as String in enumerator {
            let path = state + "/" + relative
            var info = stat()
            XCTAssertEqual(lstat(path, &info), 0)
            let mode = info.st_mode & 0o777
            let isDirectory = info.st_mode & S_IFMT == S_IFDIR
            XCTAssertEqual(mode, isDirectory ? 0o700 : 0o600, "\(relative) has mode \(String(mode, radix: 8))")
            checked += 1
        }
        var top = stat()
        XCTAssertEqual(stat(state, &top), 0)
        XCTAssertEqual(top.st_mode & 0o777, 0o700)
        XCTAssertGreaterThanOrEqual(checked, 4, "db/, data.mdb, lock.mdb and the job lock at least")
    }
}
