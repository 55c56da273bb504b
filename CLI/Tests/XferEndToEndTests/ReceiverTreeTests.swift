import Crypto
import Foundation
import XCTest
import XferTestSupport

/// `xfer serve` receiving files of a directory tree: every protocol carries the file's path
/// relative to the directory the user named, the receiver stores it at
/// `ROOT/downloads/<id>/<relative path>` and serves it there; paths that could name a place
/// elsewhere are refused with 400 before anything is written. A real `xfer serve` process, curl.
final class ReceiverTreeTests: XCTestCase {
    var work: TemporaryDirectory!
    /// The test's own files (request bodies, answers), kept out of `work`, whose listing is checked.
    var scratch: TemporaryDirectory!
    var server: ServeProcess!

    /// Spaces and non-ASCII in directories and in the name.
    static let nestedPath = "photos/2024 été/IMG 01 视频.jpg"
    static let nestedURLPath = "photos/2024%20%C3%A9t%C3%A9/IMG%2001%20%E8%A7%86%E9%A2%91.jpg"

    /// Every kind of path the receiver must refuse, and why.
    static let refusedPaths: [(path: String, reason: String)] = [
        ("", "empty"),
        ("/etc/passwd", "absolute"),
        ("/", "absolute"),
        ("a//b.txt", "empty component"),
        ("a/b/", "trailing slash"),
        ("a/./b.txt", "'.' component"),
        ("a/../b.txt", "'..' component"),
        ("../escaped.txt", "'..' first"),
        ("..", "'..' alone"),
        ("a/..", "'..' last"),
        ("a/b\u{0}c.txt", "NUL"),
        ("a/line\nbreak.txt", "LF"),
        ("a\u{1}/b.txt", "control character in a directory"),
        ("a/del\u{7F}.txt", "DEL"),
        ("a/" + String(repeating: "x", count: 256), "component over 255 bytes"),
        ("a/" + String(repeating: "é", count: 128), "component over 255 bytes of UTF-8"),
        ((0..<17).map { _ in String(repeating: "y", count: 250) }.joined(separator: "/"), "over 4096 bytes"),
        // A '/' followed by a combining mark is one Character: names are split on bytes.
        ("../\u{301}escaped.txt", "'..', then a combining mark after the '/'"),
        ("a/\u{301}../../escaped.txt", "'..' after a component that starts with a combining mark"),
        ("a/photo\u{202E}gpj.exe", "a bidi override (shows as photoexe.jpg)"),
        ("a/\u{2066}isolate\u{2069}.txt", "bidi isolates"),
        ("a/next\u{85}line.txt", "a C1 control (NEL)"),
    ]

    override func setUpWithError() throws {
        try SuiteStorage.requireDisk("every test reads the paths the receiver wrote under its root")
        work = TemporaryDirectory("xfer-tree-serve")
        scratch = TemporaryDirectory("xfer-tree-scratch")
        try FileManager.default.createDirectory(atPath: work.file("sibling"), withIntermediateDirectories: true)
        server = try ServeProcess(root: work.file("server"))
    }

    override func tearDown() {
        server = nil
        work = nil
        scratch = nil
    }

    private var root: String { server.root }

    // MARK: Nested paths arrive where they belong

    func testPatchStoresANestedPathAndServesIt() throws {
        let data = testBytes(70_000, seed: 1)
        let created = try request("POST", "/uploads", json: ["fileName": Self.nestedPath, "size": data.count, "chunkSize": 32_768])
        XCTAssertEqual(created.status, 201, created.text)
        let id = try XCTUnwrap(created.json["uploadId"] as? String)
        for chunk in 1...3 {
            let start = (chunk - 1) * 32_768, end = min(start + 32_768, data.count)
            let reply = try request(
                "PATCH", "/uploads/\(id)/chunks/\(chunk)", body: data[start..<end],
                headers: ["Content-Type: application/octet-stream", "Content-Range: bytes \(start)-\(end - 1)/\(data.count)"])
            XCTAssertEqual(reply.status, 204, reply.text)
        }
        XCTAssertEqual(try request("GET", "/uploads/\(id)").json["fileName"] as? String, Self.nestedPath)
        let completed = try request("POST", "/uploads/\(id)/complete")
        XCTAssertEqual(completed.status, 200, completed.text)
        let url = try XCTUnwrap(completed.json["url"] as? String)
        try assertPublished(id: storedID(id), url: url, data: data)
        try assertEscapesAreRefused(id: storedID(id))
    }

