import Foundation
import XCTest
import XferTestSupport

/// A backend's optional steps are capabilities it adopts by name, so a
/// near-miss spelling of one is a compile error, never a step the engine
/// silently does not call. These tests compile small backends against the
/// built `Xfer` module with `swiftc -typecheck` (a fraction of a second each).
final class BackendConformanceTests: XCTestCase {
    private static let header = """
        import Xfer
        struct Probe: UploadBackend, CAPABILITIES {
            let name = "probe"
            let traits = BackendTraits(defaultChunkSize: 1 << 20, defaultConcurrency: 1, authentication: .authorizationHeader)
            func uploadChunk(_ chunk: ChunkPayload, of file: FileContext, in job: JobContext) -> Exchange<ChunkOutcome> {
                Exchange(HTTPRequest(method: .put, url: job.url("/c"), body: RequestBody(chunk: chunk))) { _ in .stored() }
            }

        """

    private func typecheck(adopting capabilities: String, _ body: String) throws -> (succeeded: Bool, diagnostics: String) {
        let work = TemporaryDirectory("xfer-conformance")
        let source = work.file("Probe.swift")
        let text = Self.header.replacingOccurrences(of: "CAPABILITIES", with: capabilities) + body + "\n}\n"
        try text.write(toFile: source, atomically: true, encoding: .utf8)
        let child = try ChildProcess(executable: "/usr/bin/env", arguments: ["swiftc", "-typecheck"] + Self.searchPaths() + [source])
        let status = child.wait()
        return (status == 0, child.standardError)
    }

    /// Where the package's build put the modules `import Xfer` needs: the
    /// directory of this test binary, and the C modules' maps.
    private static func searchPaths() -> [String] {
        let executable = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        var products = URL(fileURLWithPath: executable).deletingLastPathComponent()
        while products.pathComponents.count > 1, !FileManager.default.fileExists(atPath: products.appendingPathComponent("Modules").path) {
            products.deleteLastPathComponent()
        }
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let sources = root.appendingPathComponent("Sources")
        // The C targets' maps are SwiftPM's, beside their objects; their headers in include/.
        return ["-I", products.appendingPathComponent("Modules").path]
            + ["CCurlShim", "CCRC64"].flatMap {
                [
                    "-Xcc", "-fmodule-map-file=" + products.appendingPathComponent("\($0).build/module.modulemap").path,
                    "-I", sources.appendingPathComponent("\($0)/include").path,
                ]
            } + ["CISAL", "CLMDB", "CCurl", "CMalloc"].flatMap { ["-I", sources.appendingPathComponent($0).path] }
    }

    func testACapabilitySpelledRightCompiles() throws {
        // The control: without it, the failures below could be the harness's.
        let result = try typecheck(
            adopting: "FileReconciling",
            """
                func reconcileFile(_ file: FileContext, in job: JobContext) -> Step<Reconciliation<Never>> { .skip }
            """)
        XCTAssertTrue(result.succeeded, result.diagnostics)
    }

    func testAMisspelledArgumentLabelDoesNotCompile() throws {
        let result = try typecheck(
            adopting: "FileReconciling",
            """
                func reconcileFile(_ file: FileContext, job: JobContext) -> Step<Reconciliation<Never>> { .skip }
            """)
        XCTAssertFalse(result.succeeded)
        XCTAssertTrue(result.diagnostics.contains("reconcileFile"), result.diagnostics)
    }

    func testAMisspelledPagingStepDoesNotCompile() throws {
        // A cursor type says answers come in parts: the step that asks for
        // the next part must exist (no default covers it).
        let result = try typecheck(
            adopting: "FileReconciling",
            """
                func reconcileFile(_ file: FileContext, in job: JobContext) -> Step<Reconciliation<Int>> { .skip }
                func continueReconcilling(_ file: FileContext, in job: JobContext, from cursor: Int) -> Step<Reconciliation<Int>> { .skip }
            """)
        XCTAssertFalse(result.succeeded)
        XCTAssertTrue(result.diagnostics.contains("does not conform"), result.diagnostics)
    }

    func testAWrongOutcomeTypeDoesNotCompile() throws {
        let result = try typecheck(
            adopting: "FileFinishing",
            """
                func finishFile(_ file: FileContext, in job: JobContext) -> Exchange<FileFinish>? { nil }
            """)
        XCTAssertFalse(result.succeeded)
        XCTAssertTrue(result.diagnostics.contains("does not conform"), result.diagnostics)
    }
}
