import Foundation
import XCTest
import XferTestSupport

@testable import Xfer
@testable import XferCLI

/// The lines `--progress lines` and `--verbose` print, as text.
final class ProgressTextTests: XCTestCase {
    func testDurationsKeepTenthsOnlyWhereTheyMatter() {
        XCTAssertEqual(ProgressText.duration(0), "0.0s")
        XCTAssertEqual(ProgressText.duration(0.42), "0.4s")
        XCTAssertEqual(ProgressText.duration(9.94), "9.9s")
        XCTAssertEqual(ProgressText.duration(9.96), "10s")
        XCTAssertEqual(ProgressText.duration(17.3), "17s")
        XCTAssertEqual(ProgressText.duration(59.6), "1m00s")
        XCTAssertEqual(ProgressText.duration(245), "4m05s")
        XCTAssertEqual(ProgressText.duration(7380), "2h03m")
        XCTAssertEqual(ProgressText.duration(-3), "0.0s")
        XCTAssertEqual(ProgressText.duration(.infinity), "unknown")
    }

    func testRatesInBinaryUnits() {
        XCTAssertEqual(ProgressText.rate(0), "0 B/s")
        XCTAssertEqual(ProgressText.rate(512.7), "512 B/s")
        XCTAssertEqual(ProgressText.rate(3 * 1024 * 1024), "3.0 MiB/s")
        XCTAssertEqual(ProgressText.rate(1536), "1.5 KiB/s")
    }

    func testPeriodicAndFinalLines() {
        var tally = ProgressTally()
        _ = tally.apply(.started(job: JobID(rawValue: "j"), totalBytes: 64 << 20, doneBytes: 4 << 20, files: 3, doneFiles: 0, resumed: true))
        _ = tally.apply(.chunkStored(file: 0, chunk: 7, bytes: 1 << 20, doneBytes: 12 << 20, totalBytes: 64 << 20))
        _ = tally.apply(.fileCompleted(file: 0, path: "/a", url: "u"))
        let figures = tally.figures(after: .seconds(4))
        XCTAssertEqual(figures.rate, Double(2 << 20), "only this run's bytes: 8 MiB in 4 s")
        XCTAssertEqual(figures.secondsLeft ?? 0, 26, accuracy: 1e-9)
        XCTAssertEqual(
            ProgressText.line(tally, figures, final: false),
            "progress 12.0 MiB / 64.0 MiB (18%), 1/3 files, 2.0 MiB/s, ETA 26s")

        _ = tally.apply(.fileFailed(file: 1, path: "/b", reason: "gone"))
        XCTAssertEqual(
            ProgressText.line(tally, tally.figures(after: .zero), final: false),
            "progress 12.0 MiB / 64.0 MiB (18%), 1/3 files (1 failed), 0 B/s, ETA unknown")

        var done = ProgressTally()
        _ = done.apply(.started(job: JobID(rawValue: "j"), totalBytes: 1000, doneBytes: 0, files: 1, doneFiles: 0, resumed: false))
        _ = done.apply(.fileCompleted(file: 0, path: "/a", url: "u"))
        XCTAssertFalse(done.completed)
        _ = done.apply(.completed(JobReport(job: JobID(rawValue: "j"), files: JobReport.Files([]), bytesSent: 1000, bytesResumed: 0)))
        XCTAssertTrue(done.completed)
        XCTAssertEqual(
            ProgressText.line(done, done.figures(after: .milliseconds(2500)), final: true),
            "done 1000 B / 1000 B (100%), 1/1 file, 400 B/s, took 2.5s")
    }

    /// A file that shrank from 286 MiB to 19 MiB after an interrupted run is sent anew: the closing
    /// line names the job as it is now, and the rate only what this run sent.
    func testAFileThatChangedIsCountedAtItsNewSize() {
        var tally = ProgressTally()
        _ = tally.apply(.started(job: JobID(rawValue: "j"), totalBytes: 286 << 20, doneBytes: 100 << 20, files: 1, doneFiles: 0, resumed: true))
        _ = tally.apply(.resending(file: 0, chunks: 3, reason: "it changed since the last run"))
        for chunk in 0..<3 {
            let bytes = chunk < 2 ? 8 << 20 : 3 << 20
            let done = chunk < 2 ? (chunk + 1) * (8 << 20) : 19 << 20
            _ = tally.apply(.chunkStored(file: 0, chunk: chunk, bytes: bytes, doneBytes: Int64(done), totalBytes: 19 << 20))
        }
        _ = tally.apply(.fileCompleted(file: 0, path: "/a", url: "u"))
        _ = tally.apply(.completed(JobReport(job: JobID(rawValue: "j"), files: JobReport.Files([]), bytesSent: 19 << 20, bytesResumed: 0)))
        XCTAssertEqual(
            ProgressText.line(tally, tally.figures(after: .seconds(1)), final: true),
            "done 19.0 MiB / 19.0 MiB (100%), 1/1 file, 19.0 MiB/s, took 1.0s")
    }