    func testMultipartStoresANestedPathAndServesIt() throws {
        let data = testBytes(50_000, seed: 2)
        let fileId = try preload("tree-source")
        let answer = try fragment(sourceId: "tree-source", fileId: fileId, name: Self.nestedPath, data: data)
        XCTAssertEqual(answer.json["code"] as? Int, 200, answer.text)
        let finish = try request(
            "POST", "/fileSection/isFinish.do", body: Data("sourceId=tree-source&fileIds=\(fileId)".utf8),
            headers: ["Content-Type: application/x-www-form-urlencoded"])
        let urls = try XCTUnwrap((finish.json["data"] as? [String: Any])?["fileUrls"] as? [String: String], finish.text)
        try assertPublished(id: fileId, url: try XCTUnwrap(urls[fileId]), data: data)
    }

    func testTusStoresTheRelativePathFromItsMetadataAndServesIt() throws {
        let data = testBytes(40_000, seed: 3)
        let created = try tusCreate(length: data.count, metadata: ["filename": "IMG 01 视频.jpg", "relativePath": Self.nestedPath])
        XCTAssertEqual(created.status, 201, created.text)
        let location = try XCTUnwrap(created.headers["location"])
        let patched = try request(
            "PATCH", location, body: data,
            headers: ["Tus-Resumable: 1.0.0", "Upload-Offset: 0", "Content-Type: application/offset+octet-stream"])
        XCTAssertEqual(patched.status, 204, patched.text)
        let id = storedID(try XCTUnwrap(location.split(separator: "/").last))
        try assertPublished(id: id, url: server.url + "/downloads/\(id)/" + Self.nestedURLPath, data: data)
        // The tus URL serves the same file, named by its last component.
        let viaTus = try request("GET", location)
        XCTAssertEqual(viaTus.body, data)
        XCTAssertTrue(viaTus.headers["content-disposition"]?.hasSuffix("IMG%2001%20%E8%A7%86%E9%A2%91.jpg") == true, "\(viaTus.headers)")

        // Without relativePath the filename decides, as before; Uppy's "null" (a file outside any
        // folder) counts as no relativePath.
        for metadata in [["filename": "plain.txt"], ["filename": "plain.txt", "relativePath": "null"]] {
            let plain = try tusCreate(length: 0, metadata: metadata)
            XCTAssertEqual(plain.status, 201, plain.text)
            let plainID = storedID(try XCTUnwrap(plain.headers["location"]?.split(separator: "/").last))
            XCTAssertTrue(FileManager.default.fileExists(atPath: root + "/downloads/\(plainID)/plain.txt"), "\(metadata)")
        }
    }

    func testSequenceStoresANestedPathAndServesIt() throws {
        let data = testBytes(3000, seed: 4)
        let blockSize = 2048
        let opened = try sequence(sequenceNo: 0, blockSize: blockSize, size: data.count, upToken: "", crc: "", block: Data(), filename: Self.nestedPath)
        XCTAssertEqual(opened.json["code"] as? Int, 0, opened.text)
        let token = try XCTUnwrap((opened.json["data"] as? [String: Any])?["upToken"] as? String)
        var url: String?
        for sequenceNo in 1...2 {
            let block = data[(sequenceNo - 1) * blockSize..<min(sequenceNo * blockSize, data.count)]
            let crc = String(format: "%08x", crc32(block))
            let answer = try sequence(
                sequenceNo: sequenceNo, blockSize: blockSize, size: data.count, upToken: token, crc: crc, block: block, filename: Self.nestedPath)
            XCTAssertEqual(answer.json["code"] as? Int, 0, answer.text)
            url = (answer.json["data"] as? [String: Any])?["fileUrl"] as? String
        }
        try assertPublished(id: String(token.prefix(32)), url: try XCTUnwrap(url), data: data)
    }

