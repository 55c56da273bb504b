import CWBackend
import Foundation
import XCTest
import Xfer
import XferTestSupport

/// The example backend (`Examples/CustomBackend`, public API only) through
/// the real engine and libcurl against a real CW server on 127.0.0.1.
final class CustomBackendTests: XCTestCase {
    var work: TemporaryDirectory!
    var server: CWServer!

    override func setUpWithError() throws {
        work = TemporaryDirectory("xfer-cw")
        server = try CWServer(root: work.file("server"))
    }

    override func tearDown() {
        server = nil
        work = nil
    }

    private var state: String { work.file("state") }

    /// The example program, built with the engine's package: `make test` builds it beside xfer
    /// (one build folder for the three packages); a plain `swift build` of the engine, in its own.
    private var uploader: String {
        let besideXfer = (productsDirectory as NSString).appendingPathComponent("CWUpload")
        return FileManager.default.fileExists(atPath: besideXfer) ? besideXfer : repositoryRoot + "/.build/debug/CWUpload"
    }

    func testFilesOfEverySizeArriveThroughTheLibrary() async throws {
        let sizes = [("empty.bin", 0), ("one.bin", 1), ("exact.bin", 4 << 16), ("odd.bin", 300_001)]
        for (index, (name, size)) in sizes.enumerated() {
            try makeTestFile(at: work.file(name), size: size, seed: UInt64(20 + index))
        }
        let paths = sizes.map { work.file($0.0) }
        let engine = try TransferEngine(stateDirectory: state)
        let job = try await engine.push(
            paths, to: server.url, using: CWBackend(bizID: "tests"), options: TransferOptions(chunkSize: 1 << 16))
        var chunks = 0
        for await event in job.events {
            if case .chunkStored = event { chunks += 1 }
        }
        let report = try await job.report
        // One empty chunk for the empty file, then 1, 4 and 5 chunks of 64 KiB.
        XCTAssertEqual(chunks, 1 + 1 + 4 + 5)
        XCTAssertEqual(report.files.map(\.path), paths)
        for file in report.files {
            XCTAssertEqual(try downloadSHA256(file.url, into: work), try sha256sum(file.path), file.path)
        }
        let listed = try XCTUnwrap(try engine.jobs(includingCompleted: true).first)
        XCTAssertEqual(listed.backend, "cw")
        XCTAssertEqual(listed.state, .completed)
    }