    func testRequestLines() {
        XCTAssertEqual(
            ProgressText.request(
                RequestSummary(
                    method: "PATCH", url: "http://h:1/uploads/ab/chunks/1", status: 204, failure: nil, bodyBytes: 1 << 20,
                    duration: .microseconds(35_900))),
            "PATCH http://h:1/uploads/ab/chunks/1 204 (1048576 bytes, 35 ms)")
        XCTAssertEqual(
            ProgressText.request(
                RequestSummary(
                    method: "POST", url: "http://h:1/uploads", status: nil, failure: "timed out: too slow", bodyBytes: 49,
                    duration: .seconds(30))),
            "POST http://h:1/uploads failed: timed out: too slow (49 bytes, 30000 ms)")
    }

    func testWhichProgressIsShown() throws {
        let auto = try OutputArguments.parse([])
        XCTAssertEqual(auto.resolvedProgress(json: false, stderrIsTerminal: true), .bar)
        XCTAssertEqual(auto.resolvedProgress(json: false, stderrIsTerminal: false), .lines)
        XCTAssertEqual(auto.resolvedProgress(json: true, stderrIsTerminal: true), .none, "--json alone keeps stderr quiet")
        let lines = try OutputArguments.parse(["--progress", "lines"])
        XCTAssertEqual(lines.resolvedProgress(json: true, stderrIsTerminal: true), .lines, "asked for by name, even with --json")
        let quiet = try OutputArguments.parse(["--quiet", "--progress", "bar"])
        XCTAssertEqual(quiet.resolvedProgress(json: false, stderrIsTerminal: true), .none)
        XCTAssertEqual(auto.interval, .seconds(10))
        XCTAssertEqual(try OutputArguments.parse(["--progress-interval", "0.25"]).interval, .milliseconds(250))
        XCTAssertThrowsError(try OutputArguments.parse(["--quiet", "--verbose"]))
    }
}

/// `--progress`, `--quiet` and `--verbose` end to end: the real binary with
/// a pipe (not a terminal) for stderr, as in a log or CI.
final class ProgressOutputTests: XCTestCase {
    var work: TemporaryDirectory!
    var server: ServeProcess!

    override func setUpWithError() throws {
        work = TemporaryDirectory("xfer-progress")
        server = try ServeProcess(root: work.file("server"))
    }

    override func tearDown() {
        server = nil
        work = nil
    }

    private func push(_ paths: [String], to server: ServeProcess? = nil, _ extra: [String]) throws -> RunResult {
        try runXfer(
            ["push"] + paths + ["--backend", "patch", "--to", (server ?? self.server).url, "--state", work.file("state")] + extra)
    }

    /// By default a non-terminal stderr gets lines: here every 0.2 s (the
    /// hidden `--progress-interval`; 10 s otherwise) of a push that takes
    /// about two seconds, and a last one once it is done.
    func testLinesOnANonTerminalStderr() throws {
        let file = work.file("2m.bin")
        try makeTestFile(at: file, size: 2 << 20)
        let result = try push([file], ["--limit-rate", "1M", "--progress-interval", "0.2"])
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(result.stdout.count, 1, "the URL is still the output: \(result.stdout)")
        let lines = result.stderr.split(separator: "\n").map(String.init)
        let periodic = lines.dropLast()
        XCTAssertGreaterThanOrEqual(periodic.count, 3, result.stderr)
        for line in periodic {
            XCTAssertTrue(line.hasPrefix("xfer: progress "), line)
            XCTAssertTrue(line.contains(" / 2.0 MiB ("), line)
            XCTAssertTrue(line.contains("/1 file, "), line)
            XCTAssertTrue(line.contains("/s, ETA "), line)
        }
        let last = try XCTUnwrap(lines.last)
        XCTAssertTrue(last.hasPrefix("xfer: done 2.0 MiB / 2.0 MiB (100%), 1/1 file, "), last)
        XCTAssertTrue(last.contains("/s, took "), last)

        let none = try runXfer([
            "push", file, "--backend", "patch", "--to", server.url, "--state", work.file("state2"), "--progress", "none",
        ])
        XCTAssertEqual(none.status, 0, none.stderr)
        XCTAssertEqual(none.stderr, "")
    }