    /// A Linux name may hold '\': inside a path it is kept; a plain name is read as it always was.
    /// Names that look alike or carry marks in odd places are stored as the bytes they are, each
    /// inside its own upload: an NFC and an NFD spelling are two files, a component that starts
    /// with a combining mark or is ".." with one is a plain name.
    func testLookalikeAndCombiningNamesStayInsideTheirUpload() throws {
        let names = ["caf\u{E9}.txt", "cafe\u{301}.txt", "a/..\u{301}/b.txt", "\u{301}/c.txt", "d/\u{301}.txt"]
        var ids: [String] = []
        for name in names {
            let created = try request("POST", "/uploads", json: ["fileName": name, "size": 0, "chunkSize": 10])
            XCTAssertEqual(created.status, 201, "\(name): \(created.text)")
            let id = try XCTUnwrap(created.json["uploadId"] as? String)
            let completed = try request("POST", "/uploads/\(id)/complete")
            XCTAssertEqual(completed.status, 200, name)
            ids.append(id)
            // Its link names the same components, each encoded on its own ("d/\u{301}.txt" is
            // "d" and "\u{301}.txt", though Swift reads "/\u{301}" as one Character).
            let url = try XCTUnwrap(completed.json["url"] as? String)
            XCTAssertFalse(url.uppercased().contains("%2F"), url)
            XCTAssertEqual(try request("GET", url).status, 200, url)
        }
        for (name, id) in zip(names, ids) {
            // Asked of the kernel by the name's own bytes (Foundation's path helpers read
            // Characters, and a combining mark after '/' is one with it).
            var info = stat()
            XCTAssertEqual(stat(publishedPath(root: root, id: storedID(id), name), &info), 0, name.debugDescription)
            XCTAssertEqual(info.st_mode & S_IFMT, S_IFREG, name.debugDescription)
        }
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: work.path).sorted(), ["server", "sibling"])
    }

    func testBackslashesInPathsAndInPlainNames() throws {
        for (name, stored) in [("dir/a\\b.txt", "dir/a\\b.txt"), ("C:\\x\\y.txt", "y.txt")] {
            let created = try request("POST", "/uploads", json: ["fileName": name, "size": 0, "chunkSize": 10])
            XCTAssertEqual(created.status, 201, created.text)
            let id = try XCTUnwrap(created.json["uploadId"] as? String)
            let url = try XCTUnwrap(try request("POST", "/uploads/\(id)/complete").json["url"] as? String)
            XCTAssertTrue(FileManager.default.fileExists(atPath: root + "/downloads/\(storedID(id))/" + stored), name)
            XCTAssertEqual(try request("GET", url).status, 200, url)
        }
    }

    // MARK: Refusals write nothing, anywhere

    func testPatchRefusesUnsafePathsAndWritesNothing() throws {
        try assertRefusalsWriteNothing(naming: "fileName") { path in
            let reply = try self.request("POST", "/uploads", json: ["fileName": path, "size": 1, "chunkSize": 1])
            XCTAssertEqual(reply.status, 400, reply.text)
            return reply.json["error"] as? String
        }
    }

    func testMultipartRefusesUnsafePathsAndWritesNothing() throws {
        let fileId = try preload("refusals")
        try assertRefusalsWriteNothing(naming: "fileName") { path in
            let reply = try self.fragment(sourceId: "refusals", fileId: fileId, name: path, data: Data("x".utf8))
            XCTAssertEqual(reply.status, 200, "the protocol answers refusals as HTTP 200 with a code: \(reply.text)")
            XCTAssertEqual(reply.json["code"] as? Int, 400, reply.text)
            return reply.json["msg"] as? String
        }
    }

    func testTusRefusesUnsafeRelativePathsAndWritesNothing() throws {
        try assertRefusalsWriteNothing(naming: "relativePath") { path in
            let reply = try self.tusCreate(length: 1, metadata: ["filename": "fine.txt", "relativePath": path])
            XCTAssertEqual(reply.status, 400, reply.text)
            return reply.json["error"] as? String
        }
    }

    func testSequenceRefusesUnsafePathsAndWritesNothing() throws {
        try assertRefusalsWriteNothing(naming: "the block part's filename") { path in
            let reply = try self.sequence(sequenceNo: 0, blockSize: 10, size: 1, upToken: "", crc: "", block: Data(), filename: path)
            XCTAssertEqual(reply.status, 200, reply.text)
            XCTAssertEqual(reply.json["code"] as? Int, 400, reply.text)
            return reply.json["msg"] as? String
        }
    }

    /// A symbolic link planted where a directory of the path belongs is not followed.
    func testPublishingNeverFollowsASymbolicLinkOutOfTheRoot() throws {
        let created = try request("POST", "/uploads", json: ["fileName": "a/b.txt", "size": 1, "chunkSize": 1])
        let id = try XCTUnwrap(created.json["uploadId"] as? String)
        XCTAssertEqual(
            try request("PATCH", "/uploads/\(id)/chunks/1", body: Data("z".utf8), headers: ["Content-Type: application/octet-stream", "Content-Range: bytes 0-0/1"]).status,
            204)
        try FileManager.default.createDirectory(atPath: root + "/downloads/\(storedID(id))", withIntermediateDirectories: true)
        XCTAssertEqual(symlink(work.file("sibling"), root + "/downloads/\(storedID(id))/a"), 0)
        let completed = try request("POST", "/uploads/\(id)/complete")
        XCTAssertEqual(completed.status, 500, completed.text)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: work.file("sibling")), [])
    }

    /// A tree pushed by xfer while the receiver is SIGKILLed and restarted on the same root
    /// and port: every file arrives byte-identical under its relative path. Many small files in
    /// flight at once, so the kill lands among shared sync rounds.
    func testATreeSurvivesTheReceiverKilledMidPush() throws {
        let tree = scratch.file("tree")
        var paths: [String] = []
        for index in 0..<240 {
            let path = "dir \(index % 6)/sub é/file \(index).bin"
            try FileManager.default.createDirectory(
                atPath: (tree + "/" + path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try makeTestFile(at: tree + "/" + path, size: 100 + index * 37, seed: UInt64(index))
            paths.append(path)
        }
        for backend in ["patch", "multipart"] {
            let root = scratch.file("served-\(backend)")
            var served = try ServeProcess(root: root)
            let port = served.port
            let push = try ChildProcess(
                executable: xferExecutable,
                arguments: ["push", tree, "--backend", backend, "--to", served.url, "--state", scratch.file("state-\(backend)"),
                            "--concurrency", "8", "--max-attempts", "20", "--json"])
            var completed = 0
            while completed < paths.count / 3, let line = push.readLine() {
                if line.contains("\"event\":\"fileCompleted\"") { completed += 1 }
            }
            served.child.kill(SIGKILL)
            XCTAssertEqual(served.child.wait(), 128 + SIGKILL)
            served = try ServeProcess(root: root, port: port)
            let rest = push.readRemaining()
            XCTAssertEqual(push.wait(), 0, "\(backend): \(push.standardError.suffix(1000))")
            let last = rest.last.flatMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
            let files = try XCTUnwrap(last?["files"] as? [[String: Any]], "\(backend): \(rest.suffix(2))")
            XCTAssertEqual(files.count, paths.count, backend)
            for file in files {
                let local = try XCTUnwrap(file["path"] as? String)
                let url = try XCTUnwrap(file["url"] as? String)
                let relative = String(local.dropFirst(tree.count + 1))
                let id = try XCTUnwrap(URL(string: url)?.path.split(separator: "/").dropFirst().first.map(String.init))
                XCTAssertEqual(
                    FileManager.default.contents(atPath: publishedPath(root: root, id: id, relative)), FileManager.default.contents(atPath: local),
                    "\(backend): \(relative)")
            }
            // A sample served over HTTP too.
            let first = try XCTUnwrap(files.first)
            XCTAssertEqual(
                try downloadSHA256(try XCTUnwrap(first["url"] as? String), into: scratch), try sha256sum(try XCTUnwrap(first["path"] as? String)))
            served.stop()
        }
    }

    // MARK: Checks

    /// The file sits at `downloads/<id>/<nestedPath>`, its URL encodes each component, GET and
    /// HEAD serve it byte-identical, and a prefix of the path is not a file.
    private func assertPublished(id: String, url: String, data: Data, file: StaticString = #filePath, line: UInt = #line) throws {
        XCTAssertEqual(url, server.url + "/downloads/\(id)/" + Self.nestedURLPath, file: file, line: line)
        XCTAssertEqual(FileManager.default.contents(atPath: root + "/downloads/\(id)/" + Self.nestedPath), data, file: file, line: line)
        let download = try request("GET", url)
        XCTAssertEqual(download.status, 200, file: file, line: line)
        XCTAssertEqual(download.body, data, "byte-identical", file: file, line: line)
        XCTAssertTrue(download.headers["content-disposition"]?.hasSuffix("IMG%2001%20%E8%A7%86%E9%A2%91.jpg") == true, file: file, line: line)
        let head = try request("HEAD", url)
        XCTAssertEqual(head.status, 200, file: file, line: line)
        XCTAssertEqual(head.headers["content-length"], String(data.count), file: file, line: line)
        XCTAssertEqual(try request("GET", "/downloads/\(id)/photos").status, 404, file: file, line: line)
        XCTAssertEqual(try request("GET", "/downloads/\(id)/photos/2024%20%C3%A9t%C3%A9").status, 404, file: file, line: line)
    }

    /// Ways to name something outside the upload's directory, or its file by another spelling.
    private func assertEscapesAreRefused(id: String) throws {
        let name = "IMG%2001%20%E8%A7%86%E9%A2%91.jpg"
        for path in [
            "/downloads/\(id)/photos/2024%20%C3%A9t%C3%A9/../2024%20%C3%A9t%C3%A9/\(name)",
            "/downloads/\(id)/photos/2024%20%C3%A9t%C3%A9/%2e%2e/2024%20%C3%A9t%C3%A9/\(name)",
            "/downloads/\(id)/photos/./2024%20%C3%A9t%C3%A9/\(name)",
            "/downloads/\(id)/photos%2F2024%20%C3%A9t%C3%A9%2F\(name)",
            "/downloads/\(id)/photos/2024%20%C3%A9t%C3%A9%2F\(name)",
            "/downloads/\(id)/photos//2024%20%C3%A9t%C3%A9/\(name)",
            "/downloads/\(id)/photos/2024%20%C3%A9t%C3%A9/\(name)%00",
            "/downloads/\(id)/%2e%2e/%2e%2e/server/downloads/\(id)/photos/2024%20%C3%A9t%C3%A9/\(name)",
            "/downloads/\(id)/../../etc/passwd",
            "/downloads/%2e%2e/uploads/\(id)/meta.json",
        ] {
            XCTAssertEqual(try request("GET", server.url + path, pathAsIs: true).status, 404, path)
        }
    }

    /// Each of `refusedPaths` is refused by `send` (which checks the answer and returns its
    /// message, one line naming `field`), and the root, its parent and a sibling of the root are
    /// left exactly as they were.
    private func assertRefusalsWriteNothing(naming field: String, _ send: (String) throws -> String?) throws {
        let before = try listing(root)
        for (path, reason) in Self.refusedPaths {
            let message = try send(path) ?? ""
            XCTAssertTrue(message.hasPrefix(field + " "), "\(reason): \(message)")
            XCTAssertFalse(message.contains("\n"), "one line: \(message)")
            XCTAssertEqual(try listing(root), before, "\(reason): nothing written under the root")
        }
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: work.path).sorted(), ["server", "sibling"])
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: work.file("sibling")), [])
    }

    private func listing(_ directory: String) throws -> [String] {
        try FileManager.default.subpathsOfDirectory(atPath: directory).sorted()
    }

    // MARK: Protocol requests

    private func preload(_ sourceId: String) throws -> String {
        let reply = try request(
            "POST", "/fileSection/preLoad.do", body: Data("sourceId=\(sourceId)&fileCount=1".utf8),
            headers: ["Content-Type: application/x-www-form-urlencoded"])
        let ids = try XCTUnwrap((reply.json["data"] as? [String: Any])?["fileIds"] as? [String], reply.text)
        return ids[0]
    }

    /// The whole of `data` as the one fragment of a file named `name`.
    private func fragment(sourceId: String, fileId: String, name: String, data: Data) throws -> Reply {
        let md5 = Insecure.MD5.hash(data: data).map { String(format: "%02x", $0) }.joined()
        let header = "[{\"sourceId\":\(jsonASCII(sourceId)),\"fileId\":\"\(fileId)\",\"fragmentIndex\":0,\"fragmentOffset\":0,"
            + "\"fragmentSize\":\(data.count),\"totalFileFragment\":1,\"totalFileSize\":\(data.count),"
            + "\"fileName\":\(jsonASCII(name)),\"fragmentMd5\":\"\(md5)\"}]"
        let boundary = "xferTreeBoundary"
        var body = Data("--\(boundary)\r\nContent-Disposition: form-data; name=\"sectionFile\"; filename=\"\(fileId)-0.jpg\"\r\n".utf8)
        body += Data("Content-Type: application/octet-stream\r\n\r\n".utf8) + data + Data("\r\n--\(boundary)--\r\n".utf8)
        return try request(
            "POST", "/fileSection/upload.do", body: body,
            headers: ["file_block: " + header, "Content-Type: multipart/form-data; boundary=\(boundary)"])
    }

    /// `tus` creation with `metadata` (values base64-encoded, as tus wants).
    private func tusCreate(length: Int, metadata: [String: String]) throws -> Reply {
        let pairs = metadata.sorted { $0.key < $1.key }.map { $0.key + " " + Data($0.value.utf8).base64EncodedString() }
        return try request(
            "POST", "/files/", headers: ["Tus-Resumable: 1.0.0", "Upload-Length: \(length)", "Upload-Metadata: " + pairs.joined(separator: ",")])
    }

    /// One `sequence` request, the form written by hand so the filename can hold any byte.
    private func sequence(
        sequenceNo: Int, blockSize: Int, size: Int, upToken: String, crc: String, block: some DataProtocol, filename: String
    ) throws -> Reply {
        let boundary = "xferTreeBoundary"
        var body = Data()
        for (name, value) in [
            ("sequenceNo", String(sequenceNo)), ("blockSize", String(blockSize)), ("totFileSize", String(size)),
            ("suffix", "jpg"), ("token", ""), ("upToken", upToken), ("crc", crc),
        ] {
            body += Data("--\(boundary)\r\nContent-Disposition: form-data; name=\"\(name)\"\r\n\r\n\(value)\r\n".utf8)
        }
        // Quotes, CR and LF escaped as browsers do; every other byte as it is.
        let escaped = filename.replacingOccurrences(of: "\"", with: "%22").replacingOccurrences(of: "\r", with: "%0D")
            .replacingOccurrences(of: "\n", with: "%0A")
        body += Data("--\(boundary)\r\nContent-Disposition: form-data; name=\"block\"; filename=\"\(escaped)\"\r\n".utf8)
        body += Data("Content-Type: application/octet-stream\r\n\r\n".utf8) + Data(block) + Data("\r\n--\(boundary)--\r\n".utf8)
        return try request("POST", "/upload", body: body, headers: ["Content-Type: multipart/form-data; boundary=\(boundary)"])
    }

    // MARK: curl

    private struct Reply {
        var status: Int
        var headers: [String: String]
        var body: Data
        var text: String { String(decoding: body, as: UTF8.self) }
        var json: [String: Any] { ((try? JSONSerialization.jsonObject(with: body)) as? [String: Any]) ?? [:] }
    }

    private func request(_ method: String, _ path: String, json: [String: Any]) throws -> Reply {
        try request(method, path, body: try JSONSerialization.data(withJSONObject: json), headers: ["Content-Type: application/json"])
    }

    /// One request with curl; `path` is a path on the server or a whole URL. `pathAsIs` sends
    /// `..` and `.` segments as they are instead of letting curl resolve them.
    private func request(
        _ method: String, _ path: String, body: (some DataProtocol)? = Data?.none, headers: [String] = [], pathAsIs: Bool = false
    ) throws -> Reply {
        let name = UUID().uuidString.prefix(8)
        let headerFile = scratch.file("h-\(name)"), bodyFile = scratch.file("b-\(name)")
        var arguments = ["-sS", "-D", headerFile, "-o", bodyFile, "-w", "%{http_code}", "-H", "Expect:"]
        arguments += method == "HEAD" ? ["-I"] : ["-X", method]
        if pathAsIs { arguments.append("--path-as-is") }
        for header in headers { arguments += ["-H", header] }
        if let body {
            let upload = scratch.file("u-\(name)")
            try Data(body).write(to: URL(fileURLWithPath: upload))
            arguments += ["--data-binary", "@" + upload]
            if !headers.contains(where: { $0.lowercased().hasPrefix("content-type:") }) { arguments += ["-H", "Content-Type:"] }
        }
        let child = try ChildProcess(executable: "/usr/bin/curl", arguments: arguments + [path.hasPrefix("http") ? path : server.url + path])
        let status = child.readRemaining().joined()
        XCTAssertEqual(child.wait(), 0, "curl: \(child.standardError)")
        var fields: [String: String] = [:]
        let rawHeaders = (try? String(contentsOfFile: headerFile, encoding: .utf8)) ?? ""
        for line in rawHeaders.split(whereSeparator: \.isNewline) {
            guard let colon = line.firstIndex(of: ":") else { continue }
            fields[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        return Reply(status: Int(status) ?? -1, headers: fields, body: FileManager.default.contents(atPath: bodyFile) ?? Data())
    }
}

// MARK: - Helpers

/// A JSON string literal in plain ASCII: everything outside printable ASCII as `\uXXXX`
/// (surrogate pairs above U+FFFF), as a header value needs.
private func jsonASCII(_ text: String) -> String {
    var out = "\""
    for unit in text.utf16 {
        switch unit {
        case UInt16(UInt8(ascii: "\"")): out += "\\\""
        case UInt16(UInt8(ascii: "\\")): out += "\\\\"
        case 0x20..<0x7F: out.unicodeScalars.append(Unicode.Scalar(UInt8(unit)))
        default: out += String(format: "\\u%04x", unit)
        }
    }
    return out + "\""
}

private func testBytes(_ count: Int, seed: UInt64) -> Data {
    var state = seed &* 0x9E37_79B9_7F4A_7C15 | 1
    var bytes = [UInt8](repeating: 0, count: count)
    for index in bytes.indices {
        state ^= state << 13
        state ^= state >> 7
        state ^= state << 17
        bytes[index] = UInt8(truncatingIfNeeded: state)
    }
    return Data(bytes)
}

/// zlib's CRC-32, as the sequence protocol's `crc` field wants it.
private func crc32(_ bytes: some Collection<UInt8>) -> UInt32 {
    var crc: UInt32 = 0xFFFF_FFFF
    for byte in bytes {
        crc ^= UInt32(byte)
        for _ in 0..<8 { crc = crc & 1 == 1 ? (crc >> 1) ^ 0xEDB8_8320 : crc >> 1 }
    }
    return ~crc
}