    /// The example program is killed with SIGKILL mid-transfer; `xfer`
    /// lists the custom job without leaking its token; the program run
    /// again resumes and the server assembles a byte-identical file.
    func testTheExampleProgramSurvivesSIGKILLAndResumes() throws {
        let size = 24 << 20
        let chunk = 64 << 10
        let concurrency = 2
        let file = work.file("video.mp4")
        try makeTestFile(at: file, size: size, seed: 77)
        let arguments = [file, "--to", server.url, "--state", state, "--biz-id", "tests",
                         "--chunk-size", String(chunk), "--concurrency", String(concurrency)]

        let first = try ChildProcess(executable: uploader, arguments: arguments)
        let started = try XCTUnwrap(first.readLine { $0.hasPrefix("started ") }, first.standardError)
        let job = String(started.split(separator: " ")[1])
        var acknowledged = 0
        while let line = first.readLine() {
            guard line.hasPrefix("chunk "), let done = Int(line.dropFirst(6).split(separator: "/")[0]) else { continue }
            acknowledged = done
            if done >= size / 4 {
                first.kill(SIGKILL)
                break
            }
        }
        XCTAssertEqual(first.wait(), 128 + SIGKILL, "the first run must die by SIGKILL: \(first.standardError)")
        XCTAssertGreaterThanOrEqual(acknowledged, size / 4)

        // The CLI knows the job without knowing its backend; the server's
        // upload token is stored but never shown.
        let saveName = try md5sum(file)
        let token = try XCTUnwrap((try server.upload(saveName)["params"] as? [String: String])?["uploadToken"])
        let status = try runXfer(["status", job, "--state", state, "--json"])
        XCTAssertEqual(status.status, 0, status.stderr)
        let detail = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(status.stdout.joined().utf8)) as? [String: Any])
        XCTAssertEqual(detail["backend"] as? String, "cw")
        XCTAssertEqual(detail["state"] as? String, "unfinished")
        XCTAssertGreaterThanOrEqual(int(detail["doneBytes"]), acknowledged)
        let handles = try XCTUnwrap((detail["files"] as? [[String: Any]])?.first?["handles"] as? [String: String])
        XCTAssertEqual(handles["param.uploadToken"], "<redacted>")
        XCTAssertEqual(handles["param.saveName"], saveName)
        let text = try runXfer(["status", job, "--state", state])
        let list = try runXfer(["list", "--state", state])
        XCTAssertTrue(list.stdout.joined().contains("cw"), "\(list.stdout)")
        for output in [status, text, list] {
            XCTAssertFalse((output.stdout.joined() + output.stderr).contains(token), "the upload token leaked")
        }
        // xfer cannot resume a backend it does not have, and says where to.
        let refused = try runXfer(["resume", job, "--state", state])
        XCTAssertEqual(refused.status, 2, refused.stderr)
        XCTAssertTrue(refused.stderr.contains("'cw' backend"), refused.stderr)

        let second = try ChildProcess(executable: uploader, arguments: arguments)
        let output = second.readRemaining()
        XCTAssertEqual(second.wait(), 0, second.standardError)
        let restart = try XCTUnwrap(output.first { $0.hasPrefix("started ") })
        XCTAssertTrue(restart.hasSuffix(" resumed"), restart)
        let resumedFrom = Int(restart.split(separator: " ")[2].split(separator: "/")[0]) ?? -1
        XCTAssertGreaterThanOrEqual(resumedFrom, acknowledged, "nothing acknowledged is forgotten")
        let urlLine = try XCTUnwrap(output.first { $0.hasPrefix("url ") }, "\(output.suffix(3))")
        let url = String(urlLine.split(separator: " ").last ?? "")
        XCTAssertEqual(try downloadSHA256(url, into: work), try sha256sum(file))

        // Without a way to ask the server what it holds, the second run
        // re-sends exactly what was not committed: at most the chunks that
        // were in flight at the kill arrive twice.
        let held = try server.upload(saveName)
        XCTAssertEqual(held["complete"] as? Bool, true)
        let chunks = size / chunk
        XCTAssertLessThanOrEqual(int(held["posts"]), chunks + concurrency)
        XCTAssertGreaterThanOrEqual(int(held["posts"]), chunks)
    }
}

extension CustomBackendTests {
    /// Docs/backend-guide.md shows the example backend in full; it must be
    /// the code that these tests run, not a copy that drifted.
    func testTheBackendGuideShowsTheExampleCode() throws {
        let root = URL(fileURLWithPath: repositoryRoot)
        let code = try String(
            contentsOf: root.appendingPathComponent("Examples/CustomBackend/Sources/CWBackend/CWBackend.swift"), encoding: .utf8)
        let guide = try String(contentsOf: root.appendingPathComponent("Docs/backend-guide.md"), encoding: .utf8)
        XCTAssertTrue(guide.contains("```swift\n" + code + "```\n"), "Docs/backend-guide.md must quote CWBackend.swift verbatim")
        XCTAssertTrue(
            try String(contentsOf: root.appendingPathComponent("README.md"), encoding: .utf8).contains("Docs/backend-guide.md"),
            "the README points to the backend guide")
    }
}

/// MD5 of a file by the system's `md5sum`, independent of xfer's.
func md5sum(_ path: String) throws -> String {
    let child = try ChildProcess(executable: "/usr/bin/md5sum", arguments: [path])
    let line = child.readLine() ?? ""
    child.wait()
    return String(line.prefix(32))
}