    /// `--quiet`: nothing on stderr but errors; the URLs are still printed.
    func testQuietPrintsOnlyErrors() throws {
        let tree = work.file("tree")
        try FileManager.default.createDirectory(atPath: tree, withIntermediateDirectories: true)
        try makeTestFile(at: tree + "/a.bin", size: 100_000)
        try FileManager.default.createSymbolicLink(atPath: tree + "/link", withDestinationPath: tree + "/a.bin")
        let result = try push([tree], ["--quiet"])
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(result.stderr, "", "no progress and no note about the link")
        XCTAssertEqual(result.stdout.count, 1, "\(result.stdout)")
        let dryRun = try runXfer(["push", tree, "--dry-run", "--quiet"])
        XCTAssertEqual(dryRun.status, 0, dryRun.stderr)
        XCTAssertEqual(dryRun.stderr, "", "no note and no summary")
        XCTAssertEqual(dryRun.stdout.count, 1, "what would be sent is the output: \(dryRun.stdout)")

        let other = work.file("b.bin")
        try makeTestFile(at: other, size: 1000)
        let url = server.url
        server.stop()
        let failed = try runXfer([
            "push", other, "--backend", "patch", "--to", url, "--state", work.file("state2"), "--quiet", "--max-attempts", "1",
        ])
        XCTAssertEqual(failed.status, 1, failed.stderr)
        XCTAssertEqual(failed.stderr.split(separator: "\n").count, 1, failed.stderr)
        XCTAssertTrue(failed.stderr.contains("could not connect"), failed.stderr)
    }

    /// `--verbose`: a line per request with its method, URL, status, body
    /// size and time; never the token, whatever the backend does with it.
    func testVerboseShowsEveryRequestButNoSecret() throws {
        let secret = "s3cr3t-t0ken-\(UUID().uuidString)"
        let guarded = try ServeProcess(root: work.file("guarded"), extraArguments: ["--auth-token", secret])
        let file = work.file("a.bin")
        try makeTestFile(at: file, size: 3 * 65536)
        let result = try push([file], to: guarded, ["--token", secret, "--verbose", "--chunk-size", "64KiB", "--progress", "none"])
        XCTAssertEqual(result.status, 0, result.stderr)
        let lines = result.stderr.split(separator: "\n").map(String.init)
        let pattern = try NSRegularExpression(pattern: #"^xfer: (POST|PATCH) http://127\.0\.0\.1:\d+/\S* \d{3} \(\d+ bytes, \d+ ms\)$"#)
        for line in lines {
            XCTAssertNotNil(pattern.firstMatch(in: line, range: NSRange(line.startIndex..., in: line)), line)
        }
        XCTAssertEqual(lines.filter { $0.hasPrefix("xfer: PATCH ") && $0.contains(" 204 (65536 bytes, ") }.count, 3, result.stderr)
        XCTAssertEqual(lines.filter { $0.hasPrefix("xfer: POST ") }.count, 2, "create and complete: \(result.stderr)")
        XCTAssertFalse((result.stdout.joined(separator: "\n") + result.stderr).contains(secret), "the token leaked")

        // With --json the NDJSON on stdout is as it was; the lines go to stderr.
        let json = try runXfer([
            "push", file, "--backend", "patch", "--to", guarded.url, "--state", work.file("state2"), "--token", secret,
            "--verbose", "--chunk-size", "64KiB", "--json",
        ])
        XCTAssertEqual(json.status, 0, json.stderr)
        XCTAssertEqual(Set(json.events.compactMap { $0["event"] as? String }), ["started", "chunk", "fileCompleted", "completed"])
        XCTAssertEqual(json.stderr.split(separator: "\n").count, 5, json.stderr)
        XCTAssertFalse((json.stdout.joined(separator: "\n") + json.stderr).contains(secret), "the token leaked")
    }

    /// A password in the URL is masked in every request line.
    func testVerboseMasksAPasswordInTheURL() throws {
        let file = work.file("a.bin")
        try makeTestFile(at: file, size: 1000)
        let target = server.url.replacingOccurrences(of: "http://", with: "http://user:pa55w0rd-in-url@")
        let result = try runXfer([
            "push", file, "--backend", "patch", "--to", target, "--state", work.file("state"), "--verbose", "--progress", "none",
        ])
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertTrue(result.stderr.contains("xfer: POST http://user:***@127.0.0.1:"), result.stderr)
        XCTAssertFalse((result.stdout.joined(separator: "\n") + result.stderr).contains("pa55w0rd"), result.stderr)
    }

    func testQuietAndVerboseConflict() throws {
        let result = try runXfer(["push", "x", "--backend", "patch", "--to", server.url, "--quiet", "--verbose"])
        XCTAssertEqual(result.status, 2, result.stderr)
        XCTAssertEqual(result.stderr.split(separator: "\n").count, 1, result.stderr)
        XCTAssertTrue(result.stderr.contains("--quiet and --verbose"), result.stderr)
        let resume = try runXfer(["resume", "--state", work.file("state"), "--quiet", "--verbose"])
        XCTAssertEqual(resume.status, 2, resume.stderr)
    }
}
